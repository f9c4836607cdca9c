#include "client/staging/host_memory_staging.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace reducer {
namespace {

class HostMemoryStaging final : public DeviceStaging {
 public:
  explicit HostMemoryStaging(std::string why_no_devices)
      : why_no_devices_(std::move(why_no_devices)) {}

  absl::Status CheckMemory(Device device, absl::Span<const void* const>,
                           absl::string_view what) override {
    if (device.is_cpu()) return absl::OkStatus();
    return Refuse(device, what);
  }

  absl::StatusOr<std::unique_ptr<StagedInputs>> ToHost(
      const Contribution& contribution) override {
    return Refuse(contribution.device, "the collective's input");
  }

  absl::StatusOr<Tensor> ToDevice(const Tensor&, Device device,
                                  void*) override {
    return Refuse(device, "the collective's result");
  }

  absl::Status CopyInto(const Tensor&, const MutableTensorView& inout,
                        void*) override {
    return Refuse(inout.device(), "the in-place buffer");
  }

 private:
  absl::Status Refuse(Device device, absl::string_view what) const {
    return absl::FailedPreconditionError(absl::StrCat(
        what, " is on ", device.ToString(), ", but ", why_no_devices_));
  }

  const std::string why_no_devices_;
};

}  // namespace

std::unique_ptr<DeviceStaging> NewHostMemoryStaging(
    std::string why_no_devices) {
  return std::make_unique<HostMemoryStaging>(std::move(why_no_devices));
}

}  // namespace reducer
