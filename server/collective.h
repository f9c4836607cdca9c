// Collective: one matched collective of a job, the rendezvous of its group's
// contributions and the engine that turns them into each rank's result.
//
// Protocol, step by step:
//  1. Each rank's stream attaches with its fingerprint. The first attach
//     creates the Collective and starts its timers; every later attach is
//     checked against the reference fingerprint (the first, or for
//     Broadcast the first that carries a tensor). A disagreement fails the
//     collective for every rank at once.
//  2. Payload bytes arrive per rank in order (OnData).
//     - AllReduce and ReduceScatter: bytes are staged per block of
//       options.chunk_bytes. When every rank has delivered block k, the block
//       is reduced in group-rank order (on the reduction pool when large) and
//       its result slice is sent to every rank that needs it (all ranks for
//       AllReduce; the owners of the overlapping slices for ReduceScatter).
//     - AllGather and Broadcast: once every header is in, each received
//       message is forwarded as is (zero-copy slices) to every rank at its
//       offset in the result.
//     - Barrier: once every header is in, every rank gets an empty result.
//  3. A rank's stream finishes OK once all of its result bytes are queued
//     and written. The first response message carries the result specs.
//  4. Back-pressure: a rank's stream stops reading while it has `window`
//     blocks staged or `window` messages queued for it; the collective
//     resumes it as blocks are reduced and writes complete. Memory is thus
//     bounded by 2 x ranks x window x chunk (staged in plus queued out),
//     whatever the tensor size.
//  5. Timers: at half the timeout a stall warning names the ranks still
//     missing; at the timeout every rank gets DEADLINE_EXCEEDED naming them.
//
// Thread-safe: all state is under mu_. Lock order: Collective::mu_ before a
// RankChannel's own lock; channels call in without holding theirs.
#ifndef REDUCER_SERVER_COLLECTIVE_H_
#define REDUCER_SERVER_COLLECTIVE_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/fingerprint.h"
#include "core/payload_layout.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"
#include "proto/reducer/v1/collective_codec.h"
#include "server/block_pool.h"
#include "server/log.h"
#include "server/memory_budget.h"
#include "server/metrics_sink.h"
#include "server/server_options.h"
#include "server/thread_pool.h"
#include "server/timer_queue.h"

namespace reducer {

// How a Collective talks back to one rank's call. Implemented over gRPC by
// RankStream (a call on its own stream) and MultiplexedStream's CallChannel
// (a call on the shared Collectives stream). Calls may come from any
// thread, with the Collective's lock held; implementations must not call
// back into the Collective from inside them.
class RankChannel {
 public:
  virtual ~RankChannel() = default;
  // Queues one response message. With `last`, the stream then ends with OK
  // (in the same write, saving the client a wakeup); nothing may follow.
  virtual void Send(grpc::ByteBuffer message, bool last) = 0;
  // Ends the stream with OK once every queued message is written.
  virtual void FinishWhenSent() = 0;
  // Ends the stream with `status` now; queued messages are dropped.
  virtual void Fail(const absl::Status& status) = 0;
  // Reading was paused (OnData returned false); read the next message.
  virtual void ResumeReading() = 0;
};

// What a Collective needs from the server; every pointer outlives it.
struct CollectiveEnv {
  const ServerOptions* options;
  ThreadPool* reduction_pool;
  TimerQueue* timers;
  MemoryBudget* memory;
  BlockPool* blocks;  // block_bytes() == options->chunk_bytes
  MetricsSink* metrics;  // the null sink when metrics are off
  const Logger* log;
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

class Collective : public std::enable_shared_from_this<Collective> {
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

  // Adds `rank`'s contribution (its fingerprint must already be valid on
  // its own). On a mismatch with the reference, fails the collective for
  // everyone (this rank included, through `channel`). A rank attaching a
  // second time is failed with FAILED_PRECONDITION, unless `attempt_id`
  // matches its first attach (a retry after the first stream was lost),
  // which is answered ABORTED if the first attempt already moved data.
  void Attach(std::shared_ptr<RankChannel> channel, int rank, Fingerprint fp,
              const std::string& attempt_id);

  // `rank`'s payload bytes [offset, offset + data.size()). Returns true if
  // the channel may read its next message now, false if it must wait for
  // ResumeReading(). Out-of-order or excess bytes fail the collective.
  bool OnData(int rank, uint64_t offset, SliceRange data);

  // `rank`'s client closed its side. Fails the collective with
  // INVALID_ARGUMENT if payload bytes are missing.
  void OnInputEnd(int rank);

  // A message queued for `rank` was written.
  void OnWriteDone(int rank);

  // `rank`'s call on `channel` was cancelled (its connection dropped or it
  // gave up). Before every rank has arrived, the rank is detached, so that a
  // retry can attach again and nothing is counted twice; after that the
  // collective fails for everyone with ABORTED.
  void OnRankCancelled(int rank, const RankChannel* channel);

  // True once `rank` received its whole result (it may start another
  // collective of the same name).
  bool HasFinished(int rank) const;

  // Fails the collective for every attached rank and every later attach.
  void Fail(const absl::Status& status);

  // True when `rank` is in the group.
  bool Includes(int rank) const {
    return std::binary_search(group_.begin(), group_.end(), rank);
  }

  // True once every rank of the group has attached.
  bool all_attached() const;
  // True once the collective succeeded or failed.
  bool done() const;
  const std::string& description() const { return description_; }

  // Its state now, for status reports; nullopt once done.
  std::optional<CollectiveSnapshot> Snapshot() const;

 private:
  struct Member;
  struct Block;
  // What reducing a block needs; fixed once every header is in.
  struct ReductionPlan {
    PayloadLayout layout;
    std::vector<TensorSpec> tensors;
  };
  using BlockParts = std::vector<BlockPool::Block>;

  int IndexOf(int rank) const;
  // Fails the collective for everyone; `ranks` are those the failure is
  // about (for the log), default: the whole group.
  void FailLocked(const absl::Status& status, std::vector<int> ranks = {})
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Reports the collective's end (done_ was just set) to the metrics.
  void ReportEnd(absl::StatusCode outcome) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::vector<int> AbsentRanks() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnAllAttached() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ComputeResult() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Reduces a block whose every part has arrived: inline when small, else
  // on the reduction pool. Called without mu_.
  void ScheduleReduction(std::shared_ptr<const ReductionPlan> plan,
                         size_t block_index, BlockParts parts);
  void ReduceBlock(const ReductionPlan& plan, size_t block_index,
                   BlockParts parts);
  void DeliverReduced(size_t block_index, grpc::Slice result)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Forward(int index, uint64_t offset, const SliceRange& data)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SendTo(int index, uint64_t offset, absl::Span<const grpc::Slice> data)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool MayRead(int index) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ResumeReaders() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Finishes `index`'s stream if IsComplete (used when its last payload
  // arrives after its last result byte was sent).
  void MaybeFinish(int index) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool IsComplete(const Member& m) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void MarkFinished(int index) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReleaseMemory(int index) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string MissingRanks() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnStallTimer();
  void OnDeadline();

  // Constant after construction.
  const CollectiveEnv env_;
  const CollectiveLabel label_;
  const std::string description_;
  const std::vector<int> group_;
  const absl::Duration timeout_;
  const size_t block_bytes_;
  const absl::Time created_;

  mutable absl::Mutex mu_;
  std::vector<Member> members_ ABSL_GUARDED_BY(mu_);  // in group order
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
  // Known once every header is in.
  std::shared_ptr<const ReductionPlan> plan_ ABSL_GUARDED_BY(mu_);
  // The result specs, encoded once as CollectiveResponse.result fields;
  // every rank's first message references this slice.
  grpc::Slice encoded_result_specs_ ABSL_GUARDED_BY(mu_);
  // Reduction kinds: blocks staged but not yet reduced, by block index.
  absl::flat_hash_map<size_t, Block> blocks_ ABSL_GUARDED_BY(mu_);
  std::vector<TimerQueue::Id> timer_ids_ ABSL_GUARDED_BY(mu_);
};

}  // namespace reducer

#endif  // REDUCER_SERVER_COLLECTIVE_H_
