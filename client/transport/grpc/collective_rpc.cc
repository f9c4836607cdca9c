#include "client/transport/grpc/collective_rpc.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "proto/reducer/v1/collective_codec.h"
#include "proto/reducer/v1/status_conversion.h"

namespace reducer {
namespace {

constexpr char kCollectiveMethod[] = "/reducer.v1.Reducer/Collective";

}  // namespace

CollectiveRpc::CollectiveRpc(grpc::GenericStub* stub, CompletionDriver* driver,
                             const Contribution* contribution,
                             size_t chunk_bytes,
                             std::shared_ptr<BufferCache> buffers)
    : stub_(stub),
      driver_(driver),
      contribution_(contribution),
      chunk_bytes_(chunk_bytes),
      result_(std::move(buffers), contribution->result_into) {
  stream_.context()->set_deadline(absl::ToChronoTime(contribution->deadline));
}

CollectiveRpc::~CollectiveRpc() {
  {
    absl::MutexLock lock(&mu_);
    if (!stream_.started() || OverLocked()) return;
    stream_.Cancel();
  }
  driver_->DriveUntil(
      [this] {
        absl::MutexLock lock(&mu_);
        return OverLocked();
      },
      absl::InfiniteFuture());
}

size_t CollectiveRpc::PayloadEnd(size_t index) const {
  if (!contribution_->send_payload) return 0;
  return std::min((index + 1) * chunk_bytes_, contribution_->payload_bytes());
}

size_t CollectiveRpc::NumMessages() const {
  const size_t payload = contribution_->payload_bytes();
  return std::max<size_t>(1, (payload + chunk_bytes_ - 1) / chunk_bytes_);
}

grpc::ByteBuffer CollectiveRpc::BuildMessage(size_t index) const {
  v1::CollectiveRequest fields;
  if (index == 0) *fields.mutable_header() = contribution_->header;
  std::vector<grpc::Slice> data;
  if (contribution_->send_payload) {
    const size_t begin = index * chunk_bytes_;
    fields.set_offset(begin);
    data = PayloadSlices(contribution_->layout, contribution_->inputs, begin,
                         PayloadEnd(index));
  }
  return EncodeMessage(fields, data);
}

void CollectiveRpc::Start() {
  // The first message's bytes, awaited before the stream opens: a call
  // whose inputs cannot be read sends nothing at all.
  absl::Status ready = contribution_->AwaitPayload(PayloadEnd(0));
  absl::MutexLock lock(&mu_);
  if (!ready.ok()) {
    SetErrorLocked(std::move(ready));
    return;
  }
  stream_.Start(stub_, kCollectiveMethod);
  WriteMessageLocked(0);
}

void CollectiveRpc::WriteMessageLocked(size_t index) {
  // Device staging copies chunks ahead of the stream, far faster than it
  // sends, so this rarely waits (and then for one chunk's copy), though on
  // the completion thread with mu_ held.
  absl::Status ready = contribution_->AwaitPayload(PayloadEnd(index));
  if (!ready.ok()) {
    SetErrorLocked(std::move(ready));
    stream_.Cancel();
    return;
  }
  stream_.Write(index, BuildMessage(index), index + 1 == NumMessages());
}

void CollectiveRpc::OnWritten(uint64_t index, bool ok) {
  mu_.AssertHeld();
  // A failed start or write means the call is over; the pending read
  // fails too and Finish brings the status.
  if (ok && index + 1 < NumMessages()) WriteMessageLocked(index + 1);
}

void CollectiveRpc::OnRead(grpc::ByteBuffer* message) {
  mu_.AssertHeld();
  DecodedMessage<v1::CollectiveResponse> decoded;
  absl::Status handled = DecodeMessage(message, &decoded);
  if (!handled.ok()) {
    handled = absl::InternalError(absl::StrCat(
        "reducerd's answer did not parse: ", handled.message()));
  } else {
    handled = result_.Add(decoded.fields, PiecesOf(decoded.data));
  }
  if (!handled.ok()) {
    SetErrorLocked(std::move(handled));
    stream_.Cancel();
  }
}

absl::StatusOr<std::vector<Tensor>> CollectiveRpc::Wait() {
  {
    absl::MutexLock lock(&mu_);
    if (!stream_.started()) {
      if (!error_.ok()) return error_;
      return absl::InternalError("collective call never started");
    }
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
  if (!stream_.status().ok()) return FromGrpcStatus(stream_.status());
  return result_.Finish();
}

bool CollectiveRpc::Ready() {
  driver_->PollReady();
  absl::MutexLock lock(&mu_);
  return !stream_.started() || OverLocked();
}

bool CollectiveRpc::Settled() {
  absl::MutexLock lock(&mu_);
  return !stream_.started() || OverLocked();
}

void CollectiveRpc::Cancel() {
  absl::MutexLock lock(&mu_);
  if (!stream_.started() || OverLocked()) return;
  SetErrorLocked(absl::CancelledError("the collective call was given up"));
  stream_.Cancel();
}

bool CollectiveRpc::received_any() const {
  absl::MutexLock lock(&mu_);
  return result_.started();
}

void CollectiveRpc::SetErrorLocked(absl::Status status) {
  if (error_.ok()) error_ = std::move(status);
}

}  // namespace reducer
