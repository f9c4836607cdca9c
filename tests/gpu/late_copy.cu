// The late-copy kernel of tests/gpu/gpu_support.h: one block spins for
// `spin_cycles` clock cycles, then copies the bytes.
#include <cuda_runtime.h>

namespace reducer {
namespace testing {

__global__ void LateCopy(char* to, const char* from, size_t bytes,
                         long long spin_cycles) {
  if (threadIdx.x == 0) {
    const long long start = clock64();
    while (clock64() - start < spin_cycles) {
    }
  }
  __syncthreads();
  for (size_t i = threadIdx.x; i < bytes; i += blockDim.x) to[i] = from[i];
}

cudaError_t LaunchLateCopyKernel(void* to, const void* from, size_t bytes,
                                 long long spin_cycles, cudaStream_t stream) {
  LateCopy<<<1, 256, 0, stream>>>(static_cast<char*>(to),
                                  static_cast<const char*>(from), bytes,
                                  spin_cycles);
  return cudaGetLastError();
}

}  // namespace testing
}  // namespace reducer
