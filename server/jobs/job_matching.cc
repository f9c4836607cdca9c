// Job's matching: how a call finds its collective (by matching key or
// retried attempt), how new collectives are admitted and started, Done's
// exclusions, and replays. Sessions and epochs are in job.cc.
#include <algorithm>
#include <utility>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/point_to_point_name.h"
#include "core/status_macros.h"
#include "core/validate.h"
#include "proto/reducer/v1/wire_conversion.h"
#include "server/jobs/collective_admission.h"
#include "server/jobs/job.h"
#include "server/jobs/several_ranks.h"

namespace reducer {
namespace {

// The key that matches the same collective across ranks: its name, which
// is unique in the job (so ranks that name different groups meet and are
// told), or else its sequence number on its group.
std::string MatchingKey(const v1::CollectiveHeader& header,
                        const Fingerprint& fp) {
  if (!header.name().empty()) return absl::StrCat("\"", header.name());
  return absl::StrCat(absl::StrJoin(fp.group, ","), "|#", header.sequence());
}

}  // namespace

absl::StatusOr<std::shared_ptr<Collective>> Job::Attach(
    const v1::CollectiveHeader& header, std::shared_ptr<RankChannel> stream) {
  if (env_.kept != nullptr &&
      (header.received_below() > 0 || header.received_size() > 0)) {
    env_.kept->Acknowledge(header.session_id(), header.received_below(),
                           header.received());
  }
  if (header.replay()) return Replay(header, std::move(stream));
  absl::StatusOr<Fingerprint> fp = CheckedFingerprint(header);
  if (!fp.ok()) return fp.status();
  const std::string description = DescribeCollective(header, *fp, world_size_);

  // A relay's contribution for several ranks: the others it stands for.
  absl::StatusOr<std::vector<int>> covered = CoveredRanks(
      *fp, header.rank(),
      std::vector<int>(header.ranks().begin(), header.ranks().end()),
      description);
  if (!covered.ok()) return covered.status();

  absl::MutexLock lock(&mu_);
  absl::Status holds = membership_.CheckCaller(
      header.rank(), header.epoch(), header.session_id(), description);
  if (!holds.ok()) return holds;
  for (int other : *covered) {
    REDUCER_RETURN_IF_ERROR(membership_.CheckCaller(
        other, header.epoch(), header.session_id(), description));
    if (membership_.CalledDone(other)) {
      return absl::FailedPreconditionError(absl::StrCat(
          description, ": rank ", other,
          " called Done(); it takes part in no collective of the job until "
          "every rank has called Done(), so no contribution may stand for "
          "it"));
    }
  }
  if (fp->kind == CollectiveKind::kQuorumBarrier && header.quorum_follower()) {
    // Another shard decides the step; this one only learns that the job
    // runs quorum steps.
    membership_.EnterQuorumMode();
    ResultMessage none;
    none.result_specs = std::make_shared<const std::vector<TensorSpec>>();
    stream->Send(std::move(none), /*last=*/true);
    return std::shared_ptr<Collective>();
  }
  if (membership_.CalledDone(header.rank()) &&
      fp->kind != CollectiveKind::kDone) {
    return absl::FailedPreconditionError(absl::StrCat(
        description, ": rank ", header.rank(),
        " called Done(); it takes part in no collective of the job until "
        "every rank has called Done()"));
  }
  if (fp->kind == CollectiveKind::kDone) {
    // What the pending collectives it will be left out of make the job
    // remember is held in the budget first.
    REDUCER_RETURN_IF_ERROR(ReserveForDoneLocked(header.rank(), description));
  }
  absl::StatusOr<std::shared_ptr<Collective>> collective =
      CollectiveForLocked(header, *fp, description);
  if (!collective.ok()) return collective.status();
  const CollectiveKind kind = fp->kind;
  if (kind == CollectiveKind::kDone) {
    (*collective)
        ->SetResultValues(
            {static_cast<int64_t>(membership_.next_whole_sequence())});
  }
  const int root = fp->root;
  std::vector<int> sources;
  if (kind == CollectiveKind::kMatch) sources = fp->sources;
  if (!(*collective)
           ->Attach(std::move(stream), header.rank(), *std::move(fp),
                    header.attempt_id(), *covered)) {
    if ((*collective)->LeftOut(header.rank())) {
      membership_.MarkAbsent(header.rank(), env_.timers->clock().Now());
      LoseAbsentLocked({header.rank()}, absl::StrCat("it was late for ",
                                                     ShortName(description)));
    }
    return RefusedByCollectiveError();
  }
  if (kind == CollectiveKind::kDone) MarkDoneLocked(header.rank());
  if (kind == CollectiveKind::kSendReceive) {
    point_to_point_.NoteMessage(header, root, **collective);
  }
  if (kind == CollectiveKind::kMatch) {
    point_to_point_.AddMatch(header, root, std::move(sources), *collective);
  }
  return collective;
}

absl::StatusOr<std::shared_ptr<AttachedCollective>> Job::AttachCall(
    const v1::CollectiveHeader& header, std::shared_ptr<RankChannel> stream) {
  if (relay_ == nullptr) return Attach(header, std::move(stream));
  if (header.replay()) {
    return absl::NotFoundError(absl::StrCat(
        "job ", name_, ": this relay keeps no results to send again (attempt ",
        header.attempt_id(), ")"));
  }
  if (header.ranks_size() > 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "job ", name_, ": rank ", header.rank(),
        " sent a contribution for several ranks to a relay, which takes "
        "each rank's own"));
  }
  absl::StatusOr<Fingerprint> fp = CheckedFingerprint(header);
  if (!fp.ok()) return fp.status();
  const std::string description = DescribeCollective(header, *fp, world_size_);
  {
    absl::MutexLock lock(&mu_);
    REDUCER_RETURN_IF_ERROR(membership_.CheckCaller(
        header.rank(), header.epoch(), header.session_id(), description));
  }
  // A message between two ranks of this host never leaves it. Its route
  // and its attaching here are one step for the held messages a match
  // hands over (under p2p_mu_): a message kept here is in matching_ by
  // the time a match looks for it.
  if (fp->kind == CollectiveKind::kSendReceive) {
    absl::MutexLock routing(&p2p_mu_);
    if (relay_->KeepsHere(header, *fp)) {
      return Attach(header, std::move(stream));
    }
  }
  if (fp->kind == CollectiveKind::kMatch) {
    absl::MutexLock routing(&p2p_mu_);
    std::vector<JobRelay::HeldMessage> held = relay_->BeforeMatch(header, *fp);
    absl::MutexLock lock(&mu_);
    for (JobRelay::HeldMessage& message : held) {
      HandOverHeldLocked(message.send, std::move(message.channel));
    }
  }
  return relay_->Attach(header, *fp, std::move(stream));
}

void Job::HandOverHeldLocked(const v1::CollectiveHeader& send,
                             std::shared_ptr<RankChannel> channel) {
  absl::StatusOr<Fingerprint> fp = FingerprintFromHeader(send, world_size_);
  if (fp.ok() && fp->group.size() == 2) {
    auto it = matching_.find(MatchingKeyLocked(send, *fp));
    if (it != matching_.end() && !it->second->done()) {
      const int destination =
          fp->group[0] == fp->root ? fp->group[1] : fp->group[0];
      // As the destination's Receive: no tensor of its own, which agrees
      // with the one sent.
      Fingerprint receive = *std::move(fp);
      receive.tensors.clear();
      it->second->Attach(std::move(channel), destination, std::move(receive),
                         /*attempt_id=*/"", /*covered=*/{});
      return;
    }
  }
  channel->Fail(absl::NotFoundError(
      absl::StrCat("job ", name_, ": the message \"", send.name(),
                   "\" is no longer held on this relay")));
}

absl::StatusOr<std::shared_ptr<Collective>> Job::Replay(
    const v1::CollectiveHeader& header, std::shared_ptr<RankChannel> stream) {
  const int rank = header.rank();
  const std::string& attempt = header.attempt_id();
  absl::Status valid = CheckReplay(header);
  if (valid.ok() && (rank < 0 || rank >= world_size_)) {
    valid = absl::InvalidArgumentError(
        absl::StrCat("job ", name_, ": a replay names rank ", rank,
                     ", not a rank of the "
                     "job's ",
                     world_size_));
  }
  if (!valid.ok()) return valid;
  // A call cut off while its result is still being made takes it up again;
  // one whose result was made whole finds it kept. In that order: a result
  // handed over while this looks is kept by the time Resume says so.
  std::shared_ptr<Collective> first;
  {
    absl::MutexLock lock(&mu_);
    if (std::optional<std::weak_ptr<Collective>> seen =
            attempts_.Find(attempt)) {
      first = seen->lock();
    }
  }
  if (first != nullptr) {
    absl::StatusOr<Fingerprint> fp = FingerprintFromHeader(header, world_size_);
    if (!fp.ok()) return fp.status();
    absl::Status resumed = first->Resume(rank, attempt, fp->tensors, stream);
    if (resumed.ok()) return first;
    if (resumed.code() != absl::StatusCode::kNotFound) return resumed;
  }
  return ReplayKept(env_.kept.get(), header, *stream, *env_.log);
}

absl::Status RefusedByCollectiveError() {
  absl::Status refused = absl::AbortedError(
      "the collective refused this call; the call was told why");
  refused.SetPayload(kRefusedByCollectiveMark, absl::Cord());
  return refused;
}

bool IsRefusedByCollective(const absl::Status& status) {
  return status.GetPayload(kRefusedByCollectiveMark).has_value();
}

absl::StatusOr<Fingerprint> Job::CheckedFingerprint(
    const v1::CollectiveHeader& header) {
  const int rank = header.rank();
  absl::StatusOr<Fingerprint> fp = FingerprintFromHeader(header, world_size_);
  absl::Status valid =
      fp.ok() ? ValidateContribution(*fp, rank, world_size_,
                                     env_.options->max_tensor_bytes)
              : fp.status();
  // Point-to-point messages are matched by their reserved names alone, and
  // no other collective may take one (core/point_to_point_name.h). A name
  // refused here fails only this call: it may name another pair's message.
  bool bad_name = false;
  if (valid.ok()) {
    valid = CheckPointToPointName(header.name(), *fp);
    bad_name = !valid.ok();
  }
  if (valid.ok()) return fp;
  const absl::Status status = RefusedContribution(env_, name_, rank, valid);
  if (!bad_name) FailNamedCollective(header, status);
  return status;
}

absl::StatusOr<std::shared_ptr<Collective>> Job::CollectiveForLocked(
    const v1::CollectiveHeader& header, const Fingerprint& fp,
    const std::string& description) {
  const int rank = header.rank();
  // A retry (same attempt id) goes to the collective its first attempt
  // joined, if that one can still take it; a contribution already used is
  // never counted again.
  const std::string& attempt = header.attempt_id();
  if (!attempt.empty()) {
    if (std::optional<std::weak_ptr<Collective>> seen =
            attempts_.Find(attempt)) {
      std::shared_ptr<Collective> first = seen->lock();
      if (first == nullptr || first->done() || first->HasFinished(rank)) {
        return absl::AbortedError(
            absl::StrCat(description, ": rank ", rank,
                         " retried a contribution (attempt ", attempt,
                         ") that was already used; its result cannot be sent "
                         "again, and counting it twice would be wrong"));
      }
      return first;
    }
  }
  const std::string key = MatchingKeyLocked(header, fp);
  if (std::shared_ptr<Collective> step = LeftOutStepLocked(key, rank)) {
    return step;  // its Attach refuses the late call
  }
  if (std::optional<Membership::LeftOutOfStep> left_out =
          membership_.RememberedLeftOut(key, rank)) {
    return Collective::LeftOutRefusal(left_out->description, rank,
                                      left_out->done);
  }
  if (std::optional<absl::Status> failed = failed_.Take(key, rank)) {
    ReportPendingLocked();
    return *failed;
  }
  // A new id is remembered (AttemptCache) with its bytes counted, or the
  // call refused before anything is created.
  std::vector<MemoryReservation> attempt_held;
  if (!attempt.empty()) {
    REDUCER_ASSIGN_OR_RETURN(
        attempt_held,
        ReserveInShares(env_, name_, description,
                        "the record of its attempt id, kept to recognize "
                        "a retry",
                        AttemptCache::EntryBytes(attempt)));
  }
  std::shared_ptr<Collective> collective;
  auto it = matching_.find(key);
  // A rank that already has its result from a collective of this name is
  // starting the next one (names may be reused, as in Horovod).
  if (it != matching_.end() && !it->second->HasFinished(rank)) {
    collective = it->second;
  } else {
    // What it may make the job remember is held in the budget first: a
    // quorum step, or one that leaves out a rank done already, its
    // refusals of late calls; an unnamed one that leaves out a done rank,
    // its group's record of Done's counts, if there is none yet.
    const bool leaves_done_out =
        std::any_of(fp.group.begin(), fp.group.end(),
                    [this](int r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
                      return membership_.CalledDone(r);
                    });
    const std::string group = SkippedGroupOf(key);
    const bool needs_skip_record =
        leaves_done_out && !group.empty() && !membership_.HasSkipRecord(group);
    std::vector<MemoryReservation> skip_record;
    if (needs_skip_record) {
      REDUCER_ASSIGN_OR_RETURN(skip_record,
                               ReserveSkipRecordLocked(group, description));
    }
    std::vector<MemoryReservation> step_record;
    if (leaves_done_out || fp.kind == CollectiveKind::kQuorumBarrier) {
      REDUCER_ASSIGN_OR_RETURN(
          step_record, ReserveStepRecordLocked(key, description,
                                               fp.group.size(), description));
    }
    absl::StatusOr<std::shared_ptr<Collective>> created =
        NewCollectiveLocked(header, fp, description);
    if (!created.ok()) {
      ReportPendingLocked();  // gives back the tenant's count it took
      return created.status();
    }
    collective = *std::move(created);
    matching_[key] = collective;
    ReportPendingLocked();
    if (step_record.empty()) {
      step_records_.erase(key);  // a collective's of that key before
    } else {
      step_records_[key] = std::move(step_record);
    }
    if (needs_skip_record) {
      membership_.AddSkipRecord(group, std::move(skip_record));
    }
    TellMembershipChangedLocked(collective, key);
    if (header.name().empty() &&
        static_cast<int>(fp.group.size()) == world_size_) {
      membership_.NoteWholeSequence(header.sequence());
    }
  }
  if (!attempt.empty()) {
    attempts_.Remember(attempt, collective, std::move(attempt_held));
  }
  return collective;
}

absl::StatusOr<std::shared_ptr<Collective>> Job::NewCollectiveLocked(
    const v1::CollectiveHeader& header, const Fingerprint& fp,
    const std::string& description) {
  const bool quorum = fp.kind == CollectiveKind::kQuorumBarrier;
  if (!quorum) {  // a quorum step goes on without them
    REDUCER_RETURN_IF_ERROR(
        membership_.CheckGroupPresent(fp.group, description));
  }
  PruneFinished();
  // Failed collectives remembered for ranks yet to call them give their
  // room to one that ranks wait for.
  ForgetFailedForRoomLocked();
  REDUCER_RETURN_IF_ERROR(
      CheckPendingLimit(env_, name_, description, PendingLocked()));
  if (tenant_ != nullptr) {
    if (!tenant_->TryAddPending(1)) {
      return TenantPendingRefusal(env_, description, tenant_->pending(),
                                  tenant_->max_pending());
    }
    ++reported_pending_;  // the collective added next is counted
  }
  REDUCER_ASSIGN_OR_RETURN(
      std::vector<MemoryReservation> state,
      ReserveCollectiveState(env_, name_, description, fp.group.size()));
  const absl::Duration timeout = CollectiveTimeout(env_, header.timeout_ms());
  auto collective = std::make_shared<Collective>(
      env_,
      CollectiveLabel{name_, membership_.epoch(), ShortName(description),
                      fp.kind},
      description, fp.group, timeout);
  collective->HoldState(std::move(state));
  if (TraitsOf(fp.kind).paced_chunks) collective->SetChunkBytes(chunk_bytes_);
  collective->StartTimers();
  if (quorum) {
    collective->StartQuorum(
        fp.quorum, membership_.StartQuorumStep(fp.group, header.sequence()),
        membership_);
  }
  active_.push_back(collective);
  return collective;
}

void Job::FailNamedCollective(const v1::CollectiveHeader& header,
                              const absl::Status& status) {
  // The key as the well-formed ranks compute it: their group is "all" when
  // this header says so, else the ranks it lists, if they make sense.
  Fingerprint key_fp;
  if (header.group().empty()) {
    for (int r = 0; r < world_size_; ++r) key_fp.group.push_back(r);
  } else {
    key_fp.group.assign(header.group().begin(), header.group().end());
    std::sort(key_fp.group.begin(), key_fp.group.end());
    key_fp.group.erase(std::unique(key_fp.group.begin(), key_fp.group.end()),
                       key_fp.group.end());
    for (int r : key_fp.group) {
      if (r < 0 || r >= world_size_) return;  // no well-formed peer matches
    }
  }
  absl::MutexLock lock(&mu_);
  if (!membership_.running() || header.epoch() != membership_.epoch()) return;
  // Only a session that holds the rank it claims speaks for a collective:
  // otherwise which collective it meant is unknown, and a stray client
  // must not fail other ranks' work.
  if (!membership_.Holds(header.rank(), header.session_id())) return;
  std::string key = MatchingKey(header, key_fp);
  if (auto it = matching_.find(key); it != matching_.end()) {
    // Peers waiting now get the error, and so do peers arriving later.
    it->second->Fail(status);
    return;
  }
  // Nobody waits for it yet: no Collective, only what the ranks that will
  // call it must be told.
  const int ranks[] = {header.rank()};
  const std::string description = DescribeCollective(header, std::nullopt);
  env_.log->Log({LogSeverity::kWarning, "collective_failed", status.ToString(),
                 name_, membership_.epoch(), ShortName(description), ranks,
                 env_.tenant});
  RememberFailedLocked(std::move(key), key_fp.group, status);
}

bool Job::PendingFullLocked() const {
  return PendingLocked() >=
             static_cast<size_t>(
                 env_.options->max_pending_collectives_per_job) ||
         (tenant_ != nullptr && tenant_->pending() >= tenant_->max_pending());
}

void Job::ForgetFailedForRoomLocked() {
  while (PendingFullLocked() && failed_.ForgetOldest()) ReportPendingLocked();
}

void Job::RememberFailedLocked(std::string key, const std::vector<int>& group,
                               const absl::Status& status) {
  ForgetFailedForRoomLocked();
  if (PendingFullLocked()) return;
  const size_t bytes = FailedCollectives::EntryBytes(key, status, group.size());
  std::vector<MemoryReservation> held;
  for (MemoryBudget* budget :
       {env_.memory, env_.job_memory.get(), env_.tenant_memory.get()}) {
    if (budget == nullptr) continue;
    held.push_back(MemoryReservation::Try(budget, bytes));
    if (!held.back().ok()) return;  // its ranks wait for their deadline
  }
  failed_.Add(std::move(key), status, group, std::move(held));
  ReportPendingLocked();
}

void Job::PruneFinished() {
  active_.erase(std::remove_if(active_.begin(), active_.end(),
                               [](const auto& w) { return w.expired(); }),
                active_.end());
  for (auto it = matching_.begin(); it != matching_.end();) {
    auto current = it++;
    if (current->second->all_attached() && current->second->done()) {
      if (std::optional<double> pace = current->second->InputPace()) {
        NotePaceLocked(*pace);
      }
      std::vector<MemoryReservation> record;
      if (auto funded = step_records_.find(current->first);
          funded != step_records_.end()) {
        record = std::move(funded->second);
        step_records_.erase(funded);
      }
      if (current->second->LeftAnyOut()) {
        membership_.RememberStep(current->first, current->second->description(),
                                 current->second->LeftOutRanks(),
                                 std::move(record));
      }
      matching_.erase(current);
    }
  }
  ReportPendingLocked();
}

std::shared_ptr<Collective> Job::LeftOutStepLocked(const std::string& key,
                                                   int rank) {
  if (auto it = matching_.find(key);
      it != matching_.end() && it->second->LeftOut(rank)) {
    return it->second;
  }
  return nullptr;
}

std::string Job::MatchingKeyLocked(const v1::CollectiveHeader& header,
                                   const Fingerprint& fp) {
  const bool several_shards = shards_.has_value() && shards_->size() > 1;
  if (!header.name().empty() || several_shards) return MatchingKey(header, fp);
  const std::string group = absl::StrJoin(fp.group, ",");
  return absl::StrCat(
      group, "|#",
      header.sequence() + membership_.Skipped(header.rank(), group));
}

void Job::MarkDoneLocked(int rank) {
  // Once every rank is done, the DONE collective ends for all, and they
  // take part again from their next call.
  if (membership_.MarkDone(rank) != Membership::DoneMark::kLeftOut) return;
  const uint64_t epoch = membership_.epoch();
  const int ranks[] = {rank};
  env_.log->Log({LogSeverity::kInfo, "rank_done",
                 absl::StrCat("job ", name_, " epoch ", epoch, ": rank ", rank,
                              " called Done(); the job's collectives go on "
                              "without it until every rank has"),
                 name_, epoch, "", ranks});
  for (auto& [key, collective] : matching_) {
    TellMembershipChangedLocked(collective, key);
  }
}

void Job::TellMembershipChangedLocked(
    const std::shared_ptr<Collective>& collective, const std::string& key) {
  const std::vector<int> done = collective->OnMembershipChanged(membership_);
  const std::string group = SkippedGroupOf(key);
  if (group.empty()) return;
  for (int r : done) membership_.NoteSkipped(r, group);
}

std::string Job::SkippedGroupOf(const std::string& key) {
  const size_t bar = key.find("|#");
  return bar == std::string::npos ? std::string() : key.substr(0, bar);
}

absl::StatusOr<std::vector<MemoryReservation>> Job::ReserveSkipRecordLocked(
    const std::string& group, const std::string& description) {
  const size_t group_size = std::count(group.begin(), group.end(), ',') + 1;
  return ReserveInShares(
      env_, name_, description,
      absl::StrCat("the counts of the collectives of a group of ", group_size,
                   " ranks that ranks done with Done() are left out of"),
      Membership::SkipRecordBytes(group, group_size));
}

absl::StatusOr<std::vector<MemoryReservation>> Job::ReserveStepRecordLocked(
    const std::string& key, const std::string& step, size_t group_size,
    const std::string& description) {
  return ReserveInShares(
      env_, name_, description,
      absl::StrCat("the record of the ranks a collective of ", group_size,
                   " ranks may leave out, kept to refuse their late calls"),
      Membership::StepBytes(key, step, group_size));
}

absl::Status Job::ReserveForDoneLocked(int rank,
                                       const std::string& description) {
  if (membership_.CalledDone(rank) ||
      membership_.done_count() + 1 >= world_size_) {
    return absl::OkStatus();  // it leaves nobody out
  }
  std::vector<std::pair<std::string, std::vector<MemoryReservation>>> steps;
  std::vector<std::pair<std::string, std::vector<MemoryReservation>>> groups;
  for (const auto& [key, collective] : matching_) {
    if (collective->done() || !collective->Includes(rank)) continue;
    if (!step_records_.contains(key)) {
      REDUCER_ASSIGN_OR_RETURN(
          std::vector<MemoryReservation> held,
          ReserveStepRecordLocked(key, collective->description(),
                                  collective->group_size(), description));
      steps.emplace_back(key, std::move(held));
    }
    const std::string group = SkippedGroupOf(key);
    if (group.empty() || membership_.HasSkipRecord(group) ||
        std::any_of(groups.begin(), groups.end(),
                    [&](const auto& g) { return g.first == group; })) {
      continue;
    }
    REDUCER_ASSIGN_OR_RETURN(std::vector<MemoryReservation> held,
                             ReserveSkipRecordLocked(group, description));
    groups.emplace_back(group, std::move(held));
  }
  for (auto& [key, held] : steps) step_records_[key] = std::move(held);
  for (auto& [group, held] : groups) {
    membership_.AddSkipRecord(group, std::move(held));
  }
  return absl::OkStatus();
}

}  // namespace reducer
