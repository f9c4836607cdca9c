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

CollectiveCall::CollectiveCall(grpc::GenericStub* stub,
                               v1::CollectiveHeader header,
                               std::vector<const void*> inputs,
                               bool send_payload, absl::Time deadline,
                               size_t chunk_bytes,
                               std::shared_ptr<BufferCache> buffers)
    : stub_(stub),
      header_(std::move(header)),
      inputs_(std::move(inputs)),
      send_payload_(send_payload),
      chunk_bytes_(chunk_bytes),
      buffers_(std::move(buffers)),
      result_(buffers_) {
  context_.set_deadline(absl::ToChronoTime(deadline));
}

size_t CollectiveCall::NumMessages() const {
  const size_t payload = send_payload_ ? layout_.total_bytes : 0;
  return std::max<size_t>(1, (payload + chunk_bytes_ - 1) / chunk_bytes_);
}

grpc::ByteBuffer CollectiveCall::BuildMessage(size_t index) const {
  v1::CollectiveRequest fields;
  if (index == 0) *fields.mutable_header() = header_;
  std::vector<grpc::Slice> data;
  if (send_payload_) {
    const size_t begin = index * chunk_bytes_;
    const size_t end = std::min(begin + chunk_bytes_, layout_.total_bytes);
    fields.set_offset(begin);
    data = PayloadSlices(layout_, inputs_, begin, end);
  }
  return EncodeMessage(fields, data);
}

absl::Status CollectiveCall::Start() {
  std::vector<TensorSpec> specs;
  absl::StatusOr<PayloadLayout> layout =
      LayoutOfSpecs(header_.tensors(), "tensors", &specs);
  if (!layout.ok()) {
    absl::MutexLock lock(&mu_);
    SetError(layout.status());
    return layout.status();
  }
  layout_ = *std::move(layout);
  started_ = true;
  stub_->PrepareBidiStreamingCall(&context_, kCollectiveMethod,
                                  grpc::StubOptions(), this);
  StartRead(&incoming_);
  WriteNext();
  StartCall();
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Tensor>> CollectiveCall::Wait() {
  if (started_) done_.WaitForNotification();
  absl::MutexLock lock(&mu_);
  if (!error_.ok()) return error_;
  if (!final_status_.ok()) return FromGrpcStatus(final_status_);
  return result_.Finish();
}

void CollectiveCall::WriteNext() {
  if (next_message_ == NumMessages()) return;
  outgoing_ = BuildMessage(next_message_);
  if (++next_message_ == NumMessages()) {
    StartWriteLast(&outgoing_, grpc::WriteOptions());
  } else {
    StartWrite(&outgoing_);
  }
}

void CollectiveCall::OnWriteDone(bool ok) {
  // A failed write means the call is over; OnDone brings the status.
  if (ok) WriteNext();
}

void CollectiveCall::OnReadDone(bool ok) {
  if (!ok) return;  // the server finished; OnDone follows
  DecodedMessage<v1::CollectiveResponse> message;
  absl::Status handled = DecodeMessage(&incoming_, &message);
  if (!handled.ok()) {
    handled = absl::InternalError(
        absl::StrCat("reducerd's answer did not parse: ", handled.message()));
  } else {
    handled = result_.Add(message.fields, message.data);
  }
  if (!handled.ok()) {
    {
      absl::MutexLock lock(&mu_);
      SetError(std::move(handled));
    }
    context_.TryCancel();
    return;
  }
  StartRead(&incoming_);
}

void CollectiveCall::OnDone(const grpc::Status& status) {
  final_status_ = status;
  done_.Notify();
}

void CollectiveCall::SetError(absl::Status status) {
  if (error_.ok()) error_ = std::move(status);
}

}  // namespace reducer
