#include "server/relay/upstream.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace reducer {

UpstreamInput::UpstreamInput(size_t bytes, BufferPool* buffers)
    : bytes_(bytes),
      buffer_(buffers != nullptr ? buffers->Get(bytes)
                                 : AllocateBuffer(bytes)) {}

void UpstreamInput::MarkReady(size_t end) {
  absl::MutexLock lock(&mu_);
  ready_ = std::max(ready_, std::min(end, bytes_));
}

void UpstreamInput::Abandon(const absl::Status& why) {
  absl::MutexLock lock(&mu_);
  if (abandoned_.ok()) abandoned_ = why;
}

size_t UpstreamInput::ready() const {
  absl::MutexLock lock(&mu_);
  return ready_;
}

absl::Status UpstreamInput::Await(size_t end, absl::Time deadline) const {
  absl::MutexLock lock(&mu_);
  auto settled = [this, end]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return ready_ >= end || !abandoned_.ok();
  };
  mu_.AwaitWithDeadline(absl::Condition(&settled), deadline);
  if (!abandoned_.ok()) return abandoned_;
  if (ready_ >= end) return absl::OkStatus();
  return absl::DeadlineExceededError(
      absl::StrCat("the relay had ", ready_, " of the ", end,
                   " payload bytes asked for ready at the deadline"));
}

}  // namespace reducer
