// The fixture of RelayCollective's tests: a RelayCollective against a fake
// upstream session (fake_upstream_session.h) that records what the relay
// sends and answers as the test says, with ranks as FakeRankChannels.
#ifndef REDUCER_SERVER_RELAY_RELAY_COLLECTIVE_FIXTURE_H_
#define REDUCER_SERVER_RELAY_RELAY_COLLECTIVE_FIXTURE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/fingerprint.h"
#include "gtest/gtest.h"
#include "proto/reducer/v1/wire_conversion.h"
#include "server/engine/clock.h"
#include "server/engine/fake_rank_channel.h"
#include "server/engine/string_bytes.h"
#include "server/relay/fake_upstream_session.h"
#include "server/relay/relay_collective.h"

namespace reducer {

template <typename T>
inline std::string Bytes(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()),
                     v.size() * sizeof(T));
}

inline Payload PayloadOf(const std::string& bytes) {
  Payload p;
  p.Append(StringBytes(bytes));
  return p;
}

class RelayCollectiveTest : public ::testing::Test {
 protected:
  RelayCollectiveTest() : timers_(&Clock::Steady()) {
    env_.timers = &timers_;
    env_.memory = &memory_;
    env_.metrics = &metrics_;
    env_.chunk_bytes = 64;  // so that payloads span several chunks
    env_.window = 2;
  }

  std::shared_ptr<RelayCollective> Make(std::vector<int> members) {
    return std::make_shared<RelayCollective>(
        env_, "allreduce #0 in job j", std::move(members), session_,
        [this](uint64_t saved, const std::vector<int>& absent) {
          saved_ = saved;
          absent_ = absent;
        });
  }

  // The header rank `rank` sends for `fp` (group and kind as the fp's).
  static v1::CollectiveHeader HeaderOf(const Fingerprint& fp, int rank) {
    v1::CollectiveHeader h;
    h.set_job("j");
    h.set_rank(rank);
    h.set_session_id("local-session");
    h.set_attempt_id("local-session/1");
    h.set_timeout_ms(20000);
    for (int r : fp.group) h.add_group(r);
    h.set_root(fp.root);
    for (const TensorSpec& t : fp.tensors)
      *h.add_tensors() = TensorSpecToWire(t);
    return h;
  }

  // Acknowledges every write of `ch` until its call ended, or 20 s passed
  // (messages may come from a reduction pool meanwhile).
  static void DrainWrites(RelayCollective& c, int rank, FakeRankChannel& ch) {
    const absl::Time give_up = absl::Now() + absl::Seconds(20);
    while (!ch.finished_ok() && ch.fail_calls() == 0 && absl::Now() < give_up) {
      int n = ch.TakeUnacknowledged();
      if (n == 0) absl::SleepFor(absl::Microseconds(100));
      for (; n > 0; --n) c.OnWriteDone(rank);
    }
  }

  TimerQueue timers_;
  MemoryBudget memory_{1 << 30};
  MetricsSink metrics_;
  RelayEnv env_;
  std::shared_ptr<FakeUpstreamSession> session_ =
      std::make_shared<FakeUpstreamSession>();
  uint64_t saved_ = 0;
  std::vector<int> absent_;
};

}  // namespace reducer

#endif  // REDUCER_SERVER_RELAY_RELAY_COLLECTIVE_FIXTURE_H_
