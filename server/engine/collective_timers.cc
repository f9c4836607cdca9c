// Collective, its timers and status: at half the timeout a stall warning
// names the ranks still missing (or what an undecided collective awaits),
// at the timeout every rank gets DEADLINE_EXCEEDED naming them; Snapshot
// shows the same for status reports.
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/engine/collective.h"
#include "server/log.h"

namespace reducer {

void Collective::StartTimers() {
  std::weak_ptr<Collective> weak = weak_from_this();
  absl::MutexLock lock(&mu_);
  timer_ids_.push_back(env_.timers->Schedule(created_ + timeout_ / 2, [weak] {
    if (auto self = weak.lock()) self->OnStallTimer();
  }));
  timer_ids_.push_back(env_.timers->Schedule(created_ + timeout_, [weak] {
    if (auto self = weak.lock()) self->OnDeadline();
  }));
}

void Collective::OnStallTimer() {
  absl::MutexLock lock(&mu_);
  if (done_) return;
  stalled_ = true;
  if (label_.kind.has_value()) env_.metrics->CollectiveStalled(*label_.kind);
  const std::string awaited = AwaitedLocked();
  const std::string message = absl::StrCat(
      description_, " stalled for ", absl::FormatDuration(Now() - created_),
      ": ", awaited.empty() ? MissingRanks() : awaited,
      "; it fails at the timeout of ", absl::FormatDuration(timeout_));
  const std::vector<int> absent = AbsentRanks();
  env_.log->Log({LogSeverity::kWarning, "collective_stalled", message,
                 label_.job, label_.epoch, label_.name, absent, env_.tenant});
}

void Collective::OnDeadline() {
  absl::MutexLock lock(&mu_);
  if (done_) return;
  const std::string awaited = AwaitedLocked();
  if (!awaited.empty()) {
    FailLocked(absl::DeadlineExceededError(
        absl::StrCat(description_, ": ", awaited, " within ",
                     absl::FormatDuration(timeout_))));
    return;
  }
  FailLocked(absl::DeadlineExceededError(absl::StrCat(
                 description_, " timed out after ",
                 absl::FormatDuration(timeout_), ": ", MissingRanks())),
             AbsentRanks());
}

std::vector<int> Collective::AbsentRanks() const {
  std::vector<int> absent;
  for (size_t i = 0; i < ranks_.size(); ++i) {
    if (!ranks_[i].attached) absent.push_back(group_[i]);
  }
  return absent;
}

std::string Collective::MissingRanks() const {
  std::vector<int> absent, present;
  for (size_t i = 0; i < ranks_.size(); ++i) {
    (ranks_[i].attached ? present : absent).push_back(group_[i]);
  }
  if (!absent.empty()) {
    return absl::StrCat(
        absent.size() == 1 ? "rank " : "ranks ", absl::StrJoin(absent, ","),
        " never arrived (",
        present.empty() ? std::string("no rank")
                        : absl::StrCat("ranks ", absl::StrJoin(present, ",")),
        " waited)");
  }
  std::vector<std::string> slow;
  for (size_t i = 0; i < ranks_.size(); ++i) {
    const RankState& m = ranks_[i];
    if (m.received < m.input_bytes) {
      slow.push_back(absl::StrCat("rank ", group_[i], " sent ", m.received,
                                  " of ", m.input_bytes, " bytes"));
    } else if (!m.finished) {
      slow.push_back(absl::StrCat("rank ", group_[i], " has received ", m.sent,
                                  " of ", m.output_bytes, " result bytes"));
    }
  }
  return absl::StrCat("every rank arrived but payload is missing: ",
                      absl::StrJoin(slow, "; "));
}

std::string Collective::AwaitedLocked() const {
  if (!all_headers_ || strategy_ == nullptr || strategy_->Decided()) {
    return std::string();
  }
  return strategy_->Awaited();
}

std::optional<CollectiveSnapshot> Collective::Snapshot() const {
  absl::MutexLock lock(&mu_);
  if (done_) return std::nullopt;
  CollectiveSnapshot s;
  s.name = label_.name;
  s.kind = label_.kind;
  s.group = group_;
  s.missing_ranks = AbsentRanks();
  s.age = Now() - created_;
  s.stalled = stalled_;
  return s;
}

}  // namespace reducer
