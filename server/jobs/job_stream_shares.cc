#include "server/jobs/job_stream_shares.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace reducer {

JobStreamShares::Share::Share(Share&& other) noexcept
    : shares_(std::exchange(other.shares_, nullptr)),
      job_(std::move(other.job_)) {}

JobStreamShares::Share& JobStreamShares::Share::operator=(
    Share&& other) noexcept {
  if (this != &other) {
    GiveBack();
    shares_ = std::exchange(other.shares_, nullptr);
    job_ = std::move(other.job_);
  }
  return *this;
}

JobStreamShares::Share::~Share() { GiveBack(); }

void JobStreamShares::Share::GiveBack() {
  if (shares_ == nullptr) return;
  std::exchange(shares_, nullptr)->GiveBack(job_);
}

JobStreamShares::JobStreamShares(int max_streams_per_job, MetricsSink* metrics)
    : max_streams_per_job_(max_streams_per_job), metrics_(metrics) {}

absl::StatusOr<JobStreamShares::Share> JobStreamShares::Take(
    absl::string_view job) {
  {
    absl::MutexLock lock(&mu_);
    int& held = streams_[job];
    if (held < max_streams_per_job_) {
      ++held;
      return Share(this, std::string(job));
    }
  }
  metrics_->RequestRefused(absl::StatusCode::kResourceExhausted,
                           RefusedLimit::kMaxStreamsPerJob);
  return absl::ResourceExhaustedError(absl::StrCat(
      "job ", job, " already holds ", max_streams_per_job_,
      " collective streams (--max_streams_per_job=", max_streams_per_job_,
      "); finish some calls first, or raise the flag"));
}

int JobStreamShares::StreamsOf(absl::string_view job) const {
  absl::MutexLock lock(&mu_);
  auto it = streams_.find(job);
  return it == streams_.end() ? 0 : it->second;
}

void JobStreamShares::GiveBack(const std::string& job) {
  absl::MutexLock lock(&mu_);
  auto it = streams_.find(job);
  if (it == streams_.end()) return;
  if (--it->second <= 0) streams_.erase(it);
}

absl::Status HeldStreamShares::Hold(absl::string_view job) {
  absl::MutexLock lock(&mu_);
  for (const std::string& held : jobs_) {
    if (held == job) return absl::OkStatus();
  }
  absl::StatusOr<JobStreamShares::Share> share = shares_->Take(job);
  if (!share.ok()) return share.status();
  held_.push_back(*std::move(share));
  jobs_.emplace_back(job);
  return absl::OkStatus();
}

void HeldStreamShares::GiveBack() {
  std::vector<JobStreamShares::Share> held;
  {
    absl::MutexLock lock(&mu_);
    held.swap(held_);
    jobs_.clear();
  }
}

}  // namespace reducer
