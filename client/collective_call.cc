#include "client/collective_call.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "proto/reducer/v1/collective_codec.h"
#include "proto/reducer/v1/status_conversion.h"

namespace reducer {
namespace {

constexpr char kCollectiveMethod[] = "/reducer.v1.Reducer/Collective";

}  // namespace

CollectiveCall::CollectiveCall(grpc::GenericStub* stub, CompletionDriver* driver,
                               const Contribution* contribution,
                               size_t chunk_bytes,
                               std::shared_ptr<BufferCache> buffers)
    : stub_(stub),
      driver_(driver),
      contribution_(contribution),
      chunk_bytes_(chunk_bytes),
      result_(std::move(buffers)) {
  context_.set_deadline(absl::ToChronoTime(contribution->deadline));
}

CollectiveCall::~CollectiveCall() {
  {
    absl::MutexLock lock(&mu_);
    if (!started_ || OverLocked()) return;
  }
  context_.TryCancel();
  driver_->DriveUntil(
      [this] {
        absl::MutexLock lock(&mu_);
        return OverLocked();
      },
      absl::InfiniteFuture());
}

void CollectiveCall::Tag::OnComplete(bool ok) {
  absl::MutexLock lock(&call->mu_);
  call->HandleEventLocked(op, ok);
}

size_t CollectiveCall::NumMessages() const {
  const size_t payload = contribution_->payload_bytes();
  return std::max<size_t>(1, (payload + chunk_bytes_ - 1) / chunk_bytes_);
}

grpc::ByteBuffer CollectiveCall::BuildMessage(size_t index) const {
  v1::CollectiveRequest fields;
  if (index == 0) *fields.mutable_header() = contribution_->header;
  std::vector<grpc::Slice> data;
  if (contribution_->send_payload) {
    const size_t begin = index * chunk_bytes_;
    const size_t end =
        std::min(begin + chunk_bytes_, contribution_->payload_bytes());
    fields.set_offset(begin);
    data = PayloadSlices(contribution_->layout, contribution_->inputs, begin, end);
  }
  return EncodeMessage(fields, data);
}

void CollectiveCall::Start() {
  absl::MutexLock lock(&mu_);
  started_ = true;
  stream_ = stub_->PrepareCall(&context_, kCollectiveMethod, driver_->cq());
  stream_->StartCall(&start_tag_);
  write_busy_ = true;
  stream_->Read(&incoming_, &read_tag_);
  operations_ = 2;
}

void CollectiveCall::WriteNextLocked() {
  if (write_busy_ || finished_ || next_message_ == NumMessages()) return;
  outgoing_ = BuildMessage(next_message_);
  write_busy_ = true;
  ++operations_;
  if (++next_message_ == NumMessages()) {
    stream_->WriteLast(outgoing_, grpc::WriteOptions(), &write_tag_);
  } else {
    stream_->Write(outgoing_, &write_tag_);
  }
}

void CollectiveCall::HandleEventLocked(Op op, bool ok) {
  --operations_;
  switch (op) {
    case Op::kStart:
    case Op::kWrite:
      write_busy_ = false;
      // A failed start or write means the call is over; the pending read
      // fails too and Finish brings the status.
      if (ok) WriteNextLocked();
      break;
    case Op::kRead: {
      if (!ok) {
        ++operations_;
        stream_->Finish(&final_status_, &finish_tag_);
        break;
      }
      DecodedMessage<v1::CollectiveResponse> message;
      absl::Status handled = DecodeMessage(&incoming_, &message);
      if (!handled.ok()) {
        handled = absl::InternalError(absl::StrCat(
            "reducerd's answer did not parse: ", handled.message()));
      } else {
        handled = result_.Add(message.fields, message.data);
      }
      if (!handled.ok()) {
        SetErrorLocked(std::move(handled));
        context_.TryCancel();
      }
      ++operations_;
      stream_->Read(&incoming_, &read_tag_);
      break;
    }
    case Op::kFinish:
      finished_ = true;
      break;
  }
}

absl::StatusOr<std::vector<Tensor>> CollectiveCall::Wait() {
  {
    absl::MutexLock lock(&mu_);
    if (!started_) return absl::InternalError("collective call never started");
  }
  // The context's deadline ends the call, so this returns.
  driver_->DriveUntil(
      [this] {
        absl::MutexLock lock(&mu_);
        return OverLocked();
      },
      absl::InfiniteFuture());
  absl::MutexLock lock(&mu_);
  if (!error_.ok()) return error_;
  if (!final_status_.ok()) return FromGrpcStatus(final_status_);
  return result_.Finish();
}

bool CollectiveCall::Ready() {
  driver_->PollReady();
  absl::MutexLock lock(&mu_);
  return !started_ || OverLocked();
}

bool CollectiveCall::received_any() const {
  absl::MutexLock lock(&mu_);
  return result_.started();
}

void CollectiveCall::SetErrorLocked(absl::Status status) {
  if (error_.ok()) error_ = std::move(status);
}

}  // namespace reducer
