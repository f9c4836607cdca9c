#include "client/staging/staging_backend.h"

#include <utility>
#include <vector>

#include "client/internal/settled_attempt.h"
#include "core/status_macros.h"

namespace reducer {
namespace {

// One attempt of a device contribution whose inputs are being staged to
// the host; its results are staged back to the device in Wait().
class StagedAttempt final : public CollectiveAttempt {
 public:
  StagedAttempt(const Contribution& contribution,
                std::unique_ptr<StagedInputs> staged, CollectiveBackend* host,
                DeviceStaging* staging)
      : device_(contribution.device),
        cuda_stream_(contribution.cuda_stream),
        staging_(staging),
        staged_(std::move(staged)),
        host_contribution_(contribution) {
    host_contribution_.inputs = staged_->inputs();
    host_contribution_.device = Device::Cpu();
    host_contribution_.cuda_stream = nullptr;
    // The transports send each chunk as soon as its copy is done.
    host_contribution_.inputs_gate = staged_->gate();
    attempt_ = host->Start(host_contribution_);
  }

  absl::StatusOr<std::vector<Tensor>> Wait() override {
    absl::StatusOr<std::vector<Tensor>> result = attempt_->Wait();
    // The host copies of the inputs are no longer read.
    staged_.reset();
    if (!result.ok()) return result.status();
    std::vector<Tensor> on_device;
    on_device.reserve(result->size());
    for (const Tensor& t : *result) {
      REDUCER_ASSIGN_OR_RETURN(Tensor moved,
                               staging_->ToDevice(t, device_, cuda_stream_));
      on_device.push_back(std::move(moved));
    }
    return on_device;
  }

  bool Ready() override { return attempt_->Ready(); }
  bool Settled() override { return attempt_->Settled(); }
  void Cancel() override { attempt_->Cancel(); }

  bool received_any() const override { return attempt_->received_any(); }
  bool retries_itself() const override { return attempt_->retries_itself(); }

 private:
  const Device device_;
  void* const cuda_stream_;
  DeviceStaging* const staging_;  // not owned
  std::unique_ptr<StagedInputs> staged_;
  Contribution host_contribution_;  // read by attempt_ until it is done
  std::unique_ptr<CollectiveAttempt> attempt_;
};

}  // namespace

std::unique_ptr<CollectiveAttempt> StagingBackend::Start(
    const Contribution& contribution) {
  if (contribution.device.is_cpu()) return host_->Start(contribution);
  absl::StatusOr<std::unique_ptr<StagedInputs>> staged =
      staging_->ToHost(contribution);
  if (!staged.ok()) return std::make_unique<FailedAttempt>(staged.status());
  return std::make_unique<StagedAttempt>(contribution, *std::move(staged),
                                         host_, staging_);
}

}  // namespace reducer
