// DeviceStaging for a build without the CUDA Toolkit: host memory is all
// there is, and every CUDA device is refused with FAILED_PRECONDITION.
#include <memory>

#include "absl/strings/str_cat.h"
#include "client/staging/device_staging.h"

namespace reducer {
namespace {

absl::Status BuiltWithoutCuda(Device device, absl::string_view what) {
  return absl::FailedPreconditionError(absl::StrCat(
      what, " is on ", device.ToString(),
      ", but this Reducer client library was built without CUDA (no CUDA "
      "Toolkit at $CUDA_PATH or /usr/local/cuda when it was built); rebuild "
      "it where the toolkit is installed, or pass host memory"));
}

class NoCudaDeviceStaging final : public DeviceStaging {
 public:
  absl::Status CheckMemory(Device device, absl::Span<const void* const>,
                           absl::string_view what) override {
    if (device.is_cpu()) return absl::OkStatus();
    return BuiltWithoutCuda(device, what);
  }

  absl::StatusOr<std::unique_ptr<StagedInputs>> ToHost(
      const Contribution& contribution) override {
    return BuiltWithoutCuda(contribution.device, "the collective's input");
  }

  absl::StatusOr<Tensor> ToDevice(const Tensor&, Device device,
                                  void*) override {
    return BuiltWithoutCuda(device, "the collective's result");
  }

  absl::Status CopyInto(const Tensor&, const MutableTensorView& inout,
                        void*) override {
    return BuiltWithoutCuda(inout.device(), "the in-place buffer");
  }
};

}  // namespace

std::unique_ptr<DeviceStaging> NewDeviceStaging(size_t /*pinned_bytes*/) {
  return std::make_unique<NoCudaDeviceStaging>();
}

}  // namespace reducer
