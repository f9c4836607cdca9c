// The Collectives stream (many small collectives over one long-lived stream),
// driven by a raw gRPC client on the generated stubs: answers are tagged with
// their call's id and end with the call's status; a failed call ends only
// itself; messages that cannot be routed to a call end the stream with
// INVALID_ARGUMENT; a broken stream cancels its calls for every peer.
// Expected tensors come from tests/closed_form.h.
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/reducer/v1/call_status.h"
#include "proto/reducer/v1/reducer.pb.h"
#include "tests/closed_form.h"
#include "tests/fault_test_base.h"
#include "tests/raw_client.h"
#include "tests/status_matchers.h"

namespace reducer {
namespace testing {
namespace {

using ::testing::HasSubstr;

constexpr absl::Duration kCallTimeout = absl::Seconds(20);
// How soon a failure must be reported: well before any collective timeout.
constexpr absl::Duration kFast = absl::Milliseconds(2500);

std::string Payload(int rank, int64_t n, uint64_t seed) {
  std::vector<uint8_t> bytes =
      ClosedFormInput(ReduceOp::kSum, DataType::kFloat32, rank, n, seed);
  return std::string(bytes.begin(), bytes.end());
}

std::string Expected(const std::vector<int>& ranks, int64_t n, uint64_t seed) {
  std::vector<uint8_t> bytes =
      ClosedFormExpected(ReduceOp::kSum, DataType::kFloat32, ranks, n, seed);
  return std::string(bytes.begin(), bytes.end());
}

// One whole call: float32 [n] SUM all-reduce number `sequence` of the job.
v1::CollectiveRequest WholeCall(const RawSession& raw, uint64_t call_id,
                                uint64_t sequence, int64_t n, std::string data) {
  v1::CollectiveRequest m = raw.AllReduceRequest({n});
  m.mutable_header()->set_sequence(sequence);
  m.set_call_id(call_id);
  m.set_data(std::move(data));
  return m;
}

// What each call of a Collectives stream came to.
struct CallOutcome {
  std::string data;
  bool ended = false;
  // The status its last message carried; UNKNOWN until one came.
  absl::Status status = absl::UnknownError("no status came");
};

absl::flat_hash_map<uint64_t, CallOutcome> ByCall(const RawCallResult& result) {
  absl::flat_hash_map<uint64_t, CallOutcome> calls;
  for (const v1::CollectiveResponse& r : result.responses) {
    CallOutcome& c = calls[r.call_id()];
    EXPECT_FALSE(c.ended) << "call " << r.call_id() << " answered after its end";
    c.data += r.data();
    if (r.has_status()) {
      c.ended = true;
      c.status = FromCallStatus(r.status());
    }
  }
  return calls;
}

class CollectivesStreamTest : public FaultTest {
 protected:
  // Joins ranks 0..world_size-1 of `job` as raw sessions (concurrently:
  // each waits for all).
  std::vector<std::unique_ptr<RawSession>> JoinAll(const std::string& job,
                                                   int world_size) {
    std::vector<absl::StatusOr<std::unique_ptr<RawSession>>> joined(world_size);
    std::vector<std::thread> threads;
    for (int r = 0; r < world_size; ++r) {
      threads.emplace_back([&, r] {
        joined[r] = RawSession::Join(server()->address(), job, r, world_size,
                                     absl::Seconds(30));
      });
    }
    for (std::thread& t : threads) t.join();
    std::vector<std::unique_ptr<RawSession>> sessions;
    for (auto& j : joined) {
      EXPECT_TRUE(j.ok()) << j.status();
      if (j.ok()) sessions.push_back(*std::move(j));
    }
    return sessions;
  }

  // Runs one Collectives stream per rank at once, rank r sending calls[r].
  std::vector<RawCallResult> RunStreams(
      const std::vector<std::unique_ptr<RawSession>>& sessions,
      const std::vector<std::vector<v1::CollectiveRequest>>& calls) {
    std::vector<RawCallResult> results(sessions.size());
    std::vector<std::thread> threads;
    for (size_t r = 0; r < sessions.size(); ++r) {
      threads.emplace_back([&, r] {
        results[r] = sessions[r]->Call(calls[r], kCallTimeout,
                                       /*half_close=*/true, /*many_calls=*/true);
      });
    }
    for (std::thread& t : threads) t.join();
    return results;
  }
};

TEST_F(CollectivesStreamTest, CallsOnOneStreamAreAnsweredByTheirIds) {
  ASSERT_TRUE(StartServer());
  std::vector<std::unique_ptr<RawSession>> s = JoinAll(Job(), 2);
  ASSERT_EQ(s.size(), 2u);
  // Two all-reduces per rank on one stream each; the ids differ by rank.
  std::vector<std::vector<v1::CollectiveRequest>> calls(2);
  for (int r = 0; r < 2; ++r) {
    calls[r] = {WholeCall(*s[r], 7 + r, 0, 4, Payload(r, 4, 11)),
                WholeCall(*s[r], 9 + r, 1, 1000, Payload(r, 1000, 12))};
  }
  std::vector<RawCallResult> results = RunStreams(s, calls);
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(results[r].status.ok()) << "rank " << r << ": " << results[r].status;
    absl::flat_hash_map<uint64_t, CallOutcome> by_call = ByCall(results[r]);
    ASSERT_EQ(by_call.size(), 2u) << "rank " << r;
    const CallOutcome& first = by_call[7 + r];
    EXPECT_TRUE(first.ended);
    EXPECT_THAT(first.status, IsOk());
    EXPECT_EQ(first.data, Expected({0, 1}, 4, 11)) << "rank " << r;
    const CallOutcome& second = by_call[9 + r];
    EXPECT_TRUE(second.ended);
    EXPECT_THAT(second.status, IsOk());
    EXPECT_EQ(second.data, Expected({0, 1}, 1000, 12)) << "rank " << r;
  }
}

TEST_F(CollectivesStreamTest, AFailedCallEndsOnlyItselfForEveryRank) {
  ASSERT_TRUE(StartServer());
  std::vector<std::unique_ptr<RawSession>> s = JoinAll(Job(), 2);
  ASSERT_EQ(s.size(), 2u);
  std::vector<std::vector<v1::CollectiveRequest>> calls(2);
  // Rank 1's first call carries 12 of its 16 payload bytes.
  calls[0] = {WholeCall(*s[0], 1, 0, 4, Payload(0, 4, 21)),
              WholeCall(*s[0], 2, 1, 5, Payload(0, 5, 22))};
  calls[1] = {WholeCall(*s[1], 1, 0, 4, Payload(1, 4, 21).substr(0, 12)),
              WholeCall(*s[1], 2, 1, 5, Payload(1, 5, 22))};
  std::vector<RawCallResult> results = RunStreams(s, calls);
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(results[r].status.ok()) << "rank " << r << ": " << results[r].status;
    absl::flat_hash_map<uint64_t, CallOutcome> by_call = ByCall(results[r]);
    const CallOutcome& bad = by_call[1];
    EXPECT_TRUE(bad.ended);
    EXPECT_THAT(bad.status, StatusIs(absl::StatusCode::kInvalidArgument,
                                     HasSubstr("rank 1 closed its stream after "
                                               "12 of 16 payload bytes")))
        << "rank " << r;
    EXPECT_TRUE(bad.data.empty()) << "rank " << r << " got result bytes";
    const CallOutcome& good = by_call[2];
    EXPECT_THAT(good.status, IsOk()) << "rank " << r;
    EXPECT_EQ(good.data, Expected({0, 1}, 5, 22)) << "rank " << r;
  }
}

// A call the collective refuses (its name reused while a call of that name
// is in flight) feeds none of its bytes: the call in flight, and so the
// collective, are untouched, and complete with the right result.
TEST_F(CollectivesStreamTest, ARefusedCallFeedsNothingIntoTheCollective) {
  ASSERT_TRUE(StartServer());
  std::vector<std::unique_ptr<RawSession>> s = JoinAll(Job(), 2);
  ASSERT_EQ(s.size(), 2u);
  auto named = [](v1::CollectiveRequest m) {
    m.mutable_header()->set_name("dup");
    return m;
  };
  // Rank 0 sends "dup", then "dup" again with other bytes; rank 1 joins the
  // collective only after both are in.
  const std::vector<v1::CollectiveRequest> rank0 = {
      named(WholeCall(*s[0], 1, 0, 4, Payload(0, 4, 31))),
      named(WholeCall(*s[0], 2, 0, 4, Payload(0, 4, 99)))};
  RawCallResult first;
  std::thread sender([&] {
    first = s[0]->Call(rank0, kCallTimeout, /*half_close=*/true,
                       /*many_calls=*/true);
  });
  absl::SleepFor(absl::Milliseconds(500));
  const RawCallResult second =
      s[1]->Call({named(WholeCall(*s[1], 1, 0, 4, Payload(1, 4, 31)))},
                 kCallTimeout, /*half_close=*/true, /*many_calls=*/true);
  sender.join();

  absl::flat_hash_map<uint64_t, CallOutcome> by_call = ByCall(first);
  const CallOutcome& refused = by_call[2];
  EXPECT_TRUE(refused.ended);
  EXPECT_THAT(refused.status, StatusIs(absl::StatusCode::kFailedPrecondition,
                                       HasSubstr("rank 0 contributed twice")));
  EXPECT_TRUE(refused.data.empty());
  const CallOutcome& kept = by_call[1];
  EXPECT_THAT(kept.status, IsOk());
  EXPECT_EQ(kept.data, Expected({0, 1}, 4, 31));
  absl::flat_hash_map<uint64_t, CallOutcome> peer = ByCall(second);
  EXPECT_THAT(peer[1].status, IsOk());
  EXPECT_EQ(peer[1].data, Expected({0, 1}, 4, 31));
}

TEST_F(CollectivesStreamTest, MessagesThatNameNoCallEndTheStream) {
  ASSERT_TRUE(StartServer());
  std::vector<std::unique_ptr<RawSession>> s = JoinAll(Job(), 1);
  ASSERT_EQ(s.size(), 1u);
  RawSession& raw = *s[0];
  struct Case {
    std::string label;
    v1::CollectiveRequest message;
    std::string want;
  };
  std::vector<Case> cases;
  cases.push_back({"call id 0", WholeCall(raw, 0, 0, 4, Payload(0, 4, 1)),
                   "must carry a nonzero call_id"});
  v1::CollectiveRequest headerless;
  headerless.set_call_id(3);
  headerless.set_data(Payload(0, 4, 1));
  cases.push_back({"no header", headerless, "call 3: each message is one whole "
                                            "call and must carry `header`"});
  v1::CollectiveRequest chunk = WholeCall(raw, 4, 0, 4, Payload(0, 4, 1));
  chunk.set_offset(8);
  cases.push_back({"nonzero offset", chunk, "at offset 0 (got offset 8)"});
  for (const Case& c : cases) {
    const RawCallResult result =
        raw.Call({c.message}, kCallTimeout, /*half_close=*/true,
                 /*many_calls=*/true);
    EXPECT_THAT(result.status,
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(c.want)))
        << c.label;
    EXPECT_LE(result.elapsed, kFast) << c.label;
  }
  // The job is unharmed: a good call on a fresh stream works.
  const RawCallResult good =
      raw.Call({WholeCall(raw, 1, 0, 4, Payload(0, 4, 5))}, kCallTimeout,
               /*half_close=*/true, /*many_calls=*/true);
  EXPECT_TRUE(good.status.ok()) << good.status;
  EXPECT_EQ(good.data, Expected({0}, 4, 5));
}

TEST_F(CollectivesStreamTest, ReusingTheIdOfACallInFlightEndsTheStream) {
  ASSERT_TRUE(StartServer());
  std::vector<std::unique_ptr<RawSession>> s = JoinAll(Job(), 2);
  ASSERT_EQ(s.size(), 2u);
  // Rank 1's call 5 waits for rank 0, which never comes; a second call 5
  // arrives while it is in flight.
  const RawCallResult result = s[1]->Call(
      {WholeCall(*s[1], 5, 0, 4, Payload(1, 4, 1)),
       WholeCall(*s[1], 5, 1, 4, Payload(1, 4, 2))},
      kCallTimeout, /*half_close=*/true, /*many_calls=*/true);
  EXPECT_THAT(result.status,
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("call id 5 is already in flight")));
  EXPECT_LE(result.elapsed, kFast);
}

TEST_F(CollectivesStreamTest, ABrokenStreamCancelsItsCallForThePeers) {
  ASSERT_TRUE(StartServer());
  std::vector<std::unique_ptr<RawSession>> s = JoinAll(Job(), 2);
  ASSERT_EQ(s.size(), 2u);
  // Rank 1 sends its contribution and gives up on the stream after 1 s
  // (its deadline cancels it) without closing its side.
  const RawCallResult gave_up =
      s[1]->Call({WholeCall(*s[1], 1, 0, 4, Payload(1, 4, 1))},
                 absl::Seconds(1), /*half_close=*/false, /*many_calls=*/true);
  EXPECT_THAT(gave_up.status, StatusIs(absl::StatusCode::kDeadlineExceeded));
  // The client's deadline ends the call on its side at once; reducerd learns
  // of the cancellation when the stream's reset arrives. A peer arriving
  // before that would complete the collective with rank 1's contribution,
  // so give the reset time to land (it takes well under a millisecond on
  // loopback; 300 ms covers a loaded machine).
  absl::SleepFor(absl::Milliseconds(300));
  // Rank 0 then arrives at the same collective: its contribution was used
  // by nobody, but rank 1's was taken and cancelled, so the collective
  // fails fast for rank 0 naming rank 1.
  const RawCallResult peer =
      s[0]->Call({WholeCall(*s[0], 1, 0, 4, Payload(0, 4, 1))}, kCallTimeout,
                 /*half_close=*/true, /*many_calls=*/true);
  EXPECT_TRUE(peer.status.ok()) << peer.status;
  absl::flat_hash_map<uint64_t, CallOutcome> by_call = ByCall(peer);
  EXPECT_THAT(by_call[1].status,
              StatusIs(absl::StatusCode::kAborted,
                       HasSubstr("rank 1's call was cancelled")));
  EXPECT_LE(peer.elapsed, kFast);
}

}  // namespace
}  // namespace testing
}  // namespace reducer
