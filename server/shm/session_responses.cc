// SharedMemorySession's answering side: what the calls' channels queue
// (Enqueue, or AnswerAtOnce for the small-call fast path), copied by the
// job's thread into each call's result (ProcessItems, ProcessMessage), and
// the response records pushed once a call's end is known (PushResponses).
// See session.h for the protocol.
#include <cstring>
#include <deque>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/payload_layout.h"
#include "proto/reducer/v1/call_status.h"
#include "proto/reducer/v1/wire_conversion.h"
#include "server/shm/session.h"
#include "server/shm/session_call.h"

namespace reducer {

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
  std::shared_ptr<AttachedCollective> collective = call.collective;
  absl::Status copied;
  if (!call.end.has_value()) {
    ResultMessage& message = item.message;
    if (!call.result_started) {
      call.result_started = true;
      call.specs = message.result_specs;
      if (call.specs != nullptr) {
        absl::StatusOr<PayloadLayout> layout =
            ComputePayloadLayout(*call.specs);
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
              "segment of ",
              results_->size(), " bytes (", results_->used(),
              " in use; its size follows the "
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
        copied = absl::InternalError(
            absl::StrCat("call ", call.call_id, ": result bytes at ", at, ", +",
                         piece.size(), " lie outside its result of ",
                         call.result_bytes, " bytes"));
        break;
      }
      if (piece.size() > 0) std::memcpy(dest + at, piece.data(), piece.size());
      at += piece.size();
    }
    if (copied.ok() && !written && call.writing != nullptr) {
      call.writing->MarkCopied(message.offset, message_end);
    }
    message.data.clear();
    if (call.hold == nullptr) call.hold = std::move(message.hold);
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
  size_t unread = 0;
  for (auto& [serial, owned] : calls_) {
    Call& call = *owned;
    if (!call.end.has_value() ||
        !call.input_released->load(std::memory_order_acquire)) {
      continue;
    }
    if (!outcome.ok()) {
      // Due, but the ring is full: its client has not taken enough.
      unread += kWaitingCallBytes + call.inline_result.size();
      continue;
    }
    std::string record = ResponseRecord(call);
    absl::MutexLock push(&push_mu_);
    absl::StatusOr<bool> pushed = responses.TryPush(record);
    if (!pushed.ok() &&
        pushed.status().code() == absl::StatusCode::kInvalidArgument) {
      // Too large a record (a result of very many tensors): the call fails.
      call.end = absl::ResourceExhaustedError(
          absl::StrCat("call ", call.call_id,
                       ": its response record would exceed the "
                       "ring's limit: ",
                       pushed.status().message()));
      record = ResponseRecord(call);
      pushed = responses.TryPush(record);
    }
    if (!pushed.ok()) return pushed.status();
    if (!*pushed) {
      outcome = absl::ResourceExhaustedError("the response ring is full");
      unread += kWaitingCallBytes + call.inline_result.size();
      continue;
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
  unread_answer_bytes_ = unread;
  return outcome;
}

}  // namespace reducer
