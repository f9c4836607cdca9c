#include "client/collective_handle.h"

#include <utility>

#include "client/internal/collective_handle_impl.h"
#include "core/status_macros.h"

namespace reducer {

CollectiveHandle::CollectiveHandle(std::unique_ptr<Impl> impl)
    : impl_(std::move(impl)) {}

CollectiveHandle::~CollectiveHandle() = default;

absl::StatusOr<std::vector<Tensor>> CollectiveHandle::Wait() {
  return impl_->Wait();
}

bool CollectiveHandle::Ready() { return impl_->Ready(); }

int CollectiveHandle::source() const { return impl_->source(); }

CollectiveHandle::Impl::Impl(std::unique_ptr<PendingCollective> pending,
                             std::optional<InPlaceTarget> target)
    : pending_(std::move(pending)), target_(std::move(target)) {}

CollectiveHandle::Impl::Impl(absl::Status refused)
    : refused_(std::move(refused)) {}

CollectiveHandle::Impl::~Impl() {
  if (pending_ != nullptr) pending_->Wait().IgnoreError();
}

bool CollectiveHandle::Impl::Ready() {
  return waited_ || !refused_.ok() || pending_->Ready();
}

absl::StatusOr<std::vector<Tensor>> CollectiveHandle::Impl::Wait() {
  if (waited_) {
    return absl::FailedPreconditionError(
        "Wait() was called a second time on the handle of one collective");
  }
  waited_ = true;
  if (!refused_.ok()) return refused_;
  std::unique_ptr<PendingCollective> pending = std::move(pending_);
  absl::StatusOr<std::vector<Tensor>> result = pending->Wait();
  if (!result.ok()) return result;
  source_ = pending->matched_source();
  if (!target_.has_value()) return result;
  REDUCER_RETURN_IF_ERROR(Deliver(*std::move(result), *target_));
  return std::vector<Tensor>();
}

}  // namespace reducer
