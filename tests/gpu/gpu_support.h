// Test support for the GPU tests: whether this machine has a CUDA device,
// device memory and streams, and a kernel that writes device memory late
// (for the caller's-stream ordering test). Built without the CUDA Toolkit,
// CudaDevices() is 0 and the rest fails with FAILED_PRECONDITION.
//
//   if (CudaDevices() == 0) GTEST_SKIP() << NoGpuReason();
//   absl::StatusOr<void*> d = DeviceAlloc(1024);
//
// Thread-compatible; the memory and streams belong to the caller.
#ifndef REDUCER_TESTS_GPU_GPU_SUPPORT_H_
#define REDUCER_TESTS_GPU_GPU_SUPPORT_H_

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace reducer {
namespace testing {

// True when this build found the CUDA Toolkit (@cuda//:defs.bzl).
bool BuiltWithCuda();
// CUDA devices the runtime sees; 0 when none or built without CUDA.
int CudaDevices();
// Why CudaDevices() is 0 (for GTEST_SKIP).
std::string NoGpuReason();

// cudaMalloc'd memory on the current device (at least one byte).
absl::StatusOr<void*> DeviceAlloc(size_t bytes);
void DeviceFree(void* p);
absl::Status CopyToDevice(void* device, const void* host, size_t bytes);
absl::Status CopyToHost(void* host, const void* device, size_t bytes);

// A new non-blocking stream (a cudaStream_t as void*), and its end.
absl::StatusOr<void*> NewStream();
void DestroyStream(void* stream);
absl::Status SyncStream(void* stream);

// Queues on `stream` a kernel that first spins for about `spin_ms`
// milliseconds, then copies `bytes` bytes from `from` to `to` (both device
// memory); returns at once.
absl::Status LaunchLateCopy(void* to, const void* from, size_t bytes,
                            int spin_ms, void* stream);

// cudaMemcpy's bandwidth in GB/s between pinned host memory and the
// current device, device to host, over `bytes` (best of a few copies).
absl::StatusOr<double> PinnedCopyGBps(size_t bytes);

}  // namespace testing
}  // namespace reducer

#endif  // REDUCER_TESTS_GPU_GPU_SUPPORT_H_
