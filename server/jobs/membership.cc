#include "server/jobs/membership.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace reducer {

Membership::Membership(std::string job, int world_size, uint64_t epoch_id)
    : job_(std::move(job)),
      world_size_(world_size),
      expected_here_(world_size),
      epoch_id_(epoch_id),
      holders_(world_size),
      departed_(world_size, false),
      done_(world_size, false),
      absent_(world_size, false),
      absent_since_(world_size, absl::InfinitePast()),
      rejoined_(world_size, false) {}

size_t Membership::StateBytes(int world_size) {
  // holders_, absent_since_, and departed_, done_, absent_ and rejoined_
  // (a bit each, counted as a byte). Done's counts hold their own
  // (SkipRecordBytes).
  return static_cast<size_t>(world_size) *
         (sizeof(std::optional<Holder>) + sizeof(absl::Time) + 4);
}

std::string Membership::state() const {
  return ended_ ? "aborted" : running_ ? "running" : "joining";
}

bool Membership::HasSession(const std::string& session_id) const {
  return open_sessions_.contains(session_id);
}

std::optional<int> Membership::DepartedAmong(
    const std::vector<int>& ranks) const {
  if (!running_) return std::nullopt;
  for (int r : ranks) {
    if (departed_[r]) return r;
  }
  return std::nullopt;
}

absl::Status Membership::CheckFree(const std::vector<int>& ranks) const {
  for (int r : ranks) {
    if (holders_[r].has_value()) {
      return absl::AlreadyExistsError(absl::StrCat(
          "rank ", r, " of job ", job_,
          " is already held by a live session (another process uses this "
          "rank, or the previous holder has not exited yet)"));
    }
  }
  return absl::OkStatus();
}

std::vector<int> Membership::SessionRanks(const std::string& session_id) const {
  auto it = open_sessions_.find(session_id);
  return it == open_sessions_.end() ? std::vector<int>() : it->second.ranks;
}

absl::StatusOr<Membership::Seated> Membership::Seat(
    const std::string& session_id, const std::vector<int>& ranks,
    std::shared_ptr<SessionChannel> session,
    std::vector<std::shared_ptr<SessionChannel>>* superseded) {
  if (absl::Status free = CheckFree(ranks); !free.ok()) return free;
  // The ranks are this session's now: no other claims them any more.
  for (auto it = open_sessions_.begin(); it != open_sessions_.end();) {
    auto current = it++;
    std::vector<int>& claimed = current->second.ranks;
    claimed.erase(std::remove_if(claimed.begin(), claimed.end(),
                                 [&](int r) {
                                   return std::find(ranks.begin(), ranks.end(),
                                                    r) != ranks.end();
                                 }),
                  claimed.end());
    if (!claimed.empty()) continue;
    if (superseded != nullptr) superseded->push_back(current->second.channel);
    open_sessions_.erase(current);
  }
  for (int r : ranks) holders_[r] = Holder{session_id, session};
  open_sessions_[session_id] = OpenSession{ranks, std::move(session)};
  bool rejoined = false;
  for (int r : ranks) {
    if (!running_ || !absent_[r]) continue;
    // Back into the running epoch of a job in quorum mode: the others go
    // on, and the next quorum step counts the rank as joining.
    absent_[r] = false;
    absent_since_[r] = absl::InfinitePast();
    rejoined_[r] = true;
    holders_[r]->ready_quorum_steps = quorum_steps_started_;
    rejoined = true;
  }
  if (rejoined) return Seated::kRejoined;
  if (std::count_if(holders_.begin(), holders_.end(), [](const auto& h) {
        return h.has_value();
      }) == expected_here_) {
    running_ = true;
    return Seated::kAllJoined;
  }
  return Seated::kWaiting;
}

std::shared_ptr<SessionChannel> Membership::Reseat(
    const std::string& session_id, std::shared_ptr<SessionChannel> session) {
  auto it = open_sessions_.find(session_id);
  if (it == open_sessions_.end()) return nullptr;
  for (int r : it->second.ranks) {
    if (Holds(r, session_id)) holders_[r]->session = session;
  }
  return std::exchange(it->second.channel, std::move(session));
}

uint64_t Membership::ReadyQuorumSteps(int rank) const {
  return holders_[rank].has_value() ? holders_[rank]->ready_quorum_steps : 0;
}

void Membership::SetReadyQuorumSteps(int rank, uint64_t steps) {
  if (holders_[rank].has_value()) holders_[rank]->ready_quorum_steps = steps;
}

Membership::Unseated Membership::Unseat(const std::string& session_id,
                                        const SessionChannel* owner,
                                        absl::Time now) {
  Unseated out;
  auto it = open_sessions_.find(session_id);
  if (it == open_sessions_.end() || it->second.channel.get() != owner) {
    out.last_session = open_sessions_.empty();
    return out;
  }
  const std::vector<int> ranks = std::move(it->second.ranks);
  open_sessions_.erase(it);
  out.last_session = open_sessions_.empty();
  LoseHeld(session_id, ranks, now, &out);
  return out;
}

Membership::Unseated Membership::LoseRanks(const std::string& session_id,
                                           const std::vector<int>& ranks,
                                           absl::Time now) {
  Unseated out;
  out.last_session = open_sessions_.empty();
  // The session stays open, claiming these ranks still until its stream
  // ends or another session takes them; it holds them no longer.
  if (HasSession(session_id)) LoseHeld(session_id, ranks, now, &out);
  return out;
}

void Membership::LoseHeld(const std::string& session_id,
                          const std::vector<int>& ranks, absl::Time now,
                          Unseated* out) {
  for (int r : ranks) {
    if (!Holds(r, session_id)) continue;  // replaced since, or not its
    const bool held_running = running() && !departed_[r];
    if (held_running && quorum_mode_) {
      MarkAbsent(r, now);
      out->effect = Unseated::Effect::kAbsent;
      out->ranks.push_back(r);
      continue;
    }
    holders_[r].reset();
    if (held_running) {
      out->effect = Unseated::Effect::kEndsEpoch;
      out->ranks.push_back(r);
    }
  }
}

Membership::Unseated Membership::Depart(const std::string& session_id,
                                        absl::Time now) {
  return DepartRanks(session_id, RunningRanks(session_id), now);
}

Membership::Unseated Membership::DepartRanks(const std::string& session_id,
                                             const std::vector<int>& ranks,
                                             absl::Time now) {
  Unseated out;
  for (int r : RunningRanks(session_id)) {
    if (std::find(ranks.begin(), ranks.end(), r) != ranks.end()) {
      out.ranks.push_back(r);
    }
  }
  if (out.ranks.empty()) return out;
  if (quorum_mode_) {
    // As a lost rank: the others go on, and it may connect again.
    for (int r : out.ranks) MarkAbsent(r, now);
    out.effect = Unseated::Effect::kAbsent;
    return out;
  }
  for (int r : out.ranks) departed_[r] = true;
  out.effect = Unseated::Effect::kDeparted;
  return out;
}

std::vector<int> Membership::RunningRanks(const std::string& session_id) const {
  std::vector<int> ranks;
  auto it = open_sessions_.find(session_id);
  if (it == open_sessions_.end() || !running()) return ranks;
  for (int r : it->second.ranks) {
    if (Holds(r, session_id)) ranks.push_back(r);
  }
  return ranks;
}

bool Membership::Holds(int rank, const std::string& session_id) const {
  return rank >= 0 && rank < world_size_ && holders_[rank].has_value() &&
         holders_[rank]->session_id == session_id;
}

std::vector<std::shared_ptr<SessionChannel>> Membership::Sessions() const {
  std::vector<std::shared_ptr<SessionChannel>> sessions;
  for (const std::optional<Holder>& h : holders_) {
    if (!h.has_value()) continue;
    if (std::find(sessions.begin(), sessions.end(), h->session) ==
        sessions.end()) {
      sessions.push_back(h->session);
    }
  }
  return sessions;
}

std::shared_ptr<SessionChannel> Membership::HolderOf(int rank) const {
  if (rank < 0 || rank >= world_size_ || !holders_[rank].has_value()) {
    return nullptr;
  }
  return holders_[rank]->session;
}

void Membership::EndEpoch(const std::string& reason) {
  ended_ = true;
  running_ = false;
  end_reason_ = reason;
}

void Membership::StartNextEpoch(uint64_t epoch_id) {
  ++epoch_;
  epoch_id_ = epoch_id;
  ended_ = false;
  running_ = false;
  end_reason_.clear();
  holders_.assign(world_size_, std::nullopt);
  departed_.assign(world_size_, false);
  done_.assign(world_size_, false);
  done_count_ = 0;
  skipped_.clear();
  next_whole_sequence_ = 0;
  quorum_mode_ = false;
  absent_.assign(world_size_, false);
  absent_since_.assign(world_size_, absl::InfinitePast());
  rejoined_.assign(world_size_, false);
  quorum_steps_started_ = 0;
  recent_quorum_steps_.clear();
}

absl::Status Membership::CheckCaller(int rank, uint64_t epoch,
                                     const std::string& session_id,
                                     const std::string& description) const {
  if (epoch != epoch_ || ended_) {
    if (epoch < epoch_ || ended_) {
      return absl::AbortedError(absl::StrCat(
          description, ": epoch ", epoch, " of job ", job_, " has ended",
          end_reason_.empty() ? "" : absl::StrCat(" (", end_reason_, ")"),
          "; Connect again to go on"));
    }
    return absl::FailedPreconditionError(
        absl::StrCat(description, ": epoch ", epoch, " of job ", job_,
                     " has not started (current epoch ", epoch_, ")"));
  }
  if (running_ && absent_[rank]) {
    return absl::FailedPreconditionError(absl::StrCat(
        description, ": rank ", rank, " of job ", job_,
        " is absent from epoch ", epoch_,
        " (lost, or late for a quorum step); Connect again to rejoin at the "
        "next quorum step"));
  }
  if (!running_ || !Holds(rank, session_id)) {
    return absl::FailedPreconditionError(absl::StrCat(
        description, ": session ", session_id, " does not hold rank ", rank,
        " of job ", job_, " in epoch ", epoch_, "; Connect first"));
  }
  return absl::OkStatus();
}

absl::Status Membership::CheckGroupPresent(
    const std::vector<int>& group, const std::string& description) const {
  for (int r : group) {
    if (departed_[r]) {
      return absl::FailedPreconditionError(
          absl::StrCat(description, ": rank ", r,
                       " has left the job (its client was closed)"));
    }
    if (absent_[r]) {
      // ABORTED, as for a rank lost while the collective waited: a quorum
      // step whose contributor was lost between its two phases runs again.
      return absl::AbortedError(absl::StrCat(
          description, ": rank ", r,
          " was lost (or was late for a quorum step) and is absent; it takes "
          "part again from the quorum step after it connects again"));
    }
  }
  return absl::OkStatus();
}

Membership::DoneMark Membership::MarkDone(int rank) {
  if (done_[rank]) return DoneMark::kAlready;
  if (++done_count_ == world_size_) {
    done_.assign(world_size_, false);
    done_count_ = 0;
    return DoneMark::kAllDone;
  }
  done_[rank] = true;
  return DoneMark::kLeftOut;
}

uint64_t Membership::Skipped(int rank, const std::string& group) const {
  auto record = skipped_.find(group);
  if (record == skipped_.end()) return 0;
  auto it = record->second.by_rank.find(rank);
  return it == record->second.by_rank.end() ? 0 : it->second;
}

void Membership::NoteSkipped(int rank, const std::string& group) {
  ++skipped_[group].by_rank[rank];
}

size_t Membership::SkipRecordBytes(const std::string& group,
                                   size_t group_size) {
  // The key and the record, and a count per rank: a flat_hash_map slot and
  // its control byte, twice over for the table's growth.
  return sizeof(std::string) + group.size() + sizeof(SkipRecord) +
         2 * sizeof(MemoryReservation) +
         group_size * 2 * (sizeof(std::pair<int, uint64_t>) + 1);
}

void Membership::AddSkipRecord(const std::string& group,
                               std::vector<MemoryReservation> held) {
  skipped_[group].held = std::move(held);
}

void Membership::NoteWholeSequence(uint64_t sequence) {
  next_whole_sequence_ = std::max<uint64_t>(next_whole_sequence_, sequence + 1);
}

void Membership::MarkAbsent(int rank, absl::Time now) {
  holders_[rank].reset();
  if (!absent_[rank]) absent_since_[rank] = now;
  absent_[rank] = true;
  rejoined_[rank] = false;
}

absl::Duration Membership::AbsentFor(int rank, absl::Time now) const {
  if (!absent_[rank]) return absl::ZeroDuration();
  return std::max(now - absent_since_[rank], absl::ZeroDuration());
}

bool Membership::Gone(int rank) const {
  return absent_[rank] || departed_[rank] || !holders_[rank].has_value();
}

std::vector<int> Membership::StartQuorumStep(const std::vector<int>& group,
                                             uint64_t step) {
  std::vector<int> joining;
  for (int r : group) {
    if (!Gone(r) && rejoined_[r]) {
      joining.push_back(r);
      rejoined_[r] = false;
    }
  }
  quorum_mode_ = true;
  quorum_steps_started_ = std::max<uint64_t>(quorum_steps_started_, step + 1);
  return joining;
}

void Membership::ForgetRecords() {
  skipped_.clear();
  recent_quorum_steps_.clear();
}

size_t Membership::StepBytes(const std::string& key,
                             const std::string& description,
                             size_t group_size) {
  return sizeof(RememberedStep) + key.size() + description.size() +
         2 * sizeof(MemoryReservation) +
         group_size * sizeof(std::pair<int, bool>);
}

void Membership::RememberStep(std::string key, std::string description,
                              std::vector<std::pair<int, bool>> left_out,
                              std::vector<MemoryReservation> held) {
  std::sort(left_out.begin(), left_out.end());
  recent_quorum_steps_.push_back({std::move(key), std::move(description),
                                  std::move(left_out), std::move(held)});
  if (recent_quorum_steps_.size() > kRememberedQuorumSteps) {
    recent_quorum_steps_.erase(recent_quorum_steps_.begin());
  }
}

std::optional<Membership::LeftOutOfStep> Membership::RememberedLeftOut(
    const std::string& key, int rank) const {
  for (const RememberedStep& step : recent_quorum_steps_) {
    if (step.key != key) continue;
    auto it = std::lower_bound(step.left_out.begin(), step.left_out.end(),
                               std::make_pair(rank, false));
    if (it != step.left_out.end() && it->first == rank) {
      return LeftOutOfStep{step.description, it->second};
    }
  }
  return std::nullopt;
}

std::vector<int> Membership::SeatedRanks() const {
  std::vector<int> ranks;
  for (int r = 0; r < world_size_; ++r) {
    if (holders_[r].has_value()) ranks.push_back(r);
  }
  return ranks;
}

std::vector<int> Membership::AbsentRanks() const {
  std::vector<int> ranks;
  for (int r = 0; r < world_size_; ++r) {
    if (absent_[r]) ranks.push_back(r);
  }
  return ranks;
}

std::vector<int> Membership::DoneRanks() const {
  std::vector<int> ranks;
  for (int r = 0; r < world_size_; ++r) {
    if (done_[r]) ranks.push_back(r);
  }
  return ranks;
}

}  // namespace reducer
