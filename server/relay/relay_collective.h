// RelayCollective: one collective on a relay (reducerd --upstream), as the
// ranks of its host take part in it. Their calls attach here as they would
// to a Collective (it is their AttachedCollective); once every one of them
// is attached, it starts the collective's one call upstream, fills that
// call's payload as their payloads arrive, and when the result comes back
// from upstream sends it to each of them.
//
// With several ranks (`members`, of a kind that takes several ranks, each
// consecutive in the group: server/jobs/several_ranks.h) their inputs are
// combined into one contribution for all of them (CollectiveHeader.ranks):
//   AllReduce, Reduce,  reduced chunk by chunk, in rank order, as the
//   ReduceScatter       chunks of every member are in (AVG summed: the
//                       shards divide by every rank); sent upstream chunk
//                       by chunk as they are reduced
//   AllGather, Gather   concatenated in rank order
//   Broadcast, Scatter  the root's, when it is one of them
//   AllToAll            per destination rank of the group in order, the
//                       members' parts for it in rank order (each part, a
//                       member's input cut into equal parts along dim 0,
//                       placed as its bytes arrive)
//   Barrier             none
// and the result is the same for each (AllReduce, AllGather, Broadcast,
// Barrier), or the root's alone (Reduce, Gather: the others get none), or
// cut along dimension 0 into the members' own parts, each member getting
// its own (ReduceScatter's slices, Scatter's parts, AllToAll's rows every
// rank sent it: upstream sends them concatenated in rank order).
// AllToAllV (rows per destination each rank's own) goes upstream per rank,
// as if alone.
// With one rank the call goes upstream as that rank's own, its payload as
// it is, and its result is that rank's.
//
// Streamed: an all-reduce that goes upstream has its result written into
// the relay's memory as it arrives (ResultInto), and each member's
// messages go as their bytes land, in any order after the first (two
// shards' partitions land side by side); the last, which ends the member's
// call with OK, only once upstream's call ended OK
// (relay_collective_streamed.cc). A rank over gRPC reads each message as
// it comes; for those on the same-host path each is copied into the host's
// result segment as it comes, and they take the result when their call
// ends.
//
// Answered here: when every rank of the group is a member (a job, or a
// group, on this host alone) and the kind is one of those combined above,
// nothing goes upstream: the combined payload is the result (reduced with
// the tensors' own ops, AVG dividing by the members, so the bits are those
// a reducerd with these ranks gives), handed out as an upstream result
// would be, each message once the bytes it carries are combined; a
// member's last message (its call's OK) only once all of them are
// (relay_collective_here.cc). A quorum step, Done and point-to-point
// calls always go upstream, which decides them.
//
// All or nothing: an upstream failure fails every member with its status
// (upstream's errors name global ranks); a member's own failure (missing
// payload, a call cancelled) fails the members here and abandons the
// upstream call, which fails it upstream.
//
// Split: when a member disagrees with the others here (a mismatch), or
// when half the collective's timeout passed and some member has not
// attached, the members go upstream each on its own, as if connected
// directly, those that attach later too. Upstream then judges them with
// the other hosts' ranks: a mismatch or a missing rank is named there, in
// one message for every rank of the job, exactly as without a relay
// (relay_collective_split.cc).
//
// Thread-safe; RankChannels are called with the lock held and must not call
// back in (server/engine/rank_channel.h).
#ifndef REDUCER_SERVER_RELAY_RELAY_COLLECTIVE_H_
#define REDUCER_SERVER_RELAY_RELAY_COLLECTIVE_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/buffer.h"
#include "core/fingerprint.h"
#include "core/payload_layout.h"
#include "core/result_into.h"
#include "proto/reducer/v1/reducer.pb.h"
#include "server/engine/attached_collective.h"
#include "server/engine/memory_budget.h"
#include "server/engine/staged_part.h"
#include "server/engine/thread_pool.h"
#include "server/engine/timer_queue.h"
#include "server/metrics/metrics_sink.h"
#include "server/relay/landed_ranges.h"
#include "server/relay/upstream.h"

namespace reducer {

// What every RelayCollective of a relay shares; every pointer outlives it.
struct RelayEnv {
  TimerQueue* timers;
  MemoryBudget* memory;  // the relay's budget: upstream payloads are held in it
  MetricsSink* metrics;  // the null sink when metrics are off
  // The size of the chunks it reduces in and of the messages it sends its
  // ranks (a multiple of 8), and how many messages each may have unwritten.
  size_t chunk_bytes = 1 << 20;
  int window = 4;
  // Where upstream payloads take their memory (null: malloc).
  BufferPool* buffers = nullptr;
  // Where chunks of at least `offload_bytes` are reduced, off the thread
  // that brought their last part and off the lock (null: there, under it).
  ThreadPool* reduction_pool = nullptr;
  size_t offload_bytes = 64 << 10;
};

class RelayCollective final
    : public AttachedCollective,
      public std::enable_shared_from_this<RelayCollective> {
 public:
  // `members`: the ranks of this host taking part, sorted. `on_done` is
  // called once, without the lock, when every member has its outcome,
  // with the bytes combining saved on the host's link (what one call per
  // member would have sent and received, less what was), and the members
  // that never attached (it failed, or was split and went on without
  // them): each is to go upstream alone when it comes, as the others did.
  RelayCollective(
      RelayEnv env, std::string description, std::vector<int> members,
      std::shared_ptr<UpstreamSession> session,
      std::function<void(uint64_t saved, const std::vector<int>& absent)>
          on_done);
  ~RelayCollective() override;

  // Adds `rank`'s call (`fp` valid, its rank a member). False when it was
  // refused or the collective failed (`channel` was told why).
  bool Attach(std::shared_ptr<RankChannel> channel, int rank,
              const v1::CollectiveHeader& header, Fingerprint fp);

  // `rank` called Done(): unless it attached already, it is no longer a
  // member (the others' combined contribution goes without it, as its
  // Job's collectives go on without a rank that called Done()); the call
  // starts if every other member is in.
  void Excuse(int rank);

  // AttachedCollective.
  bool OnData(int rank, uint64_t offset, Payload data) override;
  void OnInputEnd(int rank) override;
  void OnWriteDone(int rank) override;
  void OnRankCancelled(int rank, const RankChannel* channel) override;
  void Fail(const absl::Status& status) override;
  const std::string& description() const override { return description_; }

  // Fails it with `status` unless its call upstream was made or it was
  // split, in one step under its lock, so that it can never start after
  // this returns true; false (nothing done) when its outcome is already
  // upstream's. What a relay uses to end the calls it cannot make any
  // more, while their last members may be attaching on other threads.
  bool FailUnlessStarted(const absl::Status& status);

  // True once every member has its outcome (split: every member that
  // attached; one that attaches later makes a call of its own upstream).
  bool done() const;
  // True once its call upstream was made, it was split, or it is being
  // answered here: its outcome no longer depends on a call not yet made.
  bool started() const;

 private:
  // How the members' inputs make the upstream payload.
  enum class Combine { kAlone, kReduce, kConcat, kRoot, kParts, kNone };
  struct Member {
    int rank = -1;
    std::shared_ptr<RankChannel> channel;
    v1::CollectiveHeader header;
    Fingerprint fp;
    size_t input_bytes = 0;
    size_t received = 0;
    // Payload that came before every member attached (offsets unknown).
    std::vector<std::pair<uint64_t, Payload>> held;
    // Its result's messages not yet sent, and those sent but not written.
    std::vector<ResultMessage> to_send;
    // Answered here: where its result's bytes start in the combined payload
    // (its part's place; 0 for the whole).
    size_t answer_base = 0;
    int unwritten = 0;
    bool attached = false;
    bool finished = false;  // ended: OK, failed, or cut off
    // Split: its own upstream payload, held in the relay's budget.
    std::shared_ptr<UpstreamInput> own_input;
    std::optional<MemoryReservation> own_reserved;
  };
  // One chunk of a reduction being staged: a part per member.
  struct Staging {
    std::vector<StagedPart> parts;
    int complete = 0;
  };
  // kReduce: the payload's layout and the tensors the members' chunks are
  // reduced by (AVG as SUM, unless answered here). Set when the call
  // starts, never changed: offloaded reductions read it off the lock.
  struct ReducePlan {
    PayloadLayout layout;
    std::vector<TensorSpec> tensors;
  };
  // A chunk, bytes [begin, end), whose every member's part is in.
  struct ChunkToReduce {
    size_t index = 0;
    size_t begin = 0;
    size_t end = 0;
    std::vector<StagedPart> parts;
  };

  // A rank's header as the relay forwards it for that rank alone: without
  // what belongs to its call here (its session, epoch, attempt, progress);
  // the upstream session fills its own.
  static v1::CollectiveHeader ForwardedHeader(
      const v1::CollectiveHeader& header);
  // The index of `rank` in members_, or -1 when it is not one of them.
  int IndexOf(int rank) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Every member attached: plans the upstream call; returns the function
  // that starts it (run without the lock), or null when it failed or is
  // answered here.
  std::function<void()> StartLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  v1::CollectiveHeader UpstreamHeaderLocked() const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Adds to `offload` the chunks to reduce on the reduction pool.
  void OnDataLocked(int rank, uint64_t offset, Payload data,
                    std::vector<ChunkToReduce>* offload)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Member `m`'s payload bytes [offset, offset + data.size()), every member
  // attached. kReduce: a chunk it completes is reduced here, or, when
  // `offload` is given and the chunk is large enough for the pool, added
  // to it.
  absl::Status PlaceLocked(int m, uint64_t offset, const Payload& data,
                           std::vector<ChunkToReduce>* offload = nullptr)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Reduces the members' `parts` of bytes [begin, end) by `plan` into the
  // same bytes of `payload` (the combined payload).
  static absl::Status ReduceChunk(const ReducePlan& plan,
                                  const std::vector<StagedPart>& parts,
                                  size_t begin, size_t end, char* payload);
  // On the reduction pool: reduces `chunk` into `input` by `plan`, then
  // marks it reduced (unless the collective failed meanwhile).
  void ReduceOffloaded(const ReducePlan& plan, UpstreamInput& input,
                       ChunkToReduce chunk);
  // kParts: places member `m`'s bytes [offset, offset + data.size()) part
  // by part, each at its destination's place in the upstream payload.
  void PlacePartsLocked(int m, uint64_t offset, const Payload& data)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Marks the upstream payload's prefix that is whole as ready.
  void AdvanceReadyLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnUpstreamDone(absl::StatusOr<UpstreamResult> result);
  // Splits it (see above): each member attached goes upstream alone.
  // Returns the functions that start their calls (run without the lock).
  std::vector<std::function<void()>> SplitLocked()
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Split: member `m`'s own call upstream, its payload so far placed;
  // returns the function that starts it, or null when it failed.
  std::function<void()> StartAloneLocked(int m)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnAloneDone(int rank, absl::StatusOr<UpstreamResult> result);
  // Whether it is answered here (above), every member attached and agreeing.
  bool AnswersHereLocked() const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Answered here: queues each member's result over the combined payload,
  // sent as its bytes are combined (SendSomeLocked).
  void AnswerHereLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Answered here: whether member `m`'s next message may go, given the
  // combined payload's bytes ready.
  bool ReadyToSendLocked(const Member& m) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Called once its call upstream is planned (not answered here): an
  // all-reduce is streamed (above); returns the memory for its result,
  // whose messages are queued for the members now. Null for other calls.
  std::shared_ptr<const ResultInto> StreamResultLocked()
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Streamed: sends the members what landed (on the reduction pool).
  void SendLanded();
  // Streamed: whether every byte `message` carries for member `m` landed.
  static bool Landed(const LandedRanges& landed, const Member& m,
                     const ResultMessage& message);
  // Streamed: upstream's call ended OK; false (and it failed) when bytes of
  // the result never landed.
  bool EndStreamedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Where in member `m`'s to_send the message that may go next is, or
  // to_send.size() when none may yet: in order, answered here as the
  // combined bytes are ready; streamed, as above.
  size_t NextToSendLocked(const Member& m) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Answered here: the members' timeout passed before every one of them
  // sent its payload and took its result.
  void OnHereDeadline();
  // Hands `result` (upstream's, or the combined payload when answered
  // here) to the members: the whole, the root's alone, or each its part.
  void DeliverResultLocked(const UpstreamResult& result)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Queues `messages` (result_messages.h) for member `m` and sends a window
  // of them.
  void DeliverLocked(int m, std::vector<ResultMessage> messages)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SendSomeLocked(int m) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Answered here: sends each member what became ready to send.
  void SendReadyLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FailLocked(const absl::Status& status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Half the members' timeout passed: split unless every member is in.
  void OnStragglerDeadline();
  // Calls on_done_ once every member finished (without the lock).
  void MaybeDone();

  const RelayEnv env_;
  const std::string description_;
  const std::shared_ptr<UpstreamSession> session_;
  const std::function<void(uint64_t saved, const std::vector<int>& absent)>
      on_done_;

  mutable absl::Mutex mu_;
  std::vector<Member> members_ ABSL_GUARDED_BY(mu_);  // in rank order
  int attached_ ABSL_GUARDED_BY(mu_) = 0;
  bool started_ ABSL_GUARDED_BY(mu_) = false;  // the upstream call was made
  bool failed_ ABSL_GUARDED_BY(mu_) = false;
  bool split_ ABSL_GUARDED_BY(mu_) = false;
  bool here_ ABSL_GUARDED_BY(mu_) = false;  // answered here (above)
  // The first member's arrival and its timeout (0: none).
  absl::Time first_attached_ ABSL_GUARDED_BY(mu_);
  absl::Duration timeout_ ABSL_GUARDED_BY(mu_);
  absl::Status failure_ ABSL_GUARDED_BY(mu_);
  bool done_reported_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t saved_ ABSL_GUARDED_BY(mu_) = 0;  // see on_done
  Combine combine_ ABSL_GUARDED_BY(mu_) = Combine::kAlone;
  // The upstream payload, and where each member's bytes go in it
  // (kConcat; the sender's 0 otherwise).
  std::shared_ptr<UpstreamInput> input_ ABSL_GUARDED_BY(mu_);
  std::optional<MemoryReservation> reserved_ ABSL_GUARDED_BY(mu_);
  std::vector<size_t> base_ ABSL_GUARDED_BY(mu_);
  // kParts: the bytes each member sends each rank of the group.
  size_t part_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  // kReduce: its plan, chunks being staged, and chunks reduced.
  std::shared_ptr<const ReducePlan> plan_ ABSL_GUARDED_BY(mu_);
  std::map<size_t, Staging> staging_ ABSL_GUARDED_BY(mu_);
  std::vector<bool> reduced_ ABSL_GUARDED_BY(mu_);
  // Streamed (above): which of the result's bytes landed, told by the
  // transport's thread, which never takes mu_ (mu_ comes first); the
  // padding between its tensors counts from the start.
  struct Landing {
    explicit Landing(size_t bytes) : bytes(bytes) {}
    const size_t bytes;  // the whole result's
    absl::Mutex mu;
    LandedRanges landed ABSL_GUARDED_BY(mu);
    bool send_scheduled ABSL_GUARDED_BY(mu) = false;  // SendLanded queued
  };
  std::shared_ptr<Landing> landing_ ABSL_GUARDED_BY(mu_);  // null: not streamed
  bool upstream_ok_ ABSL_GUARDED_BY(mu_) = false;          // its call ended OK
  // When it splits for members not attached (half their timeout), or,
  // answered here, when it times out.
  std::optional<TimerQueue::Id> deadline_ ABSL_GUARDED_BY(mu_);
};

}  // namespace reducer

#endif  // REDUCER_SERVER_RELAY_RELAY_COLLECTIVE_H_
