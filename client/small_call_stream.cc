#include "client/small_call_stream.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/call_payload.h"
#include "core/fingerprint.h"
#include "proto/reducer/v1/collective_codec.h"
#include "proto/reducer/v1/status_conversion.h"
#include "proto/reducer/v1/wire_conversion.h"

namespace reducer {
namespace {

constexpr char kCollectivesMethod[] = "/reducer.v1.Reducer/Collectives";

// Payloads of several tensors up to this size are copied into one slice
// (PackPayload); a larger one, or a single tensor, is sent from caller
// memory without a copy.
constexpr size_t kPackedPayloadBytes = 64 << 10;

// Why a call gave up without reducerd's answer. reducerd itself answers a
// collective whose ranks do not all arrive, at its timeout (naming them);
// this is for when even that answer did not come.
absl::Status NoAnswerError(const v1::CollectiveHeader& header) {
  absl::StatusOr<CollectiveKind> kind = CollectiveKindFromWire(header.kind());
  return absl::DeadlineExceededError(absl::StrCat(
      DescribeCollective(header,
                         kind.ok() ? std::optional(*kind) : std::nullopt),
      ": no answer from reducerd within the call's "
      "timeout (", absl::FormatDuration(absl::Milliseconds(header.timeout_ms())),
      ") and some slack, not even its own timeout report; reducerd may be "
      "overloaded or stuck (see its log)"));
}

}  // namespace

// One call in flight. Guarded by SmallCallStream::mu_.
struct SmallCallStream::Call {
  explicit Call(std::shared_ptr<BufferCache> buffers)
      : result(std::move(buffers)) {}
  Opening* opening = nullptr;  // where it was sent
  ResultAssembler result;
  bool done = false;
  absl::Status status;  // once done: how it ended
  // Its message, which points into caller memory, is queued or being
  // written. Wait() does not return before this is false.
  bool unsent = false;
};

// A message waiting for (or in) the stream's one write slot.
struct SmallCallStream::Outgoing {
  std::shared_ptr<Call> call;
  grpc::ByteBuffer message;
};

// One opening of the gRPC stream, and the operations gRPC holds for it.
// Guarded by SmallCallStream::mu_.
struct SmallCallStream::Opening {
  explicit Opening(SmallCallStream* owner)
      : start_tag(owner, this, Op::kStart),
        read_tag(owner, this, Op::kRead),
        write_tag(owner, this, Op::kWrite),
        finish_tag(owner, this, Op::kFinish) {}
  grpc::ClientContext context;
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> stream;
  grpc::ByteBuffer incoming;
  std::deque<Outgoing> outgoing;  // in order; the front may be in the slot
  // The write slot is taken (gRPC sends the start of the call through it
  // too): at most one start or write at a time.
  bool write_busy = false;
  bool front_in_flight = false;  // outgoing.front() is being written
  grpc::Status final_status;              // filled by Finish
  absl::Status error;  // a client-side reason to fail its calls, if any
  int operations = 0;  // started and not yet back from the queue
  bool retired = false;
  Tag start_tag;
  Tag read_tag;
  Tag write_tag;
  Tag finish_tag;
};

void SmallCallStream::Tag::OnComplete(bool ok) {
  absl::MutexLock lock(&owner->mu_);
  owner->HandleEventLocked(this, ok);
}

class SmallCallStream::Attempt final : public CollectiveAttempt {
 public:
  // `contribution` outlives the attempt (see CollectiveAttempt).
  Attempt(SmallCallStream* owner, uint64_t call_id, std::shared_ptr<Call> call,
          const Contribution* contribution)
      : owner_(owner), call_id_(call_id), call_(std::move(call)),
        contribution_(contribution) {}

  absl::StatusOr<std::vector<Tensor>> Wait() override {
    return owner_->Wait(call_id_, call_, *contribution_);
  }
  bool Ready() override { return owner_->Ready(call_); }
  bool received_any() const override {
    absl::MutexLock lock(&owner_->mu_);
    return call_->result.started();
  }

 private:
  SmallCallStream* const owner_;
  const uint64_t call_id_;
  const std::shared_ptr<Call> call_;
  const Contribution* const contribution_;
};

SmallCallStream::SmallCallStream(grpc::GenericStub* stub,
                                 CompletionDriver* driver,
                                 std::shared_ptr<BufferCache> buffers)
    : stub_(stub), driver_(driver), buffers_(std::move(buffers)) {}

SmallCallStream::~SmallCallStream() {
  {
    absl::MutexLock lock(&mu_);
    if (current_ != nullptr) RetireLocked(current_.get());
    for (const auto& opening : retired_) opening->context.TryCancel();
  }
  // Cancelled operations complete promptly; each opening goes once its
  // last one is back.
  driver_->DriveUntil(
      [this] {
        absl::MutexLock lock(&mu_);
        return retired_.empty();
      },
      absl::InfiniteFuture());
}

std::unique_ptr<CollectiveAttempt> SmallCallStream::Start(
    const Contribution& contribution) {
  auto call = std::make_shared<Call>(buffers_);
  const size_t bytes = contribution.payload_bytes();
  const std::vector<grpc::Slice> data =
      bytes > 0 && bytes <= kPackedPayloadBytes &&
              contribution.layout.offsets.size() > 1
          ? std::vector<grpc::Slice>{PackPayload(contribution.layout,
                                                 contribution.inputs)}
          : PayloadSlices(contribution.layout, contribution.inputs, 0, bytes);
  v1::CollectiveRequest fields;  // call_id here, the header encoded apart
  const uint64_t call_id = last_call_id_.fetch_add(1) + 1;
  fields.set_call_id(call_id);
  grpc::ByteBuffer message = EncodeMessage(
      fields,
      EncodeField(v1::CollectiveRequest::kHeaderFieldNumber,
                  contribution.header),
      data);
  absl::MutexLock lock(&mu_);

  if (current_ == nullptr) OpenLocked();
  Opening* opening = current_.get();
  call->opening = opening;
  calls_[call_id] = call;
  call->unsent = true;
  opening->outgoing.push_back(Outgoing{call, std::move(message)});
  if (!opening->write_busy) WriteFrontLocked(opening);
  return std::make_unique<Attempt>(this, call_id, std::move(call),
                                   &contribution);
}

void SmallCallStream::OpenLocked() {
  current_ = std::make_unique<Opening>(this);
  Opening* opening = current_.get();
  opening->stream =
      stub_->PrepareCall(&opening->context, kCollectivesMethod, driver_->cq());
  opening->stream->StartCall(&opening->start_tag);
  opening->write_busy = true;
  opening->stream->Read(&opening->incoming, &opening->read_tag);
  opening->operations = 2;
}

void SmallCallStream::WriteFrontLocked(Opening* opening) {
  opening->write_busy = true;
  opening->front_in_flight = true;
  ++opening->operations;
  opening->stream->Write(opening->outgoing.front().message,
                         &opening->write_tag);
}

bool SmallCallStream::Ready(const std::shared_ptr<Call>& call) {
  driver_->PollReady();
  absl::MutexLock lock(&mu_);
  return call->done && !call->unsent;
}

absl::StatusOr<std::vector<Tensor>> SmallCallStream::Wait(
    uint64_t call_id, const std::shared_ptr<Call>& call,
    const Contribution& contribution) {
  const absl::Time deadline = contribution.deadline;
  auto over = [this, &call] {
    absl::MutexLock lock(&mu_);
    return call->done && !call->unsent;
  };
  if (!driver_->DriveUntil(over, deadline)) {
    {
      absl::MutexLock lock(&mu_);
      if (!call->done) {
        // Given up here; reducerd answers the collective at its own timeout
        // (before this deadline) unless it is unreachable.
        calls_.erase(call_id);
        call->done = true;
        call->status = NoAnswerError(contribution.header);
      }
      if (call->unsent) ForgetMessageLocked(call);
    }
    // A message being written cannot be taken back: wait for its write to
    // end (ForgetMessageLocked cancelled the stream, so that is prompt).
    driver_->DriveUntil(over, absl::InfiniteFuture());
  }
  absl::MutexLock lock(&mu_);
  if (!call->status.ok()) return call->status;
  return call->result.Finish();
}

void SmallCallStream::ForgetMessageLocked(const std::shared_ptr<Call>& call) {
  Opening* opening = call->opening;
  auto& queue = opening->outgoing;
  for (auto it = queue.begin(); it != queue.end(); ++it) {
    if (it->call != call) continue;
    if (it == queue.begin() && opening->front_in_flight) {
      // gRPC holds it: end the stream, which ends the write.
      RetireLocked(opening);
      opening->context.TryCancel();
      return;
    }
    call->unsent = false;
    queue.erase(it);
    return;
  }
}

void SmallCallStream::HandleEventLocked(const Tag* tag, bool ok) {
  Opening* opening = tag->opening;
  --opening->operations;
  switch (tag->op) {
    case Op::kStart:
      WriteSideFreeLocked(opening, ok);
      break;
    case Op::kWrite:
      opening->front_in_flight = false;
      opening->outgoing.front().call->unsent = false;
      opening->outgoing.pop_front();
      WriteSideFreeLocked(opening, ok);
      break;
    case Op::kRead:
      if (ok) {
        DispatchLocked(opening);
        ++opening->operations;
        opening->stream->Read(&opening->incoming, &opening->read_tag);
      } else {
        RetireLocked(opening);
        ++opening->operations;
        opening->stream->Finish(&opening->final_status, &opening->finish_tag);
      }
      break;
    case Op::kFinish: {
      absl::Status why = opening->error;
      if (why.ok() && !opening->final_status.ok()) {
        why = FromGrpcStatus(opening->final_status);
      }
      if (why.ok()) {
        why = absl::UnavailableError(
            "reducerd closed the Collectives stream before answering");
      }
      FailCallsLocked(opening, why);
      break;
    }
  }
  if (opening->retired && opening->operations == 0) {
    DropQueueLocked(opening);  // nothing can write it any more
    retired_.erase(std::find_if(
        retired_.begin(), retired_.end(),
        [opening](const auto& o) { return o.get() == opening; }));
  }
}

void SmallCallStream::WriteSideFreeLocked(Opening* opening, bool ok) {
  opening->write_busy = false;
  if (!ok) {
    // The stream is over: nothing more will be written, and the pending
    // read fails as well and brings the status.
    RetireLocked(opening);
    DropQueueLocked(opening);
  } else if (!opening->outgoing.empty()) {
    WriteFrontLocked(opening);
  }
}

void SmallCallStream::DispatchLocked(Opening* opening) {
  SliceRange data;
  absl::Status decoded = DecodeMessage(&opening->incoming, &response_, &data);
  if (!decoded.ok()) {
    // Nothing on this stream can be trusted any more.
    opening->error = absl::InternalError(
        absl::StrCat("reducerd's answer did not parse: ", decoded.message()));
    RetireLocked(opening);
    opening->context.TryCancel();
    return;
  }
  auto it = calls_.find(response_.call_id());
  if (it == calls_.end()) return;  // a call given up at its deadline
  Call& call = *it->second;
  absl::Status outcome;
  bool over = response_.has_status();
  if (over && response_.status().code() != 0) {
    outcome = FromCallStatus(response_.status());
  } else {
    outcome = call.result.Add(response_, data);
    if (!outcome.ok()) over = true;
  }
  if (!over) return;
  call.done = true;
  call.status = outcome;
  calls_.erase(it);
}

void SmallCallStream::DropQueueLocked(Opening* opening) {
  for (Outgoing& out : opening->outgoing) out.call->unsent = false;
  opening->outgoing.clear();
}

void SmallCallStream::RetireLocked(Opening* opening) {
  if (opening->retired) return;
  opening->retired = true;
  if (current_.get() == opening) retired_.push_back(std::move(current_));
}

void SmallCallStream::FailCallsLocked(Opening* opening,
                                      const absl::Status& status) {
  for (auto it = calls_.begin(); it != calls_.end();) {
    Call& call = *it->second;
    if (call.opening != opening) {
      ++it;
      continue;
    }
    call.done = true;
    call.status = status;
    calls_.erase(it++);
  }
}

}  // namespace reducer
