// Collective: one matched collective of a job, the rendezvous of its group's
// contributions and the engine that turns them into each rank's result.
// Transport-free: bytes come in as a Payload and go out as SharedBytes
// through each rank's RankChannel; what differs by kind is a KindStrategy
// (server/engine/kind_strategy.h) chosen once, when the first rank attaches.
//
// Protocol, step by step:
//  1. Each rank's call attaches with its fingerprint. The first attach
//     creates the Collective and starts its timers; every later attach is
//     checked against the reference fingerprint (the first, or for
//     Broadcast the first that carries a tensor). A disagreement fails the
//     collective for every rank at once.
//  2. Before accepting any payload of a rank, the Collective reserves the
//     most its kind can make reducerd hold for it in the memory budget;
//     without room, the collective fails with RESOURCE_EXHAUSTED.
//  3. Payload bytes arrive per rank in order (OnData) and go to the kind's
//     strategy: staged per chunk and reduced once every rank's part is in
//     (AllReduce, ReduceScatter, Reduce; large chunks on the reduction
//     pool), or forwarded as received once every header is in (AllGather,
//     Broadcast, Gather; Scatter, AllToAll and AllToAllV each part only to
//     its rank), or none at all (Barrier, Match). A kind may check each
//     attaching rank against the ranks attached before it beyond the
//     reference (AllToAllV's rows, pair by pair), and give a rank result
//     specs of its own (AllToAllV: the rows it gets).
//  3a. A match's result is the job's to decide (SetResultValues): until
//     then it is undecided, so the end of the epoch fails it and a
//     cancelled call is detached for its retry, and its deadline says what
//     it waited for.
//  4. A rank's call finishes OK once all of its payload is in and all of its
//     result bytes are queued and written, and its reservation is released
//     once nothing of it is held any more: nothing staged, and every message
//     of its answer written to its client (each message holds the
//     reservation, server/engine/rank_reservation.h, so answers a client
//     has not read stay in the budget). The first message carries the
//     rank's result specs: those of the kind's result, or an empty list for
//     a rank that gets none (the non-roots of Reduce and Gather, which get
//     0 result bytes). A rank's call ends OK once it has its whole result
//     and every rank's payload is in (the collective is decided), never
//     sooner, so that a rank lost before then fails every call. A rank
//     that finishes alone (KindStrategy::FinishesAlone: a point-to-point
//     message's source, whose whole payload is reserved and held) gets its
//     empty header when it attaches and finishes once its payload is in,
//     before the other ranks arrive; its bytes stay reserved until the
//     collective is done or failed.
//  5. Back-pressure: a rank's call stops reading when the strategy says so
//     (chunks staged or messages queued reach `window`); the Collective
//     resumes it as chunks are reduced and writes complete. Memory is thus
//     bounded by 2 x ranks x window x chunk (staged in plus queued out),
//     whatever the tensor size.
//  6. Timers: at half the timeout a stall warning names the ranks still
//     missing; at the timeout every rank gets DEADLINE_EXCEEDED naming them.
//  7. Quorum barriers (StartQuorum) end before every rank attached: each
//     attach is an arrival for the collective's QuorumStep
//     (server/engine/quorum_step.h), each rank the job's Participation says
//     is gone a death (asked at the start, and again whenever the job says
//     that membership changed), and a timer asks again at the grace's end. Once the step decides, every rank that
//     did not arrive is left out (counted as attached and finished, sent
//     nothing) and the others get the step's marks
//     (server/engine/quorum_barrier_strategy.h). A left-out rank's late
//     call gets FAILED_PRECONDITION naming the step.
//
// The class is defined over four files, one job each: collective.cc (its
// life: creation, failure, the end, queries), collective_attach.cc (the
// rendezvous: attach and agreement, memory reservations, retries, ranks
// left out or cancelled, the quorum step's host), collective_data.cc (the
// data flow: payload in, results out, back-pressure, kept results) and
// collective_timers.cc (stall warning, deadline, status snapshots).
//
// Thread-safe: all state is under mu_. Lock order: Collective::mu_ before a
// RankChannel's own lock; channels call in without holding theirs. A
// Participation is asked under mu_, only within the call that hands it
// over; it takes no lock (its job holds its own around that call).
#ifndef REDUCER_SERVER_ENGINE_COLLECTIVE_H_
#define REDUCER_SERVER_ENGINE_COLLECTIVE_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/fingerprint.h"
#include "server/engine/attached_collective.h"
#include "server/engine/chunk_pool.h"
#include "server/engine/engine_options.h"
#include "server/engine/kept_results.h"
#include "server/engine/kind_strategy.h"
#include "server/engine/memory_budget.h"
#include "server/engine/participation.h"
#include "server/engine/quorum_step.h"
#include "server/engine/rank_channel.h"
#include "server/engine/shared_bytes.h"
#include "server/engine/thread_pool.h"
#include "server/engine/timer_queue.h"
#include "server/log.h"
#include "server/metrics/metrics_sink.h"

namespace reducer {

// What a Collective needs from the server; every pointer outlives it.
struct CollectiveEnv {
  const EngineOptions* options;
  ThreadPool* reduction_pool;
  TimerQueue* timers;
  MemoryBudget* memory;
  ChunkPool* chunks;  // chunk_bytes() == options->chunk_bytes
  MetricsSink* metrics;  // the null sink when metrics are off
  const Logger* log;
  // The server-wide room for kept results; null:
  // results are not kept. Each Job makes its own `kept` from it.
  MemoryBudget* kept_memory = nullptr;
  // Where each rank's whole result is kept until its receipt is
  // acknowledged (server/engine/kept_results.h); null: results are not kept.
  std::shared_ptr<KeptResults> kept;
  // The job's share of `memory` (options->max_job_memory_fraction), reserved as
  // well as `memory`; null: no share of its own. Shared: a collective may
  // outlive its job.
  std::shared_ptr<MemoryBudget> job_memory;
  // The tenant the job belongs to (server/jobs/tenants.h): it names the
  // tenant's share in messages, and the events a client can cause at will
  // in the log (LogEvent::tenant, rate-limited per tenant).
  std::string tenant;
  // The tenant's share of `memory` (options->max_tenant_memory_fraction),
  // shared by its jobs and reserved as well as `memory` and `job_memory`;
  // null: no share of its own. Shared: a collective may outlive its job.
  std::shared_ptr<MemoryBudget> tenant_memory;
};

// Who a collective is, for logs, metrics and status reports.
struct CollectiveLabel {
  std::string job;
  uint64_t epoch = 0;
  std::string name;  // `allreduce "step7"`, `allreduce #12`
  // Unknown for a collective failed before a well-formed header named it.
  std::optional<CollectiveKind> kind;
};

// A collective not yet done, as a status report shows it.
struct CollectiveSnapshot {
  std::string name;                   // as CollectiveLabel::name
  std::optional<CollectiveKind> kind;
  std::vector<int> group;             // global ranks taking part
  std::vector<int> missing_ranks;     // in the group, not yet arrived
  absl::Duration age;                 // since the first rank arrived
  bool stalled = false;               // past its stall warning
};

class Collective final : public AttachedCollective,
                         public std::enable_shared_from_this<Collective>,
                         private KindStrategy::Output,
                         private QuorumStep::Host {
 public:
  // `description` names it in messages: `allreduce "step7" in job j1`.
  // `group` holds the sorted global ranks taking part.
  Collective(CollectiveEnv env, CollectiveLabel label, std::string description,
             std::vector<int> group, absl::Duration timeout);
  ~Collective();
  Collective(const Collective&) = delete;
  Collective& operator=(const Collective&) = delete;

  // Starts the stall and deadline timers. Call once, right after creation.
  void StartTimers();

  // What a collective of `group_size` ranks holds for its bookkeeping,
  // whatever its payload: its creator reserves it from the memory budget
  // (and the job's share) before creating it.
  static size_t StateBytes(size_t group_size);
  // Keeps `state` (StateBytes reserved by the creator, one reservation per
  // budget) until the collective is destroyed.
  void HoldState(std::vector<MemoryReservation> state);

  // Adds `rank`'s contribution (its fingerprint must already be valid on
  // its own). On a mismatch with the reference, fails the collective for
  // everyone (this rank included, through `channel`). A rank attaching a
  // second time is failed with FAILED_PRECONDITION, unless `attempt_id`
  // matches its first attach (a retry after the first stream was lost),
  // which is answered ABORTED if the first attempt already moved data.
  // Returns true when `channel` now carries `rank`'s contribution and its
  // bytes may be fed (OnData, OnInputEnd); false when it was refused or the
  // collective failed (`channel` was told why): its bytes must not be fed,
  // since `rank` may have another call in this collective.
  //
  // `covered`: the other ranks a contribution stands for (a relay's,
  // CollectiveHeader.ranks), checked by the caller: distinct ranks of the
  // group, with `rank` consecutive members of it, of a kind that
  // TakesSeveralRanks, `rank` the root where the root is among them. Their
  // parts are in `rank`'s payload, combined, and their result is `rank`'s:
  // each counts as attached and finished (KindStrategy::Cover); `fp` must
  // agree with the other contributions as one of its ranks' would
  // (OneRanksFingerprint: an AllToAll's holds every one's rows). One that
  // attached already on its own fails the collective; a retry of the
  // contribution covers the same ranks again.
  bool Attach(std::shared_ptr<RankChannel> channel, int rank, Fingerprint fp,
              const std::string& attempt_id,
              const std::vector<int>& covered = {});

  // `rank`'s payload bytes [offset, offset + data.size()). Returns true if
  // the channel may read its next message now, false if it must wait for
  // ResumeReading(). Out-of-order or excess bytes fail the collective.
  bool OnData(int rank, uint64_t offset, Payload data) override;

  // `rank`'s client closed its side. Fails the collective with
  // INVALID_ARGUMENT if payload bytes are missing.
  void OnInputEnd(int rank) override;

  // A message queued for `rank` was written.
  void OnWriteDone(int rank) override;

  // `rank`'s call on `channel` was cancelled (its connection dropped or it
  // gave up). Before every rank has arrived, the rank is detached, so that a
  // retry can attach again and nothing is counted twice. Once every input
  // is in, the result is decided: only this rank's call ends (it is gone),
  // and the others go on receiving theirs. In between, the collective
  // fails for everyone with ABORTED.
  void OnRankCancelled(int rank, const RankChannel* channel) override;

  // A replay (CollectiveHeader.replay) of `rank`'s attempt `attempt_id`,
  // whose result is being kept and not yet whole: `channel` takes the
  // place of the attempt's call (cut off, or failed ABORTED now: its client
  // gave it up before reducerd saw it end), gets every message sent so far
  // at once, and the rest as it comes. NOT_FOUND when there is nothing to
  // resume (another attempt, a result not kept, finished, failed);
  // INVALID_ARGUMENT when `declared` (the replay's tensors) are not those
  // the attempt declared.
  absl::Status Resume(int rank, const std::string& attempt_id,
                      const std::vector<TensorSpec>& declared,
                      std::shared_ptr<RankChannel> channel);

  // Quorum barriers only (CollectiveKind::kQuorumBarrier), right after
  // creation: the step ends by `settings`; the ranks of the group that
  // `who` says are gone count as dead from the start, `joining` ranks take
  // part without contributing (QuorumRule::Joining).
  void StartQuorum(const QuorumSettings& settings,
                   const std::vector<int>& joining, const Participation& who);
  // Who takes part changed (and, right after creation, who takes part):
  // asks `who` about every rank of the group that has not attached. A rank
  // that called Done() is left out, as the kind's strategy allows
  // (KindStrategy::Exclude; if the kind cannot go on without it, the
  // collective fails for everyone with FAILED_PRECONDITION saying so), and
  // a later attach of it is refused with FAILED_PRECONDITION; a DONE
  // collective leaves nobody out. A quorum barrier's step no longer waits
  // for a rank that is gone (attached or not). Returns the ranks found
  // done, left out or not (the job counts them as having skipped the
  // collective); none once the collective is done. Call under the lock that keeps `who`'s answers
  // (participation.h).
  std::vector<int> OnMembershipChanged(const Participation& who);
  // True when `rank` is in the group of a quorum barrier that ended
  // without it; LeftAnyOut: when it ended without some rank.
  bool LeftOut(int rank) const;
  bool LeftAnyOut() const;
  // The ranks left out, by rank: true for one left out because it called
  // Done(), false for one a quorum step ended without. A job remembers
  // these for a finished step instead of the Collective, and refuses their
  // late calls with LeftOutRefusal.
  std::vector<std::pair<int, bool>> LeftOutRanks() const;
  // What a late call of `rank`, left out of the collective `description`
  // names (`done`: because it called Done()), gets: what Attach fails it
  // with.
  static absl::Status LeftOutRefusal(const std::string& description, int rank,
                                     bool done);
  bool IsQuorumBarrier() const {
    return label_.kind == CollectiveKind::kQuorumBarrier;
  }
  // A DONE collective (Client::Done).
  bool IsDone() const { return label_.kind == CollectiveKind::kDone; }
  // True once `rank` attached (or was left out).
  bool HasAttached(int rank) const;

  // The values the job hands the kind for its result (KindStrategy::
  // SetResultValues): a DONE collective's int64 every rank gets (the value
  // set before the last rank attaches is sent); a match's message, {source,
  // n}, sent to its rank at once (or once a detached call's retry
  // attaches). False when the collective is done (failed, or finished)
  // and takes none.
  bool SetResultValues(std::vector<int64_t> values);

  // True once `rank` received its whole result (it may start another
  // collective of the same name).
  bool HasFinished(int rank) const;

  // Before the first rank attaches: the chunk its reduction stages in and
  // answers by (server/engine/chunk_pacing.h), instead of
  // EngineOptions::chunk_bytes.
  void SetChunkBytes(size_t chunk_bytes);
  // Once every input is in: the pace (bytes per second) at which the
  // slowest rank's payload arrived, from its first message to its last,
  // over the ranks that sent at least kMinPacedInputBytes; nullopt when
  // none did.
  std::optional<double> InputPace() const;

  // Fails the collective for every attached rank and every later attach.
  void Fail(const absl::Status& status) override;

  // Fail, unless every input is in: then the result is decided, and the
  // ranks still connected get it (a job's epoch ending, a rank departing,
  // must not take away a result other ranks already have or are receiving).
  // Ranks that cannot receive it end by their own cancellation or by the
  // deadline.
  void FailUnlessDecided(const absl::Status& status);

  size_t group_size() const { return group_.size(); }
  // True when `rank` is in the group.
  bool Includes(int rank) const {
    return std::binary_search(group_.begin(), group_.end(), rank);
  }

  // True once every rank of the group has attached.
  bool all_attached() const;
  // True once the collective succeeded or failed.
  bool done() const;
  const std::string& description() const override { return description_; }

  // Its state now, for status reports; nullopt once done.
  std::optional<CollectiveSnapshot> Snapshot() const;

 private:
  // The time now on the engine's clock (env_.timers->clock()), on which
  // every deadline and age of the collective is measured.
  absl::Time Now() const { return env_.timers->clock().Now(); }

  // The position of `rank` in the group, -1 if not in it; IndicesOf: those
  // of `ranks` in it; RanksAt: the global ranks at `indices`.
  int IndexOf(int rank) const;
  std::vector<int> IndicesOf(const std::vector<int>& ranks) const;
  std::vector<int> RanksAt(const std::vector<int>& indices) const;
  // True once every rank attached and sent its whole payload.
  bool AllInputInLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Fails the collective for everyone; `ranks` are those the failure is
  // about (for the log), default: the whole group.
  void FailLocked(const absl::Status& status, std::vector<int> ranks = {})
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Reports the collective's end (done_ was just set) to the metrics.
  void ReportEnd(absl::StatusCode outcome) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::vector<int> AbsentRanks() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Attach's cases: a rank outside the group (fails the collective), and a
  // rank attaching again (its retry replaces its call, or it is refused).
  void RefuseForeignRankLocked(RankChannel& channel, int rank,
                               const Fingerprint& fp)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool AttachAgainLocked(int index, std::shared_ptr<RankChannel> channel,
                         const std::string& attempt_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Counts the ranks `covered` as taking part through ranks_[index]'s
  // contribution (see Attach); `ready` gets the chunks it made whole.
  // False when the collective failed.
  bool CoverLocked(int index, const std::vector<int>& covered,
                   std::vector<StagedChunk>* ready)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Reserves ranks_[index]'s worst case (KindStrategy::Reservation) in the
  // memory budget and the job's share; false (after failing the collective
  // with RESOURCE_EXHAUSTED naming the limit) when it does not fit.
  bool ReserveLocked(int index) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // ranks_[index] attached and reserved: the quorum step, or the last
  // attach, may make the result now; a rank that finishes alone gets its
  // header. Returns Attach's answer: false when a quorum step failed, or
  // ended without the rank.
  bool ArrivedLocked(int index) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Checks `fp` against the reference (or makes it the reference) and picks
  // the strategy; false if the collective failed.
  bool Agree(int rank, const Fingerprint& fp) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnAllAttached() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Reduces a chunk whose every part has arrived: inline when small, else
  // on the reduction pool. Called without mu_.
  void ScheduleReduction(std::shared_ptr<KindStrategy> strategy,
                         StagedChunk chunk);
  void ReduceChunk(const KindStrategy& strategy, StagedChunk chunk);
  // KindStrategy::Output: queues `data` for ranks_[index] at `offset`.
  void SendTo(int index, uint64_t offset, std::vector<SharedBytes> data)
      override ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool MayRead(int index) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `channel` takes the place of the call of the rank at `index` (whose
  // result is being kept): the old call, unless cut off, fails ABORTED
  // naming `what` and `by` (what took its place), and the new one gets
  // every message sent so far at once, and the rest as it comes.
  void TakeOverLocked(int index, std::shared_ptr<RankChannel> channel,
                      const std::string& what, const char* by)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ResumeReaders() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Finishes `index`'s call if IsComplete (used when its last payload
  // arrives after its last result byte was sent).
  void MaybeFinish(int index) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool IsComplete(const RankState& r) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Counts ranks_[index] as finished, handing its kept result, if it was
  // collecting one, to KeptResults.
  void MarkFinished(int index) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Starts collecting each rank's result for KeptResults where there is
  // room (once every header is in and result sizes are known).
  void StartKeeping() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Gives back the room of results being collected that will not be kept.
  void StopKeeping() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Releases the reservation of a finished rank that holds nothing staged.
  void ReleaseIfDone(int index) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReleaseMemory(int index) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string MissingRanks() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // What an undecided collective whose every rank arrived waits for
  // (KindStrategy::Awaited); empty otherwise.
  std::string AwaitedLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnStallTimer();
  void OnDeadline();
  // The quorum step at the grace's end it asked for (LookAgainAt).
  void OnQuorumTimer();
  // QuorumStep::Host, under mu_.
  void LookAgainAt(absl::Time when) override ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StepFailed(const absl::Status& why) override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void LeaveOut(int index) override ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StepEnded(const std::vector<int>& contributors,
                 const std::vector<int>& left_out) override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // True while a quorum step may still end (it has not, nor failed).
  bool QuorumOpenLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Marks ranks_[index] as taking no part: attached, finished, sent
  // nothing. Returns false (after failing the collective) when the kind
  // cannot do without it; `ready` gets the chunks it made whole.
  bool LeaveOutLocked(int index, std::vector<StagedChunk>* ready)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Counts ranks_[index] as attached and finished, taking no part.
  void MarkLeftOutLocked(int index) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The refusal of a late call from a rank left out.
  absl::Status LeftOutError(int rank) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The failure of a collective whose kind cannot do without the part of
  // ranks_[index], which called Done().
  absl::Status CannotGoOnWithout(int index) const;

  // Constant after construction.
  const CollectiveEnv env_;
  const CollectiveLabel label_;
  const std::string description_;
  const std::vector<int> group_;
  const absl::Duration timeout_;
  const absl::Time created_;

  mutable absl::Mutex mu_;
  std::vector<RankState> ranks_ ABSL_GUARDED_BY(mu_);  // in group order
  int attached_ ABSL_GUARDED_BY(mu_) = 0;
  int finished_ ABSL_GUARDED_BY(mu_) = 0;
  bool all_headers_ ABSL_GUARDED_BY(mu_) = false;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  bool stalled_ ABSL_GUARDED_BY(mu_) = false;  // the stall warning fired
  absl::Status failure_ ABSL_GUARDED_BY(mu_);
  // The fingerprint later ranks are checked against, and who sent it.
  Fingerprint reference_ ABSL_GUARDED_BY(mu_);
  int reference_rank_ ABSL_GUARDED_BY(mu_) = -1;
  bool has_reference_ ABSL_GUARDED_BY(mu_) = false;
  // The kind's part; set with the reference. Shared with reductions running
  // on the pool, which use only its immutable plan.
  std::shared_ptr<KindStrategy> strategy_ ABSL_GUARDED_BY(mu_);
  // Known once every header is in; the first message to every rank that
  // gets a result (KindStrategy::GetsResult) carries its own specs
  // (RankState::own_result_specs) or else result_specs_, to every other rank
  // no_result_specs_ (empty).
  std::shared_ptr<const std::vector<TensorSpec>> result_specs_
      ABSL_GUARDED_BY(mu_);
  std::shared_ptr<const std::vector<TensorSpec>> no_result_specs_
      ABSL_GUARDED_BY(mu_);
  std::vector<TimerQueue::Id> timer_ids_ ABSL_GUARDED_BY(mu_);
  std::vector<MemoryReservation> state_ ABSL_GUARDED_BY(mu_);
  // Quorum barriers only (StartQuorum): how the step ends; null otherwise.
  std::unique_ptr<QuorumStep> quorum_ ABSL_GUARDED_BY(mu_);
  // SetResultValues' values, handed to the strategy (again, when it is made
  // anew).
  std::vector<int64_t> result_values_ ABSL_GUARDED_BY(mu_);
  size_t chunk_bytes_ ABSL_GUARDED_BY(mu_);  // see SetChunkBytes
};

}  // namespace reducer

#endif  // REDUCER_SERVER_ENGINE_COLLECTIVE_H_
