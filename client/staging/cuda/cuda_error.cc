#include "client/staging/cuda/cuda_error.h"

#include <cuda_runtime.h>

#include "absl/strings/str_cat.h"

namespace reducer {

absl::Status CudaError(absl::string_view call, absl::string_view context,
                       cudaError_t error) {
  return absl::InternalError(absl::StrCat(call, " (", context,
                                          ") failed: ", cudaGetErrorName(error),
                                          ": ", cudaGetErrorString(error)));
}

ScopedDevice::~ScopedDevice() {
  if (previous_ >= 0 && previous_ != current_) cudaSetDevice(previous_);
}

absl::Status ScopedDevice::Set(int index) {
  cudaError_t error = cudaGetDevice(&previous_);
  if (error != cudaSuccess) return CudaError("cudaGetDevice", "", error);
  current_ = index;
  if (index == previous_) return absl::OkStatus();
  error = cudaSetDevice(index);
  if (error != cudaSuccess) {
    return CudaError("cudaSetDevice", absl::StrCat("device ", index), error);
  }
  return absl::OkStatus();
}

}  // namespace reducer
