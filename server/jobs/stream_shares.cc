#include "server/jobs/stream_shares.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace reducer {

StreamShares::Share::Share(Share&& other) noexcept
    : shares_(std::exchange(other.shares_, nullptr)),
      holder_(std::exchange(other.holder_, std::string())) {}

StreamShares::Share& StreamShares::Share::operator=(
    Share&& other) noexcept {
  if (this != &other) {
    GiveBack();
    shares_ = std::exchange(other.shares_, nullptr);
    holder_ = std::exchange(other.holder_, std::string());
  }
  return *this;
}

StreamShares::Share::~Share() { GiveBack(); }

void StreamShares::Share::GiveBack() {
  if (shares_ == nullptr) return;
  std::exchange(shares_, nullptr)->GiveBack(holder_);
}

StreamShares::StreamShares(Holder holder, int max_streams_per_job,
                           MetricsSink* metrics)
    : holder_(holder),
      max_streams_per_job_(max_streams_per_job),
      metrics_(metrics) {}

absl::StatusOr<StreamShares::Share> StreamShares::Take(
    absl::string_view holder) {
  {
    absl::MutexLock lock(&mu_);
    int& held = streams_[holder];
    if (held < max_streams_per_job_) {
      ++held;
      return Share(this, std::string(holder));
    }
  }
  metrics_->RequestRefused(absl::StatusCode::kResourceExhausted,
                           RefusedLimit::kMaxStreamsPerJob);
  if (holder_ == Holder::kSilentPeer) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "peer ", holder, " already holds ", max_streams_per_job_,
        " collective streams that sent no call yet (--max_streams_per_job=",
        max_streams_per_job_, "); a stream must send its call as it opens: look for a client that "
        "opens streams and sends nothing, or raise the flag"));
  }
  return absl::ResourceExhaustedError(absl::StrCat(
      "job ", holder, " already holds ", max_streams_per_job_,
      " collective streams (--max_streams_per_job=", max_streams_per_job_,
      "); finish some calls first, or raise the flag"));
}

int StreamShares::StreamsOf(absl::string_view holder) const {
  absl::MutexLock lock(&mu_);
  auto it = streams_.find(holder);
  return it == streams_.end() ? 0 : it->second;
}

void StreamShares::GiveBack(const std::string& holder) {
  absl::MutexLock lock(&mu_);
  auto it = streams_.find(holder);
  if (it == streams_.end()) return;
  if (--it->second <= 0) streams_.erase(it);
}

absl::Status HeldStreamShares::Hold(absl::string_view job) {
  absl::MutexLock lock(&mu_);
  silent_ = StreamShares::Share();  // a call came: the stream is not silent
  for (const StreamShares::Share& held : held_) {
    if (held.holder() == job) return absl::OkStatus();
  }
  absl::StatusOr<StreamShares::Share> share = shares_->Take(job);
  if (!share.ok()) return share.status();
  held_.push_back(*std::move(share));
  return absl::OkStatus();
}

void HeldStreamShares::GiveBack() {
  std::vector<StreamShares::Share> held;
  {
    absl::MutexLock lock(&mu_);
    held.swap(held_);
    held.push_back(std::move(silent_));
  }
}

}  // namespace reducer
