#include "client/transport/grpc/async_stream.h"

#include <utility>

namespace reducer {

AsyncStream::AsyncStream(CompletionDriver* driver, absl::Mutex* mu,
                         Observer* observer)
    : driver_(driver), mu_(mu), observer_(observer) {}

void AsyncStream::Tag::OnComplete(bool ok) {
  // Copied out: OnDone may destroy the stream, and with it this tag.
  absl::Mutex* const mu = stream->mu_;
  Observer* const observer = stream->observer_;
  absl::MutexLock lock(mu);
  if (stream->HandleEvent(op, ok)) observer->OnDone();
}

void AsyncStream::Start(grpc::GenericStub* stub, const char* method) {
  mu_->AssertHeld();
  call_ = stub->PrepareCall(&context_, method, driver_->cq());
  call_->StartCall(&start_tag_);
  write_busy_ = true;
  operations_ = 1;
  if (!reads_on_demand_) ReadIfIdle();
}

void AsyncStream::ReadIfIdle() {
  mu_->AssertHeld();
  if (call_ == nullptr || reading_ || reads_ended_) return;
  reading_ = true;
  ++operations_;
  call_->Read(&incoming_, &read_tag_);
}

void AsyncStream::Cancel() {
  mu_->AssertHeld();
  context_.TryCancel();
  ReadIfIdle();
}

bool AsyncStream::Write(uint64_t id, grpc::ByteBuffer message, bool last) {
  mu_->AssertHeld();
  if (writes_over_) return false;
  outgoing_.push_back(Outgoing{id, std::move(message), last});
  if (!write_busy_) WriteFront();
  return true;
}

AsyncStream::Unqueued AsyncStream::Unqueue(uint64_t id) {
  mu_->AssertHeld();
  for (auto it = outgoing_.begin(); it != outgoing_.end(); ++it) {
    if (it->id != id) continue;
    if (it == outgoing_.begin() && front_in_flight_) return Unqueued::kInFlight;
    outgoing_.erase(it);
    return Unqueued::kRemoved;
  }
  return Unqueued::kAbsent;
}

bool AsyncStream::started() const {
  mu_->AssertHeld();
  return call_ != nullptr;
}

bool AsyncStream::done() const {
  mu_->AssertHeld();
  return call_ != nullptr && finished_ && operations_ == 0;
}

const grpc::Status& AsyncStream::status() const {
  mu_->AssertHeld();
  return status_;
}

void AsyncStream::WriteFront() {
  mu_->AssertHeld();
  Outgoing& front = outgoing_.front();
  write_busy_ = true;
  front_in_flight_ = true;
  ++operations_;
  if (front.last) {
    writes_over_ = true;
    call_->WriteLast(front.message, grpc::WriteOptions(), &write_tag_);
  } else {
    call_->Write(front.message, &write_tag_);
  }
}

void AsyncStream::WriteSlotFree(bool ok) {
  mu_->AssertHeld();
  write_busy_ = false;
  if (!ok) {
    writes_over_ = true;
    ReadIfIdle();  // the stream is over: its read brings the status
  }
  if (writes_over_) {
    DropQueue();
  } else if (!outgoing_.empty()) {
    WriteFront();
  }
}

void AsyncStream::DropQueue() {
  mu_->AssertHeld();
  // Taken out first: OnWritten may queue (refused now) or unqueue.
  std::deque<Outgoing> dropped;
  dropped.swap(outgoing_);
  for (const Outgoing& out : dropped) observer_->OnWritten(out.id, false);
}

bool AsyncStream::HandleEvent(Op op, bool ok) {
  mu_->AssertHeld();
  --operations_;
  switch (op) {
    case Op::kStart:
      observer_->OnStarted(ok);
      WriteSlotFree(ok);
      break;
    case Op::kWrite: {
      front_in_flight_ = false;
      const uint64_t id = outgoing_.front().id;
      outgoing_.pop_front();
      // The slot is free before the owner hears of it, so that a message
      // it queues in OnWritten goes out at once.
      write_busy_ = false;
      if (!ok) writes_over_ = true;
      observer_->OnWritten(id, ok);
      if (!write_busy_) WriteSlotFree(ok);
      break;
    }
    case Op::kRead:
      reading_ = false;
      if (ok) {
        observer_->OnRead(&incoming_);
        if (!reads_on_demand_ || observer_->WantsMoreReads()) ReadIfIdle();
      } else {
        reads_ended_ = true;
        observer_->OnReadsEnded();
        ++operations_;
        call_->Finish(&status_, &finish_tag_);
      }
      break;
    case Op::kFinish:
      finished_ = true;
      observer_->OnFinished(status_);
      // Nothing written after the end; a write still in flight ends too.
      writes_over_ = true;
      if (!write_busy_) DropQueue();
      break;
  }
  return finished_ && operations_ == 0;
}

}  // namespace reducer
