// Job's joining half (job.h): ranks joining its epochs, a relay's join
// upstream, retried and rejoining sessions, and the JobReady and
// JoinWaiting events they get. The rest of Job is in job.cc.
#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "core/status_macros.h"
#include "server/jobs/job.h"
#include "server/jobs/several_ranks.h"
#include "server/log.h"

namespace reducer {

absl::Status Job::Join(const std::vector<int>& ranks, int world_size,
                       const std::string& session_id,
                       std::shared_ptr<SessionChannel> session,
                       std::vector<std::string> shards, int local_world_size) {
  std::vector<int> upstream_ranks;
  uint64_t epoch_id = 0;
  absl::Status joined;
  {
    absl::MutexLock lock(&mu_);
    joined = JoinLocked(ranks, world_size, session_id, std::move(session),
                        std::move(shards), local_world_size, &upstream_ranks);
    epoch_id = membership_.epoch_id();
  }
  if (joined.ok() && !upstream_ranks.empty()) {
    relay_->JoinUpstream(epoch_id, std::move(upstream_ranks),
                         [this, epoch_id](const absl::Status& status) {
                           OnUpstreamReady(epoch_id, status);
                         });
  }
  return joined;
}

void Job::OnUpstreamReady(uint64_t epoch_id, const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  if (membership_.epoch_id() != epoch_id || membership_.ended()) return;
  if (!status.ok()) {
    EndEpoch(absl::StrCat("the job could not be joined upstream: ",
                          status.message()),
             -1, EpochEndReason::kOtherShardFailed);
    return;
  }
  SendToAllLocked(ReadyEventLocked(membership_.SeatedRanks().front()));
  env_.log->Log({LogSeverity::kInfo, "job_ready",
                 absl::StrCat("job ", name_, " epoch ", membership_.epoch(),
                              ": its ", membership_.expected_here(),
                              " ranks here joined, and the job is ready "
                              "upstream"),
                 name_, membership_.epoch()});
}

void Job::EndEpochFromUpstream(uint64_t epoch_id, const std::string& reason) {
  absl::MutexLock lock(&mu_);
  if (membership_.epoch_id() != epoch_id || membership_.ended()) return;
  EndEpoch(absl::StrCat("upstream: ", reason), -1,
           EpochEndReason::kOtherShardFailed);
}

void Job::EndRankFromUpstream(uint64_t epoch_id, int rank,
                              const std::string& reason) {
  std::shared_ptr<SessionChannel> session;
  {
    absl::MutexLock lock(&mu_);
    if (membership_.epoch_id() != epoch_id || !membership_.running()) return;
    session = membership_.HolderOf(rank);
  }
  // Its transport then ends the stream, and Leave loses the rank.
  if (session != nullptr) {
    session->Fail(absl::AbortedError(absl::StrCat(
        "job ", name_, ": rank ", rank, "'s own session upstream ended (",
        reason, "); Connect again to go on")));
  }
}

absl::Status Job::JoinLocked(const std::vector<int>& ranks, int world_size,
                             const std::string& session_id,
                             std::shared_ptr<SessionChannel> session,
                             std::vector<std::string> shards,
                             int local_world_size,
                             std::vector<int>* upstream_ranks) {
  const int rank = ranks.front();
  // "rank 3", or a relay's "ranks [0,1,2,3]".
  const std::string who = RanksName(ranks);
  if (relay_ != nullptr) {
    const int here = local_world_size > 0 ? local_world_size : world_size_;
    if (membership_.HasSession(session_id)) {
      // A retried Join: as below.
    } else if (membership_.SeatedRanks().empty() && !membership_.running()) {
      membership_.ExpectRanksHere(here);
    } else if (here != membership_.expected_here()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "job ", name_, " on this relay expects ", membership_.expected_here(),
          " ranks on its host (set by the ranks already joined), but ", who,
          " said ", here,
          " (ClientOptions::local_world_size, torchrun's "
          "LOCAL_WORLD_SIZE; 0 means all ",
          world_size_, ")"));
    }
  }
  // Every refusal comes before anything changes: a refused Join touches no
  // session, and no epoch.
  if (world_size != world_size_) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", name_, " has world size ", world_size_,
                     " (set by the ranks already joined), but ", who,
                     " asked for ", world_size));
  }
  if (const bool several = shards.size() > 1;
      shards_.has_value() &&
      (several != (shards_->size() > 1) || (several && shards != *shards_))) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", name_, ": ", who, " names the shards [",
        absl::StrJoin(shards, ","), "], but the ranks already joined named [",
        absl::StrJoin(*shards_, ","),
        "]; every rank must give the same shards in the same order"));
  }
  if (membership_.HasSession(session_id)) {
    if (membership_.SessionRanks(session_id) != ranks) {
      return absl::AlreadyExistsError(
          absl::StrCat("session ", session_id, " already joined job ", name_,
                       " as ", RanksName(membership_.SessionRanks(session_id)),
                       "; a Join as ", who, " needs a session id of its own"));
    }
    return RejoinLocked(ranks, session_id, std::move(session));
  }
  if (relay_ != nullptr && membership_.running()) {
    // A rank lost here joins again: upstream first, on a session of its
    // own; it is answered once ready there (OnRejoinedUpstream).
    for (int r : ranks) {
      if (!membership_.IsAbsent(r)) continue;
      const uint64_t epoch_id = membership_.epoch_id();
      if (ranks.size() > 1 ||
          !relay_->RejoinUpstream(
              epoch_id, r,
              [this, epoch_id, session_id, r,
               channel = session](const absl::StatusOr<uint64_t>& first_step) {
                OnRejoinedUpstream(epoch_id, session_id, r, channel,
                                   first_step);
              })) {
        return absl::UnavailableError(absl::StrCat(
            "rank ", r, " of job ", name_,
            " was lost on this relay in the running epoch ",
            membership_.epoch(),
            ", and the relay cannot join it upstream again now (its upstream "
            "session is not running, or the rank is joining already); try "
            "again"));
      }
      break;
    }
  }
  const std::optional<int> departed = membership_.DepartedAmong(ranks);
  if (!membership_.ended() && !departed.has_value()) {
    REDUCER_RETURN_IF_ERROR(membership_.CheckFree(ranks));
  }
  if (!shards_.has_value()) shards_ = std::move(shards);
  if (departed.has_value()) {
    // A rank that closed its client and connects again starts its call
    // order from the beginning, which the other ranks' sessions cannot
    // match: like a lost rank, it restarts the job in a new epoch.
    EndEpoch(absl::StrCat("rank ", *departed,
                          " connected again after closing its client"),
             *departed, EpochEndReason::kRankRejoined);
  }
  if (membership_.ended()) {
    // The first Join after a loss starts the next epoch.
    membership_.StartNextEpoch(NextEpochId());
    matching_.clear();
    failed_.Clear();
    ReportPendingLocked();
    step_records_.clear();
    attempts_.Clear();
    active_.clear();
    point_to_point_.Clear();
  }
  const absl::Duration absent_for =
      membership_.AbsentFor(rank, env_.timers->clock().Now());
  const std::shared_ptr<SessionChannel> rejoining = session;
  std::vector<std::shared_ptr<SessionChannel>> superseded;
  absl::StatusOr<Membership::Seated> seated =
      membership_.Seat(session_id, ranks, std::move(session), &superseded);
  if (!seated.ok()) return seated.status();  // not reached: checked above
  for (const std::shared_ptr<SessionChannel>& old : superseded) {
    old->Fail(absl::AbortedError(absl::StrCat(
        who, " of job ", name_,
        " was joined by a newer session; this one no longer takes part")));
  }
  const uint64_t epoch = membership_.epoch();
  v1::JoinEvent event = ReadyEventLocked(rank);
  switch (*seated) {
    case Membership::Seated::kWaiting:
      rejoining->SendEvent(WaitingEventLocked(/*upstream=*/false));
      ScheduleWaitingLocked();
      break;
    case Membership::Seated::kRejoined: {
      // On a relay: answered once joined upstream again.
      if (relay_ != nullptr) break;
      // Back into the running epoch of a job in quorum mode: the others go
      // on, and the next quorum step counts this rank as joining.
      const uint64_t steps = membership_.quorum_steps_started();
      rejoining->SendEvent(event);
      env_.log->Log(
          {LogSeverity::kInfo, "rank_rejoined",
           absl::StrCat("job ", name_, " epoch ", epoch, ": ", who,
                        " joined again after ",
                        absl::FormatDuration(absent_for),
                        " absent; it takes part from quorum step ", steps),
           name_, epoch, "", ranks});
      break;
    }
    case Membership::Seated::kAllJoined:
      if (relay_ != nullptr) {
        // Ready once the job is ready upstream too (OnUpstreamReady).
        *upstream_ranks = membership_.SeatedRanks();
        SendToAllLocked(WaitingEventLocked(/*upstream=*/true));
        break;
      }
      SendToAllLocked(event);
      env_.log->Log({LogSeverity::kInfo, "job_ready",
                     absl::StrCat("job ", name_, " epoch ", epoch, ": all ",
                                  world_size_, " ranks joined"),
                     name_, epoch});
      break;
  }
  return absl::OkStatus();
}

void Job::OnRejoinedUpstream(uint64_t epoch_id, const std::string& session_id,
                             int rank, std::shared_ptr<SessionChannel> channel,
                             const absl::StatusOr<uint64_t>& first_step) {
  absl::MutexLock lock(&mu_);
  // Lost again meanwhile (the relay closed its session upstream), or the
  // epoch is over: nothing to answer.
  if (membership_.epoch_id() != epoch_id || membership_.ended() ||
      !membership_.Holds(rank, session_id)) {
    return;
  }
  const uint64_t epoch = membership_.epoch();
  if (!first_step.ok()) {
    // Its stream ends, and with it the seat (the rank is lost again).
    channel->Fail(absl::UnavailableError(
        absl::StrCat("rank ", rank, " of job ", name_,
                     " could not join upstream again through this relay: ",
                     first_step.status().message(), "; Connect again")));
    return;
  }
  membership_.SetReadyQuorumSteps(rank, *first_step);
  channel->SendEvent(ReadyEventLocked(rank));
  const int ranks[] = {rank};
  env_.log->Log({LogSeverity::kInfo, "rank_rejoined",
                 absl::StrCat("job ", name_, " epoch ", epoch, ": rank ", rank,
                              " joined again through this relay; it takes "
                              "part from quorum step ",
                              *first_step),
                 name_, epoch, "", ranks});
}

v1::JoinEvent Job::ReadyEventLocked(int rank) const {
  v1::JoinEvent event;
  event.mutable_ready()->set_epoch(membership_.epoch());
  event.mutable_ready()->set_chunk_bytes(chunk_bytes_);
  event.mutable_ready()->set_shared_memory_socket(shared_memory_socket_);
  event.mutable_ready()->set_quorum_steps_started(
      membership_.ReadyQuorumSteps(rank));
  return event;
}

v1::JoinEvent Job::WaitingEventLocked(bool upstream) const {
  v1::JoinEvent event;
  v1::JoinWaiting* waiting = event.mutable_waiting();
  const std::vector<int> seated = membership_.SeatedRanks();
  for (int rank : seated) waiting->add_joined(rank);
  if (relay_ == nullptr) return event;
  if (upstream) {
    waiting->set_note(absl::StrCat(
        "this relay holds the ", seated.size(),
        " ranks of its host and waits for the job upstream (the other "
        "hosts' ranks)"));
  } else {
    waiting->set_note(absl::StrCat(
        "this relay waits for ", membership_.expected_here(), " of the job's ",
        world_size_,
        " ranks on its host (ClientOptions::local_world_size, torchrun's "
        "LOCAL_WORLD_SIZE; 0 means all of them) and holds ",
        RanksName(seated)));
  }
  return event;
}

void Job::ScheduleWaitingLocked() {
  if (waiting_scheduled_) return;
  waiting_scheduled_ = true;
  const absl::Time at =
      std::max(env_.timers->clock().Now(), waiting_sent_at_ + kWaitingEvery);
  env_.timers->Schedule(at, [timer = waiting_timer_] {
    absl::MutexLock lock(&timer->mu);
    if (timer->job != nullptr) timer->job->BroadcastWaiting();
  });
}

void Job::BroadcastWaiting() {
  absl::MutexLock lock(&mu_);
  waiting_scheduled_ = false;
  const size_t seated = membership_.SeatedRanks().size();
  // Running, ended, or (a relay) waiting upstream, which it said already.
  if (membership_.running() || membership_.ended() || seated == 0 ||
      (relay_ != nullptr &&
       static_cast<int>(seated) == membership_.expected_here())) {
    return;
  }
  SendToAllLocked(WaitingEventLocked(/*upstream=*/false));
  waiting_sent_at_ = env_.timers->clock().Now();
}

absl::Status Job::RejoinLocked(const std::vector<int>& ranks,
                               const std::string& session_id,
                               std::shared_ptr<SessionChannel> session) {
  const std::string who = RanksName(ranks);
  const uint64_t epoch = membership_.epoch();
  if (membership_.ended()) {
    return absl::AbortedError(absl::StrCat(
        "session ", session_id, " joined epoch ", epoch, " of job ", name_,
        ", which has ended (", membership_.end_reason(),
        "); Connect again with a new session to go on"));
  }
  // A loop, not std::all_of: the thread-safety analysis does not see mu_
  // held inside a lambda.
  bool holds_all = true;
  for (int rank : ranks)
    holds_all = holds_all && membership_.Holds(rank, session_id);
  if (!holds_all || membership_.DepartedAmong(ranks).has_value()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "session ", session_id, " no longer holds ", who, " of job ", name_,
        " in epoch ", epoch,
        " (it was lost, left out of a quorum step, or closed); Connect again "
        "with a new session to go on"));
  }
  // A retry of this session's own Join (the first stream lost, or not yet
  // known to be): the new stream takes the session over, and is answered
  // as the first was.
  const std::shared_ptr<SessionChannel> retry = session;
  const std::shared_ptr<SessionChannel> replaced =
      membership_.Reseat(session_id, std::move(session));
  if (replaced != nullptr) {
    replaced->Fail(absl::AbortedError(
        absl::StrCat("session ", session_id, " of job ", name_,
                     " was replaced by a retry of its Join")));
  }
  if (membership_.running()) retry->SendEvent(ReadyEventLocked(ranks.front()));
  env_.log->Log({LogSeverity::kInfo, "join_retried",
                 absl::StrCat("job ", name_, " epoch ", epoch, ": ", who,
                              ": its Join was retried; its new stream "
                              "replaces the first"),
                 name_, epoch, "", ranks});
  return absl::OkStatus();
}

}  // namespace reducer
