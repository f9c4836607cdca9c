// Test helper: a RankChannel that records what a Collective does to one
// rank's call: every message (decoded), the result bytes at their offsets,
// the specs of its first message, how the call ended, how often reading
// was resumed, and the writes whose OnWriteDone the test owes.
// Thread-safe: reductions on the pool and timers call in from their threads.
//
//   auto channel = std::make_shared<RecordingChannel>();
//   collective->Attach(channel, rank, fingerprint, "");
//   ASSERT_TRUE(channel->WaitEnded());
//   EXPECT_EQ(channel->result(), expected_bytes);
#ifndef REDUCER_SERVER_ENGINE_RECORDING_CHANNEL_H_
#define REDUCER_SERVER_ENGINE_RECORDING_CHANNEL_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/fingerprint.h"
#include "server/engine/rank_channel.h"
#include "server/engine/shared_bytes.h"

namespace reducer {

// One result message as the engine handed it to a rank's channel.
struct SentMessage {
  uint64_t offset = 0;
  std::vector<TensorSpec> result;  // the result specs (first message)
  std::string data;
  bool last = false;
};

class RecordingChannel final : public RankChannel {
 public:
  void Send(ResultMessage message, bool last) override {
    absl::MutexLock lock(&mu_);
    SentMessage sent;
    sent.offset = message.offset;
    sent.last = last;
    if (message.result_specs != nullptr) {
      ++headers_;
      specs_ = *message.result_specs;
      sent.result = specs_;
    }
    for (const SharedBytes& piece : message.data) {
      sent.data.append(piece.data(), piece.size());
      if (result_.size() < message.offset + piece.size()) {
        result_.resize(message.offset + piece.size(), '\xee');
      }
      if (piece.size() > 0) {
        std::memcpy(&result_[message.offset], piece.data(), piece.size());
      }
      message.offset += piece.size();
      bytes_ += piece.size();
    }
    sent_.push_back(std::move(sent));
    if (!last) ++unacknowledged_;
    if (last) ended_ok_ = true;
  }
  void FinishWhenSent() override {
    absl::MutexLock lock(&mu_);
    ended_ok_ = true;
  }
  void Fail(const absl::Status& status) override {
    absl::MutexLock lock(&mu_);
    failure_ = status;
    ++fail_calls_;
  }
  void ResumeReading() override {
    absl::MutexLock lock(&mu_);
    ++resumes_;
  }

  // True once the call ended (OK or failed) within `wait`.
  bool WaitEnded(absl::Duration wait = absl::Seconds(20)) {
    absl::MutexLock lock(&mu_);
    auto ended = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return ended_ok_ || !failure_.ok();
    };
    return mu_.AwaitWithTimeout(absl::Condition(&ended), wait);
  }
  // True once at least `n` messages were sent within `wait`.
  bool WaitMessages(size_t n, absl::Duration wait = absl::Seconds(20)) {
    absl::MutexLock lock(&mu_);
    auto enough = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return sent_.size() >= n;
    };
    return mu_.AwaitWithTimeout(absl::Condition(&enough), wait);
  }
  // What was recorded so far: how the call ended, the result bytes at
  // their offsets ('\xee' where none came), how many bytes and headers
  // came, the specs of the first message, every message in the order sent,
  // how often Fail and ResumeReading were called.
  bool ended_ok() { return Read(&RecordingChannel::ended_ok_); }
  absl::Status failure() { return Read(&RecordingChannel::failure_); }
  std::string result() { return Read(&RecordingChannel::result_); }
  size_t bytes() { return Read(&RecordingChannel::bytes_); }
  int headers() { return Read(&RecordingChannel::headers_); }
  std::vector<TensorSpec> specs() { return Read(&RecordingChannel::specs_); }
  std::vector<SentMessage> sent() { return Read(&RecordingChannel::sent_); }
  int messages() { return static_cast<int>(sent().size()); }
  int fail_calls() { return Read(&RecordingChannel::fail_calls_); }
  int resumes() { return Read(&RecordingChannel::resumes_); }
  // Messages sent with last == false whose OnWriteDone the test has not
  // delivered yet; resets the count (the caller delivers them).
  int TakeUnacknowledged() {
    absl::MutexLock lock(&mu_);
    return std::exchange(unacknowledged_, 0);
  }

 private:
  // A copy of the member `field`, read under the lock.
  template <typename T>
  T Read(T RecordingChannel::*field) {
    absl::MutexLock lock(&mu_);
    return this->*field;
  }

  absl::Mutex mu_;
  std::string result_ ABSL_GUARDED_BY(mu_);
  size_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int headers_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<SentMessage> sent_ ABSL_GUARDED_BY(mu_);
  int unacknowledged_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<TensorSpec> specs_ ABSL_GUARDED_BY(mu_);
  bool ended_ok_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status failure_ ABSL_GUARDED_BY(mu_);
  int fail_calls_ ABSL_GUARDED_BY(mu_) = 0;
  int resumes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace reducer

#endif  // REDUCER_SERVER_ENGINE_RECORDING_CHANNEL_H_
