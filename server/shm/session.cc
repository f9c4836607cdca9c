#include "server/shm/session.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/shm/message_ring.h"
#include "server/shm/session_call.h"

namespace reducer {

SharedMemorySession::SharedMemorySession(
    Parts parts, SharedMemoryResults* results, JobDoor::AttachFn attach,
    size_t chunk_bytes, size_t max_unread_answer_bytes, const Logger* log)
    : peer_(std::move(parts.peer)),
      socket_(std::move(parts.socket)),
      results_(results),
      control_(std::move(parts.control)),
      input_(std::make_shared<const SharedSegment>(std::move(parts.input))),
      attach_(std::move(attach)),
      check_seat_(std::move(parts.check_seat)),
      chunk_bytes_(chunk_bytes),
      max_unread_answer_bytes_(max_unread_answer_bytes),
      log_(log),
      // Wall-clock times, as the job's thread passes to Step (see
      // server/shm/job.cc): periodic checks, not deadlines.
      next_socket_check_(absl::Now() + kSocketCheck),
      next_seat_check_(absl::Now() + kSeatCheck) {}

std::shared_ptr<SharedMemorySession> SharedMemorySession::Create(
    Parts parts, SharedMemoryResults* results, JobDoor::AttachFn attach,
    size_t chunk_bytes, size_t max_unread_answer_bytes, const Logger* log) {
  auto session = std::make_shared<SharedMemorySession>(
      std::move(parts), results, std::move(attach), chunk_bytes,
      max_unread_answer_bytes, log);
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
  // A client still connected (its seat was lost while it was stopped or
  // starved, it broke the protocol, reducerd stops) may yet read a
  // response already in its ring and copy that result out of its range:
  // such ranges stay referenced for as long as the segment lives, so that
  // no later result is written over them. A client that closed its socket
  // (or died) reads nothing more.
  const bool peer_closed = PeerClosed();
  size_t kept_bytes = 0;
  for (const auto& [offset, held] : handed_out_) {
    if (!peer_closed) {
      kept_bytes += held.size;
      continue;
    }
    for (int i = 0; i < held.count; ++i) results_->Unref(offset);
  }
  const size_t kept_ranges = peer_closed ? 0 : handed_out_.size();
  handed_out_.clear();
  socket_.reset();
  const bool expected = why.code() == absl::StatusCode::kUnavailable ||
                        why.code() == absl::StatusCode::kCancelled;
  const int ranks[] = {peer_.rank};
  log_->Log({expected ? LogSeverity::kInfo : LogSeverity::kWarning,
             "shm_session_ended",
             absl::StrCat(
                 "same-host session of job ", peer_.job, " rank ", peer_.rank,
                 " (pid ", peer_.pid, ", uid ", peer_.uid, ") ended after ",
                 calls_served_, " calls: ", why.message(),
                 kept_ranges == 0
                     ? ""
                     : absl::StrCat("; its client is still connected, so "
                                    "the ",
                                    kept_ranges, " result ranges (", kept_bytes,
                                    " bytes) handed to it stay taken "
                                    "while the job's result segment "
                                    "lives")),
             peer_.job, std::nullopt, "", ranks});
}

absl::Status SharedMemorySession::Step(absl::Time now, bool* look_again_soon) {
  *look_again_soon = false;
  bool held_back = false;
  if (!stop_.load(std::memory_order_acquire)) {
    if (absl::Status s = TakeRequests(&held_back); !s.ok()) return s;
  }
  FeedResumed();
  ProcessItems();
  if (absl::Status s = PushResponses(); !s.ok()) {
    if (s.code() != absl::StatusCode::kResourceExhausted) return s;
    *look_again_soon = true;
  }
  // Requests left in their ring ring no bell again: take them next pass.
  if (held_back && unread_answer_bytes_ <= max_unread_answer_bytes_) {
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
      return absl::Status(seat.code(), absl::StrCat("the peer lost its seat: ",
                                                    seat.message()));
    }
  }
  return absl::OkStatus();
}

absl::Status SharedMemorySession::TakeRequests(bool* held_back) {
  if (unread_answer_bytes_ > max_unread_answer_bytes_) {
    *held_back = true;
    if (!warned_unread_) {
      warned_unread_ = true;
      const int ranks[] = {peer_.rank};
      log_->Log(
          {LogSeverity::kWarning, "shm_answers_unread",
           absl::StrCat(
               "same-host session of job ", peer_.job, " rank ", peer_.rank,
               " (pid ", peer_.pid, "): its client has not taken ",
               unread_answer_bytes_,
               " bytes of answers from its response "
               "ring, over the bound of ",
               max_unread_answer_bytes_,
               " bytes (--window x --chunk_bytes); reducerd takes none of "
               "its requests until it does"),
           peer_.job, std::nullopt, "", ranks});
    }
    return absl::OkStatus();
  }
  MessageRing& requests = control_->requests();
  std::string record;
  // A client that pushes as fast as they are taken would make the pass
  // endless, and the answers it makes uncounted until it ends.
  size_t taken_bytes = 0;
  while (taken_bytes < MessageRing::kDefaultCapacity) {
    absl::StatusOr<bool> popped = requests.TryPop(&record);
    if (!popped.ok()) return popped.status();
    if (!*popped) return absl::OkStatus();
    taken_bytes += record.size();
    if (absl::Status s = HandleRecord(record); !s.ok()) return s;
  }
  *held_back = true;  // more may wait: the next pass takes them
  return absl::OkStatus();
}

absl::Status SharedMemorySession::HandleRecord(const std::string& record) {
  v1::CollectiveRequest request;
  if (!request.ParseFromString(record)) {
    return absl::InvalidArgumentError(
        absl::StrCat("a request record of ", record.size(),
                     " bytes does not parse as a CollectiveRequest"));
  }
  if (absl::Status s = Release(request); !s.ok()) return s;
  const bool is_call = request.has_header() || !request.data().empty() ||
                       request.has_data_range() || request.offset() != 0;
  if (is_call) return StartCall(request);
  if (request.call_id() != 0) CancelCall(request.call_id());
  return absl::OkStatus();
}

absl::Status SharedMemorySession::Release(
    const v1::CollectiveRequest& request) {
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
    return absl::InvalidArgumentError(
        absl::StrCat("call ", call_id,
                     ": a call's request record must carry `header` "
                     "(only a cancel carries nothing but the call_id)"));
  }
  if (request.offset() != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("call ", call_id,
                     ": the payload must be whole, at offset 0 (got "
                     "offset ",
                     request.offset(), ")"));
  }
  if (request.has_data_range() && !request.data().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("call ", call_id,
                     ": the payload is either inline in `data` or in "
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
    call.input =
        std::make_shared<const InputOwner>(std::move(*request.mutable_data()));
  }
  call.input_data = call.input->data();
  calls_[call.serial] = std::move(owned);
  in_flight_[call_id] = call.serial;
  ++calls_served_;

  const v1::CollectiveHeader& header = request.header();
  if (header.job() != peer_.job || header.session_id() != peer_.session_id ||
      header.rank() != peer_.rank) {
    EndCall(call, absl::PermissionDeniedError(
                      absl::StrCat("call ", call_id, " names job ",
                                   header.job(), " rank ", header.rank(),
                                   ", but this same-host session carries "
                                   "only the calls of job ",
                                   peer_.job, " rank ", peer_.rank,
                                   " (of the session it was opened for)")));
    return absl::OkStatus();
  }
  absl::StatusOr<std::shared_ptr<AttachedCollective>> attached =
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
    if (n > 0)
      piece.Append(SharedBytes(call.input, call.input_data + call.fed, n));
    const uint64_t offset = call.fed;
    call.fed += n;
    const bool more =
        call.collective->OnData(call.rank, offset, std::move(piece));
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

bool SharedMemorySession::PeerClosed() {
  // CheckSocket says UNAVAILABLE exactly when the client's end is closed.
  return !socket_.valid() || absl::IsUnavailable(CheckSocket());
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
