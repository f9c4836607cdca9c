// Sessions that hold several ranks, and contributions that stand for
// several ranks (JoinRequest.ranks, CollectiveHeader.ranks), on the wire
// against a real reducerd: what a relay sends upstream for the ranks of its
// host. Raw gRPC on the generated stubs (tests/raw_client.h). Expected
// results are computed here, as if every rank had sent its own part.
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/reducer/v1/reducer.pb.h"
#include "tests/fault_test_base.h"
#include "tests/raw_client.h"
#include "tests/status_matchers.h"

namespace reducer {
namespace testing {
namespace {

using ::testing::HasSubstr;

constexpr int kWorld = 4;
constexpr int kN = 1000;  // float32 elements

// Rank r's input: element i is r * 1000 + i (exact in float32, as are the
// sums of four of them).
std::vector<float> Input(int rank) {
  std::vector<float> v(kN);
  for (int i = 0; i < kN; ++i) v[i] = static_cast<float>(rank * 1000 + i);
  return v;
}

std::string Bytes(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()),
                     v.size() * sizeof(float));
}

// Element-wise sum of the inputs of `ranks`, each added in turn.
std::vector<float> SumOf(const std::vector<int>& ranks) {
  std::vector<float> sum(kN, 0.0f);
  for (int r : ranks) {
    const std::vector<float> x = Input(r);
    for (int i = 0; i < kN; ++i) sum[i] += x[i];
  }
  return sum;
}

// The result a call's responses make, each response's data at its offset.
std::string Assembled(const RawCallResult& result) {
  std::string out;
  for (const v1::CollectiveResponse& response : result.responses) {
    const size_t end = response.offset() + response.data().size();
    if (out.size() < end) out.resize(end, '\xee');
    out.replace(response.offset(), response.data().size(), response.data());
  }
  return out;
}

class SeveralRanksTest : public FaultTest {
 protected:
  // A relay's session holding ranks 0-2 and rank 3's own, joined at once
  // (each Join waits for the other).
  void JoinRelayAndRank3(const std::string& job) {
    absl::StatusOr<std::unique_ptr<RawSession>> relay, alone;
    std::thread t([&] {
      relay = RawSession::JoinRanks(server()->address(), job, {0, 1, 2}, kWorld,
                                    absl::Seconds(30));
    });
    alone = RawSession::Join(server()->address(), job, 3, kWorld,
                             absl::Seconds(30));
    t.join();
    ASSERT_THAT(relay, IsOk());
    ASSERT_THAT(alone, IsOk());
    relay_ = *std::move(relay);
    rank3_ = *std::move(alone);
  }

  // Runs `relay_request` on the relay's session and `rank3_request` on rank
  // 3's at once.
  void RunBoth(const v1::CollectiveRequest& relay_request,
               const v1::CollectiveRequest& rank3_request) {
    std::thread t([&] {
      relay_result_ = relay_->Call({relay_request}, absl::Seconds(20));
    });
    rank3_result_ = rank3_->Call({rank3_request}, absl::Seconds(20));
    t.join();
  }

  std::unique_ptr<RawSession> relay_;
  std::unique_ptr<RawSession> rank3_;
  RawCallResult relay_result_;
  RawCallResult rank3_result_;
};

TEST_F(SeveralRanksTest, AllReduceOfARelaysSumAndARankIsTheSumOfAll) {
  ASSERT_TRUE(StartServer());
  ASSERT_NO_FATAL_FAILURE(JoinRelayAndRank3(Job()));
  v1::CollectiveRequest relay = relay_->AllReduceRequest({kN});
  relay.set_data(Bytes(SumOf({0, 1, 2})));
  v1::CollectiveRequest alone = rank3_->AllReduceRequest({kN});
  alone.set_data(Bytes(Input(3)));
  RunBoth(relay, alone);
  ASSERT_THAT(relay_result_.status, IsOk());
  ASSERT_THAT(rank3_result_.status, IsOk());
  const std::string expected = Bytes(SumOf({0, 1, 2, 3}));
  EXPECT_EQ(relay_result_.data, expected);
  EXPECT_EQ(rank3_result_.data, expected);
}

TEST_F(SeveralRanksTest, AverageCountsEveryRankARelayStandsFor) {
  ASSERT_TRUE(StartServer());
  ASSERT_NO_FATAL_FAILURE(JoinRelayAndRank3(Job()));
  v1::CollectiveRequest relay = relay_->AllReduceRequest({kN});
  relay.mutable_header()->mutable_tensors(0)->set_op(v1::REDUCE_OP_AVG);
  relay.set_data(Bytes(SumOf({0, 1, 2})));
  v1::CollectiveRequest alone = rank3_->AllReduceRequest({kN});
  alone.mutable_header()->mutable_tensors(0)->set_op(v1::REDUCE_OP_AVG);
  alone.set_data(Bytes(Input(3)));
  RunBoth(relay, alone);
  ASSERT_THAT(relay_result_.status, IsOk());
  // The mean of r * 1000 + i over r = 0..3: 1500 + i, exact.
  std::vector<float> mean(kN);
  for (int i = 0; i < kN; ++i) mean[i] = 1500.0f + static_cast<float>(i);
  EXPECT_EQ(relay_result_.data, Bytes(mean));
  EXPECT_EQ(rank3_result_.data, Bytes(mean));
}

TEST_F(SeveralRanksTest, AllGatherTakesARelaysRowsInRankOrder) {
  ASSERT_TRUE(StartServer());
  ASSERT_NO_FATAL_FAILURE(JoinRelayAndRank3(Job()));
  auto gather = [](RawSession& s, int64_t rows, const std::string& data) {
    v1::CollectiveRequest request;
    *request.mutable_header() = s.Header(v1::COLLECTIVE_KIND_ALL_GATHER);
    v1::TensorSpec* spec = request.mutable_header()->add_tensors();
    spec->set_dtype(v1::DATA_TYPE_FLOAT32);
    spec->add_shape(rows);
    spec->add_shape(kN);
    request.set_data(data);
    return request;
  };
  RunBoth(
      gather(*relay_, 3, Bytes(Input(0)) + Bytes(Input(1)) + Bytes(Input(2))),
      gather(*rank3_, 1, Bytes(Input(3))));
  ASSERT_THAT(relay_result_.status, IsOk());
  const std::string expected =
      Bytes(Input(0)) + Bytes(Input(1)) + Bytes(Input(2)) + Bytes(Input(3));
  EXPECT_EQ(Assembled(relay_result_), expected);
  EXPECT_EQ(Assembled(rank3_result_), expected);
}

TEST_F(SeveralRanksTest, LosingARelaysSessionNamesAllOfItsRanks) {
  ASSERT_TRUE(StartServer());
  ASSERT_NO_FATAL_FAILURE(JoinRelayAndRank3(Job()));
  relay_.reset();  // its Join stream cancelled: the relay is gone
  v1::CollectiveRequest alone = rank3_->AllReduceRequest({kN});
  alone.set_data(Bytes(Input(3)));
  const RawCallResult result = rank3_->Call({alone}, absl::Seconds(20));
  EXPECT_THAT(result.status,
              StatusIs(absl::StatusCode::kAborted,
                       HasSubstr("the session of ranks [0,1,2] (a relay's) "
                                 "was lost")));
}

TEST_F(SeveralRanksTest, ReduceScatterGivesARelayItsRanksSlices) {
  // The relay sends the sum of ranks 0-2's whole inputs and gets their
  // three slices back to back; rank 3 gets its own.
  ASSERT_TRUE(StartServer());
  ASSERT_NO_FATAL_FAILURE(JoinRelayAndRank3(Job()));
  v1::CollectiveRequest relay = relay_->AllReduceRequest({kN});
  relay.mutable_header()->set_kind(v1::COLLECTIVE_KIND_REDUCE_SCATTER);
  relay.set_data(Bytes(SumOf({0, 1, 2})));
  v1::CollectiveRequest alone = rank3_->AllReduceRequest({kN});
  alone.mutable_header()->set_kind(v1::COLLECTIVE_KIND_REDUCE_SCATTER);
  alone.set_data(Bytes(Input(3)));
  RunBoth(relay, alone);
  ASSERT_THAT(relay_result_.status, IsOk());
  ASSERT_THAT(rank3_result_.status, IsOk());
  const std::vector<float> sum = SumOf({0, 1, 2, 3});
  constexpr int kSlice = kN / kWorld;
  EXPECT_EQ(Assembled(relay_result_),
            Bytes(std::vector<float>(sum.begin(), sum.begin() + 3 * kSlice)));
  EXPECT_EQ(Assembled(rank3_result_),
            Bytes(std::vector<float>(sum.begin() + 3 * kSlice, sum.end())));
  ASSERT_FALSE(relay_result_.responses.empty());
  ASSERT_EQ(relay_result_.responses[0].result_size(), 1);
  EXPECT_EQ(relay_result_.responses[0].result(0).shape(0), 3 * kSlice);
}

TEST_F(SeveralRanksTest, ARelayMayStillCallForEachRankAlone) {
  // A relay may also send each of its ranks' calls on its one session, as
  // it does when it goes without combining them: a reduce-scatter rank by
  // rank.
  ASSERT_TRUE(StartServer());
  ASSERT_NO_FATAL_FAILURE(JoinRelayAndRank3(Job()));
  std::vector<RawCallResult> results(kWorld);
  std::vector<std::thread> threads;
  for (int r = 0; r < kWorld; ++r) {
    threads.emplace_back([&, r] {
      RawSession& session = r < 3 ? *relay_ : *rank3_;
      v1::CollectiveRequest request = session.AllReduceRequest({kN});
      request.mutable_header()->set_kind(v1::COLLECTIVE_KIND_REDUCE_SCATTER);
      request.mutable_header()->set_rank(r);
      request.mutable_header()->clear_ranks();
      request.set_data(Bytes(Input(r)));
      results[r] = session.Call({request}, absl::Seconds(20));
    });
  }
  for (std::thread& t : threads) t.join();
  const std::vector<float> sum = SumOf({0, 1, 2, 3});
  constexpr int kSlice = kN / kWorld;
  for (int r = 0; r < kWorld; ++r) {
    SCOPED_TRACE(absl::StrCat("rank ", r));
    ASSERT_THAT(results[r].status, IsOk());
    EXPECT_EQ(results[r].data,
              Bytes(std::vector<float>(sum.begin() + r * kSlice,
                                       sum.begin() + (r + 1) * kSlice)));
  }
}

TEST_F(SeveralRanksTest, RefusesWhatNoRelayMaySend) {
  ASSERT_TRUE(StartServer());
  ASSERT_NO_FATAL_FAILURE(JoinRelayAndRank3(Job()));
  // An all-to-all-v for several ranks (each rank's rows are its own).
  v1::CollectiveRequest exchange = relay_->AllReduceRequest({kN});
  exchange.mutable_header()->set_kind(v1::COLLECTIVE_KIND_ALL_TO_ALL_V);
  for (int64_t rows :
       {static_cast<int64_t>(kN), int64_t{0}, int64_t{0}, int64_t{0}}) {
    exchange.mutable_header()->add_send_rows(rows);
  }
  exchange.set_data(Bytes(SumOf({0, 1, 2})));
  EXPECT_THAT(relay_->Call({exchange}, absl::Seconds(20)).status,
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("a alltoallv takes each rank's own "
                                 "contribution")));
  // Ranks the session does not hold.
  v1::CollectiveRequest foreign = relay_->AllReduceRequest({kN});
  foreign.mutable_header()->add_ranks(3);
  foreign.set_data(Bytes(SumOf({0, 1, 2, 3})));
  EXPECT_THAT(
      relay_->Call({foreign}, absl::Seconds(20)).status,
      StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("rank 3")));
  // A Join whose ranks are not sorted, and one for a rank already held.
  EXPECT_THAT(RawSession::JoinRanks(server()->address(), Job("other"), {1, 0},
                                    kWorld, absl::Seconds(10))
                  .status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("must be sorted")));
  EXPECT_THAT(RawSession::JoinRanks(server()->address(), relay_->job(), {2, 3},
                                    kWorld, absl::Seconds(10))
                  .status(),
              StatusIs(absl::StatusCode::kAlreadyExists));
}

}  // namespace
}  // namespace testing
}  // namespace reducer
