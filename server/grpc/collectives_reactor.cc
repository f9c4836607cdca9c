#include "server/grpc/collectives_reactor.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "proto/reducer/v1/collective_codec.h"
#include "proto/reducer/v1/status_conversion.h"
#include "server/grpc/wire_bytes.h"
#include "server/grpc/write_queue.h"
#include "server/log.h"

namespace reducer {

// One call's RankChannel: what its Collective sends goes onto the shared
// stream tagged with the call's id. Called with the Collective's lock held;
// only queues, never calls back into the Collective.
class CollectivesReactor::StreamAttempt final : public RankChannel {
 public:
  StreamAttempt(std::weak_ptr<CollectivesReactor> stream, uint64_t call_id)
      : stream_(std::move(stream)), call_id_(call_id) {}

  void Send(ResultMessage message, bool last) override {
    std::shared_ptr<CollectivesReactor> stream = stream_.lock();
    if (stream == nullptr) return;
    v1::CollectiveResponse tag;
    tag.set_call_id(call_id_);
    if (last) tag.mutable_status();  // code 0: OK
    grpc::ByteBuffer encoded = EncodeResult(message, std::move(tag));
    stream->Enqueue(call_id_, std::move(encoded), last,
                    std::move(message.hold));
  }
  void FinishWhenSent() override { End(absl::OkStatus()); }
  void Fail(const absl::Status& status) override { End(status); }
  // Each call's payload arrives whole, so there is never more to read.
  void ResumeReading() override {}

 private:
  void End(const absl::Status& status) {
    std::shared_ptr<CollectivesReactor> stream = stream_.lock();
    if (stream != nullptr) stream->EndCall(call_id_, status);
  }

  const std::weak_ptr<CollectivesReactor> stream_;
  const uint64_t call_id_;
};

namespace {

// Holds the fields of a request fusing a few hundred tensors; a larger one
// spills into blocks that the next reset frees.
constexpr size_t kArenaBlockBytes = 32 << 10;

google::protobuf::ArenaOptions ArenaOn(char* block) {
  google::protobuf::ArenaOptions options;
  options.initial_block = block;
  options.initial_block_size = kArenaBlockBytes;
  return options;
}

}  // namespace

CollectivesReactor::CollectivesReactor(grpc::CallbackServerContext* context,
                                       std::function<void()> on_done,
                                       CollectiveReactor::AttachFn attach,
                                       HeldReads* held_reads,
                                       size_t max_unread_bytes)
    : context_(context),
      on_done_(std::move(on_done)),
      attach_(std::move(attach)),
      held_reads_(held_reads),
      max_unread_bytes_(max_unread_bytes),
      arena_block_(new char[kArenaBlockBytes]),
      arena_(ArenaOn(arena_block_.get())) {}

CollectivesReactor* CollectivesReactor::Create(
    grpc::CallbackServerContext* context, std::function<void()> on_done,
    CollectiveReactor::AttachFn attach, CallMetrics metrics,
    HeldReads* held_reads, size_t max_unread_bytes) {
  auto stream = std::make_shared<CollectivesReactor>(
      context, std::move(on_done), std::move(attach), held_reads,
      max_unread_bytes);
  CollectivesReactor* raw = stream.get();
  raw->metrics_ = metrics;
  {
    absl::MutexLock lock(&raw->mu_);
    raw->self_ = std::move(stream);
  }
  raw->StartRead(&raw->incoming_);
  return raw;
}

void CollectivesReactor::OnReadDone(bool ok) {
  if (!ok) {
    // A cancelled stream is handled by OnCancel; a half-close ends the
    // stream once every call was answered.
    if (context_->IsCancelled()) return;
    absl::MutexLock lock(&mu_);
    input_ended_ = true;
    MaybeFinishLocked();
    return;
  }
  metrics_.Received();
  const size_t message_bytes = incoming_.Length();
  if (!message_arrived_) {
    absl::MutexLock lock(&mu_);
    message_arrived_ = true;
    if (finished_) return;  // closed as silent just before
  }
  HandleMessage();
  absl::MutexLock lock(&mu_);
  ReadOnLocked(message_bytes);
}

void CollectivesReactor::ReadOnLocked(size_t message_bytes) {
  if (finished_) return;
  if (UnreadOverBoundLocked()) {
    // OnWriteDone reads on once the client took enough of its answers.
    read_blocked_ = true;
    return;
  }
  const bool call_waits = std::any_of(
      live_.begin(), live_.end(),
      [](const auto& entry) { return !entry.second.ended; });
  if (held_reads_ != nullptr && message_bytes <= kHoldingMessageBytes &&
      call_waits) {
    // Its answer, or the deadline, posts the read.
    read_held_ = true;
    held_reads_->Hold(weak_from_this());
    return;
  }
  StartRead(&incoming_);
}

void CollectivesReactor::ReleaseHeldRead() {
  absl::MutexLock lock(&mu_);
  if (!read_held_ || finished_) return;
  read_held_ = false;
  PostReadLocked();
}

bool CollectivesReactor::UnreadOverBoundLocked() const {
  return outgoing_.unwritten_bytes() > max_unread_bytes_;
}

void CollectivesReactor::PostReadLocked() {
  if (UnreadOverBoundLocked()) {
    read_blocked_ = true;
    return;
  }
  StartRead(&incoming_);
}

void CollectivesReactor::EndUnlessMessageArrived(const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  if (!message_arrived_) FinishLocked(status);
}

void CollectivesReactor::CloseIfIdleSince(absl::Time cutoff,
                                          const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  if (finished_) return;
  if (!outgoing_.idle() && front_waiting_since_ <= cutoff) {
    // Its client took no answer for the whole timeout: not slow, stopped.
    // The status cannot reach a client that reads nothing (it waits behind
    // the answers), so the stream is also cancelled, which frees it now,
    // and the log says why.
    const absl::Status refused = absl::ResourceExhaustedError(absl::StrCat(
        "reducerd ended this Collectives stream: it has ",
        outgoing_.unwritten_bytes(),
        " bytes of answers its client has not read, and the client took "
        "none of them for --stream_idle_timeout=",
        absl::FormatDuration(
            absl::Trunc(Clock::Steady().Now() - cutoff, absl::Seconds(1))),
        "; a client must read the answers of the calls it sends"));
    Log(LogSeverity::kWarning,
        absl::StrCat("peer ", context_->peer(), ": ", refused.message()));
    FinishLocked(refused);
    context_->TryCancel();
    return;
  }
  if (!live_.empty() || !outgoing_.idle() || last_activity_ > cutoff) {
    return;
  }
  FinishLocked(status);
}

void CollectivesReactor::HandleMessage() {
  arena_.Reset();  // the previous message's fields are no longer used
  auto* request =
      google::protobuf::Arena::CreateMessage<v1::CollectiveRequest>(&arena_);
  SliceRange payload;
  absl::Status problem = DecodeMessage(&incoming_, request, &payload);
  const v1::CollectiveRequest& fields = *request;
  const uint64_t call_id = fields.call_id();
  if (problem.ok() && call_id == 0) {
    problem = absl::InvalidArgumentError(
        "every message of a Collectives stream must carry a nonzero call_id");
  } else if (problem.ok() && !fields.has_header()) {
    problem = absl::InvalidArgumentError(absl::StrCat(
        "Collectives stream call ", call_id,
        ": each message is one whole call and must carry `header`"));
  } else if (problem.ok() && fields.offset() != 0) {
    problem = absl::InvalidArgumentError(absl::StrCat(
        "Collectives stream call ", call_id, ": the payload must be whole, "
        "at offset 0 (got offset ", fields.offset(),
        "); send chunked payloads on the Collective method"));
  }
  const int rank = fields.header().rank();
  auto channel = std::make_shared<StreamAttempt>(weak_from_this(), call_id);
  if (problem.ok()) {
    absl::MutexLock lock(&mu_);
    // Closed (idle) before this message: it is not used, and its client
    // learns so from the stream's status.
    if (finished_) return;
    last_activity_ = Clock::Steady().Now();
    auto it = live_.find(call_id);
    if (it != live_.end() && !it->second.ended) {
      problem = absl::InvalidArgumentError(absl::StrCat(
          "Collectives stream call id ", call_id, " is already in flight"));
    } else {
      LiveCall& call = live_[call_id];
      call = LiveCall();
      call.channel = channel;
      call.rank = rank;
      call.serial = ++last_serial_;
    }
  }
  if (!problem.ok()) {
    {
      absl::MutexLock lock(&mu_);
      FinishLocked(problem);
    }
    CancelLiveCalls();
    return;
  }

  absl::StatusOr<std::shared_ptr<AttachedCollective>> attached =
      attach_(fields.header(), channel);
  if (!attached.ok()) {
    EndCall(call_id, attached.status());
    return;
  }
  std::shared_ptr<AttachedCollective> collective = *std::move(attached);
  // A replay feeds nothing: its result was sent already (no collective) or
  // comes from the resumed collective.
  if (collective == nullptr) return;
  {
    absl::MutexLock lock(&mu_);
    auto it = live_.find(call_id);
    if (it != live_.end() && it->second.channel == channel) {
      it->second.collective = collective;
    }
  }
  if (fields.header().replay()) return;
  // The whole payload is here: hand it over and close this rank's input
  // (which fails the collective if bytes are missing). Reading goes on
  // whatever OnData says: this call has nothing more to read.
  collective->OnData(rank, 0, ToPayload(std::move(payload)));
  collective->OnInputEnd(rank);
}

void CollectivesReactor::Enqueue(uint64_t call_id, grpc::ByteBuffer message,
                                 bool ends_call,
                                 std::shared_ptr<const void> hold) {
  absl::MutexLock lock(&mu_);
  if (finished_) return;
  auto it = live_.find(call_id);
  if (it == live_.end() || it->second.ended) return;
  const size_t bytes = message.Length() + kQueuedMessageOverheadBytes;
  Outgoing out;
  out.message = std::move(message);
  out.call_id = call_id;
  out.serial = it->second.serial;
  out.ends_call = ends_call;
  out.hold = std::move(hold);
  // The entry (and its references) goes once the last message is written:
  // this may run inside the Collective, which must not be released here.
  if (ends_call) it->second.ended = true;
  if (outgoing_.Push(std::move(out), bytes)) {
    front_waiting_since_ = Clock::Steady().Now();
    WriteFrontLocked();
  }
  if (ends_call && read_held_) {
    // Read on now: gRPC sends the window update with this answer.
    read_held_ = false;
    PostReadLocked();
  }
}

void CollectivesReactor::EndCall(uint64_t call_id, const absl::Status& status) {
  v1::CollectiveResponse end;
  end.set_call_id(call_id);
  *end.mutable_status() = ToCallStatus(status);
  Enqueue(call_id, EncodeMessage(end, {}), /*ends_call=*/true,
          /*hold=*/nullptr);
}

void CollectivesReactor::WriteFrontLocked() {
  metrics_.Sent();
  StartWrite(&outgoing_.front().message);
}

void CollectivesReactor::OnWriteDone(bool ok) {
  std::shared_ptr<AttachedCollective> notify;
  int rank = -1;
  LiveCall over;  // released after the lock
  Outgoing written;  // and so is its hold on the budget
  {
    absl::MutexLock lock(&mu_);
    written = outgoing_.PopWritten();
    last_activity_ = Clock::Steady().Now();
    if (!ok) {
      // The stream broke; OnCancel or OnDone takes care of the calls.
      outgoing_.Clear();
      return;
    }
    auto it = live_.find(written.call_id);
    if (it != live_.end() && it->second.serial == written.serial) {
      if (written.ends_call) {
        over = std::move(it->second);
        live_.erase(it);
      } else {
        notify = it->second.collective;
        rank = it->second.rank;
      }
    }
    if (!finished_ && outgoing_.TakeNext()) {
      front_waiting_since_ = Clock::Steady().Now();
      WriteFrontLocked();
    } else {
      MaybeFinishLocked();
    }
    if (read_blocked_ && !finished_ && !UnreadOverBoundLocked()) {
      // The client took enough of its answers: read its next call.
      read_blocked_ = false;
      StartRead(&incoming_);
    }
  }
  if (notify != nullptr) notify->OnWriteDone(rank);
}

void CollectivesReactor::MaybeFinishLocked() {
  if (finished_ || !input_ended_ || !outgoing_.idle()) {
    return;
  }
  for (const auto& [id, call] : live_) {
    if (!call.ended) return;
  }
  finished_ = true;
  FinishCounted(grpc::Status::OK);
}

void CollectivesReactor::FinishLocked(const absl::Status& status) {
  if (finished_) return;
  finished_ = true;
  outgoing_.DropUnwritten();
  FinishCounted(ToGrpcStatus(status));
}

void CollectivesReactor::FinishCounted(const grpc::Status& status) {
  metrics_.Handled(status.error_code());
  Finish(status);
}

void CollectivesReactor::CancelLiveCalls() {
  absl::flat_hash_map<uint64_t, LiveCall> calls;
  {
    absl::MutexLock lock(&mu_);
    calls.swap(live_);
  }
  for (auto& [id, call] : calls) {
    if (!call.ended && call.collective != nullptr) {
      call.collective->OnRankCancelled(call.rank, call.channel.get());
    }
  }
}

void CollectivesReactor::OnCancel() {
  CancelLiveCalls();
  absl::MutexLock lock(&mu_);
  FinishLocked(absl::CancelledError("call cancelled"));
}

void CollectivesReactor::OnDone() {
  on_done_();
  CancelLiveCalls();
  std::shared_ptr<CollectivesReactor> self;
  absl::MutexLock lock(&mu_);
  self = std::move(self_);
  // Nothing more is written: what the answers held goes now.
  outgoing_.Clear();
}

}  // namespace reducer
