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

StreamShares::StreamShares(Holder holder, int max_streams_per_tenant,
                           MetricsSink* metrics)
    : holder_(holder),
      max_streams_per_tenant_(max_streams_per_tenant),
      metrics_(metrics) {}

absl::StatusOr<StreamShares::Share> StreamShares::Take(
    absl::string_view holder) {
  {
    absl::MutexLock lock(&mu_);
    int& held = streams_[holder];
    if (held < max_streams_per_tenant_) {
      ++held;
      return Share(this, std::string(holder));
    }
  }
  metrics_->RequestRefused(absl::StatusCode::kResourceExhausted,
                           RefusedLimit::kMaxStreamsPerTenant);
  if (holder_ == Holder::kSilentPeer) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "peer ", holder, " already holds ", max_streams_per_tenant_,
        " collective streams that sent no call yet (--max_streams_per_tenant=",
        max_streams_per_tenant_,
        "; without --job_tokens_file a stream has no tenant until its first "
        "call, so silent ones count per client address); a stream must send "
        "its call as it opens: look for a client that opens streams and "
        "sends nothing, or raise the flag"));
  }
  return absl::ResourceExhaustedError(absl::StrCat(
      "tenant ", holder, " already holds ", max_streams_per_tenant_,
      " collective streams (--max_streams_per_tenant=", max_streams_per_tenant_,
      "; a stream counts from the moment it opens with the tenant's token, "
      "or once a call of one of its jobs attaches on it); finish some calls "
      "or close streams that send nothing first, or raise the flag"));
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

absl::Status HeldStreamShares::Hold(
    absl::string_view job, absl::FunctionRef<std::string()> tenant_of) {
  absl::MutexLock lock(&mu_);
  took_ = Took::kNothing;
  pending_job_.assign(job.data(), job.size());
  if (!last_job_.empty() && job == last_job_) return absl::OkStatus();
  const std::string tenant = tenant_of();
  for (const StreamShares::Share& held : held_) {
    if (held.holder() == tenant) return absl::OkStatus();
  }
  if (opening_.Of(shares_) && opening_.holder() == tenant) {
    held_.push_back(std::move(opening_));
    took_ = Took::kOpeningShare;
    return absl::OkStatus();
  }
  absl::StatusOr<StreamShares::Share> share = shares_->Take(tenant);
  if (!share.ok()) return share.status();
  held_.push_back(*std::move(share));
  took_ = Took::kNewShare;
  return absl::OkStatus();
}

void HeldStreamShares::Settle(bool attached) {
  StreamShares::Share given_back;  // goes after the lock
  absl::MutexLock lock(&mu_);
  if (attached) {
    // The stream holds its tenant's share now: not silent any more.
    given_back = std::move(opening_);
    last_job_.swap(pending_job_);
  } else if (took_ == Took::kNewShare) {
    given_back = std::move(held_.back());
    held_.pop_back();
  } else if (took_ == Took::kOpeningShare) {
    opening_ = std::move(held_.back());
    held_.pop_back();
  }
  took_ = Took::kNothing;
  pending_job_.clear();
}

void HeldStreamShares::GiveBack() {
  std::vector<StreamShares::Share> held;
  {
    absl::MutexLock lock(&mu_);
    held.swap(held_);
    held.push_back(std::move(opening_));
    took_ = Took::kNothing;
    last_job_.clear();
  }
}

}  // namespace reducer
