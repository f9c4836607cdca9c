#include "server/grpc/collective_reactor.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "proto/reducer/v1/collective_codec.h"
#include "proto/reducer/v1/status_conversion.h"
#include "server/grpc/wire_bytes.h"
#include "server/grpc/write_queue.h"

namespace reducer {

CollectiveReactor::CollectiveReactor(std::function<void()> on_done, AttachFn attach)
    : on_done_(std::move(on_done)), attach_(std::move(attach)) {}

CollectiveReactor* CollectiveReactor::CreateFailed(const absl::Status& status,
                                     std::function<void()> on_done,
                                     CallMetrics metrics) {
  auto stream = std::make_shared<CollectiveReactor>(std::move(on_done), nullptr);
  CollectiveReactor* raw = stream.get();
  raw->metrics_ = metrics;
  absl::MutexLock lock(&raw->mu_);
  raw->self_ = std::move(stream);
  raw->FinishLocked(status);
  return raw;
}

CollectiveReactor* CollectiveReactor::Create(grpc::CallbackServerContext* context,
                               std::function<void()> on_done, AttachFn attach,
                               CallMetrics metrics) {
  auto stream =
      std::make_shared<CollectiveReactor>(std::move(on_done), std::move(attach));
  CollectiveReactor* raw = stream.get();
  raw->context_ = context;
  raw->metrics_ = metrics;
  {
    absl::MutexLock lock(&raw->mu_);
    raw->self_ = std::move(stream);
  }
  raw->StartRead(&raw->incoming_);
  return raw;
}

void CollectiveReactor::OnReadDone(bool ok) {
  if (!ok) {
    // The client closed its side, or the call was cancelled (its process
    // died or its connection dropped): the latter is reported as such.
    if (collective_ != nullptr && context_->IsCancelled()) {
      collective_->OnRankCancelled(rank_, this);
    } else if (collective_ != nullptr) {
      collective_->OnInputEnd(rank_);
    } else {
      absl::MutexLock lock(&mu_);
      FinishLocked(absl::InvalidArgumentError(
          "Collective stream ended before its first message (the header)"));
    }
    return;
  }
  metrics_.Received();
  if (!message_arrived_) {
    absl::MutexLock lock(&mu_);
    message_arrived_ = true;
    last_activity_ = Clock::Steady().Now();
    if (finished_) return;  // closed as silent just before
  }
  HandleMessage();
}

void CollectiveReactor::CloseIfIdleSince(absl::Time cutoff,
                                         const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  if (finished_ || collective_ != nullptr || !outgoing_.idle() ||
      last_activity_ > cutoff) {
    return;
  }
  FinishLocked(status);
}

void CollectiveReactor::EndUnlessMessageArrived(const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  if (!message_arrived_) FinishLocked(status);
}

void CollectiveReactor::HandleMessage() {
  DecodedMessage<v1::CollectiveRequest> message;
  absl::Status decoded = DecodeMessage(&incoming_, &message);
  if (!decoded.ok()) {
    if (collective_ != nullptr) {
      collective_->Fail(absl::InvalidArgumentError(absl::StrCat(
          collective_->description(), ": rank ", rank_, ": ",
          decoded.message())));
    } else {
      absl::MutexLock lock(&mu_);
      FinishLocked(decoded);
    }
    return;
  }
  if (collective_ == nullptr) {
    if (!message.fields.has_header()) {
      absl::MutexLock lock(&mu_);
      FinishLocked(absl::InvalidArgumentError(
          "the first message of a Collective stream must carry `header`"));
      return;
    }
    rank_ = message.fields.header().rank();
    absl::StatusOr<std::shared_ptr<AttachedCollective>> attached =
        attach_(message.fields.header(), shared_from_this());
    if (!attached.ok()) {
      absl::MutexLock lock(&mu_);
      FinishLocked(attached.status());
      return;
    }
    if (message.fields.header().replay() || *attached == nullptr) {
      // Nothing to feed: the result was sent already (no collective: a
      // replay's kept result, a quorum follower note), or comes from the
      // resumed collective. Read on to see the call end.
      absl::MutexLock lock(&mu_);
      collective_ = *std::move(attached);
      if (!finished_) StartRead(&incoming_);
      return;
    }
    absl::MutexLock lock(&mu_);
    collective_ = *std::move(attached);
  } else if (message.fields.has_header()) {
    collective_->Fail(absl::InvalidArgumentError(absl::StrCat(
        collective_->description(), ": rank ", rank_,
        " sent a second header on the same stream")));
    return;
  }
  if (collective_->OnData(rank_, message.fields.offset(),
                          ToPayload(std::move(message.data)))) {
    ResumeReading();
  }
}

void CollectiveReactor::ResumeReading() {
  absl::MutexLock lock(&mu_);
  if (finished_) return;
  StartRead(&incoming_);
}

void CollectiveReactor::Send(ResultMessage message, bool last) {
  Outgoing out;
  out.message = EncodeResult(message);
  out.hold = std::move(message.hold);
  const size_t bytes = out.message.Length();
  absl::MutexLock lock(&mu_);
  if (finished_ || last_queued_) return;
  last_queued_ = last;
  if (outgoing_.Push(std::move(out), bytes)) WriteFrontLocked();
}

void CollectiveReactor::WriteFrontLocked() {
  if (last_queued_ && outgoing_.size() == 1) {
    finished_ = true;
    metrics_.Sent();
    metrics_.Handled(grpc::StatusCode::OK);
    StartWriteAndFinish(&outgoing_.front().message, grpc::WriteOptions(),
                        grpc::Status::OK);
  } else {
    metrics_.Sent();
    StartWrite(&outgoing_.front().message);
  }
}

void CollectiveReactor::FinishCounted(const grpc::Status& status) {
  metrics_.Handled(status.error_code());
  Finish(status);
}

void CollectiveReactor::OnWriteDone(bool ok) {
  std::shared_ptr<AttachedCollective> collective;
  Outgoing written;  // its hold goes after the lock
  {
    absl::MutexLock lock(&mu_);
    written = outgoing_.PopWritten();
    if (!ok) {
      // The client went away; the Collective learns it through OnCancel.
      outgoing_.Clear();
    }
    if (!finished_ && outgoing_.TakeNext()) {
      WriteFrontLocked();
    } else if (finish_when_sent_ && !finished_ && outgoing_.empty()) {
      finished_ = true;
      FinishCounted(grpc::Status::OK);
    }
    collective = collective_;
  }
  if (collective != nullptr) collective->OnWriteDone(rank_);
}

void CollectiveReactor::FinishWhenSent() {
  absl::MutexLock lock(&mu_);
  if (finished_ || last_queued_) return;
  if (!outgoing_.idle()) {
    finish_when_sent_ = true;
    return;
  }
  finished_ = true;
  FinishCounted(grpc::Status::OK);
}

void CollectiveReactor::Fail(const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  FinishLocked(status);
}

void CollectiveReactor::FinishLocked(const absl::Status& status) {
  if (finished_) return;
  finished_ = true;
  outgoing_.DropUnwritten();
  FinishCounted(ToGrpcStatus(status));
}

void CollectiveReactor::OnCancel() {
  std::shared_ptr<AttachedCollective> collective;
  {
    absl::MutexLock lock(&mu_);
    collective = collective_;
  }
  if (collective != nullptr) collective->OnRankCancelled(rank_, this);
  absl::MutexLock lock(&mu_);
  FinishLocked(absl::CancelledError("call cancelled"));
}

void CollectiveReactor::OnDone() {
  // Destroyed in reverse order, after the lock is released: first our
  // reference to the Collective (the Collective holds this stream and this
  // stream the Collective, so one side must let go), then our own, which
  // may delete this.
  on_done_();
  std::shared_ptr<CollectiveReactor> self;
  std::shared_ptr<AttachedCollective> collective;
  absl::MutexLock lock(&mu_);
  collective = std::move(collective_);
  self = std::move(self_);
  // The last message went with the call's end (StartWriteAndFinish, which
  // has no OnWriteDone): what it held goes now.
  outgoing_.Clear();
}

}  // namespace reducer
