// RelayCollective answering a group whose every rank is a member (a job on
// one host): no call upstream, and each member's result as a reducerd
// serving those ranks directly gives it, computed here element by element.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/fingerprint_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/engine/thread_pool.h"
#include "server/relay/relay_collective_fixture.h"
#include "tests/status_matchers.h"

namespace reducer {
namespace {

using ::reducer::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

class RelayCollectiveHereTest : public RelayCollectiveTest {
 protected:
  // Attaches ranks 0..n-1 of `fps` (rank r's fingerprint fps[r]) to `c`.
  std::vector<std::shared_ptr<FakeRankChannel>> AttachAll(
      RelayCollective& c, const std::vector<Fingerprint>& fps) {
    std::vector<std::shared_ptr<FakeRankChannel>> ch;
    for (size_t r = 0; r < fps.size(); ++r) {
      ch.push_back(std::make_shared<FakeRankChannel>());
      EXPECT_TRUE(c.Attach(ch[r], static_cast<int>(r),
                           HeaderOf(fps[r], static_cast<int>(r)), fps[r]));
    }
    return ch;
  }

  // Waits for rank r's call to end OK and returns its result bytes.
  std::string ResultOf(RelayCollective& c, int r, FakeRankChannel& ch) {
    DrainWrites(c, r, ch);
    EXPECT_TRUE(ch.WaitEnded());
    EXPECT_TRUE(ch.finished_ok()) << "rank " << r << ": " << ch.failure();
    return ch.result();
  }
};

TEST_F(RelayCollectiveHereTest, AllReduceOfTheWholeGroupMakesNoUpstreamCall) {
  // Ranks 0-2 of {0,1,2}: float32 [50] AVG and int32 [7] MAX, which the
  // payload lays out at offsets 0 and 200 (several chunks of 64 bytes).
  constexpr int kN = 50, kM = 7;
  const std::vector<int> group = {0, 1, 2};
  const Fingerprint fp =
      MakeFingerprint(CollectiveKind::kAllReduce,
                      {Spec(DataType::kFloat32, {kN}, ReduceOp::kAvg),
                       Spec(DataType::kInt32, {kM}, ReduceOp::kMax)},
                      group);
  auto c = Make({0, 1, 2});
  auto ch = AttachAll(*c, {fp, fp, fp});
  std::vector<float> avg(kN, 0.0f);
  std::vector<int32_t> max(kM, INT32_MIN);
  std::vector<std::string> inputs(3);
  for (int r = 0; r < 3; ++r) {
    std::vector<float> x(kN);
    std::vector<int32_t> y(kM);
    for (int i = 0; i < kN; ++i) x[i] = static_cast<float>(r * 100 + i);
    for (int i = 0; i < kM; ++i) y[i] = (r * 7 + i * 5) % 11 - 5;
    for (int i = 0; i < kN; ++i) avg[i] += x[i];
    for (int i = 0; i < kM; ++i) max[i] = std::max(max[i], y[i]);
    inputs[r] = Bytes(x) + Bytes(y);
  }
  for (float& v : avg) v /= 3.0f;  // exact sums, one rounding
  for (int r : {2, 0, 1}) {
    // In two messages that do not fall on chunk boundaries.
    c->OnData(r, 0, PayloadOf(inputs[r].substr(0, 72)));
    c->OnData(r, 72, PayloadOf(inputs[r].substr(72)));
    c->OnInputEnd(r);
  }
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(ResultOf(*c, r, *ch[r]), Bytes(avg) + Bytes(max)) << "rank " << r;
    EXPECT_EQ(ch[r]->specs().size(), 2u);
  }
  EXPECT_EQ(session_->calls(), 0u);
  EXPECT_TRUE(c->done());
  // Nothing crossed the host's link: three payloads of 228 bytes up, and
  // three results of 228 down.
  EXPECT_EQ(saved_, 6u * 228u);
}

TEST_F(RelayCollectiveHereTest,
       EachChunkIsSentOnceReducedTheCallEndsOnceAllAre) {
  // {0,1}: int32 [50] SUM, 200 bytes in chunks of 64. Once both ranks sent
  // their first 64 bytes, each has that chunk of the result, and its call
  // goes on; the rest comes once the rest is in.
  const std::vector<int> group = {0, 1};
  const Fingerprint fp = MakeFingerprint(CollectiveKind::kAllReduce,
                                         {Spec(DataType::kInt32, {50})}, group);
  auto c = Make({0, 1});
  auto ch = AttachAll(*c, {fp, fp});
  std::vector<std::string> inputs;
  std::vector<int32_t> sum(50);
  for (int r = 0; r < 2; ++r) {
    std::vector<int32_t> x(50);
    for (int i = 0; i < 50; ++i) sum[i] += x[i] = 1000 * r + i;
    inputs.push_back(Bytes(x));
    c->OnData(r, 0, PayloadOf(inputs[r].substr(0, 64)));
  }
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(ch[r]->WaitMessages(1));
    EXPECT_EQ(ch[r]->message_count(), 1);
    EXPECT_EQ(ch[r]->byte_count(), 64u);
    EXPECT_FALSE(ch[r]->finished_ok());
  }
  for (int r = 0; r < 2; ++r) c->OnData(r, 64, PayloadOf(inputs[r].substr(64)));
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(ResultOf(*c, r, *ch[r]), Bytes(sum)) << "rank " << r;
  }
  EXPECT_EQ(session_->calls(), 0u);
}

TEST_F(RelayCollectiveHereTest, ChunksReducedOnThePoolMakeTheSameResult) {
  // {0,1,2}: float32 [1000] SUM in chunks of 64 bytes, each reduced on a
  // pool of two threads, in whatever order they finish.
  ThreadPool pool(2);
  env_.reduction_pool = &pool;
  env_.offload_bytes = 64;
  constexpr int kN = 1000;
  const std::vector<int> group = {0, 1, 2};
  const Fingerprint fp = MakeFingerprint(
      CollectiveKind::kAllReduce, {Spec(DataType::kFloat32, {kN})}, group);
  auto c = Make({0, 1, 2});
  auto ch = AttachAll(*c, {fp, fp, fp});
  std::vector<float> sum(kN);
  for (int r = 0; r < 3; ++r) {
    std::vector<float> x(kN);
    for (int i = 0; i < kN; ++i)
      sum[i] += x[i] = static_cast<float>(r * kN + i);
    const std::string bytes = Bytes(x);
    for (size_t at = 0; at < bytes.size(); at += 96) {
      c->OnData(r, at, PayloadOf(bytes.substr(at, 96)));
    }
  }
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(ResultOf(*c, r, *ch[r]), Bytes(sum)) << "rank " << r;
  }
  EXPECT_EQ(session_->calls(), 0u);
}

TEST_F(RelayCollectiveHereTest, ReduceScatterHandsEachRankItsSliceOfTheMean) {
  // {0,1}: float32 [8, 2] AVG; rank r gets rows [4r, 4r + 4) of the mean.
  const std::vector<int> group = {0, 1};
  const Fingerprint fp = MakeFingerprint(
      CollectiveKind::kReduceScatter,
      {Spec(DataType::kFloat32, {8, 2}, ReduceOp::kAvg)}, group);
  auto c = Make({0, 1});
  auto ch = AttachAll(*c, {fp, fp});
  std::vector<float> mean(16);
  for (int r = 0; r < 2; ++r) {
    std::vector<float> x(16);
    for (int i = 0; i < 16; ++i) x[i] = static_cast<float>(r * 10 + i);
    c->OnData(r, 0, PayloadOf(Bytes(x)));
    for (int i = 0; i < 16; ++i) mean[i] += x[i];
  }
  for (float& v : mean) v /= 2.0f;
  for (int r = 0; r < 2; ++r) {
    const std::vector<float> slice(mean.begin() + 8 * r,
                                   mean.begin() + 8 * r + 8);
    EXPECT_EQ(ResultOf(*c, r, *ch[r]), Bytes(slice)) << "rank " << r;
  }
  EXPECT_EQ(session_->calls(), 0u);
}

TEST_F(RelayCollectiveHereTest, AllToAllHandsEachRankTheRowsEveryRankSentIt) {
  // {0,1,2}: each rank sends [6, 2] int32, two rows to each rank; rank d
  // gets rank 0's, 1's and 2's rows for it, in that order.
  const std::vector<int> group = {0, 1, 2};
  const Fingerprint fp = MakeFingerprint(
      CollectiveKind::kAllToAll, {Spec(DataType::kInt32, {6, 2})}, group);
  auto c = Make({0, 1, 2});
  auto ch = AttachAll(*c, {fp, fp, fp});
  // Element e of rank s's input: 100 s + e; its part for d is elements
  // [4d, 4d + 4).
  for (int s : {1, 2, 0}) {
    std::vector<int32_t> x(12);
    for (int e = 0; e < 12; ++e) x[e] = 100 * s + e;
    const std::string bytes = Bytes(x);
    c->OnData(s, 0, PayloadOf(bytes.substr(0, 20)));
    c->OnData(s, 20, PayloadOf(bytes.substr(20)));
  }
  for (int d = 0; d < 3; ++d) {
    std::vector<int32_t> want;
    for (int s = 0; s < 3; ++s) {
      for (int e = 4 * d; e < 4 * d + 4; ++e) want.push_back(100 * s + e);
    }
    EXPECT_EQ(ResultOf(*c, d, *ch[d]), Bytes(want)) << "rank " << d;
  }
  EXPECT_EQ(session_->calls(), 0u);
}

TEST_F(RelayCollectiveHereTest, GatherGivesTheRootAloneTheConcatenation) {
  // {0,1,2}, root 1: rank r sends r + 1 rows of [., 1] int32.
  const std::vector<int> group = {0, 1, 2};
  std::vector<Fingerprint> fps;
  for (int r = 0; r < 3; ++r) {
    fps.push_back(MakeFingerprint(CollectiveKind::kGather,
                                  {Spec(DataType::kInt32, {r + 1, 1})}, group,
                                  /*root=*/1));
  }
  auto c = Make({0, 1, 2});
  auto ch = AttachAll(*c, fps);
  std::vector<int32_t> all;
  for (int r : {2, 1, 0}) {
    std::vector<int32_t> x;
    for (int i = 0; i <= r; ++i) x.push_back(10 * r + i);
    c->OnData(r, 0, PayloadOf(Bytes(x)));
  }
  for (int r = 0; r < 3; ++r) {
    for (int i = 0; i <= r; ++i) all.push_back(10 * r + i);
  }
  EXPECT_EQ(ResultOf(*c, 1, *ch[1]), Bytes(all));
  for (int r : {0, 2}) {
    EXPECT_EQ(ResultOf(*c, r, *ch[r]), "");
    EXPECT_THAT(ch[r]->specs(), IsEmpty());
  }
  EXPECT_EQ(session_->calls(), 0u);
}

TEST_F(RelayCollectiveHereTest, ScatterHandsEachRankItsPartOfTheRoots) {
  // {0,1,2}, root 2 sends [6] int32; rank r gets elements [2r, 2r + 2).
  const std::vector<int> group = {0, 1, 2};
  const Fingerprint root = MakeFingerprint(
      CollectiveKind::kScatter, {Spec(DataType::kInt32, {6})}, group, 2);
  const Fingerprint other =
      MakeFingerprint(CollectiveKind::kScatter, {}, group, 2);
  auto c = Make({0, 1, 2});
  auto ch = AttachAll(*c, {other, other, root});
  c->OnData(2, 0, PayloadOf(Bytes(std::vector<int32_t>{5, 6, 7, 8, 9, 10})));
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(ResultOf(*c, r, *ch[r]),
              Bytes(std::vector<int32_t>{5 + 2 * r, 6 + 2 * r}))
        << "rank " << r;
  }
  EXPECT_EQ(session_->calls(), 0u);
}

TEST_F(RelayCollectiveHereTest, BarrierOfTheWholeGroupEndsHere) {
  const std::vector<int> group = {0, 1};
  const Fingerprint fp = MakeFingerprint(CollectiveKind::kBarrier, {}, group);
  auto c = Make({0, 1});
  auto ch = AttachAll(*c, {fp, fp});
  for (int r = 0; r < 2; ++r) EXPECT_EQ(ResultOf(*c, r, *ch[r]), "");
  EXPECT_EQ(session_->calls(), 0u);
  EXPECT_TRUE(c->done());
}

TEST_F(RelayCollectiveHereTest, AQuorumStepOfTheWholeGroupStillGoesUpstream) {
  // Upstream decides who contributes, even when every rank is here.
  const std::vector<int> group = {0, 1};
  const Fingerprint fp =
      MakeFingerprint(CollectiveKind::kQuorumBarrier, {}, group);
  auto c = Make({0, 1});
  auto ch = AttachAll(*c, {fp, fp});
  EXPECT_EQ(session_->Payload(), "");
  EXPECT_EQ(session_->calls(), 1u);
}

TEST_F(RelayCollectiveHereTest, APayloadThatStopsHalfwayTimesOutNamingItsRank) {
  // Rank 1 sends 100 of its 200 bytes and no more: at the timeout both
  // ranks fail DEADLINE_EXCEEDED naming it, and nothing went upstream.
  const std::vector<int> group = {0, 1};
  const Fingerprint fp = MakeFingerprint(
      CollectiveKind::kAllReduce, {Spec(DataType::kFloat32, {50})}, group);
  auto c = Make({0, 1});
  std::vector<std::shared_ptr<FakeRankChannel>> ch;
  for (int r = 0; r < 2; ++r) {
    ch.push_back(std::make_shared<FakeRankChannel>());
    v1::CollectiveHeader h = HeaderOf(fp, r);
    h.set_timeout_ms(300);
    ASSERT_TRUE(c->Attach(ch[r], r, h, fp));
  }
  c->OnData(0, 0, PayloadOf(std::string(200, '\0')));
  c->OnData(1, 0, PayloadOf(std::string(100, '\0')));
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(ch[r]->WaitEnded());
    EXPECT_THAT(ch[r]->failure(),
                StatusIs(absl::StatusCode::kDeadlineExceeded,
                         HasSubstr("rank 1 sent 100 of 200 bytes")));
  }
  EXPECT_EQ(session_->calls(), 0u);
  EXPECT_TRUE(c->done());
}

}  // namespace
}  // namespace reducer
