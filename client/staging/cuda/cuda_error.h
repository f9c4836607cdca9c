// The CUDA runtime's errors as absl::Status, and the calling thread's
// current device held for a scope: what every CUDA call of device staging
// goes through.
//
//   ScopedDevice scoped;
//   REDUCER_RETURN_IF_ERROR(scoped.Set(device.index()));
//   cudaError_t error = cudaMalloc(&p, bytes);
//   if (error != cudaSuccess) return CudaError("cudaMalloc", "the result", error);
#ifndef REDUCER_CLIENT_STAGING_CUDA_CUDA_ERROR_H_
#define REDUCER_CLIENT_STAGING_CUDA_CUDA_ERROR_H_

#include <cuda_runtime.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace reducer {

// INTERNAL: "`call` (`context`) failed: cudaErrorX: its description".
absl::Status CudaError(absl::string_view call, absl::string_view context,
                       cudaError_t error);

// Makes a device the calling thread's current device for its lifetime, and
// restores the one before. Not thread-safe: one thread's, on its stack.
class ScopedDevice {
 public:
  ScopedDevice() = default;
  ~ScopedDevice();
  ScopedDevice(const ScopedDevice&) = delete;
  ScopedDevice& operator=(const ScopedDevice&) = delete;

  // Makes `index` current (once per object). OK, or INTERNAL naming the
  // CUDA call that failed.
  absl::Status Set(int index);

 private:
  int previous_ = -1;
  int current_ = -1;
};

}  // namespace reducer

#endif  // REDUCER_CLIENT_STAGING_CUDA_CUDA_ERROR_H_
