// FakeUpstreamSession: an UpstreamSession (upstream.h) for the relay's
// tests, in process: it records each call the relay makes upstream (its
// header, payload and result memory), each Leave and each report of ranks
// lost, and answers a call when the test says.
#ifndef REDUCER_SERVER_RELAY_FAKE_UPSTREAM_SESSION_H_
#define REDUCER_SERVER_RELAY_FAKE_UPSTREAM_SESSION_H_

#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "core/fingerprint.h"
#include "core/tensor.h"
#include "gtest/gtest.h"
#include "server/relay/upstream.h"
#include "tests/status_matchers.h"

namespace reducer {

// Records each call; the test answers it with Answer(). A call's accessors
// wait for it: `call` counts the calls from 0 in the order they started.
class FakeUpstreamSession final : public UpstreamSession {
 public:
  void Start(
      v1::CollectiveHeader header, std::shared_ptr<UpstreamInput> input,
      std::shared_ptr<const ResultInto> into,
      std::function<void(absl::StatusOr<UpstreamResult>)> done) override {
    absl::MutexLock lock(&mu_);
    calls_.push_back({std::move(header), std::move(input), std::move(into),
                      std::move(done)});
  }
  void Leave(const std::string& cause) override {
    absl::MutexLock lock(&mu_);
    left_.push_back(cause);
  }
  absl::Status LoseRanks(const std::vector<int>& ranks,
                         const std::string& cause) override {
    absl::MutexLock lock(&mu_);
    lost_.push_back({ranks, cause});
    return lose_ranks_answer_;
  }

  // Waits for the call, then for its whole payload.
  std::string Payload(size_t call = 0) {
    std::shared_ptr<UpstreamInput> input = Wait(call).input;
    EXPECT_THAT(input->Await(input->size(), absl::Now() + absl::Seconds(20)),
                ::reducer::testing::IsOk());
    return std::string(input->data(), input->size());
  }
  v1::CollectiveHeader header(size_t call = 0) { return Wait(call).header; }
  std::shared_ptr<UpstreamInput> input(size_t call = 0) {
    return Wait(call).input;
  }
  // The calls started so far.
  size_t calls() {
    absl::MutexLock lock(&mu_);
    return calls_.size();
  }
  // The memory the relay gave for the call's result (null: none).
  std::shared_ptr<const ResultInto> into(size_t call = 0) {
    return Wait(call).into;
  }
  // Writes `bytes` as bytes [begin, ...) of the call's result into its
  // ResultInto (whose tensors are packed from 0 on, as one payload) and
  // tells the relay they landed, as a transport does, before the call ends.
  void Land(size_t begin, const std::string& bytes, size_t call = 0) {
    std::shared_ptr<const ResultInto> into = Wait(call).into;
    ASSERT_NE(into, nullptr)
        << "upstream call " << call << " was given no memory for its result";
    for (size_t i = 0; i < into->specs.size(); ++i) {
      const size_t from = into->offsets[i];
      const size_t to = from + static_cast<size_t>(*NumBytes(
                                   into->specs[i].dtype, into->specs[i].shape));
      const size_t b = std::max(begin, from);
      const size_t e = std::min(begin + bytes.size(), to);
      if (b >= e) continue;
      std::memcpy(into->data[i] + (b - from), bytes.data() + (b - begin),
                  e - b);
      into->landed(b, e);
    }
  }
  // Answers the call with one tensor of `spec` holding `bytes`, or `status`.
  // A call given memory for its result gets them there, its second half
  // landing before its first (as two shards' partitions may).
  void Answer(const TensorSpec& spec, const std::string& bytes,
              size_t call = 0) {
    if (Wait(call).into != nullptr) {
      Land(bytes.size() / 2, bytes.substr(bytes.size() / 2), call);
      Land(0, bytes.substr(0, bytes.size() / 2), call);
      EndLanded(call);
      return;
    }
    auto owned = std::make_shared<std::string>(bytes);
    UpstreamResult result;
    result.specs = {spec};
    result.data = {owned->data()};
    result.owner = owned;
    Wait(call).done(std::move(result));
  }
  // Ends a call given memory for its result with OK: its result is what
  // landed there.
  void EndLanded(size_t call = 0) {
    Call c = Wait(call);
    UpstreamResult result;
    result.specs = c.into->specs;
    result.data.assign(c.into->data.begin(), c.into->data.end());
    result.owner = c.into->owner;
    c.done(std::move(result));
  }
  void AnswerNothing(size_t call = 0) { Wait(call).done(UpstreamResult()); }
  void Refuse(const absl::Status& status, size_t call = 0) {
    Wait(call).done(status);
  }

  // Each LoseRanks so far, waiting up to 20 s for the `count`th.
  struct LostRanks {
    std::vector<int> ranks;
    std::string cause;
  };
  std::vector<LostRanks> lost(size_t count = 1) {
    absl::MutexLock lock(&mu_);
    const auto reported = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return lost_.size() >= count;
    };
    mu_.AwaitWithTimeout(absl::Condition(&reported), absl::Seconds(20));
    return lost_;
  }
  // The LoseRanks calls so far, without waiting.
  size_t lost_now() {
    absl::MutexLock lock(&mu_);
    return lost_.size();
  }
  // What LoseRanks answers from now on (OK at first).
  void AnswerLoseRanks(const absl::Status& answer) {
    absl::MutexLock lock(&mu_);
    lose_ranks_answer_ = answer;
  }

 private:
  struct Call {
    v1::CollectiveHeader header;
    std::shared_ptr<UpstreamInput> input;
    std::shared_ptr<const ResultInto> into;
    std::function<void(absl::StatusOr<UpstreamResult>)> done;
  };
  Call Wait(size_t call) {
    absl::MutexLock lock(&mu_);
    const auto started = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return calls_.size() > call;
    };
    EXPECT_TRUE(
        mu_.AwaitWithTimeout(absl::Condition(&started), absl::Seconds(20)))
        << "upstream call " << call << " never started";
    return call < calls_.size() ? calls_[call] : Call();
  }
  absl::Mutex mu_;
  std::vector<Call> calls_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> left_ ABSL_GUARDED_BY(mu_);
  std::vector<LostRanks> lost_ ABSL_GUARDED_BY(mu_);
  absl::Status lose_ranks_answer_ ABSL_GUARDED_BY(mu_);
};

}  // namespace reducer

#endif  // REDUCER_SERVER_RELAY_FAKE_UPSTREAM_SESSION_H_
