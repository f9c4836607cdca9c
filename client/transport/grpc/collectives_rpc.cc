#include "client/transport/grpc/collectives_rpc.h"

#include <algorithm>
#include <cassert>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/internal/result_assembler.h"
#include "client/internal/settled_attempt.h"
#include "client/transport/grpc/payload_slices.h"
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

// One call in flight. Guarded by CollectivesRpc::mu_.
struct CollectivesRpc::Call {
  Call(uint64_t id, std::shared_ptr<BufferCache> buffers,
       std::shared_ptr<const ResultInto> into)
      : id(id), result(std::move(buffers), std::move(into)) {}
  const uint64_t id;  // its message's id on the stream, too
  Opening* opening = nullptr;  // where it was sent
  ResultAssembler result;
  bool done = false;
  absl::Status status;  // once done: how it ended
  // Its message, which points into caller memory, is queued or being
  // written. Wait() does not return before this is false.
  bool unsent = false;
};

// One opening of the gRPC stream, and the calls whose messages it holds.
// Guarded by CollectivesRpc::mu_ (its callbacks run with it held).
struct CollectivesRpc::Opening final : AsyncStream::Observer {
  explicit Opening(CollectivesRpc* owner)
      : owner(owner), stream(owner->driver_, &owner->mu_, this) {}

  // AsyncStream::Observer. A failed start or write, or the end of the
  // reads, means the stream is over: no new call goes to it.
  void OnStarted(bool ok) override {
    owner->mu_.AssertHeld();
    if (!ok) owner->RetireLocked(this);
  }
  void OnRead(grpc::ByteBuffer* message) override {
    owner->mu_.AssertHeld();
    owner->DispatchLocked(this, message);
  }
  // Reads on demand: a read stays posted only while an answer is due.
  bool WantsMoreReads() override { return awaiting > 0; }
  void OnReadsEnded() override {
    owner->mu_.AssertHeld();
    owner->RetireLocked(this);
  }
  void OnWritten(uint64_t call_id, bool ok) override {
    owner->mu_.AssertHeld();
    auto it = unsent.find(call_id);
    if (it != unsent.end()) {
      it->second->unsent = false;
      unsent.erase(it);
    }
    if (!ok) owner->RetireLocked(this);
  }
  void OnFinished(const grpc::Status& status) override {
    owner->mu_.AssertHeld();
    absl::Status why = error;
    if (why.ok() && !status.ok()) why = FromGrpcStatus(status);
    if (why.ok()) {
      why = absl::UnavailableError(
          "reducerd closed the Collectives stream before answering");
    }
    owner->FailCallsLocked(this, why);
  }
  void OnDone() override {
    owner->mu_.AssertHeld();
    owner->ForgetOpeningLocked(this);  // destroys this
  }

  CollectivesRpc* const owner;
  AsyncStream stream;
  // Calls whose messages are queued or being written, by call id.
  absl::flat_hash_map<uint64_t, std::shared_ptr<Call>> unsent;
  int awaiting = 0;  // calls sent on it and not yet ended
  absl::Status error;  // a client-side reason to fail its calls, if any
  bool retired = false;
};

class CollectivesRpc::Attempt final : public CollectiveAttempt {
 public:
  // `contribution` outlives the attempt (see CollectiveAttempt).
  Attempt(CollectivesRpc* owner, uint64_t call_id, std::shared_ptr<Call> call,
          const Contribution* contribution)
      : owner_(owner), call_id_(call_id), call_(std::move(call)),
        contribution_(contribution) {}

  absl::StatusOr<std::vector<Tensor>> Wait() override {
    return owner_->Wait(call_id_, call_, *contribution_);
  }
  bool Ready() override { return owner_->Ready(call_); }
  bool Settled() override {
    absl::MutexLock lock(&owner_->mu_);
    return call_->done && !call_->unsent;
  }
  void Cancel() override {
    absl::MutexLock lock(&owner_->mu_);
    owner_->GiveUpLocked(call_id_, call_,
                         absl::CancelledError("the collective call was given up"));
  }
  bool received_any() const override {
    absl::MutexLock lock(&owner_->mu_);
    return call_->result.started();
  }

 private:
  CollectivesRpc* const owner_;
  const uint64_t call_id_;
  const std::shared_ptr<Call> call_;
  const Contribution* const contribution_;
};

CollectivesRpc::CollectivesRpc(grpc::GenericStub* stub,
                                 CompletionDriver* driver,
                                 std::shared_ptr<BufferCache> buffers)
    : stub_(stub), driver_(driver), buffers_(std::move(buffers)) {}

CollectivesRpc::~CollectivesRpc() {
  {
    absl::MutexLock lock(&mu_);
    if (current_ != nullptr) RetireLocked(current_.get());
    for (const auto& opening : retired_) opening->stream.Cancel();
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

std::unique_ptr<CollectiveAttempt> CollectivesRpc::Start(
    const Contribution& contribution) {
  const size_t bytes = contribution.payload_bytes();
  // Device staging may still be filling the inputs; one message reads all.
  absl::Status ready = contribution.AwaitPayload(bytes);
  if (!ready.ok()) return std::make_unique<FailedAttempt>(std::move(ready));
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
  auto call =
      std::make_shared<Call>(call_id, buffers_, contribution.result_into);
  absl::MutexLock lock(&mu_);

  if (current_ == nullptr) OpenLocked();
  Opening* opening = current_.get();
  call->opening = opening;
  calls_[call_id] = call;
  call->unsent = true;
  opening->unsent[call_id] = call;
  // The current opening takes writes: one that cannot any more was
  // retired in the same callback that found out.
  const bool queued =
      opening->stream.Write(call_id, std::move(message), /*last=*/false);
  assert(queued);
  (void)queued;
  ++opening->awaiting;
  opening->stream.ReadIfIdle();
  return std::make_unique<Attempt>(this, call_id, std::move(call),
                                   &contribution);
}

void CollectivesRpc::OpenLocked() {
  current_ = std::make_unique<Opening>(this);
  current_->stream.set_reads_on_demand();
  current_->stream.Start(stub_, kCollectivesMethod);
}

bool CollectivesRpc::Ready(const std::shared_ptr<Call>& call) {
  driver_->PollReady();
  absl::MutexLock lock(&mu_);
  return call->done && !call->unsent;
}

absl::StatusOr<std::vector<Tensor>> CollectivesRpc::Wait(
    uint64_t call_id, const std::shared_ptr<Call>& call,
    const Contribution& contribution) {
  const absl::Time deadline = contribution.deadline;
  auto over = [this, &call] {
    absl::MutexLock lock(&mu_);
    return call->done && !call->unsent;
  };
  if (!driver_->DriveUntil(over, deadline)) {
    {
      // Given up here; reducerd answers the collective at its own timeout
      // (before this deadline) unless it is unreachable.
      absl::MutexLock lock(&mu_);
      GiveUpLocked(call_id, call, NoAnswerError(contribution.header));
    }
    // A message being written cannot be taken back: wait for its write to
    // end (ForgetMessageLocked cancelled the stream, so that is prompt).
    driver_->DriveUntil(over, absl::InfiniteFuture());
  }
  absl::MutexLock lock(&mu_);
  if (!call->status.ok()) return call->status;
  return call->result.Finish();
}

void CollectivesRpc::GiveUpLocked(uint64_t call_id,
                                   const std::shared_ptr<Call>& call,
                                   absl::Status why) {
  if (!call->done) {
    calls_.erase(call_id);
    call->done = true;
    call->status = std::move(why);
    --call->opening->awaiting;
  }
  if (call->unsent) ForgetMessageLocked(call);
}

void CollectivesRpc::ForgetMessageLocked(const std::shared_ptr<Call>& call) {
  Opening* opening = call->opening;
  switch (opening->stream.Unqueue(call->id)) {
    case AsyncStream::Unqueued::kInFlight:
      // gRPC holds it: end the stream, which ends the write.
      RetireLocked(opening);
      opening->stream.Cancel();
      return;
    case AsyncStream::Unqueued::kRemoved:
      call->unsent = false;
      opening->unsent.erase(call->id);
      return;
    case AsyncStream::Unqueued::kAbsent:
      return;
  }
}

void CollectivesRpc::DispatchLocked(Opening* opening,
                                     grpc::ByteBuffer* message) {
  SliceRange data;
  absl::Status decoded = DecodeMessage(message, &response_, &data);
  if (!decoded.ok()) {
    // Nothing on this stream can be trusted any more.
    opening->error = absl::InternalError(
        absl::StrCat("reducerd's answer did not parse: ", decoded.message()));
    RetireLocked(opening);
    opening->stream.Cancel();
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
    outcome = call.result.Add(response_, PiecesOf(data));
    if (!outcome.ok()) over = true;
  }
  if (!over) return;
  call.done = true;
  call.status = outcome;
  --call.opening->awaiting;
  calls_.erase(it);
}

void CollectivesRpc::RetireLocked(Opening* opening) {
  if (opening->retired) return;
  opening->retired = true;
  if (current_.get() == opening) retired_.push_back(std::move(current_));
}

void CollectivesRpc::ForgetOpeningLocked(Opening* opening) {
  RetireLocked(opening);  // already, but for a stream that never read
  retired_.erase(std::find_if(
      retired_.begin(), retired_.end(),
      [opening](const auto& o) { return o.get() == opening; }));
}

void CollectivesRpc::FailCallsLocked(Opening* opening,
                                      const absl::Status& status) {
  for (auto it = calls_.begin(); it != calls_.end();) {
    Call& call = *it->second;
    if (call.opening != opening) {
      ++it;
      continue;
    }
    call.done = true;
    call.status = status;
    --opening->awaiting;
    calls_.erase(it++);
  }
}

}  // namespace reducer
