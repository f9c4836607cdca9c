#include "server/shm/shared_memory_session.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/payload_layout.h"
#include "proto/reducer/v1/call_status.h"
#include "proto/reducer/v1/wire_conversion.h"

namespace reducer {

// One call's RankChannel: queues what its Collective says for the job's
// thread and rings the request ring's data bell. Called with the
// Collective's lock held; never calls back into the Collective.
class SharedMemorySession::RingAttempt final : public RankChannel {
 public:
  // `inline_input`: the call's payload came inside its request record (so
  // no range of the client's waits for the end of reducerd's references).
  RingAttempt(std::weak_ptr<SharedMemorySession> session, uint64_t serial,
              uint64_t call_id, bool inline_input)
      : session_(std::move(session)), serial_(serial), call_id_(call_id),
        inline_input_(inline_input) {}

  void Send(ResultMessage message, bool last) override {
    // A small call whose whole result is this message is answered from
    // here, with no hand-off to the job's thread.
    if (last && inline_input_ && message.offset == 0 &&
        message.result_specs != nullptr) {
      std::shared_ptr<SharedMemorySession> s = session_.lock();
      if (s != nullptr && s->AnswerAtOnce(serial_, call_id_, message)) return;
    }
    Item item;
    item.kind = Item::Kind::kMessage;
    item.message = std::move(message);
    item.last = last;
    Queue(std::move(item));
  }
  void FinishWhenSent() override {
    Item item;
    item.kind = Item::Kind::kFinish;
    Queue(std::move(item));
  }
  void Fail(const absl::Status& status) override {
    Item item;
    item.kind = Item::Kind::kFail;
    item.status = status;
    Queue(std::move(item));
  }
  // Only marks the call; the job's thread feeds the rest.
  void ResumeReading() override {
    if (std::shared_ptr<SharedMemorySession> s = session_.lock()) {
      s->Resume(serial_);
    }
  }

 private:
  void Queue(Item item) {
    item.serial = serial_;
    if (std::shared_ptr<SharedMemorySession> s = session_.lock()) {
      s->Enqueue(std::move(item));
    }
  }

  const std::weak_ptr<SharedMemorySession> session_;
  const uint64_t serial_;
  const uint64_t call_id_;
  const bool inline_input_;
};

// Holds one call's payload bytes (inline bytes, or its range of the input
// mapping, which it keeps mapped) for the SharedBytes made from them. Its
// end means reducerd holds nothing of the range any more: it says so and
// rings the bell, with no lock taken (it may go inside a Collective).
class SharedMemorySession::InputOwner final : public ByteOwner {
 public:
  // Bytes [offset, offset + n) of `segment`.
  InputOwner(std::shared_ptr<const SharedSegment> segment, uint64_t offset,
             std::shared_ptr<ControlSegment> control,
             std::shared_ptr<std::atomic<bool>> released)
      : segment_(std::move(segment)),
        data_(static_cast<const char*>(segment_->data()) + offset),
        control_(std::move(control)),
        released_(std::move(released)) {}
  // `bytes`, inline in the request: reducerd's own copy, so its end
  // concerns no one.
  explicit InputOwner(std::string bytes)
      : bytes_(std::move(bytes)), data_(bytes_.data()) {}
  ~InputOwner() override {
    if (released_ == nullptr) return;
    released_->store(true, std::memory_order_release);
    control_->requests().data_bell().Ring();
  }

  const char* data() const { return data_; }
  // A range of the client's input segment is the client's again once
  // reducerd lets go of it.
  bool lent() const override { return released_ != nullptr; }

 private:
  const std::shared_ptr<const SharedSegment> segment_;
  const std::string bytes_;
  const char* const data_;
  const std::shared_ptr<ControlSegment> control_;
  const std::shared_ptr<std::atomic<bool>> released_;
};

// One call of the session, from its request record to its response record.
struct SharedMemorySession::Call {
  uint64_t call_id = 0;
  uint64_t serial = 0;  // tells apart calls that reuse an id
  int rank = -1;
  std::shared_ptr<RingAttempt> channel;
  std::shared_ptr<Collective> collective;  // null until attached, and once over

  // Input: its owner while bytes remain to be fed, then null.
  std::shared_ptr<const InputOwner> input;
  const char* input_data = nullptr;
  size_t input_bytes = 0;
  size_t fed = 0;
  bool paused = false;  // OnData said wait; ResumeReading not seen yet
  // Set once no SharedBytes of the input is left anywhere.
  std::shared_ptr<std::atomic<bool>> input_released;

  // Result, set up by its first message.
  bool result_started = false;
  std::shared_ptr<const std::vector<TensorSpec>> specs;
  size_t result_bytes = 0;
  std::string inline_result;
  std::optional<uint64_t> range;  // offset in the result segment
  // While the call writes its range (SharedMemoryResults::Open to Close).
  std::shared_ptr<SharedMemoryResults::Writing> writing;

  std::optional<absl::Status> end;  // known: the response may go
};

SharedMemorySession::SharedMemorySession(Parts parts, SharedMemoryResults* results,
                                         JobDoor::AttachFn attach,
                                         size_t chunk_bytes, const Logger* log)
    : peer_(std::move(parts.peer)),
      socket_(std::move(parts.socket)),
      results_(results),
      control_(std::move(parts.control)),
      input_(std::make_shared<const SharedSegment>(std::move(parts.input))),
      attach_(std::move(attach)),
      check_seat_(std::move(parts.check_seat)),
      chunk_bytes_(chunk_bytes),
      log_(log),
      next_socket_check_(absl::Now() + kSocketCheck),
      next_seat_check_(absl::Now() + kSeatCheck) {}

std::shared_ptr<SharedMemorySession> SharedMemorySession::Create(
    Parts parts, SharedMemoryResults* results, JobDoor::AttachFn attach,
    size_t chunk_bytes, const Logger* log) {
  auto session = std::make_shared<SharedMemorySession>(
      std::move(parts), results, std::move(attach), chunk_bytes, log);
  const SharedMemoryPeer& p = session->peer_;
  const int ranks[] = {p.rank};
  log->Log({LogSeverity::kInfo, "shm_session_started",
            absl::StrCat("same-host session of job ", p.job, " rank ", p.rank,
                         " started (pid ", p.pid, ", uid ", p.uid, ", ",
                         session->input_->size(), "-byte segments)"),
            p.job, std::nullopt, "", ranks});
  return session;
}

void SharedMemorySession::Stop() {
  stop_.store(true, std::memory_order_release);
  Ring();
}

void SharedMemorySession::Ring() { control_->requests().data_bell().Ring(); }

void SharedMemorySession::Enqueue(Item item) {
  std::vector<Item> dropped;  // destroyed after the lock
  {
    absl::MutexLock lock(&mu_);
    if (ended_) {
      dropped.push_back(std::move(item));
    } else {
      if (item.kind == Item::Kind::kFail) {
        // A failed call's queued messages are dropped.
        std::deque<Item> kept;
        for (Item& queued : items_) {
          if (queued.serial == item.serial &&
              queued.kind == Item::Kind::kMessage) {
            dropped.push_back(std::move(queued));
          } else {
            kept.push_back(std::move(queued));
          }
        }
        items_.swap(kept);
      }
      items_.push_back(std::move(item));
    }
  }
  Ring();
}

bool SharedMemorySession::AnswerAtOnce(uint64_t serial, uint64_t call_id,
                                       const ResultMessage& message) {
  absl::StatusOr<PayloadLayout> layout =
      ComputePayloadLayout(*message.result_specs);
  if (!layout.ok() || layout->total_bytes > kInlineResultBytes) return false;
  size_t bytes = 0;
  for (const SharedBytes& piece : message.data) bytes += piece.size();
  if (bytes != layout->total_bytes) return false;
  v1::CollectiveResponse response;
  response.set_call_id(call_id);
  response.mutable_status();  // OK
  for (const TensorSpec& spec : *message.result_specs) {
    *response.add_result() = TensorSpecToWire(spec);
  }
  std::string* data = response.mutable_data();
  data->reserve(bytes);
  for (const SharedBytes& piece : message.data) {
    data->append(piece.data(), piece.size());
  }
  const std::string record = response.SerializeAsString();
  {
    absl::MutexLock lock(&mu_);
    if (ended_) return false;
    absl::MutexLock push(&push_mu_);
    absl::StatusOr<bool> pushed = control_->responses().TryPush(record);
    if (!pushed.ok() || !*pushed) return false;
    // The thread forgets the call when it next wakes; no need to wake it.
    Item answered;
    answered.kind = Item::Kind::kAnswered;
    answered.serial = serial;
    items_.push_back(std::move(answered));
  }
  return true;
}

void SharedMemorySession::Resume(uint64_t serial) {
  {
    absl::MutexLock lock(&mu_);
    if (ended_) return;
    resumed_.insert(serial);
  }
  Ring();
}

void SharedMemorySession::End(const absl::Status& why) {
  std::deque<Item> dropped;
  {
    absl::MutexLock lock(&mu_);
    ended_ = true;
    dropped.swap(items_);
    resumed_.clear();
  }
  dropped.clear();
  CancelLiveCalls();
  for (const auto& [offset, held] : handed_out_) {
    for (int i = 0; i < held.count; ++i) results_->Unref(offset);
  }
  handed_out_.clear();
  socket_.reset();
  const bool expected = why.code() == absl::StatusCode::kUnavailable ||
                        why.code() == absl::StatusCode::kCancelled;
  const int ranks[] = {peer_.rank};
  log_->Log({expected ? LogSeverity::kInfo : LogSeverity::kWarning,
             "shm_session_ended",
             absl::StrCat("same-host session of job ", peer_.job, " rank ",
                          peer_.rank, " (pid ", peer_.pid, ", uid ", peer_.uid,
                          ") ended after ", calls_served_, " calls: ",
                          why.message()),
             peer_.job, std::nullopt, "", ranks});
}

absl::Status SharedMemorySession::Step(absl::Time now, bool* look_again_soon) {
  *look_again_soon = false;
  MessageRing& requests = control_->requests();
  if (!stop_.load(std::memory_order_acquire)) {
    std::string record;
    while (true) {
      absl::StatusOr<bool> popped = requests.TryPop(&record);
      if (!popped.ok()) return popped.status();
      if (!*popped) break;
      if (absl::Status s = HandleRecord(record); !s.ok()) return s;
    }
  }
  FeedResumed();
  ProcessItems();
  if (absl::Status s = PushResponses(); !s.ok()) {
    if (s.code() != absl::StatusCode::kResourceExhausted) return s;
    *look_again_soon = true;
  }
  if (stop_.load(std::memory_order_acquire)) {
    return absl::CancelledError("reducerd is shutting down");
  }
  if (now >= next_socket_check_) {
    next_socket_check_ = now + kSocketCheck;
    if (absl::Status s = CheckSocket(); !s.ok()) return s;
  }
  if (now >= next_seat_check_ && check_seat_ != nullptr) {
    next_seat_check_ = now + kSeatCheck;
    if (absl::Status seat = check_seat_(); !seat.ok()) {
      lost_seat_ = true;
      return absl::Status(seat.code(),
                          absl::StrCat("the peer lost its seat: ",
                                       seat.message()));
    }
  }
  return absl::OkStatus();
}

absl::Status SharedMemorySession::HandleRecord(const std::string& record) {
  v1::CollectiveRequest request;
  if (!request.ParseFromString(record)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a request record of ", record.size(),
        " bytes does not parse as a CollectiveRequest"));
  }
  if (absl::Status s = Release(request); !s.ok()) return s;
  const bool is_call = request.has_header() || !request.data().empty() ||
                       request.has_data_range() || request.offset() != 0;
  if (is_call) return StartCall(request);
  if (request.call_id() != 0) CancelCall(request.call_id());
  return absl::OkStatus();
}

absl::Status SharedMemorySession::Release(const v1::CollectiveRequest& request) {
  for (const v1::SegmentRange& r : request.released()) {
    auto it = handed_out_.find(r.offset());
    if (it == handed_out_.end() || it->second.size != r.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "a request record releases bytes [", r.offset(), ", +", r.size(),
          ") of the result segment, which reducerd did not hand out as a "
          "result (or got back already)"));
    }
    if (--it->second.count == 0) handed_out_.erase(it);
    results_->Unref(r.offset());
  }
  return absl::OkStatus();
}

absl::Status SharedMemorySession::StartCall(v1::CollectiveRequest& request) {
  const uint64_t call_id = request.call_id();
  if (call_id == 0) {
    return absl::InvalidArgumentError(
        "a call's request record must carry a nonzero call_id");
  }
  if (!request.has_header()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "call ", call_id, ": a call's request record must carry `header` "
        "(only a cancel carries nothing but the call_id)"));
  }
  if (request.offset() != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "call ", call_id, ": the payload must be whole, at offset 0 (got "
        "offset ", request.offset(), ")"));
  }
  if (request.has_data_range() && !request.data().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "call ", call_id, ": the payload is either inline in `data` or in "
        "`data_range`, not both"));
  }
  const uint64_t range_offset = request.data_range().offset();
  const uint64_t range_size = request.data_range().size();
  if (request.has_data_range() &&
      (range_offset > input_->size() ||
       range_size > input_->size() - range_offset)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "call ", call_id, ": data_range [", range_offset, ", +", range_size,
        ") lies outside the input segment of ", input_->size(), " bytes"));
  }
  if (in_flight_.contains(call_id)) {
    return absl::InvalidArgumentError(
        absl::StrCat("call id ", call_id, " is already in flight"));
  }

  auto owned = std::make_unique<Call>();
  Call& call = *owned;
  call.call_id = call_id;
  call.serial = ++last_serial_;
  call.rank = request.header().rank();
  call.channel = std::make_shared<RingAttempt>(
      weak_from_this(), call.serial, call_id, !request.has_data_range());
  // Only a range of the client's input segment must be let go of before
  // the response: an inline payload is already reducerd's own.
  call.input_released =
      std::make_shared<std::atomic<bool>>(!request.has_data_range());
  if (request.has_data_range()) {
    call.input = std::make_shared<const InputOwner>(
        input_, range_offset, control_, call.input_released);
    call.input_bytes = range_size;
  } else {
    call.input_bytes = request.data().size();
    call.input = std::make_shared<const InputOwner>(
        std::move(*request.mutable_data()));
  }
  call.input_data = call.input->data();
  calls_[call.serial] = std::move(owned);
  in_flight_[call_id] = call.serial;
  ++calls_served_;

  const v1::CollectiveHeader& header = request.header();
  if (header.job() != peer_.job || header.session_id() != peer_.session_id ||
      header.rank() != peer_.rank) {
    EndCall(call, absl::PermissionDeniedError(absl::StrCat(
                      "call ", call_id, " names job ", header.job(), " rank ",
                      header.rank(), ", but this same-host session carries "
                      "only the calls of job ", peer_.job, " rank ",
                      peer_.rank, " (of the session it was opened for)")));
    return absl::OkStatus();
  }
  absl::StatusOr<std::shared_ptr<Collective>> attached =
      attach_(header, call.channel);
  if (!attached.ok()) {
    // A call the collective refused is ended by its channel's own Fail,
    // queued already, which says why.
    if (!IsRefusedByCollective(attached.status())) {
      EndCall(call, attached.status());
    }
    return absl::OkStatus();
  }
  call.collective = *std::move(attached);
  // A replay feeds nothing: its result was sent already (no collective) or
  // comes from the resumed collective.
  if (header.replay()) {
    call.input.reset();
    return absl::OkStatus();
  }
  Feed(call);
  return absl::OkStatus();
}

void SharedMemorySession::CancelCall(uint64_t call_id) {
  auto it = in_flight_.find(call_id);
  if (it == in_flight_.end()) return;  // answered already
  Call& call = *calls_.at(it->second);
  if (call.end.has_value()) return;
  if (call.collective != nullptr) {
    call.collective->OnRankCancelled(call.rank, call.channel.get());
  }
  EndCall(call, absl::CancelledError(absl::StrCat(
                    "call ", call_id, " was cancelled by its client")));
}

void SharedMemorySession::Feed(Call& call) {
  if (call.end.has_value() || call.input == nullptr ||
      call.collective == nullptr) {
    return;
  }
  while (true) {
    const size_t n = std::min(chunk_bytes_, call.input_bytes - call.fed);
    Payload piece;
    if (n > 0) piece.Append(SharedBytes(call.input, call.input_data + call.fed, n));
    const uint64_t offset = call.fed;
    call.fed += n;
    const bool more = call.collective->OnData(call.rank, offset, std::move(piece));
    if (call.fed == call.input_bytes) {
      call.collective->OnInputEnd(call.rank);
      call.input.reset();
      return;
    }
    if (!more) {
      absl::MutexLock lock(&mu_);
      if (resumed_.erase(call.serial) == 0) {
        call.paused = true;
        return;
      }
    }
  }
}

void SharedMemorySession::FeedResumed() {
  absl::flat_hash_set<uint64_t> resumed;
  {
    absl::MutexLock lock(&mu_);
    resumed.swap(resumed_);
  }
  for (uint64_t serial : resumed) {
    auto it = calls_.find(serial);
    if (it == calls_.end() || !it->second->paused) continue;
    it->second->paused = false;
    Feed(*it->second);
  }
}

void SharedMemorySession::ProcessItems() {
  std::deque<Item> items;  // their bytes go with this function's end
  {
    absl::MutexLock lock(&mu_);
    items.swap(items_);
  }
  for (Item& item : items) {
    auto it = calls_.find(item.serial);
    if (it == calls_.end()) continue;  // answered already
    Call& call = *it->second;
    switch (item.kind) {
      case Item::Kind::kMessage:
        ProcessMessage(call, item);
        break;
      case Item::Kind::kFinish:
        EndCall(call, absl::OkStatus());
        break;
      case Item::Kind::kFail:
        EndCall(call, item.status);
        break;
      case Item::Kind::kAnswered:
        in_flight_.erase(call.call_id);
        calls_.erase(it);
        break;
    }
  }
}

void SharedMemorySession::ProcessMessage(Call& call, Item& item) {
  std::shared_ptr<Collective> collective = call.collective;
  absl::Status copied;
  if (!call.end.has_value()) {
    ResultMessage& message = item.message;
    if (!call.result_started) {
      call.result_started = true;
      call.specs = message.result_specs;
      if (call.specs != nullptr) {
        absl::StatusOr<PayloadLayout> layout = ComputePayloadLayout(*call.specs);
        if (layout.ok()) {
          call.result_bytes = layout->total_bytes;
        } else {
          copied = absl::InternalError(absl::StrCat(
              "call ", call.call_id, ": the result's specs have no layout: ",
              layout.status().message()));
        }
      }
      if (copied.ok() && call.result_bytes <= kInlineResultBytes) {
        call.inline_result.assign(call.result_bytes, '\0');
      } else if (copied.ok()) {
        SharedMemoryResults::Identity identity;
        identity.bytes = call.result_bytes;
        identity.offset = message.offset;
        for (const SharedBytes& piece : message.data) {
          if (piece.size() == 0) continue;
          identity.owner = piece.owner();
          identity.data = piece.data();
          break;
        }
        call.writing = results_->Open(identity);
        if (call.writing != nullptr) {
          call.range = call.writing->range;
        } else {
          copied = absl::ResourceExhaustedError(absl::StrCat(
              "call ", call.call_id, ": its result of ", call.result_bytes,
              " bytes does not fit in what is free of the job's result "
              "segment of ", results_->size(), " bytes (",
              results_->used(), " in use; its size follows the "
              "ClientOptions::shared_memory_bytes of the job's first "
              "same-host rank): raise that, or release results sooner"));
        }
      }
    }
    char* dest = call.range.has_value() ? results_->data() + *call.range
                                        : call.inline_result.data();
    size_t message_bytes = 0;
    for (const SharedBytes& piece : message.data) message_bytes += piece.size();
    const uint64_t message_end = message.offset + message_bytes;
    // A range another call of the same result copied this message's bytes
    // into already holds them.
    const bool written = call.writing != nullptr &&
                         call.writing->Holds(message.offset, message_end);
    uint64_t at = message.offset;
    for (const SharedBytes& piece : message.data) {
      if (written) break;
      if (!copied.ok()) break;
      if (at > call.result_bytes || piece.size() > call.result_bytes - at) {
        copied = absl::InternalError(absl::StrCat(
            "call ", call.call_id, ": result bytes at ", at, ", +",
            piece.size(), " lie outside its result of ", call.result_bytes,
            " bytes"));
        break;
      }
      if (piece.size() > 0) std::memcpy(dest + at, piece.data(), piece.size());
      at += piece.size();
    }
    if (copied.ok() && !written && call.writing != nullptr) {
      call.writing->MarkCopied(message.offset, message_end);
    }
    message.data.clear();
  }
  // The last message completes the call without a write notice.
  if (!item.last && collective != nullptr) collective->OnWriteDone(call.rank);
  if (!copied.ok()) {
    // The collective hears only that the call was cancelled: say why here.
    const int ranks[] = {call.rank};
    log_->Log({LogSeverity::kWarning, "shm_result_failed",
               absl::StrCat("same-host session of job ", peer_.job, " rank ",
                            peer_.rank, ": ", copied.ToString()),
               peer_.job, std::nullopt, "", ranks});
    if (collective != nullptr) {
      collective->OnRankCancelled(call.rank, call.channel.get());
    }
    EndCall(call, copied);
  } else if (item.last) {
    EndCall(call, absl::OkStatus());
  }
}

void SharedMemorySession::EndCall(Call& call, const absl::Status& status) {
  if (!call.end.has_value()) call.end = status;
  if (call.writing != nullptr) {
    results_->Close(call.writing);
    call.writing.reset();
  }
  call.input.reset();
  call.paused = false;
  call.collective.reset();
}

std::string SharedMemorySession::ResponseRecord(Call& call) {
  v1::CollectiveResponse response;
  response.set_call_id(call.call_id);
  *response.mutable_status() = ToCallStatus(*call.end);
  if (call.end->ok()) {
    if (call.specs != nullptr) {
      for (const TensorSpec& spec : *call.specs) {
        *response.add_result() = TensorSpecToWire(spec);
      }
    }
    if (call.range.has_value()) {
      response.mutable_data_range()->set_offset(*call.range);
      response.mutable_data_range()->set_size(call.result_bytes);
    } else {
      response.set_data(call.inline_result);
    }
  }
  return response.SerializeAsString();
}

absl::Status SharedMemorySession::PushResponses() {
  MessageRing& responses = control_->responses();
  std::vector<uint64_t> answered;
  absl::Status outcome;
  for (auto& [serial, owned] : calls_) {
    Call& call = *owned;
    if (!call.end.has_value() ||
        !call.input_released->load(std::memory_order_acquire)) {
      continue;
    }
    std::string record = ResponseRecord(call);
    absl::MutexLock push(&push_mu_);
    absl::StatusOr<bool> pushed = responses.TryPush(record);
    if (!pushed.ok() &&
        pushed.status().code() == absl::StatusCode::kInvalidArgument) {
      // Too large a record (a result of very many tensors): the call fails.
      call.end = absl::ResourceExhaustedError(absl::StrCat(
          "call ", call.call_id, ": its response record would exceed the "
          "ring's limit: ", pushed.status().message()));
      record = ResponseRecord(call);
      pushed = responses.TryPush(record);
    }
    if (!pushed.ok()) return pushed.status();
    if (!*pushed) {
      outcome = absl::ResourceExhaustedError("the response ring is full");
      break;
    }
    if (call.range.has_value()) {
      // The call's reference to its range becomes the client's, or goes.
      if (call.end->ok()) {
        HandedOut& held = handed_out_[*call.range];
        held.size = call.result_bytes;
        ++held.count;
      } else {
        results_->Unref(*call.range);
      }
    }
    in_flight_.erase(call.call_id);
    answered.push_back(serial);
  }
  for (uint64_t serial : answered) calls_.erase(serial);
  return outcome;
}

absl::Status SharedMemorySession::CheckSocket() {
  pollfd p{socket_.get(), POLLIN | POLLRDHUP, 0};
  const int n = poll(&p, 1, 0);
  if (n <= 0) return absl::OkStatus();  // nothing, or EINTR: next time
  if ((p.revents & (POLLHUP | POLLRDHUP | POLLERR | POLLNVAL)) != 0) {
    return absl::UnavailableError("the client closed its socket");
  }
  if ((p.revents & POLLIN) != 0) {
    char byte;
    const ssize_t r = recv(socket_.get(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (r == 0) return absl::UnavailableError("the client closed its socket");
    if (r > 0) {
      return absl::InvalidArgumentError(
          "the client sent a message on the socket after the handshake "
          "(nothing is expected there)");
    }
  }
  return absl::OkStatus();
}

void SharedMemorySession::CancelLiveCalls() {
  absl::flat_hash_map<uint64_t, std::unique_ptr<Call>> calls;
  calls.swap(calls_);
  in_flight_.clear();
  for (auto& [serial, call] : calls) {
    if (!call->end.has_value() && call->collective != nullptr) {
      call->collective->OnRankCancelled(call->rank, call->channel.get());
    }
    if (call->writing != nullptr) results_->Close(call->writing);
    if (call->range.has_value()) results_->Unref(*call->range);
  }
}

}  // namespace reducer
