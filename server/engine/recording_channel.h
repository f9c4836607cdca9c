// Test helper: a RankChannel that records what a Collective does to one
// rank's call: the result bytes at their offsets, the specs of its first
// message, how many headers and messages it got, and how the call ended.
// Thread-safe: reductions on the pool and timers call in from their threads.
//
//   auto channel = std::make_shared<RecordingChannel>();
//   collective->Attach(channel, rank, fingerprint, "");
//   ASSERT_TRUE(channel->WaitEnded());
//   EXPECT_EQ(channel->result(), expected_bytes);
#ifndef REDUCER_SERVER_ENGINE_RECORDING_CHANNEL_H_
#define REDUCER_SERVER_ENGINE_RECORDING_CHANNEL_H_

#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/fingerprint.h"
#include "server/engine/rank_channel.h"
#include "server/engine/shared_bytes.h"

namespace reducer {

class RecordingChannel final : public RankChannel {
 public:
  void Send(ResultMessage message, bool last) override {
    absl::MutexLock lock(&mu_);
    if (message.result_specs != nullptr) {
      ++headers_;
      specs_ = *message.result_specs;
    }
    for (const SharedBytes& piece : message.data) {
      if (result_.size() < message.offset + piece.size()) {
        result_.resize(message.offset + piece.size(), '\xee');
      }
      if (piece.size() > 0) {
        std::memcpy(&result_[message.offset], piece.data(), piece.size());
      }
      message.offset += piece.size();
      bytes_ += piece.size();
    }
    ++messages_;
    if (last) ended_ok_ = true;
  }
  void FinishWhenSent() override {
    absl::MutexLock lock(&mu_);
    ended_ok_ = true;
  }
  void Fail(const absl::Status& status) override {
    absl::MutexLock lock(&mu_);
    failure_ = status;
  }
  void ResumeReading() override {}

  // True once the call ended (OK or failed) within `wait`.
  bool WaitEnded(absl::Duration wait = absl::Seconds(20)) {
    absl::MutexLock lock(&mu_);
    auto ended = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return ended_ok_ || !failure_.ok();
    };
    return mu_.AwaitWithTimeout(absl::Condition(&ended), wait);
  }
  bool ended_ok() {
    absl::MutexLock lock(&mu_);
    return ended_ok_;
  }
  absl::Status failure() {
    absl::MutexLock lock(&mu_);
    return failure_;
  }
  // The result bytes at their offsets ('\xee' where none came).
  std::string result() {
    absl::MutexLock lock(&mu_);
    return result_;
  }
  size_t bytes() {
    absl::MutexLock lock(&mu_);
    return bytes_;
  }
  int headers() {
    absl::MutexLock lock(&mu_);
    return headers_;
  }
  int messages() {
    absl::MutexLock lock(&mu_);
    return messages_;
  }
  std::vector<TensorSpec> specs() {
    absl::MutexLock lock(&mu_);
    return specs_;
  }

 private:
  absl::Mutex mu_;
  std::string result_ ABSL_GUARDED_BY(mu_);
  size_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int headers_ ABSL_GUARDED_BY(mu_) = 0;
  int messages_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<TensorSpec> specs_ ABSL_GUARDED_BY(mu_);
  bool ended_ok_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status failure_ ABSL_GUARDED_BY(mu_);
};

}  // namespace reducer

#endif  // REDUCER_SERVER_ENGINE_RECORDING_CHANNEL_H_
