#include "server/jobs/job.h"

#include <atomic>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "core/status_macros.h"
#include "server/jobs/several_ranks.h"
#include "server/log.h"

namespace reducer {
namespace {

// How long a result is kept for a replay at most: a client asks again only
// within its call's replay window (client/retry_sequence.h), which is shorter.
constexpr absl::Duration kKeepResultsFor = absl::Seconds(30);

// `env` with the job's own kept results, its share of the memory budget
// (--max_job_memory_fraction) and its tenant's name and share, unless the
// caller gave its own. A job without a tenant is a tenant of its own.
CollectiveEnv ForJob(CollectiveEnv env, const std::string& job,
                     const std::shared_ptr<Tenant>& tenant) {
  if (env.tenant.empty()) env.tenant = tenant != nullptr ? tenant->name() : job;
  if (env.tenant_memory == nullptr && tenant != nullptr) {
    env.tenant_memory = tenant->memory();
  }
  if (env.kept == nullptr && env.kept_memory != nullptr) {
    env.kept = std::make_shared<KeptResults>(env.kept_memory, kKeepResultsFor,
                                             KeptResults::kEntryBytes,
                                             &env.timers->clock());
  }
  if (env.job_memory == nullptr && env.options->max_job_memory_fraction < 1) {
    env.job_memory = std::make_shared<MemoryBudget>(static_cast<size_t>(
        static_cast<double>(env.memory->limit()) *
        env.options->max_job_memory_fraction));
  }
  return env;
}

}  // namespace

uint64_t Job::NextEpochId() {
  static std::atomic<uint64_t> last{0};
  return last.fetch_add(1, std::memory_order_relaxed) + 1;
}

Job::Job(std::string name, int world_size, CollectiveEnv env,
         std::string shared_memory_socket,
         std::vector<MemoryReservation> rank_state,
         std::shared_ptr<Tenant> tenant)
    : name_(std::move(name)),
      world_size_(world_size),
      env_(ForJob(std::move(env), name_, tenant)),
      shared_memory_socket_(std::move(shared_memory_socket)),
      tenant_(std::move(tenant)),
      rank_state_(std::move(rank_state)),
      waiting_timer_(std::make_shared<WaitingTimer>()),
      membership_(name_, world_size, NextEpochId()),
      chunk_bytes_(InitialChunkBytes(env_.options->chunk_time,
                                     env_.options->chunk_bytes)) {
  absl::MutexLock lock(&waiting_timer_->mu);
  waiting_timer_->job = this;
}

Job::~Job() {
  {
    absl::MutexLock lock(&waiting_timer_->mu);
    waiting_timer_->job = nullptr;
  }
  if (tenant_ != nullptr) tenant_->RemovePending(reported_pending_);
}

void Job::KeepForReplaysOnly() {
  absl::MutexLock lock(&mu_);
  rank_state_.clear();
  step_records_.clear();
  membership_.ForgetRecords();
  attempts_.KeepForReplays();
}

void Job::ReportPendingLocked() {
  const size_t pending = PendingLocked();
  if (tenant_ != nullptr && pending > reported_pending_) {
    tenant_->AddPending(pending - reported_pending_);
  } else if (tenant_ != nullptr) {
    tenant_->RemovePending(reported_pending_ - pending);
  }
  reported_pending_ = pending;
}

size_t Job::RankStateBytes(int world_size) {
  return Membership::StateBytes(world_size);
}

size_t Job::ShardListBytes(const std::vector<std::string>& shards) {
  size_t bytes = sizeof(std::vector<std::string>);
  for (const std::string& shard : shards) {
    bytes += sizeof(std::string) + shard.size();
  }
  return bytes;
}

bool Job::Leave(const std::string& session_id, const SessionChannel* owner,
                const std::string& why, EpochEndReason reason) {
  absl::MutexLock lock(&mu_);
  const Membership::Unseated left =
      membership_.Unseat(session_id, owner, env_.timers->clock().Now());
  switch (left.effect) {
    case Membership::Unseated::Effect::kAbsent:
      LoseAbsentLocked(left.ranks,
                       absl::StrCat("its session was lost (", why, ")"));
      break;
    case Membership::Unseated::Effect::kEndsEpoch:
      if (relay_ != nullptr) HandOverHeldFromLocked(left.ranks);
      if (relay_ != nullptr &&
          relay_->LoseRanks(membership_.epoch_id(), left.ranks, why)) {
        // Upstream takes it as these ranks' loss, as if they were connected
        // there directly; the host's other ranks go on meanwhile.
        const absl::Time now = env_.timers->clock().Now();
        for (int rank : left.ranks) {
          membership_.MarkAbsent(rank, now);
          // Its messages matched here (with a rank of this host) fail as
          // they would on a reducerd, naming it.
          LoseRankLocked(rank, absl::StatusCode::kAborted,
                         absl::StrCat("was lost (", why, ")"));
        }
        break;
      }
      EndEpoch(left.ranks.size() == 1
                   ? absl::StrCat("rank ", left.ranks.front(),
                                  "'s session was lost (", why, ")")
                   : absl::StrCat("the session of ", RanksName(left.ranks),
                                  " (a relay's) was lost (", why, ")"),
               left.ranks.front(), reason);
      break;
    case Membership::Unseated::Effect::kNone:
    case Membership::Unseated::Effect::kDeparted:
      break;
  }
  return left.last_session;
}

void Job::LoseRanks(const std::string& session_id,
                    const std::vector<int>& ranks, const std::string& cause) {
  absl::MutexLock lock(&mu_);
  const Membership::Unseated lost =
      membership_.LoseRanks(session_id, ranks, env_.timers->clock().Now());
  const std::string how =
      cause.empty() ? std::string("its session's client said so") : cause;
  switch (lost.effect) {
    case Membership::Unseated::Effect::kAbsent:
      LoseAbsentLocked(lost.ranks,
                       absl::StrCat("its session was lost (", how, ")"));
      break;
    case Membership::Unseated::Effect::kEndsEpoch:
      EndEpoch(absl::StrCat(RanksName(lost.ranks), "'s session was lost (", how,
                            ")"),
               lost.ranks.front(), EpochEndReason::kSessionCancelled);
      break;
    case Membership::Unseated::Effect::kNone:
    case Membership::Unseated::Effect::kDeparted:
      break;
  }
}

bool Job::HasNoSessions() {
  absl::MutexLock lock(&mu_);
  return membership_.NoSessions();
}

void Job::EndForOtherShard(const std::string& session_id,
                           const std::string& cause) {
  absl::MutexLock lock(&mu_);
  const std::vector<int> ranks = membership_.RunningRanks(session_id);
  if (ranks.empty() || membership_.DepartedAmong(ranks).has_value()) return;
  const int rank = ranks.front();
  EndEpoch(absl::StrCat("rank ", rank,
                        "'s job failed on another of its shards (", cause, ")"),
           rank, EpochEndReason::kOtherShardFailed);
}

std::optional<int> Job::RunningRank(const std::string& session_id) {
  absl::MutexLock lock(&mu_);
  const std::vector<int> ranks = membership_.RunningRanks(session_id);
  if (ranks.empty()) return std::nullopt;
  return ranks.front();
}

std::optional<Job::Seat> Job::RunningSeat(const std::string& session_id) {
  absl::MutexLock lock(&mu_);
  std::vector<int> ranks = membership_.RunningRanks(session_id);
  if (ranks.empty()) return std::nullopt;
  return Seat{std::move(ranks), membership_.epoch_id()};
}

void Job::Depart(const std::string& session_id) {
  absl::MutexLock lock(&mu_);
  const absl::Time now = env_.timers->clock().Now();
  if (relay_ != nullptr) {
    const std::vector<int> ranks = membership_.RunningRanks(session_id);
    if (!ranks.empty()) HandOverHeldFromLocked(ranks);
    if (!ranks.empty() &&
        relay_->LoseRanks(membership_.epoch_id(), ranks, /*cause=*/"")) {
      // Upstream takes the departure as these ranks' own, as if they were
      // connected there directly: absent here, as for a loss.
      for (int rank : ranks) {
        membership_.MarkAbsent(rank, now);
        LoseRankLocked(rank, absl::StatusCode::kAborted,
                       "left (its client was closed)");
      }
      return;
    }
  }
  ActOnDepartureLocked(membership_.Depart(session_id, now));
}

void Job::DepartRanks(const std::string& session_id,
                      const std::vector<int>& ranks) {
  absl::MutexLock lock(&mu_);
  ActOnDepartureLocked(
      membership_.DepartRanks(session_id, ranks, env_.timers->clock().Now()));
}

void Job::ActOnDepartureLocked(const Membership::Unseated& departed) {
  if (departed.effect == Membership::Unseated::Effect::kAbsent) {
    // As a lost rank: the others go on, and it may connect again.
    LoseAbsentLocked(departed.ranks, "its client was closed",
                     LogSeverity::kInfo);
    return;
  }
  if (departed.effect != Membership::Unseated::Effect::kDeparted) return;
  const uint64_t epoch = membership_.epoch();
  for (int rank : departed.ranks) {
    const int ranks[] = {rank};
    env_.log->Log({LogSeverity::kInfo, "rank_left",
                   absl::StrCat("job ", name_, " epoch ", epoch, ": rank ",
                                rank, " left"),
                   name_, epoch, "", ranks});
    LoseRankLocked(rank, absl::StatusCode::kFailedPrecondition,
                   "left the job (its client was closed) before taking part");
  }
}

template <typename Fn>
void Job::ForEachCollectiveLocked(Fn fn) {
  for (auto& [key, collective] : matching_) fn(collective);
  for (auto& weak : active_) {
    if (auto collective = weak.lock()) fn(collective);
  }
}

void Job::HandOverHeldFromLocked(const std::vector<int>& ranks) {
  for (JobRelay::HeldMessage& message : relay_->HeldFrom(ranks)) {
    HandOverHeldLocked(message.send, std::move(message.channel));
  }
}

void Job::LoseRankLocked(int rank, absl::StatusCode code,
                         const std::string& what) {
  ForEachCollectiveLocked(
      [&](const std::shared_ptr<Collective>& c)
          ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
            if (c->IsQuorumBarrier()) {
              c->OnMembershipChanged(membership_);
            } else if (c->Includes(rank) && !c->HasFinished(rank)) {
              c->FailUnlessDecided(absl::Status(
                  code,
                  absl::StrCat(c->description(), ": rank ", rank, " ", what)));
            }
          });
}

void Job::SendToAllLocked(const v1::JoinEvent& event) {
  for (const auto& session : membership_.Sessions()) session->SendEvent(event);
}

std::string Job::ShortName(const std::string& description) const {
  return std::string(
      absl::StripSuffix(description, absl::StrCat(" in job ", name_)));
}

void Job::EndEpoch(const std::string& reason, int lost_rank,
                   EpochEndReason kind) {
  membership_.EndEpoch(reason);
  const uint64_t epoch = membership_.epoch();
  const absl::Status status = absl::AbortedError(
      absl::StrCat("job ", name_, " epoch ", epoch, " aborted: ", reason,
                   "; Connect again to go on"));
  const int ranks[] = {lost_rank};
  env_.log->Log({LogSeverity::kWarning, "epoch_aborted", status.message(),
                 name_, epoch, "", ranks, env_.tenant});
  env_.metrics->EpochAborted(kind);
  // A collective whose every input is in still delivers its result: the
  // ranks that are receiving it must not fail where others succeeded.
  ForEachCollectiveLocked([&](const std::shared_ptr<Collective>& c) {
    c->FailUnlessDecided(status);
  });
  matching_.clear();
  failed_.Clear();
  ReportPendingLocked();
  step_records_.clear();
  active_.clear();
  v1::JoinEvent event;
  event.mutable_aborted()->set_epoch(epoch);
  event.mutable_aborted()->set_reason(std::string(status.message()));
  SendToAllLocked(event);
  if (relay_ != nullptr)
    relay_->EndEpoch(membership_.epoch_id(), status, reason);
}

std::shared_ptr<KeptResults> Job::kept_results() const { return env_.kept; }

bool Job::EndedByALoss() {
  absl::MutexLock lock(&mu_);
  return membership_.ended();
}

void Job::NotePaceLocked(double bytes_per_second) {
  pace_.Note(bytes_per_second);
  const size_t chunk = PacedChunkBytes(pace_.bytes_per_second(), env_.options->chunk_time,
                                       env_.options->chunk_bytes, chunk_bytes_);
  if (chunk == chunk_bytes_) return;
  chunk_bytes_ = chunk;
  v1::JoinEvent event;
  event.mutable_pace()->set_chunk_bytes(chunk);
  SendToAllLocked(event);
  env_.log->Log(
      {LogSeverity::kInfo, "chunk_paced",
       absl::StrCat("job ", name_, " epoch ", membership_.epoch(),
                    ": inputs arrive at ",
                    absl::StrFormat("%.1f", pace_.bytes_per_second() / 1e6),
                    " MB/s; its reductions now use chunks of ", chunk / 1024,
                    " KiB (--chunk_time=",
                    absl::FormatDuration(env_.options->chunk_time), ")"),
       name_, membership_.epoch()});
}

void Job::LoseAbsentLocked(const std::vector<int>& ranks,
                           const std::string& why, LogSeverity severity) {
  const uint64_t epoch = membership_.epoch();
  for (int rank : ranks) {
    const int logged[] = {rank};
    env_.log->Log({severity, "rank_absent",
                   absl::StrCat("job ", name_, " epoch ", epoch, ": rank ",
                                rank, " is absent: ", why,
                                "; the others go on, and it rejoins at a "
                                "quorum step once it connects again"),
                   name_, epoch, "", logged, env_.tenant});
    LoseRankLocked(
        rank, absl::StatusCode::kAborted,
        absl::StrCat("was lost (", why,
                     "); a quorum step run again goes on without it"));
  }
}

bool Job::InQuorumMode() {
  absl::MutexLock lock(&mu_);
  return membership_.quorum_mode() && membership_.running();
}

void Job::Shutdown(const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  ForEachCollectiveLocked(
      [&](const std::shared_ptr<Collective>& c) { c->Fail(status); });
  matching_.clear();
  failed_.Clear();
  ReportPendingLocked();
  step_records_.clear();
  active_.clear();
  for (const auto& session : membership_.Sessions()) session->Fail(status);
}

JobSnapshot Job::Snapshot() {
  absl::MutexLock lock(&mu_);
  JobSnapshot s;
  s.name = name_;
  s.world_size = world_size_;
  s.epoch = membership_.epoch();
  s.state = membership_.state();
  s.end_reason = membership_.end_reason();
  s.quorum_mode = membership_.quorum_mode();
  s.chunk_bytes = chunk_bytes_;
  s.input_bytes_per_s = pace_.bytes_per_second();
  if (relay_ != nullptr) s.relay_bytes_saved = relay_->bytes_saved();
  s.joined_ranks = membership_.SeatedRanks();
  s.absent_ranks = membership_.AbsentRanks();
  s.done_ranks = membership_.DoneRanks();
  for (auto& weak : active_) {
    std::shared_ptr<Collective> collective = weak.lock();
    if (collective == nullptr) continue;
    std::optional<CollectiveSnapshot> c = collective->Snapshot();
    if (c.has_value()) s.pending.push_back(*std::move(c));
  }
  return s;
}

bool Job::HasActiveCollectives() {
  absl::MutexLock lock(&mu_);
  for (auto& weak : active_) {
    auto collective = weak.lock();
    if (collective != nullptr && !collective->done()) return true;
  }
  return false;
}

}  // namespace reducer
