#include "server/relay/forwarded_message.h"

#include <algorithm>
#include <cstring>
#include <utility>

namespace reducer {

ForwardedMessage::ForwardedMessage(UpstreamSession& session,
                                   v1::CollectiveHeader send, size_t bytes,
                                   std::function<void(absl::Status)> done)
    : input_(std::make_shared<UpstreamInput>(bytes)) {
  session.Start(std::move(send), input_, /*into=*/nullptr,
                [done = std::move(done)](absl::StatusOr<UpstreamResult> r) {
                  done(r.status());
                });
}

void ForwardedMessage::Send(ResultMessage message, bool last) {
  (void)last;
  absl::MutexLock lock(&mu_);
  uint64_t offset = message.offset;
  for (const SharedBytes& piece : message.data) {
    const size_t size = std::min<size_t>(
        piece.size(),
        input_->size() - std::min<size_t>(offset, input_->size()));
    if (size > 0) std::memcpy(input_->data() + offset, piece.data(), size);
    if (size > 0) early_[offset] = std::max(early_[offset], offset + size);
    offset += piece.size();
  }
  // Bytes ready are those contiguous from the start.
  const size_t before = filled_;
  for (auto it = early_.begin(); it != early_.end() && it->first <= filled_;
       it = early_.erase(it)) {
    filled_ = std::max<size_t>(filled_, it->second);
  }
  if (filled_ > before) input_->MarkReady(filled_);
}

void ForwardedMessage::Fail(const absl::Status& status) {
  input_->Abandon(status);
}

}  // namespace reducer
