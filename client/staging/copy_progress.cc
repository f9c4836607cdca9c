#include "client/staging/copy_progress.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace reducer {

absl::Status CopyProgress::Await(size_t end, absl::Time deadline) const {
  end = std::min(end, total_bytes_);
  absl::MutexLock lock(&mu_);
  auto covered_or_failed = [this, end]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return ready_bytes_ >= end || !error_.ok();
  };
  mu_.AwaitWithDeadline(absl::Condition(&covered_or_failed), deadline);
  if (ready_bytes_ >= end) return absl::OkStatus();
  if (!error_.ok()) return error_;
  return absl::DeadlineExceededError(absl::StrCat(
      "the call's deadline passed while its input was still being copied from "
      "the device: ", ready_bytes_, " of ", total_bytes_,
      " bytes were in host memory, the transport waited for ", end));
}

void CopyProgress::Advance(size_t ready_bytes) {
  absl::MutexLock lock(&mu_);
  ready_bytes_ = std::max(ready_bytes_, std::min(ready_bytes, total_bytes_));
}

void CopyProgress::Fail(absl::Status error) {
  absl::MutexLock lock(&mu_);
  if (error_.ok()) error_ = std::move(error);
}

size_t CopyProgress::ready_bytes() const {
  absl::MutexLock lock(&mu_);
  return ready_bytes_;
}

}  // namespace reducer
