// Job: the server's state for one job: its sessions (one per rank per
// epoch), its epoch, and the table that matches its ranks' collectives.
//
// Lifecycle. Ranks Join; once all world_size ranks hold a session in the
// current epoch, the job runs and every member gets JobReady. When a running
// member's session is lost, the epoch ends: pending collectives fail with
// ABORTED naming the rank, the other members get JobAborted, and calls still
// made in that epoch fail the same way. The next Join starts a new epoch,
// which runs once all world_size ranks have joined again.
//
// Sessions. A session is lost only when its own stream ends (Leave with
// that stream as owner): a Join that is refused, or one naming another
// rank's session id, touches no session. A Join retried by its own client
// (same session id and rank) takes the session over on its new stream and
// is answered as the first was; the job goes on. See Join.
//
// Done. A rank's DONE (Client::Done) makes every collective of the epoch
// that includes the rank, pending or later, go on without it, until every
// rank of the job has called DONE;
// then the DONE collective ends for all and the ranks take part again. An
// unnamed collective a rank was left out of still counts in its call
// order: the Job adds the count to the sequence numbers the rank sends
// afterwards, so that its calls meet the others' again.
//
// Point to point. A message is a collective of its two ranks, matched by
// its reserved name; a match (CollectiveKind::kMatch, a ReceiveAny) is a
// collective of its receiver alone, which the job answers with the message
// it gets (MessageMatcher, told of every message's send and receive).
//
// Quorum mode. A job enters it with its epoch's first quorum barrier
// (CollectiveKind::kQuorumBarrier). From then on a running member whose
// session is lost, or whose late call a quorum step refused, becomes
// absent instead of ending the epoch: pending quorum barriers stop waiting
// for it, pending plain collectives that include it fail ABORTED naming it,
// and new plain ones that include it are refused the same way. A
// Join of an absent rank is admitted into the running epoch at once (its
// JobReady carries the count of quorum steps started); the first quorum
// barrier created after that counts it as joining (QuorumRule::Joining).
//
// Who takes part, and the rules of epochs, Done and quorum mode, are the
// job's Membership; the Job acts on what it decides (fails collectives,
// sends JoinEvents, logs) and keeps matching, point-to-point matches,
// replays and pacing. A collective asks the Membership itself who is left
// out (it is the collective's Participation): the Job hands it over when
// the collective starts and whenever a rank calls DONE or is lost
// (Collective::OnMembershipChanged), always under mu_.
//
// Its code: joining (epochs gathering their ranks, a relay's join
// upstream, JobReady and JoinWaiting) in job_joining.cc, matching calls in
// job_matching.cc, the rest (leaving, losses, epochs' ends, status) in
// job.cc.
//
// Thread-safe: state is under mu_. Lock order: JobRegistry, then Job, then
// Collective, then a stream's own lock. A Collective asks the Membership
// under its own lock, within a call the Job makes under mu_; the
// Membership takes no lock and calls nothing back.
#ifndef REDUCER_SERVER_JOBS_JOB_H_
#define REDUCER_SERVER_JOBS_JOB_H_

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/reducer/v1/reducer.pb.h"
#include "server/engine/chunk_pacing.h"
#include "server/engine/collective.h"
#include "server/engine/memory_budget.h"
#include "server/jobs/attempt_cache.h"
#include "server/jobs/failed_collectives.h"
#include "server/jobs/job_relay.h"
#include "server/jobs/membership.h"
#include "server/jobs/point_to_point_matches.h"
#include "server/jobs/replay.h"
#include "server/jobs/session_channel.h"
#include "server/jobs/tenants.h"

namespace reducer {

// A job as a status report shows it.
struct JobSnapshot {
  std::string name;
  int world_size = 0;
  uint64_t epoch = 0;
  // "running" (every rank joined this epoch), "joining" (waiting for ranks
  // to join), or "aborted" (the epoch lost a rank; the next Join starts a
  // new one).
  std::string state;
  std::string end_reason;         // why the epoch was aborted
  std::vector<int> joined_ranks;  // ranks holding a session this epoch
  bool quorum_mode = false;       // the epoch ran a quorum step
  std::vector<int> absent_ranks;  // quorum mode: lost, may connect again
  std::vector<int> done_ranks;    // called Done(), waiting for the others
  size_t chunk_bytes = 0;         // its reductions' chunk (paced)
  double input_bytes_per_s = 0;   // the pace of its inputs; 0: not measured
  uint64_t relay_bytes_saved = 0;           // on a relay: JobRelay::bytes_saved
  std::vector<CollectiveSnapshot> pending;  // collectives not yet done
};

// What Job::Attach returns when the collective itself refused the call (a
// name reused while in flight, a retry after data moved) or failed at its
// attach: the call's channel has been told why already, so the caller must
// feed none of its bytes (the rank may have another call in that
// collective) and need not answer it again. The mark is a payload of the
// status (kRefusedByCollectiveMark), not its text, so no other status is
// taken for it.
inline constexpr char kRefusedByCollectiveMark[] =
    "reducer.server/refused_by_collective";
absl::Status RefusedByCollectiveError();
bool IsRefusedByCollective(const absl::Status& status);

class Job {
 public:
  // While the job gathers its ranks, every seated session hears who joined
  // (JoinWaiting) at most once per kWaitingEvery, the joining one at once:
  // telling every session on every join would cost O(W^2) events of up to
  // W ranks each.
  static constexpr absl::Duration kWaitingEvery = absl::Seconds(1);

  // `shared_memory_socket`: what JobReady names as the same-host path's
  // socket (empty: not offered).
  // Unless `env` brings its own, the job keeps results in a KeptResults of
  // its own when env.kept_memory is set.
  // `rank_state` holds RankStateBytes(world_size) of the memory budget
  // (and of the shares that count it), and ShardListBytes of its first
  // Join's shard list, for the job's lifetime (JobRegistry reserves it
  // before creating the job).
  // `tenant`: what the job's tenant holds (server/jobs/tenants.h), which
  // the job's pending collectives count in and its collectives' memory
  // reservations take from (env.tenant_memory, unless `env` brings its
  // own); null: the job is a tenant of its own, with no share or count
  // besides its own.
  Job(std::string name, int world_size, CollectiveEnv env,
      std::string shared_memory_socket = "",
      std::vector<MemoryReservation> rank_state = {},
      std::shared_ptr<Tenant> tenant = nullptr);
  ~Job();

  // What a job of `world_size` ranks holds per rank from its creation on.
  static size_t RankStateBytes(int world_size);
  // What the job holds for the shard list `shards` (its first Join's).
  static size_t ShardListBytes(const std::vector<std::string>& shards);

  // The registry has freed the job, which may live on a while only for
  // replays: gives back to the memory budget its per-rank state and what
  // only its calls needed (Done's counts, remembered quorum steps, its
  // attempt ids' reservations; the ids of collectives still making a
  // result stay, for replays, as AttemptCache::KeepForReplays says).
  void KeepForReplaysOnly() ABSL_LOCKS_EXCLUDED(mu_);

  // Adds `session` as `rank`. OK, or FAILED_PRECONDITION when `world_size`
  // differs from the job's, ALREADY_EXISTS when a live session holds the
  // rank in the current epoch or `session_id` already joined as another
  // rank. A refused Join changes nothing: not the session it names, not
  // the epoch.
  // A Join naming a session that is open, as the same rank (and agreeing
  // on the world size and shards, as any Join must), is that session's
  // client retrying its Join (its first stream lost, or not yet known to
  // be): `session` takes the session over, the stream it replaces is ended
  // with ABORTED saying so, and it is answered as the first was (JobReady
  // now if the epoch runs, later otherwise); the epoch goes on. Refused
  // instead, changing nothing, when the session no longer holds the rank
  // (FAILED_PRECONDITION: lost, left out, closed) or its epoch ended
  // (ABORTED).
  // A rank that departed (closed its client) and joins again ends the
  // running epoch first, as a lost rank does: its new session's call order
  // starts over, which the other ranks' sessions cannot match. A new
  // session of a rank closes the session that held it before, in an ended
  // epoch or absent from this one (its stream ends with ABORTED): a job
  // never has more open sessions than ranks (Membership, "Seats").
  // `shards` is the shard list the rank was given; at most one address
  // means one shard, whose address is not compared (a proxy, a Service
  // name and a pod address may all reach this reducerd). A list of two or
  // more must equal the list of the job's first rank, and one shard must
  // meet one shard: FAILED_PRECONDITION naming both lists otherwise. The
  // first rank's list is the job's for as long as it lives.
  //
  // `ranks`: the global ranks the session holds, sorted and distinct, each
  // in [0, world_size) (checked by the caller): one for a rank's own
  // session, several for a relay's. They are seated together, and lost or
  // departed together when the session ends.
  //
  // On a relay (SetRelay), the epoch runs once the job's ranks on this host
  // are seated: `local_world_size` of them (JoinRequest.local_world_size,
  // the same on each; 0: all world_size), and the job is ready upstream
  // (JobRelay::JoinUpstream); only then is JobReady sent.
  absl::Status Join(const std::vector<int>& ranks, int world_size,
                    const std::string& session_id,
                    std::shared_ptr<SessionChannel> session,
                    std::vector<std::string> shards = {},
                    int local_world_size = 0);
  absl::Status Join(int rank, int world_size, const std::string& session_id,
                    std::shared_ptr<SessionChannel> session,
                    std::vector<std::string> shards = {}) {
    return Join(std::vector<int>{rank}, world_size, session_id,
                std::move(session), std::move(shards));
  }

  // The stream `owner` of session `session_id` ended (`why` says how):
  // removes the session, and ends the epoch if it held a rank of the
  // running epoch and had not departed. Only the session's own channel
  // (the one seated, or the retry that replaced it) ends it: for any other
  // `owner` nothing changes. Returns true when the job has no open session
  // left and can be freed. `reason` classifies `why` for the metrics.
  // On a relay, a rank of the running epoch lost here is reported upstream
  // as that rank's loss (JobRelay::LoseRanks) when the relay can: it is
  // absent here then, the epoch goes on, and upstream decides (the epoch
  // ends here when it ends there). A Join of that rank while the epoch runs
  // is seated here, and answered once the relay has joined it upstream
  // again (JobRelay::RejoinUpstream: JobReady then carries upstream's
  // quorum_steps_started), or its session fails.
  bool Leave(const std::string& session_id, const SessionChannel* owner,
             const std::string& why, EpochEndReason reason);

  // True when no session of any epoch is open (a job just created by a
  // Join that was refused).
  bool HasNoSessions() ABSL_LOCKS_EXCLUDED(mu_);

  // The session's client is closing on purpose (a Leave request, whose
  // session id is its proof, as a collective's is): its rank departs without
  // ending the epoch. Collectives that include the rank and are not done
  // fail with FAILED_PRECONDITION, and so do later ones that include it.
  // In quorum mode the rank becomes absent instead, as a lost one does.
  // On a relay, the departure of a rank of this host is taken upstream as
  // that rank's (JobRelay::LoseRanks without a cause) when the relay can:
  // the rank is absent here then, as for a loss.
  void Depart(const std::string& session_id);
  // Depart for `ranks` of the session alone (LeaveRequest.ranks without a
  // cause); the session keeps holding the others.
  void DepartRanks(const std::string& session_id,
                   const std::vector<int>& ranks);

  // The session's job failed on another of its shards (`cause` says how):
  // ends the running epoch as Leave would, naming the rank and the cause,
  // so that the ranks here learn the first failure rather than this rank's
  // departure. The session stays open until its stream ends. No-op for an
  // unknown session, one that departed, or an epoch already over.
  void EndForOtherShard(const std::string& session_id,
                        const std::string& cause);

  // The session's client reports `ranks` of it lost (LeaveRequest.ranks: a
  // relay whose ranks' own sessions there were lost; `cause` says how):
  // each is treated as a rank whose own session was lost (Leave): in
  // quorum mode it becomes absent, otherwise the running epoch ends naming
  // it and the cause. The session keeps holding its other ranks. Ranks it
  // does not hold in the current epoch, and unknown sessions, are ignored.
  void LoseRanks(const std::string& session_id, const std::vector<int>& ranks,
                 const std::string& cause);

  // Finds or creates the collective `header` names and attaches `stream`.
  // Errors, before anything is attached: ABORTED for an ended epoch,
  // FAILED_PRECONDITION for a session that does not hold the rank,
  // INVALID_ARGUMENT for a malformed header, RESOURCE_EXHAUSTED for the
  // pending-collectives limit.
  // `header.received_below` first lets the session's kept results below it
  // go. A replay header (`header.replay`: the caller sends no payload and
  // wants the result of its attempt again) is answered by Replay: then
  // the caller must feed nothing, and a null collective means the result
  // was already sent on `stream` in full. A quorum follower note
  // (`header.quorum_follower`) puts the job in quorum mode and is answered
  // at once, with a null collective too.
  absl::StatusOr<std::shared_ptr<Collective>> Attach(
      const v1::CollectiveHeader& header, std::shared_ptr<RankChannel> stream);
  // What a transport's call attaches to: Attach's collective, or on a relay
  // the one that takes it upstream (JobRelay::Attach, once the caller's
  // seat and epoch are checked here). A relay keeps no results: a replay
  // is answered NOT_FOUND. On a relay, a point-to-point message between
  // two of its ranks is Attach's, matched here (JobRelay::KeepsHere), and
  // messages held here that a match needs go upstream before it
  // (JobRelay::BeforeMatch, HandOverHeldLocked).
  absl::StatusOr<std::shared_ptr<AttachedCollective>> AttachCall(
      const v1::CollectiveHeader& header, std::shared_ptr<RankChannel> stream);

  // Makes this job a relay's (reducerd --upstream): right after creation,
  // before any Join.
  void SetRelay(std::shared_ptr<JobRelay> relay) { relay_ = std::move(relay); }
  // Whether SetRelay gave this job a relay.
  bool has_relay() const { return relay_ != nullptr; }
  // The upstream session of epoch `epoch_id` ended on its own (`reason`):
  // that epoch ends here, if it is still the current one.
  void EndEpochFromUpstream(uint64_t epoch_id, const std::string& reason)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The upstream session of `rank` alone (it joined again after its loss:
  // JobRelay::RejoinUpstream) ended on its own (`reason`): its session
  // here ends ABORTED, naming why, as if its stream had ended, so that the
  // rank is lost again (Leave) and its client connects again; the epoch
  // goes on for the others. No-op unless epoch `epoch_id` runs here.
  void EndRankFromUpstream(uint64_t epoch_id, int rank,
                           const std::string& reason) ABSL_LOCKS_EXCLUDED(mu_);

  // The rank `session_id` holds in the running epoch; nullopt when it holds
  // none (unknown, replaced) or no epoch is running.
  std::optional<int> RunningRank(const std::string& session_id)
      ABSL_LOCKS_EXCLUDED(mu_);

  // The ranks one session holds in one running epoch of one incarnation
  // of a job: two Seats with the same `epoch_id` are of the same epoch, and
  // no other epoch of any job in this process has that id.
  struct Seat {
    std::vector<int> ranks;
    uint64_t epoch_id = 0;
    bool Holds(int rank) const {
      return std::find(ranks.begin(), ranks.end(), rank) != ranks.end();
    }
  };
  // RunningRank, with the epoch it holds the rank in.
  std::optional<Seat> RunningSeat(const std::string& session_id)
      ABSL_LOCKS_EXCLUDED(mu_);

  // True once the running epoch has entered quorum mode.
  bool InQuorumMode() ABSL_LOCKS_EXCLUDED(mu_);

  // Fails every collective and session (server shutdown).
  void Shutdown(const absl::Status& status);

  // True while some collective of the job has not finished.
  bool HasActiveCollectives();

  // Its state now, for status reports and metrics.
  JobSnapshot Snapshot();

  const std::string& name() const { return name_; }
  // Its tenant's counts; null for a job made without one.
  const std::shared_ptr<Tenant>& tenant() const { return tenant_; }

  // Where its results are kept (null: they are not). Shared: it may
  // outlive the job (JobRegistry keeps it a while after a job whose epoch
  // ended by a loss is freed).
  std::shared_ptr<KeptResults> kept_results() const;
  // True when its current epoch ended by a loss (a session lost, a rank
  // back after closing, another shard's failure): ranks may have lost a
  // result on the way.
  bool EndedByALoss() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // A fresh Seat::epoch_id.
  static uint64_t NextEpochId();
  // A replay of the attempt `header` names, in any epoch and whether or
  // not its session still holds the rank: the collective whose result for
  // it is still being made resumes it on `stream` (Collective::Resume), or
  // a kept result is sent whole and null returned. NOT_FOUND: nothing to
  // send; INVALID_ARGUMENT: an attempt id not of `header.session_id`, or
  // other tensors than the attempt declared.
  absl::StatusOr<std::shared_ptr<Collective>> Replay(
      const v1::CollectiveHeader& header, std::shared_ptr<RankChannel> stream)
      ABSL_LOCKS_EXCLUDED(mu_);
  // A Join of open session `session_id` as `rank` (see Join): refused, or
  // `session` takes the session over.
  absl::Status RejoinLocked(const std::vector<int>& ranks,
                            const std::string& session_id,
                            std::shared_ptr<SessionChannel> session)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Join's work under the lock; on a relay, `*upstream_ranks` gets the
  // ranks seated here once all are, for JoinUpstream.
  absl::Status JoinLocked(const std::vector<int>& ranks, int world_size,
                          const std::string& session_id,
                          std::shared_ptr<SessionChannel> session,
                          std::vector<std::string> shards, int local_world_size,
                          std::vector<int>* upstream_ranks)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A relay's job is ready upstream for epoch `epoch_id` (OK: every
  // session gets JobReady), or could not join there (the epoch ends).
  void OnUpstreamReady(uint64_t epoch_id, const absl::Status& status)
      ABSL_LOCKS_EXCLUDED(mu_);
  // On a relay: lost `rank`, seated again by `session_id` on `channel` in
  // epoch `epoch_id`, joined upstream again (`first_step`: the quorum step
  // it takes part from) or could not (the channel fails, so that the rank
  // is lost again).
  void OnRejoinedUpstream(uint64_t epoch_id, const std::string& session_id,
                          int rank, std::shared_ptr<SessionChannel> channel,
                          const absl::StatusOr<uint64_t>& first_step)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The JobReady of the current epoch for `rank`, held now.
  v1::JoinEvent ReadyEventLocked(int rank) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The JoinWaiting of the ranks seated now: a relay's says how many ranks
  // of its host it expects, or (`upstream`) that it waits for the job
  // upstream.
  v1::JoinEvent WaitingEventLocked(bool upstream) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ScheduleWaitingLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The timer's call: tells every seated session who joined, if the job
  // still gathers its ranks here.
  void BroadcastWaiting() ABSL_LOCKS_EXCLUDED(mu_);
  // Ends the epoch (Membership::EndEpoch): fails its collectives that are
  // not decided, tells every session, logs and counts it.
  void EndEpoch(const std::string& reason, int lost_rank,
                EpochEndReason kind) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Quorum mode: `ranks` became absent (Membership decided; `why` says how
  // they were lost): pending collectives that need them fail, quorum steps
  // stop waiting for them. Logged as a warning, or as information for a
  // rank that left on purpose.
  void LoseAbsentLocked(const std::vector<int>& ranks, const std::string& why,
                        LogSeverity severity = LogSeverity::kWarning)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `rank` no longer takes part: quorum steps stop waiting for it, and the
  // other collectives that need it and are not decided fail with `code`,
  // "<collective>: rank <rank> <what>".
  void LoseRankLocked(int rank, absl::StatusCode code, const std::string& what)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Acts on ranks departed (Membership::Depart or DepartRanks): in quorum
  // mode as on lost ones; otherwise collectives that need them fail.
  void ActOnDepartureLocked(const Membership::Unseated& departed)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sends `event` to every seated session.
  void SendToAllLocked(const v1::JoinEvent& event)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Applies `fn` to every collective of the epoch not yet destroyed,
  // matched or not (a collective may be in both lists: fn must be
  // idempotent).
  template <typename Fn>
  void ForEachCollectiveLocked(Fn fn) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Hands the held message of `send` (the source's header) to `channel`
  // as to its destination's call; fails `channel` when the message is no
  // longer held (its deadline passed, or its epoch ended).
  void HandOverHeldLocked(const v1::CollectiveHeader& send,
                          std::shared_ptr<RankChannel> channel)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // On a relay, the held messages of `ranks` about to be lost go upstream
  // first (JobRelay::HeldFrom).
  void HandOverHeldFromLocked(const std::vector<int>& ranks)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The matching key of `header` (MatchingKey), its sequence number moved
  // past the unnamed collectives its rank was left out of for Done (on a
  // job of one shard; over several, the client moves its own count).
  std::string MatchingKeyLocked(const v1::CollectiveHeader& header,
                                const Fingerprint& fp)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `rank` called DONE: every pending collective asks again who takes
  // part (so those of its group leave it out, counting the unnamed ones as
  // skipped), or, when it was the last rank to, lets every rank go.
  void MarkDoneLocked(int rank) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The group an unnamed collective's matching `key` names ("0,2,3"), under
  // which Done's skipped counts are kept; empty for a named one.
  static std::string SkippedGroupOf(const std::string& key);
  // The budget for the record of Done's counts of `group` (Membership::
  // SkipRecordBytes), or the refusal of the call `description` names.
  absl::StatusOr<std::vector<MemoryReservation>> ReserveSkipRecordLocked(
      const std::string& group, const std::string& description)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The budget for the record a collective matched under `key` (named
  // `step`, over `group_size` ranks) that may leave ranks out keeps of them
  // once finished (Membership::StepBytes), or the refusal of the call
  // `description` names.
  absl::StatusOr<std::vector<MemoryReservation>> ReserveStepRecordLocked(
      const std::string& key, const std::string& step, size_t group_size,
      const std::string& description) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Before `rank`'s DONE call (`description`) that leaves it out: every
  // collective pending that includes it gets its step record, and every
  // unnamed one its group's record of Done's counts, held in the budget;
  // else the refusal of the DONE call, nothing changed.
  absl::Status ReserveForDoneLocked(int rank, const std::string& description)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Tells `collective` (matched under `key`) that who takes part changed,
  // or, just created, to ask who does: it asks membership_
  // (Collective::OnMembershipChanged, under mu_), and the ranks it found
  // done count as having skipped it when it is unnamed.
  void TellMembershipChangedLocked(
      const std::shared_ptr<Collective>& collective, const std::string& key)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A rank of a quorum step that ended without it, while the step is still
  // matched: the collective (its Attach refuses the late call), else null.
  std::shared_ptr<Collective> LeftOutStepLocked(const std::string& key,
                                                int rank)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `header`'s fingerprint, if well formed and within the limits; else the
  // error, also sent to the peers waiting in the collective it names.
  absl::StatusOr<Fingerprint> CheckedFingerprint(
      const v1::CollectiveHeader& header) ABSL_LOCKS_EXCLUDED(mu_);
  // The collective `header` joins: the one a retried attempt joined, the
  // one waiting under its matching key, or a new one.
  absl::StatusOr<std::shared_ptr<Collective>> CollectiveForLocked(
      const v1::CollectiveHeader& header, const Fingerprint& fp,
      const std::string& description) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A new collective with its timers started, unless a rank of its group
  // departed or the job is at its pending-collectives limit.
  absl::StatusOr<std::shared_ptr<Collective>> NewCollectiveLocked(
      const v1::CollectiveHeader& header, const Fingerprint& fp,
      const std::string& description) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `allreduce #3` for a collective `description` of this job names.
  std::string ShortName(const std::string& description) const;
  // Fails, for every rank, the collective a malformed `header` names (so
  // that its well-formed peers do not wait for the timeout): the one
  // waiting under its key, or else an entry of failed_ for the ranks that
  // will call it, room and memory permitting (the oldest entry forgotten
  // first). Logged, as a warning of the tenant's (rate-limited).
  void FailNamedCollective(const v1::CollectiveHeader& header,
                           const absl::Status& status) ABSL_LOCKS_EXCLUDED(mu_);
  // Remembers in failed_ that the collective under `key` failed with
  // `status` for every rank of `group`, unless the job's or its tenant's
  // pending collectives have no room even once failed_'s oldest entries
  // are forgotten, or the memory budget or a share cannot hold the entry.
  void RememberFailedLocked(std::string key, const std::vector<int>& group,
                            const absl::Status& status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The job's pending collectives (waiting in matching_, or remembered
  // failed): the count both pending bounds apply to.
  size_t PendingLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return matching_.size() + failed_.size();
  }
  // True when the job's pending collectives, or its tenant's, are at their
  // bound (--max_pending_collectives_per_job, _per_tenant).
  bool PendingFullLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Forgets failed_'s oldest entries while PendingFullLocked(): they only
  // take room nobody else needs.
  void ForgetFailedForRoomLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Tells the tenant how the job's pending collectives moved since last
  // told. Called after every change to matching_ or failed_.
  void ReportPendingLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Forgets destroyed collectives and matching entries nobody can still
  // need (every rank attached, collective done).
  void PruneFinished() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A finished collective's inputs came at `bytes_per_second`: the job's
  // pace moves, and if its chunk size changes every session is told
  // (JobPace).
  void NotePaceLocked(double bytes_per_second)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Constant after construction.
  const std::string name_;
  const int world_size_;
  // With this job's KeptResults, if any, and its tenant's name and share.
  const CollectiveEnv env_;
  const std::string shared_memory_socket_;
  // Its tenant's counts; null: none (see the constructor).
  const std::shared_ptr<Tenant> tenant_;
  // RankStateBytes(world_size_) and its shard list's bytes of the budget
  // and the shares, until the registry frees the job (a freed job kept for
  // replays no longer counts).
  std::vector<MemoryReservation> rank_state_ ABSL_GUARDED_BY(mu_);

  // How the JoinWaiting timer reaches the job: null once the job is gone,
  // so that a timer that fires later does nothing (its lock is taken
  // before mu_).
  struct WaitingTimer {
    absl::Mutex mu;
    Job* job ABSL_GUARDED_BY(mu);
  };
  const std::shared_ptr<WaitingTimer> waiting_timer_;

  // On a relay: a point-to-point call's route and its attaching here, and
  // a match's handing over of held messages, one at a time (AttachCall).
  // Taken before mu_.
  absl::Mutex p2p_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  absl::Mutex mu_;
  // Whether a JoinWaiting broadcast is scheduled, and when the last went.
  bool waiting_scheduled_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time waiting_sent_at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  // Who takes part, epoch by epoch.
  Membership membership_ ABSL_GUARDED_BY(mu_);
  // The shard list of the job's first rank; unset until one joined.
  std::optional<std::vector<std::string>> shards_ ABSL_GUARDED_BY(mu_);
  // Collectives by matching key, kept until every rank has attached and the
  // collective is done, so that late ranks learn a failure and retries find
  // the contribution they repeat.
  absl::flat_hash_map<std::string, std::shared_ptr<Collective>> matching_
      ABSL_GUARDED_BY(mu_);
  // Collectives failed by a malformed call before any rank attached, by
  // matching key, for the ranks that will still call them.
  FailedCollectives failed_ ABSL_GUARDED_BY(mu_);
  // PendingLocked() as the tenant was last told (ReportPendingLocked).
  size_t reported_pending_ ABSL_GUARDED_BY(mu_) = 0;
  // The budget held for what each collective that may leave ranks out (a
  // quorum step, or one a rank done with Done() is left out of) is
  // remembered with once finished (Membership::RememberStep), by matching
  // key, until it is pruned: then the remembered step holds it.
  absl::flat_hash_map<std::string, std::vector<MemoryReservation>> step_records_
      ABSL_GUARDED_BY(mu_);
  // The collective each recent contribution (by attempt id) joined, so
  // that retries are recognised.
  static constexpr size_t kRememberedAttempts = 4096;
  AttemptCache attempts_ ABSL_GUARDED_BY(mu_){kRememberedAttempts};
  // Every collective of this epoch not yet destroyed.
  std::vector<std::weak_ptr<Collective>> active_ ABSL_GUARDED_BY(mu_);
  // Point-to-point messages and matches (ReceiveAny) of the running epoch.
  PointToPointMatches point_to_point_ ABSL_GUARDED_BY(mu_);
  // The pace of the job's inputs, and the chunk size its reductions use and
  // its sessions were told (server/engine/chunk_pacing.h); kept across
  // epochs (the links stay).
  PaceEstimate pace_ ABSL_GUARDED_BY(mu_);
  size_t chunk_bytes_ ABSL_GUARDED_BY(mu_);
  // On a relay: where its collectives go (SetRelay); null otherwise. Set
  // before the job is shared, then constant. Last, so that it is
  // destroyed first: its threads may still call back into the job.
  std::shared_ptr<JobRelay> relay_;
};

}  // namespace reducer

#endif  // REDUCER_SERVER_JOBS_JOB_H_
