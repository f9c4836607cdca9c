// CompletionDriver: the one gRPC completion queue of a client, and who polls
// it. Every asynchronous operation of the client (the session stream, the
// shared Collectives stream, per-collective streams) completes here.
//
// Polling is what reads the sockets, so whichever thread polls handles every
// answer. A thread waiting for a collective polls itself (DriveUntil), so the
// answer is read by the thread that wants it, with no hand-off between
// threads; on this kind of machine each hand-off (a futex wake and a context
// switch) costs more than the rest of a small collective. When no caller
// waits, a background thread polls instead, so that keepalive pings are
// answered and session events arrive while the application computes. It
// starts only after callers have left the queue alone for kIdleGrace (so a
// loop of collectives never wakes it), and steps aside, kicked by an alarm,
// as soon as a caller wants to poll. Only one thread polls at a time.
//
// Operations put on cq() must use a Handler* as their tag. Handlers run on
// the polling thread, one at a time, with no lock of the driver held; they
// may start further operations on cq().
//
// Thread-safe.
#ifndef REDUCER_CLIENT_TRANSPORT_GRPC_COMPLETION_DRIVER_H_
#define REDUCER_CLIENT_TRANSPORT_GRPC_COMPLETION_DRIVER_H_

#include <functional>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/internal/progress_engine.h"
#include "grpcpp/alarm.h"
#include "grpcpp/grpcpp.h"

namespace reducer {

class CompletionDriver final : public ProgressEngine {
 public:
  class Handler {
   public:
    virtual ~Handler() = default;
    // The operation tagged with this handler completed (`ok` as gRPC says).
    virtual void OnComplete(bool ok) = 0;
  };

  CompletionDriver();
  // Stops the background thread, then shuts the queue down and drains it
  // (handlers of operations still pending are not called). Every operation
  // must have completed or been cancelled by then.
  ~CompletionDriver();
  CompletionDriver(const CompletionDriver&) = delete;
  CompletionDriver& operator=(const CompletionDriver&) = delete;

  grpc::CompletionQueue* cq() { return &cq_; }

  // Polls on the calling thread (or waits while another caller polls) until
  // `done()` is true or `deadline` passes. `done` is called with the
  // driver's lock held: it may take locks that handlers take, and must not
  // call into the driver. Returns done().
  bool DriveUntil(const std::function<bool()>& done,
                  absl::Time deadline) override;

  // Makes every thread inside DriveUntil evaluate its condition again now,
  // for outcomes that arrive other than through the queue (the same-host
  // path's). Cheap when nobody is inside DriveUntil.
  void Wake() override;

  // Runs the handlers of whatever has completed already, without waiting,
  // unless another thread polls right now (which runs them itself).
  void PollReady() override;

 private:
  // The alarm that makes the polling thread return from its poll (the
  // background thread then stops polling; a caller looks at its condition).
  class Kick final : public Handler {
   public:
    explicit Kick(CompletionDriver* driver) : driver_(driver) {}
    void OnComplete(bool ok) override;

   private:
    CompletionDriver* const driver_;
  };

  // Polls once (until `deadline`) and runs the handler of what came out.
  // Called by the one thread that holds driving_, without mu_.
  void PollOnce(absl::Time deadline);
  void RunBackground();
  void KickBackgroundLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  grpc::CompletionQueue cq_;
  Kick kick_{this};
  grpc::Alarm alarm_;  // fires kick_; set only while !kick_pending_

  absl::Mutex mu_;
  absl::CondVar callers_cv_;     // a poll ended, or the poller left
  absl::CondVar background_cv_;  // stopping
  bool driving_ ABSL_GUARDED_BY(mu_) = false;  // a thread polls cq_
  bool background_driving_ ABSL_GUARDED_BY(mu_) = false;
  int callers_ ABSL_GUARDED_BY(mu_) = 0;  // threads inside DriveUntil
  absl::Time last_caller_left_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  bool kick_pending_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread background_;  // last: starts once the fields above exist
};

}  // namespace reducer

#endif  // REDUCER_CLIENT_TRANSPORT_GRPC_COMPLETION_DRIVER_H_
