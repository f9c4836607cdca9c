// SessionStream: the server side of one process's Join call, a gRPC
// callback server-streaming reactor. It joins the job on creation, writes
// JobReady / JobAborted events as the Job sends them, and tells the job
// (through the JobDoor) the rank is gone when the stream ends (the process
// exited or was killed, its connection dropped, or keepalive pings went
// unanswered). It ends its session as the session's owner (this stream):
// a stream whose Join was refused, or whose session a retried Join took
// over, ends nothing.
//
// Ownership: owns itself through a shared_ptr dropped in OnDone(); the Job
// holds another. Thread-safe.
#ifndef REDUCER_SERVER_GRPC_SESSION_STREAM_H_
#define REDUCER_SERVER_GRPC_SESSION_STREAM_H_

#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/grpcpp.h"
#include "proto/reducer/v1/reducer.pb.h"
#include "server/grpc/write_queue.h"
#include "server/jobs/job.h"
#include "server/jobs/job_door.h"
#include "server/metrics/grpc_server_metrics.h"

namespace reducer {

class SessionStream final : public grpc::ServerWriteReactor<v1::JoinEvent>,
                            public SessionChannel,
                            public std::enable_shared_from_this<SessionStream> {
 public:
  // Joins `request`'s job through `door` with `token`; the stream ends at
  // once with the error if the Join is refused. `door` must outlive the
  // stream; `metrics` counts its messages (the request was received).
  static SessionStream* Create(JobDoor* door, const v1::JoinRequest& request,
                               const PresentedToken& token,
                               CallMetrics metrics);

  // SessionChannel.
  void SendEvent(const v1::JoinEvent& event) override;
  void Fail(const absl::Status& status) override;

  // grpc::ServerWriteReactor.
  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

  SessionStream(JobDoor* door, std::string job,
                std::string session_id);  // Create()

 private:
  void LeaveJob(const std::string& why, EpochEndReason reason);
  // Finish(status), counted.
  void FinishCounted(const grpc::Status& status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Constant after construction.
  JobDoor* const door_;  // not owned
  // Of its JoinRequest, what leaving needs (the shard list is not kept).
  const std::string job_;
  const std::string session_id_;
  CallMetrics metrics_;  // set once, in Create, before the call starts

  absl::Mutex mu_;
  std::shared_ptr<SessionStream> self_ ABSL_GUARDED_BY(mu_);
  WriteQueue<v1::JoinEvent> outgoing_ ABSL_GUARDED_BY(mu_);
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool joined_ ABSL_GUARDED_BY(mu_) = false;
  bool left_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace reducer

#endif  // REDUCER_SERVER_GRPC_SESSION_STREAM_H_
