// CollectiveReactor: the server side of one rank's Collective call, a gRPC callback
// bidi reactor over raw ByteBuffers (see proto/reducer/v1/collective_codec.h).
//
// It reads the first message, hands its header to the JobDoor's AttachFn (which
// finds or creates the Collective), then feeds payload chunks to the Collective and
// writes what the Collective sends, one write at a time, in order. Each
// message keeps its hold on the memory budget (ResultMessage::hold) until
// written; the Collective's window bounds how many wait (a rank's reading
// pauses while `window` of its messages are queued).
//
// Idle: until its first message arrives, and once a call that attached no
// collective (a replay answered at once) waits for the client to close,
// the stream is idle; IdleStreams closes it once that lasted
// --stream_idle_timeout. While its collective runs it never is.
//
// Ownership: created by ReducerService::Collective with Create(); it owns
// itself through a shared_ptr that OnDone() drops, and the Collective holds
// another, so it lives until both are done with it. Thread-safe.
#ifndef REDUCER_SERVER_GRPC_COLLECTIVE_REACTOR_H_
#define REDUCER_SERVER_GRPC_COLLECTIVE_REACTOR_H_

#include <functional>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/grpcpp.h"
#include "proto/reducer/v1/reducer.pb.h"
#include "server/engine/collective.h"
#include "server/engine/rank_channel.h"
#include "server/grpc/idle_streams.h"
#include "server/grpc/write_queue.h"
#include "server/jobs/job_door.h"
#include "server/metrics/grpc_server_metrics.h"

namespace reducer {

class CollectiveReactor final
    : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>,
      public RankChannel,
      public IdleStreams::Stream,
      public std::enable_shared_from_this<CollectiveReactor> {
 public:
  using AttachFn = JobDoor::AttachFn;

  // Starts reading. The returned pointer is what the service hands to gRPC.
  // `on_done` runs once the call is over; `metrics` counts its messages.
  static CollectiveReactor* Create(grpc::CallbackServerContext* context,
                            std::function<void()> on_done, AttachFn attach,
                            CallMetrics metrics);
  // A stream that ends at once with `status`.
  static CollectiveReactor* CreateFailed(const absl::Status& status,
                                  std::function<void()> on_done,
                                  CallMetrics metrics);

  // Ends the stream with `status` unless its first message has arrived:
  // ReducerService closes streams that stay silent past --header_timeout.
  void EndUnlessMessageArrived(const absl::Status& status);

  // IdleStreams::Stream: ends the stream with `status` if no collective
  // runs on it, nothing is left to write, and no message arrived since
  // `cutoff`.
  void CloseIfIdleSince(absl::Time cutoff, const absl::Status& status) override;

  // RankChannel, called by the Collective.
  void Send(ResultMessage message, bool last) override;
  void FinishWhenSent() override;
  void Fail(const absl::Status& status) override;
  void ResumeReading() override;

  // grpc::ServerBidiReactor.
  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

  CollectiveReactor(std::function<void()> on_done, AttachFn attach);  // Create()

 private:
  void HandleMessage();
  void FinishLocked(const absl::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes outgoing_.front() (TakeNext said so), ending the stream with it
  // if it is the last message.
  void WriteFrontLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Finish(status), counted.
  void FinishCounted(const grpc::Status& status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Constant after construction.
  grpc::CallbackServerContext* context_ = nullptr;  // owned by gRPC; set once
  const std::function<void()> on_done_;
  const AttachFn attach_;
  CallMetrics metrics_;  // set once, in Create, before the call starts

  // Only touched by the reading side: one read is outstanding at a time.
  grpc::ByteBuffer incoming_;
  int rank_ = -1;
  // Set once, by the reading side under mu_, from the first message; the
  // reading side may read it without the lock, other threads take mu_.
  std::shared_ptr<AttachedCollective> collective_;
  // Set once, by the reading side under mu_, when the first message
  // arrives; the reading side may read it without the lock.
  bool message_arrived_ = false;

  absl::Mutex mu_;
  std::shared_ptr<CollectiveReactor> self_ ABSL_GUARDED_BY(mu_);  // dropped in OnDone
  // A message to write and what it holds until written.
  struct Outgoing {
    grpc::ByteBuffer message;
    std::shared_ptr<const void> hold;  // ResultMessage::hold
  };
  WriteQueue<Outgoing> outgoing_ ABSL_GUARDED_BY(mu_);
  bool last_queued_ ABSL_GUARDED_BY(mu_) = false;  // outgoing_.back() ends it
  bool finish_when_sent_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  // When the first message arrived, or the stream opened.
  absl::Time last_activity_ ABSL_GUARDED_BY(mu_) = Clock::Steady().Now();
};

}  // namespace reducer

#endif  // REDUCER_SERVER_GRPC_COLLECTIVE_REACTOR_H_
