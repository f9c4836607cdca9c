// gpu_support.h for a build without the CUDA Toolkit: no device, ever.
#include "tests/gpu/gpu_support.h"

namespace reducer {
namespace testing {
namespace {

absl::Status NoCuda() {
  return absl::FailedPreconditionError("built without the CUDA Toolkit");
}

}  // namespace

bool BuiltWithCuda() { return false; }
int CudaDevices() { return 0; }
std::string NoGpuReason() { return "built without the CUDA Toolkit"; }
absl::StatusOr<void*> DeviceAlloc(size_t) { return NoCuda(); }
void DeviceFree(void*) {}
absl::Status CopyToDevice(void*, const void*, size_t) { return NoCuda(); }
absl::Status CopyToHost(void*, const void*, size_t) { return NoCuda(); }
absl::StatusOr<void*> NewStream() { return NoCuda(); }
void DestroyStream(void*) {}
absl::Status SyncStream(void*) { return NoCuda(); }
absl::Status LaunchLateCopy(void*, const void*, size_t, int, void*) { return NoCuda(); }
absl::StatusOr<double> PinnedCopyGBps(size_t) { return NoCuda(); }

}  // namespace testing
}  // namespace reducer
