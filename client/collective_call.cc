#include "client/collective_call.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "proto/reducer/v1/collective_codec.h"
#include "proto/reducer/v1/status_conversion.h"
#include "proto/reducer/v1/wire_conversion.h"

namespace reducer {
namespace {

constexpr char kCollectiveMethod[] = "/reducer.v1.Reducer/Collective";

// Padding between packed tensors is at most kPayloadAlignment - 1 bytes.
constexpr char kZeros[kPayloadAlignment] = {};

absl::StatusOr<PayloadLayout> LayoutOf(
    const google::protobuf::RepeatedPtrField<v1::TensorSpec>& specs,
    bool with_op, absl::string_view field, std::vector<TensorSpec>* out) {
  for (int i = 0; i < specs.size(); ++i) {
    absl::StatusOr<TensorSpec> spec = TensorSpecFromWire(
        specs.Get(i), with_op, absl::StrCat(field, "[", i, "]"));
    if (!spec.ok()) return spec.status();
    out->push_back(*std::move(spec));
  }
  return ComputePayloadLayout(*out);
}

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
      buffers_(std::move(buffers)) {
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
    size_t pos = begin;
    for (size_t i = 0; i < layout_.offsets.size() && pos < end; ++i) {
      const size_t t_begin = layout_.offsets[i];
      const size_t t_end = t_begin + layout_.sizes[i];
      if (t_end <= pos) continue;
      if (pos < t_begin) {  // padding before tensor i
        const size_t pad = std::min(t_begin, end) - pos;
        data.emplace_back(kZeros, pad, grpc::Slice::STATIC_SLICE);
        pos += pad;
        if (pos == end) break;
      }
      const size_t take = std::min(t_end, end) - pos;
      data.emplace_back(static_cast<const char*>(inputs_[i]) + (pos - t_begin),
                        take, grpc::Slice::STATIC_SLICE);
      pos += take;
    }
  }
  return EncodeMessage(fields, data);
}

absl::StatusOr<std::vector<Tensor>> CollectiveCall::Run() {
  std::vector<TensorSpec> specs;
  absl::StatusOr<PayloadLayout> layout =
      LayoutOf(header_.tensors(), /*with_op=*/false, "tensors", &specs);
  if (!layout.ok()) return layout.status();
  layout_ = *std::move(layout);

  stub_->PrepareBidiStreamingCall(&context_, kCollectiveMethod,
                                  grpc::StubOptions(), this);
  StartRead(&incoming_);
  WriteNext();
  StartCall();
  done_.WaitForNotification();

  absl::MutexLock lock(&mu_);
  if (!error_.ok()) return error_;
  if (!final_status_.ok()) return FromGrpcStatus(final_status_);
  if (!have_result_header_) {
    return absl::InternalError(
        "reducerd ended the collective with OK but sent no result");
  }
  if (result_received_ != result_layout_.total_bytes) {
    return absl::DataLossError(absl::StrCat(
        "reducerd ended the collective after ", result_received_, " of ",
        result_layout_.total_bytes, " result bytes"));
  }
  return std::move(result_);
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
  absl::Status handled = HandleResponse();
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

absl::Status CollectiveCall::HandleResponse() {
  DecodedMessage<v1::CollectiveResponse> message;
  absl::Status decoded = DecodeMessage(&incoming_, &message);
  if (!decoded.ok()) {
    return absl::InternalError(
        absl::StrCat("reducerd's answer did not parse: ", decoded.message()));
  }
  if (!have_result_header_) {
    std::vector<TensorSpec> specs;
    absl::StatusOr<PayloadLayout> layout = LayoutOf(
        message.fields.result(), /*with_op=*/false, "result", &specs);
    if (!layout.ok()) {
      return absl::InternalError(absl::StrCat(
          "reducerd sent a result header that does not parse: ",
          layout.status().message()));
    }
    result_layout_ = *std::move(layout);
    // Every byte is overwritten before Run() returns the tensors (it
    // checks that the whole result arrived), so skip zeroing them.
    for (TensorSpec& spec : specs) {
      result_.push_back(
          Tensor::Uninitialized(spec.dtype, std::move(spec.shape), buffers_));
    }
    have_result_header_ = true;
  }
  const size_t begin = message.fields.offset();
  const size_t end = begin + message.data.size();
  if (end < begin || end > result_layout_.total_bytes) {
    return absl::DataLossError(absl::StrCat(
        "reducerd sent result bytes [", begin, ", ", end,
        ") outside the result's ", result_layout_.total_bytes, " bytes"));
  }
  for (size_t i = 0; i < result_.size(); ++i) {
    const size_t t_begin = result_layout_.offsets[i];
    const size_t t_end = t_begin + result_layout_.sizes[i];
    const size_t lo = std::max(begin, t_begin);
    const size_t hi = std::min(end, t_end);
    if (lo >= hi) continue;
    message.data.CopyTo(lo - begin, hi - lo,
                        static_cast<char*>(result_[i].mutable_data()) +
                            (lo - t_begin));
  }
  result_received_ += message.data.size();
  return absl::OkStatus();
}

void CollectiveCall::OnDone(const grpc::Status& status) {
  final_status_ = status;
  done_.Notify();
}

void CollectiveCall::SetError(absl::Status status) {
  if (error_.ok()) error_ = std::move(status);
}

}  // namespace reducer
