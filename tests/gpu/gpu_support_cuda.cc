#include <cuda_runtime.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "tests/gpu/gpu_support.h"

namespace reducer {
namespace testing {

// In late_copy.cu (built by nvcc).
cudaError_t LaunchLateCopyKernel(void* to, const void* from, size_t bytes,
                                 long long spin_cycles, cudaStream_t stream);

namespace {

absl::Status Check(cudaError_t error, const char* call) {
  if (error == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(call, " failed: ", cudaGetErrorName(error),
                                          ": ", cudaGetErrorString(error)));
}

}  // namespace

bool BuiltWithCuda() { return true; }

int CudaDevices() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

std::string NoGpuReason() {
  int n = 0;
  const cudaError_t error = cudaGetDeviceCount(&n);
  cudaGetLastError();
  if (error != cudaSuccess) {
    return absl::StrCat("no GPU: cudaGetDeviceCount failed: ",
                        cudaGetErrorName(error), ": ", cudaGetErrorString(error));
  }
  return absl::StrCat("no GPU: cudaGetDeviceCount found ", n);
}

absl::StatusOr<void*> DeviceAlloc(size_t bytes) {
  void* p = nullptr;
  absl::Status s = Check(cudaMalloc(&p, bytes == 0 ? 1 : bytes), "cudaMalloc");
  if (!s.ok()) return s;
  return p;
}

void DeviceFree(void* p) { cudaFree(p); }

absl::Status CopyToDevice(void* device, const void* host, size_t bytes) {
  return Check(cudaMemcpy(device, host, bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
}

absl::Status CopyToHost(void* host, const void* device, size_t bytes) {
  return Check(cudaMemcpy(host, device, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy");
}

absl::StatusOr<void*> NewStream() {
  cudaStream_t stream = nullptr;
  absl::Status s = Check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
                         "cudaStreamCreateWithFlags");
  if (!s.ok()) return s;
  return static_cast<void*>(stream);
}

void DestroyStream(void* stream) { cudaStreamDestroy(static_cast<cudaStream_t>(stream)); }

absl::Status SyncStream(void* stream) {
  return Check(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)),
               "cudaStreamSynchronize");
}

absl::Status LaunchLateCopy(void* to, const void* from, size_t bytes, int spin_ms,
                            void* stream) {
  int device = 0;
  int khz = 0;
  absl::Status s = Check(cudaGetDevice(&device), "cudaGetDevice");
  if (s.ok()) {
    s = Check(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, device),
              "cudaDeviceGetAttribute");
  }
  if (!s.ok()) return s;
  const long long cycles = static_cast<long long>(khz) * spin_ms;
  return Check(LaunchLateCopyKernel(to, from, bytes, cycles,
                                    static_cast<cudaStream_t>(stream)),
               "the late-copy kernel launch");
}

absl::StatusOr<double> PinnedCopyGBps(size_t bytes) {
  void* host = nullptr;
  absl::Status s = Check(cudaMallocHost(&host, bytes), "cudaMallocHost");
  if (!s.ok()) return s;
  absl::StatusOr<void*> device = DeviceAlloc(bytes);
  if (!device.ok()) {
    cudaFreeHost(host);
    return device.status();
  }
  double best = 0;
  for (int i = 0; i < 5 && s.ok(); ++i) {
    const absl::Time start = absl::Now();
    s = Check(cudaMemcpy(host, *device, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy");
    const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
    if (s.ok() && seconds > 0) best = std::max(best, bytes / seconds / 1e9);
  }
  DeviceFree(*device);
  cudaFreeHost(host);
  if (!s.ok()) return s;
  return best;
}

}  // namespace testing
}  // namespace reducer
