// CollectivesReactor: the server side of one Collectives stream, a client's
// long-lived gRPC bidi stream that carries many small collectives, so that
// each costs one message each way and no stream setup.
//
// Every request message is one whole call: `call_id`, `header` and the whole
// payload at offset 0. For each, a StreamAttempt (the RankChannel of that call)
// is attached to its Collective through the same AttachFn as CollectiveReactor, the
// payload is handed over, and what the Collective sends back is tagged with
// the call's id (and, on the call's last message, its status) and written in
// order, one write at a time, shared by all calls.
//
// Reading: after a small message whose call must wait for other ranks, the
// stream holds its next read until one of its calls is answered, or until
// HeldReads' deadline (see held_reads.h for why on both counts); after any
// other message it reads on at once.
//
// Answers its client has not read: every message queued and not yet
// written counts (its bytes plus kQueuedMessageOverheadBytes); while they
// exceed `max_unread_bytes` the stream posts no read, and reads on as soon
// as writes bring them back within it. gRPC's flow control then stops the
// client's sends: a client that stops reading is slowed, and what it makes
// reducerd hold stays bounded by `max_unread_bytes`, the answers of calls
// already read (at most one call beyond the bound, plus those attached
// before and answered since) and gRPC's own buffers. Every answer keeps its
// rank's reservation (ResultMessage::hold) until written, so what a stream
// holds unread is also counted in the memory budget and its job's share. A
// client that reads, however slowly, only waits, and nothing deadlocks: a
// write completing is what reads on. A client that takes none of its
// answers for --stream_idle_timeout is refused: IdleStreams ends its
// stream RESOURCE_EXHAUSTED naming the bytes it has not read, and what
// they held goes back to the budget.
//
// Idle: while no call is in flight and no answer is left to write, the
// stream is idle since its last message arrived or its last answer was
// written; IdleStreams closes it once that was --stream_idle_timeout ago,
// and a message arriving after it closed is not handled.
//
// A call's failure ends only that call. A message that cannot be routed to a
// call (it does not parse, lacks a header or call id, reuses the id of a call
// in flight, or carries a nonzero offset) ends the stream with
// INVALID_ARGUMENT. When the stream ends before a call was answered
// (cancelled, connection lost), the call counts as cancelled, exactly as on a
// broken Collective stream. The stream finishes OK once the client closed its
// side and every call was answered.
//
// Ownership: created by ReducerService::Collectives with Create(); owns
// itself through a shared_ptr that OnDone() drops; each StreamAttempt holds a
// weak reference back. Thread-safe.
#ifndef REDUCER_SERVER_GRPC_COLLECTIVES_REACTOR_H_
#define REDUCER_SERVER_GRPC_COLLECTIVES_REACTOR_H_

#include <cstdint>
#include <functional>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "google/protobuf/arena.h"
#include "grpcpp/grpcpp.h"
#include "proto/reducer/v1/reducer.pb.h"
#include "server/engine/collective.h"
#include "server/grpc/collective_reactor.h"
#include "server/grpc/held_reads.h"
#include "server/grpc/idle_streams.h"
#include "server/grpc/write_queue.h"
#include "server/metrics/grpc_server_metrics.h"

namespace reducer {

class CollectivesReactor final
    : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>,
      public HeldReads::Holder,
      public IdleStreams::Stream,
      public std::enable_shared_from_this<CollectivesReactor> {
 public:
  // Messages up to this size may hold the next read; a larger one moves
  // enough bytes that a window update of its own costs nothing.
  static constexpr size_t kHoldingMessageBytes = 64 << 10;
  // What a queued answer costs besides its bytes (its ByteBuffer, slices
  // and queue entry, rounded up), counted towards `max_unread_bytes` so
  // that many small answers are bounded too.
  static constexpr size_t kQueuedMessageOverheadBytes = 256;

  // Starts reading. The returned pointer is what the service hands to gRPC.
  // `on_done` runs once the stream is over; `metrics` counts its messages.
  // Reads are held back with `held_reads` (which must outlive the stream);
  // without it the stream always reads on at once. While the answers not
  // yet written exceed `max_unread_bytes`, the stream reads nothing.
  static CollectivesReactor* Create(grpc::CallbackServerContext* context,
                                    std::function<void()> on_done,
                                    CollectiveReactor::AttachFn attach,
                                    CallMetrics metrics, HeldReads* held_reads,
                                    size_t max_unread_bytes);

  // HeldReads::Holder: posts the held read, if one is held.
  void ReleaseHeldRead() override;

  // Ends the stream with `status` unless its first message has arrived:
  // ReducerService closes streams that stay silent past --header_timeout.
  void EndUnlessMessageArrived(const absl::Status& status);

  // IdleStreams::Stream: ends the stream with `status` if no call is in
  // flight, no answer is left to write, and nothing arrived or was written
  // since `cutoff`.
  void CloseIfIdleSince(absl::Time cutoff, const absl::Status& status) override;

  // grpc::ServerBidiReactor.
  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

  CollectivesReactor(grpc::CallbackServerContext* context,
                     std::function<void()> on_done,
                     CollectiveReactor::AttachFn attach, HeldReads* held_reads,
                     size_t max_unread_bytes);  // Create()

 private:
  class StreamAttempt;
  friend class StreamAttempt;

  // A call whose last message was not written yet.
  struct LiveCall {
    std::shared_ptr<StreamAttempt> channel;
    std::shared_ptr<AttachedCollective> collective;  // null until attached
    int rank = -1;
    uint64_t serial = 0;  // tells apart calls that reuse an id
    bool ended = false;   // its last message is queued
  };
  struct Outgoing {
    grpc::ByteBuffer message;
    uint64_t call_id = 0;
    uint64_t serial = 0;
    // The call's last message; else its Collective hears when it is written.
    bool ends_call = false;
    // Its rank's reservation (ResultMessage::hold), kept until written.
    std::shared_ptr<const void> hold;
  };

  void HandleMessage();
  // The next read, posted now or held (see the class comment); called
  // once a message of `message_bytes` was handled.
  void ReadOnLocked(size_t message_bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Posts the next read, unless the unread answers are over the bound
  // (then OnWriteDone posts it once they are not).
  void PostReadLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The answers not yet written exceed max_unread_bytes_.
  bool UnreadOverBoundLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Queues `message` for `call_id`, keeping `hold` until it is written;
  // with `ends_call`, the call is over and later messages for it are
  // dropped. Ignored for calls already over.
  void Enqueue(uint64_t call_id, grpc::ByteBuffer message, bool ends_call,
               std::shared_ptr<const void> hold);
  // Ends `call_id` with `status` (a status-only message).
  void EndCall(uint64_t call_id, const absl::Status& status);
  // Writes outgoing_.front() (TakeNext said so).
  void WriteFrontLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void MaybeFinishLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FinishLocked(const absl::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Finish(status), counted.
  void FinishCounted(const grpc::Status& status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Every live call counts as cancelled; called once the stream is broken.
  void CancelLiveCalls();

  // Constant after construction.
  grpc::CallbackServerContext* const context_;  // owned by gRPC
  const std::function<void()> on_done_;
  const CollectiveReactor::AttachFn attach_;
  HeldReads* const held_reads_;  // not owned; may be null
  const size_t max_unread_bytes_;
  CallMetrics metrics_;  // set once, in Create, before the call starts

  // Only touched by the reading side: one read is outstanding at a time.
  grpc::ByteBuffer incoming_;
  // Where each request's fields are parsed: an arena reset per message and
  // backed by a block kept for the stream's life, so that a fused call's
  // specs (one per tensor) cost no malloc or free each. Nothing keeps a
  // reference into it past HandleMessage().
  std::unique_ptr<char[]> arena_block_;
  google::protobuf::Arena arena_;

  // Set once, by the reading side under mu_, when the first message
  // arrives; the reading side may read it without the lock.
  bool message_arrived_ = false;

  absl::Mutex mu_;
  std::shared_ptr<CollectivesReactor> self_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, LiveCall> live_ ABSL_GUARDED_BY(mu_);
  uint64_t last_serial_ ABSL_GUARDED_BY(mu_) = 0;
  WriteQueue<Outgoing> outgoing_ ABSL_GUARDED_BY(mu_);
  bool input_ended_ ABSL_GUARDED_BY(mu_) = false;  // client closed its side
  bool read_held_ ABSL_GUARDED_BY(mu_) = false;  // the next read waits
  // The next read waits for the unread answers to come back within the
  // bound (OnWriteDone posts it).
  bool read_blocked_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  // When a message last arrived or an answer was last written (or the
  // stream opened).
  absl::Time last_activity_ ABSL_GUARDED_BY(mu_) = Clock::Steady().Now();
  // Since when the answer at the front of `outgoing_` has waited for its
  // client to take it: set when it became the front (queued into an empty
  // queue, or the one before it written). Meaningless while none waits.
  absl::Time front_waiting_since_ ABSL_GUARDED_BY(mu_);
};

}  // namespace reducer

#endif  // REDUCER_SERVER_GRPC_COLLECTIVES_REACTOR_H_
