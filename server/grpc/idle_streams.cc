#include "server/grpc/idle_streams.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace reducer {

IdleStreams::IdleStreams(absl::Duration timeout) : timeout_(timeout) {
  if (on()) thread_ = std::thread([this] { Run(); });
}

IdleStreams::~IdleStreams() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void IdleStreams::Watch(const void* key, std::weak_ptr<Stream> stream) {
  if (!on()) return;
  absl::MutexLock lock(&mu_);
  watched_[key] = std::move(stream);
}

void IdleStreams::Forget(const void* key) {
  if (!on()) return;
  absl::MutexLock lock(&mu_);
  watched_.erase(key);
}

absl::Status IdleStreams::ClosedStatus() const {
  return absl::UnavailableError(absl::StrCat(
      "reducerd closed this collective stream: nothing happened on it for "
      "--stream_idle_timeout=",
      absl::FormatDuration(timeout_),
      " (no message arrived, no call was in flight, no answer was left to "
      "write); nothing sent on it since was used: send it again on a new "
      "stream"));
}

void IdleStreams::Run() {
  const absl::Duration period = timeout_ / 8;
  const absl::Status closed = ClosedStatus();
  absl::MutexLock lock(&mu_);
  while (!mu_.AwaitWithTimeout(absl::Condition(&stop_), period)) {
    const absl::Time cutoff = Clock::Steady().Now() - timeout_;
    std::vector<std::shared_ptr<Stream>> streams;
    streams.reserve(watched_.size());
    for (auto it = watched_.begin(); it != watched_.end();) {
      if (std::shared_ptr<Stream> stream = it->second.lock()) {
        streams.push_back(std::move(stream));
        ++it;
      } else {
        watched_.erase(it++);
      }
    }
    mu_.Unlock();
    for (const std::shared_ptr<Stream>& stream : streams) {
      stream->CloseIfIdleSince(cutoff, closed);
    }
    streams.clear();  // may destroy streams: without the lock
    mu_.Lock();
  }
}

}  // namespace reducer
