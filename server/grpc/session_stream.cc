#include "server/grpc/session_stream.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "proto/reducer/v1/status_conversion.h"

namespace reducer {

SessionStream::SessionStream(JobDoor* door, std::string job,
                             std::string session_id)
    : door_(door), job_(std::move(job)), session_id_(std::move(session_id)) {}

SessionStream* SessionStream::Create(JobDoor* door,
                                     const v1::JoinRequest& request,
                                     const PresentedToken& token,
                                     CallMetrics metrics) {
  auto stream = std::make_shared<SessionStream>(door, request.job(),
                                                request.session_id());
  SessionStream* raw = stream.get();
  raw->metrics_ = metrics;
  raw->metrics_.Received();
  {
    absl::MutexLock lock(&raw->mu_);
    raw->self_ = stream;
    // Set before joining so that a cancellation racing with Join still
    // leaves the job (leaving a job one never joined is a no-op).
    raw->joined_ = true;
  }
  absl::Status joined = door->Join(request, token, stream);
  absl::MutexLock lock(&raw->mu_);
  if (!joined.ok() && !raw->finished_) {
    raw->finished_ = true;
    raw->FinishCounted(ToGrpcStatus(joined));
  }
  return raw;
}

void SessionStream::SendEvent(const v1::JoinEvent& event) {
  absl::MutexLock lock(&mu_);
  if (finished_) return;
  if (outgoing_.Push(event)) {
    metrics_.Sent();
    StartWrite(&outgoing_.front());
  }
}

void SessionStream::OnWriteDone(bool ok) {
  absl::MutexLock lock(&mu_);
  outgoing_.PopWritten();
  if (!ok || finished_) return;  // OnCancel follows a failed write
  if (outgoing_.TakeNext()) {
    metrics_.Sent();
    StartWrite(&outgoing_.front());
  }
}

void SessionStream::Fail(const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  if (finished_) return;
  finished_ = true;
  FinishCounted(ToGrpcStatus(status));
}

void SessionStream::FinishCounted(const grpc::Status& status) {
  metrics_.Handled(status.error_code());
  Finish(status);
}

void SessionStream::LeaveJob(const std::string& why, EpochEndReason reason) {
  {
    absl::MutexLock lock(&mu_);
    if (!joined_ || left_) return;
    left_ = true;
  }
  door_->Leave(job_, session_id_, this, why, reason);
}

void SessionStream::OnCancel() {
  LeaveJob(
      "its session stream was closed: the process exited, was killed, or "
      "lost its connection",
      EpochEndReason::kSessionCancelled);
  Fail(absl::CancelledError("session cancelled"));
}

void SessionStream::OnDone() {
  // A stream the server finished (shutdown) also leaves its job.
  LeaveJob("its session ended", EpochEndReason::kSessionEnded);
  std::shared_ptr<SessionStream> self;
  absl::MutexLock lock(&mu_);
  self = std::move(self_);
}

}  // namespace reducer
