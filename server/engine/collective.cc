// Collective, its life: creation and the state it holds, the queries jobs
// make of it, failure (every rank told, every reservation released first)
// and the report of its end. Every rank's view of the protocol is in
// collective.h; the rendezvous, data flow and timers are in the files named
// there.
#include "server/engine/collective.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/log.h"

namespace reducer {

Collective::Collective(CollectiveEnv env, CollectiveLabel label,
                       std::string description, std::vector<int> group,
                       absl::Duration timeout)
    : env_(env),
      label_(std::move(label)),
      description_(std::move(description)),
      group_(std::move(group)),
      timeout_(timeout),
      created_(env.timers->clock().Now()),
      ranks_(group_.size()),
      chunk_bytes_(env.options->chunk_bytes) {}

Collective::~Collective() {
  absl::MutexLock lock(&mu_);
  for (size_t i = 0; i < ranks_.size(); ++i) ReleaseMemory(i);
  StopKeeping();
  for (TimerQueue::Id id : timer_ids_) env_.timers->Cancel(id);
}

size_t Collective::StateBytes(size_t group_size) {
  return sizeof(Collective) + group_size * (sizeof(RankState) + sizeof(int));
}

void Collective::HoldState(std::vector<MemoryReservation> state) {
  absl::MutexLock lock(&mu_);
  state_ = std::move(state);
}

int Collective::IndexOf(int rank) const {
  auto it = std::lower_bound(group_.begin(), group_.end(), rank);
  return (it != group_.end() && *it == rank) ? static_cast<int>(it - group_.begin())
                                             : -1;
}

std::vector<int> Collective::IndicesOf(const std::vector<int>& ranks) const {
  std::vector<int> indices;
  for (int rank : ranks) {
    const int index = IndexOf(rank);
    if (index >= 0) indices.push_back(index);
  }
  return indices;
}

std::vector<int> Collective::RanksAt(const std::vector<int>& indices) const {
  std::vector<int> ranks;
  for (int index : indices) ranks.push_back(group_[index]);
  return ranks;
}

bool Collective::all_attached() const {
  absl::MutexLock lock(&mu_);
  return attached_ == static_cast<int>(group_.size());
}

bool Collective::done() const {
  absl::MutexLock lock(&mu_);
  return done_;
}

bool Collective::HasAttached(int rank) const {
  absl::MutexLock lock(&mu_);
  const int index = IndexOf(rank);
  return index >= 0 && ranks_[index].attached;
}

bool Collective::HasFinished(int rank) const {
  absl::MutexLock lock(&mu_);
  const int index = IndexOf(rank);
  return index >= 0 && ranks_[index].finished;
}

bool Collective::LeftOut(int rank) const {
  absl::MutexLock lock(&mu_);
  const int index = IndexOf(rank);
  return index >= 0 && ranks_[index].left_out && ranks_[index].covered_by < 0;
}

bool Collective::LeftAnyOut() const {
  absl::MutexLock lock(&mu_);
  return std::any_of(ranks_.begin(), ranks_.end(), [](const RankState& m) {
    return m.left_out && m.covered_by < 0;
  });
}

std::vector<std::pair<int, bool>> Collective::LeftOutRanks() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::pair<int, bool>> left_out;
  for (size_t i = 0; i < ranks_.size(); ++i) {
    if (ranks_[i].left_out && ranks_[i].covered_by < 0) {
      left_out.emplace_back(group_[i], ranks_[i].done);
    }
  }
  return left_out;
}

void Collective::SetChunkBytes(size_t chunk_bytes) {
  absl::MutexLock lock(&mu_);
  chunk_bytes_ = chunk_bytes;
}

bool Collective::SetResultValues(std::vector<int64_t> values) {
  absl::MutexLock lock(&mu_);
  if (done_) return false;
  result_values_ = std::move(values);
  if (strategy_ != nullptr) {
    strategy_->SetResultValues(result_values_, all_headers_, *this);
  }
  return true;
}

void Collective::OnAllAttached() {
  all_headers_ = true;
  result_specs_ = std::make_shared<const std::vector<TensorSpec>>(
      strategy_->PlanResult(reference_, ranks_));
  no_result_specs_ = std::make_shared<const std::vector<TensorSpec>>();
  for (size_t i = 0; i < ranks_.size(); ++i) {
    std::optional<std::vector<TensorSpec>> own = strategy_->ResultOf(i);
    ranks_[i].own_result_specs =
        own.has_value()
            ? std::make_shared<const std::vector<TensorSpec>>(*std::move(own))
            : nullptr;
  }
  StartKeeping();
  for (size_t i = 0; i < ranks_.size(); ++i) {
    // A rank that finishes alone may have had its header already.
    if (ranks_[i].output_bytes == 0 && !ranks_[i].header_sent) {
      SendTo(i, 0, {});
      MaybeFinish(i);
    }
  }
  strategy_->OnAllAttached(*this);
  ResumeReaders();
}

void Collective::Fail(const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  FailLocked(status);
}

void Collective::FailUnlessDecided(const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  if (AllInputInLocked()) return;
  FailLocked(status);
}

bool Collective::AllInputInLocked() const {
  if (!all_headers_ || !strategy_->Decided()) return false;
  for (const RankState& m : ranks_) {
    if (m.received != m.input_bytes) return false;
  }
  return true;
}

void Collective::ReportEnd(absl::StatusCode outcome) {
  uint64_t bytes_in = 0, bytes_out = 0;
  for (const RankState& m : ranks_) {
    bytes_in += m.received;
    bytes_out += m.sent;
  }
  env_.metrics->CollectiveEnded(label_.kind, outcome, Now() - created_,
                                bytes_in, bytes_out);
}

void Collective::FailLocked(const absl::Status& status,
                            std::vector<int> ranks) {
  if (done_) return;
  done_ = true;
  failure_ = status;
  ReportEnd(status.code());
  const std::string message = status.ToString();
  env_.log->Log({LogSeverity::kWarning, "collective_failed", message,
                 label_.job, label_.epoch, label_.name,
                 ranks.empty() ? absl::Span<const int>(group_)
                               : absl::Span<const int>(ranks),
                 env_.tenant});
  // Memory first: by the time any rank learns of the failure, every
  // reservation is back in the budget.
  for (size_t i = 0; i < ranks_.size(); ++i) ReleaseMemory(i);
  StopKeeping();
  for (RankState& m : ranks_) {
    if (m.attached && !m.finished && !m.cut_off) m.channel->Fail(status);
  }
  if (strategy_ != nullptr) strategy_->Clear();
  for (TimerQueue::Id id : timer_ids_) env_.timers->Cancel(id);
  timer_ids_.clear();
}

}  // namespace reducer
