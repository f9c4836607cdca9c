// The pieces of one call of a SharedMemorySession, shared by session.cc (its
// request record, its payload fed to the Collective) and
// session_responses.cc (what the Collective sends, copied and answered):
// the call's RankChannel (RingAttempt), the owner of its input bytes
// (InputOwner) and the call itself (Call). Private to server/shm.
#ifndef REDUCER_SERVER_SHM_SESSION_CALL_H_
#define REDUCER_SERVER_SHM_SESSION_CALL_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "core/shm/control_segment.h"
#include "core/shm/shared_segment.h"
#include "server/engine/collective.h"
#include "server/engine/rank_channel.h"
#include "server/engine/shared_bytes.h"
#include "server/shm/results.h"
#include "server/shm/session.h"

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
      : session_(std::move(session)),
        serial_(serial),
        call_id_(call_id),
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
  std::shared_ptr<AttachedCollective>
      collective;  // null until attached, and once over

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
  // Its rank's reservation, from the first message that carried one
  // (ResultMessage::hold): kept until the response is in the ring, as a
  // gRPC stream keeps it until the answer is written.
  std::shared_ptr<const void> hold;
};

}  // namespace reducer

#endif  // REDUCER_SERVER_SHM_SESSION_CALL_H_
