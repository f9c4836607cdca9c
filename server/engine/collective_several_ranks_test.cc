// A contribution that stands for several ranks (Collective::Attach's
// `covered`, a relay's for the ranks of its host): its parts combined in
// one payload, its result sent once. Expected results are computed here in
// closed form, as if every rank had sent its own part.
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/engine/collective_test_base.h"

namespace reducer {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;

class CollectiveSeveralRanksTest : public CollectiveTestBase {};

// Element-wise sum of rank `first`..`last`'s Ramp inputs: what a relay
// holding those ranks sends (small integers, so every sum is exact).
std::vector<float> RampRange(int first, int last, int n) {
  std::vector<float> v(n, 0.0f);
  for (int r = first; r <= last; ++r) {
    const std::vector<float> x = Ramp(r, n);
    for (int i = 0; i < n; ++i) v[i] += x[i];
  }
  return v;
}

TEST_F(CollectiveSeveralRanksTest, AllReduceOfTwoCarriersIsTheSumOfAllRanks) {
  options_.offload_bytes = 64;
  constexpr int kN = 40;  // chunks of 64, 64 and 32 bytes
  const std::vector<int> group = {0, 1, 2, 3};
  std::shared_ptr<Collective> c = Make(CollectiveKind::kAllReduce, group);
  auto ch = Channels(4);
  // Ranks 0-1 from one carrier, 2-3 from another, in that order and the
  // other: the same bits.
  ASSERT_TRUE(c->Attach(ch[2], 2, FloatAllReduce(kN, group), "", {3}));
  EXPECT_FALSE(c->all_attached());
  ASSERT_TRUE(c->Attach(ch[0], 0, FloatAllReduce(kN, group), "", {1}));
  EXPECT_TRUE(c->all_attached());
  Feed(*c, 2, Bytes(RampRange(2, 3, kN)));
  Feed(*c, 0, Bytes(RampRange(0, 1, kN)));
  for (int r : {0, 2}) {
    SCOPED_TRACE(absl::StrCat("carrier ", r));
    ExpectResult(*ch[r], Bytes(RampSum(4, kN)), DataType::kFloat32, {kN});
  }
  // Covered ranks get nothing of their own.
  EXPECT_THAT(ch[1]->sent(), IsEmpty());
  EXPECT_THAT(ch[3]->sent(), IsEmpty());
  EXPECT_TRUE(c->HasFinished(1));
  EXPECT_FALSE(c->LeftOut(1));
  EXPECT_FALSE(c->LeftAnyOut());
  EXPECT_TRUE(c->done());
  EXPECT_EQ(memory_->used(), 0u);
}

TEST_F(CollectiveSeveralRanksTest, AverageDividesByRanksNotContributions) {
  // Ranks 0-2 summed by one carrier, rank 3 alone: the mean of four ranks,
  // Ramp's (r + 1) * (i + 1) averaging to 2.5 * (i + 1).
  constexpr int kN = 16;
  const std::vector<int> group = {0, 1, 2, 3};
  Fingerprint fp = FloatAllReduce(kN, group);
  fp.tensors[0].op = ReduceOp::kAvg;
  std::shared_ptr<Collective> c = Make(CollectiveKind::kAllReduce, group);
  auto ch = Channels(4);
  ASSERT_TRUE(c->Attach(ch[0], 0, fp, "", {1, 2}));
  ASSERT_TRUE(c->Attach(ch[3], 3, fp, ""));
  Feed(*c, 0, Bytes(RampRange(0, 2, kN)));
  Feed(*c, 3, Bytes(Ramp(3, kN)));
  std::vector<float> mean(kN);
  for (int i = 0; i < kN; ++i) mean[i] = 2.5f * static_cast<float>(i + 1);
  ExpectResult(*ch[0], Bytes(mean), DataType::kFloat32, {kN});
  ExpectResult(*ch[3], Bytes(mean), DataType::kFloat32, {kN});
}

TEST_F(CollectiveSeveralRanksTest, AllGatherPlacesACarriersRowsAtItsFirstRank) {
  // Rank r has [r + 1, 2] int32 of 100 r + j. Ranks 1-2 come from one
  // carrier as their rows back to back ([5, 2]); ranks 0 and 3 alone.
  const std::vector<int> group = {0, 1, 2, 3};
  auto rows = [](int r) {
    std::vector<int32_t> v;
    for (int j = 0; j < 2 * (r + 1); ++j) v.push_back(100 * r + j);
    return v;
  };
  std::vector<int32_t> gathered, carried;
  for (int r = 0; r < 4; ++r) {
    const std::vector<int32_t> v = rows(r);
    gathered.insert(gathered.end(), v.begin(), v.end());
    if (r == 1 || r == 2) carried.insert(carried.end(), v.begin(), v.end());
  }
  auto fp = [&](int64_t dim0) {
    return Fp(CollectiveKind::kAllGather, {Spec(DataType::kInt32, {dim0, 2})},
              group);
  };
  std::shared_ptr<Collective> c = Make(CollectiveKind::kAllGather, group);
  auto ch = Channels(4);
  ASSERT_TRUE(c->Attach(ch[3], 3, fp(4), ""));
  ASSERT_TRUE(c->Attach(ch[1], 1, fp(5), "", {2}));
  ASSERT_TRUE(c->Attach(ch[0], 0, fp(1), ""));
  c->OnData(1, 0, Range(Bytes(carried)));
  c->OnData(0, 0, Range(Bytes(rows(0))));
  c->OnData(3, 0, Range(Bytes(rows(3))));
  for (int r : {0, 1, 3}) {
    SCOPED_TRACE(absl::StrCat("rank ", r));
    ExpectResult(*ch[r], Bytes(gathered), DataType::kInt32, {10, 2});
  }
  EXPECT_THAT(ch[2]->sent(), IsEmpty());
  EXPECT_EQ(memory_->used(), 0u);
}

TEST_F(CollectiveSeveralRanksTest, GatherToARootInsideACarrier) {
  // Root 3 carries ranks 2-3; ranks 0 and 1 send their own [1] float64.
  const std::vector<int> group = {0, 1, 2, 3};
  auto fp = [&](int64_t dim0) {
    return Fp(CollectiveKind::kGather, {Spec(DataType::kFloat64, {dim0})},
              group, /*root=*/3);
  };
  std::shared_ptr<Collective> c = Make(CollectiveKind::kGather, group);
  auto ch = Channels(4);
  ASSERT_TRUE(c->Attach(ch[3], 3, fp(2), "", {2}));
  ASSERT_TRUE(c->Attach(ch[0], 0, fp(1), ""));
  ASSERT_TRUE(c->Attach(ch[1], 1, fp(1), ""));
  c->OnData(3, 0, Range(Bytes(std::vector<double>{2.0, 3.0})));
  c->OnData(1, 0, Range(Bytes(std::vector<double>{1.0})));
  c->OnData(0, 0, Range(Bytes(std::vector<double>{0.5})));
  ExpectResult(*ch[3], Bytes(std::vector<double>{0.5, 1.0, 2.0, 3.0}),
               DataType::kFloat64, {4});
  for (int r : {0, 1}) {
    ASSERT_TRUE(ch[r]->WaitEnded());
    EXPECT_TRUE(ch[r]->finished_ok()) << ch[r]->failure();
    EXPECT_EQ(ch[r]->byte_count(), 0u);
  }
}

TEST_F(CollectiveSeveralRanksTest, BroadcastFromACarrierToACarrier) {
  // Root 1 carries ranks 0-1 and sends; ranks 2-3 come as one call that
  // sends nothing and gets the root's tensor once.
  const std::vector<int> group = {0, 1, 2, 3};
  const std::string root_bytes = Bytes(std::vector<double>{1.5, -2, 1e300});
  std::shared_ptr<Collective> c = Make(CollectiveKind::kBroadcast, group);
  auto ch = Channels(4);
  ASSERT_TRUE(c->Attach(ch[2], 2, Fp(CollectiveKind::kBroadcast, {}, group, 1),
                        "", {3}));
  ASSERT_TRUE(c->Attach(
      ch[1], 1,
      Fp(CollectiveKind::kBroadcast, {Spec(DataType::kFloat64, {3})}, group, 1),
      "", {0}));
  c->OnData(1, 0, Range(root_bytes));
  ExpectResult(*ch[1], root_bytes, DataType::kFloat64, {3});
  ExpectResult(*ch[2], root_bytes, DataType::kFloat64, {3});
  EXPECT_EQ(memory_->used(), 0u);
}

TEST_F(CollectiveSeveralRanksTest, BarrierEndsOnceEveryCarrierArrived) {
  const std::vector<int> group = {0, 1, 2};
  std::shared_ptr<Collective> c = Make(CollectiveKind::kBarrier, group);
  auto ch = Channels(3);
  ASSERT_TRUE(
      c->Attach(ch[0], 0, Fp(CollectiveKind::kBarrier, {}, group), "", {1}));
  EXPECT_FALSE(ch[0]->finished_ok());
  ASSERT_TRUE(c->Attach(ch[2], 2, Fp(CollectiveKind::kBarrier, {}, group), ""));
  EXPECT_TRUE(ch[0]->finished_ok());
  EXPECT_TRUE(ch[2]->finished_ok());
}

TEST_F(CollectiveSeveralRanksTest, ACoveredRankCallingOnItsOwnIsRefused) {
  constexpr int kN = 8;
  const std::vector<int> group = {0, 1, 2};
  std::shared_ptr<Collective> c = Make(CollectiveKind::kAllReduce, group);
  auto ch = Channels(3);
  ASSERT_TRUE(c->Attach(ch[0], 0, FloatAllReduce(kN, group), "", {1}));
  EXPECT_FALSE(c->Attach(ch[1], 1, FloatAllReduce(kN, group), ""));
  ExpectFailed(*ch[1], absl::StatusCode::kFailedPrecondition,
               "rank 1's part came already in rank 0's contribution");
  // The others go on.
  EXPECT_FALSE(c->done());
  ASSERT_TRUE(c->Attach(ch[2], 2, FloatAllReduce(kN, group), ""));
  Feed(*c, 0, Bytes(RampRange(0, 1, kN)));
  Feed(*c, 2, Bytes(Ramp(2, kN)));
  ExpectResult(*ch[0], Bytes(RampSum(3, kN)), DataType::kFloat32, {kN});
}

TEST_F(CollectiveSeveralRanksTest, ARankCoveredAfterItCalledFailsEveryone) {
  constexpr int kN = 8;
  const std::vector<int> group = {0, 1, 2};
  std::shared_ptr<Collective> c = Make(CollectiveKind::kAllReduce, group);
  auto ch = Channels(3);
  ASSERT_TRUE(c->Attach(ch[1], 1, FloatAllReduce(kN, group), ""));
  EXPECT_FALSE(c->Attach(ch[0], 0, FloatAllReduce(kN, group), "", {1}));
  for (int r : {0, 1}) {
    ExpectFailed(*ch[r], absl::StatusCode::kFailedPrecondition,
                 "rank 1 contributed on its own and within the contribution "
                 "rank 0 sent for ranks [0,1]");
  }
  EXPECT_TRUE(c->done());
  EXPECT_EQ(memory_->used(), 0u);
}

TEST_F(CollectiveSeveralRanksTest, KindsOfOwnPartsRefuseACarrier) {
  const std::vector<int> group = {0, 1};
  std::shared_ptr<Collective> c = Make(CollectiveKind::kAllToAllV, group);
  auto ch = Channels(2);
  Fingerprint fp =
      Fp(CollectiveKind::kAllToAllV, {Spec(DataType::kFloat32, {4})}, group);
  fp.send_rows = {2, 2};
  EXPECT_FALSE(c->Attach(ch[0], 0, fp, "", {1}));
  ExpectFailed(*ch[0], absl::StatusCode::kInvalidArgument,
               "a alltoallv takes one rank's contribution per call");
}

TEST_F(CollectiveSeveralRanksTest, ACancelledCarrierIsReplacedByItsRetry) {
  // The carrier's first call is cut before it sent anything; its retry
  // (same attempt) covers the same ranks, which are not counted twice.
  constexpr int kN = 8;
  const std::vector<int> group = {0, 1, 2};
  std::shared_ptr<Collective> c = Make(CollectiveKind::kAllReduce, group);
  auto first = std::make_shared<FakeRankChannel>();
  auto ch = Channels(3);
  ASSERT_TRUE(c->Attach(first, 0, FloatAllReduce(kN, group), "s/1", {1}));
  c->OnRankCancelled(0, first.get());
  EXPECT_FALSE(c->all_attached());
  ASSERT_TRUE(c->Attach(ch[2], 2, FloatAllReduce(kN, group), "s2/1"));
  EXPECT_FALSE(c->all_attached());
  ASSERT_TRUE(c->Attach(ch[0], 0, FloatAllReduce(kN, group), "s/1", {1}));
  EXPECT_TRUE(c->all_attached());
  Feed(*c, 0, Bytes(RampRange(0, 1, kN)));
  Feed(*c, 2, Bytes(Ramp(2, kN)));
  ExpectResult(*ch[0], Bytes(RampSum(3, kN)), DataType::kFloat32, {kN});
  ExpectResult(*ch[2], Bytes(RampSum(3, kN)), DataType::kFloat32, {kN});
  EXPECT_EQ(memory_->used(), 0u);
}

// The reduce-scatter tests: a [12, 2] float32 over ranks 0..5 (96 bytes,
// 16 per slice: rank r gets rows 2r and 2r + 1 of the reduction).
constexpr int kRsElems = 24;
constexpr int kRsSliceElems = 4;

Fingerprint FloatReduceScatter(const std::vector<int>& group,
                               ReduceOp op = ReduceOp::kSum) {
  Fingerprint fp = Fp(CollectiveKind::kReduceScatter,
                      {Spec(DataType::kFloat32, {12, 2})}, group);
  fp.tensors[0].op = op;
  return fp;
}

// Elements [first * kRsSliceElems, (last + 1) * kRsSliceElems) of `v`:
// the slices of ranks first..last, back to back.
std::string Slices(const std::vector<float>& v, int first, int last) {
  return Bytes(std::vector<float>(v.begin() + first * kRsSliceElems,
                                  v.begin() + (last + 1) * kRsSliceElems));
}

TEST_F(CollectiveSeveralRanksTest, ReduceScatterGivesACarrierItsRanksSlices) {
  // Chunks of 40 bytes, so that chunks straddle slices and carriers'
  // ranges. Ranks 1-3 come as one carrier (rank 1), 4-5 as another, rank 0
  // alone; each carrier gets its ranks' slices of the sum of all six.
  options_.chunk_bytes = 40;
  options_.offload_bytes = 40;
  const std::vector<int> group = {0, 1, 2, 3, 4, 5};
  std::shared_ptr<Collective> c = Make(CollectiveKind::kReduceScatter, group);
  auto ch = Channels(6);
  ASSERT_TRUE(c->Attach(ch[4], 4, FloatReduceScatter(group), "", {5}));
  ASSERT_TRUE(c->Attach(ch[1], 1, FloatReduceScatter(group), "", {2, 3}));
  EXPECT_FALSE(c->all_attached());
  ASSERT_TRUE(c->Attach(ch[0], 0, FloatReduceScatter(group), ""));
  EXPECT_TRUE(c->all_attached());
  Feed(*c, 1, Bytes(RampRange(1, 3, kRsElems)), 36);
  Feed(*c, 4, Bytes(RampRange(4, 5, kRsElems)), 20);
  Feed(*c, 0, Bytes(Ramp(0, kRsElems)));
  const std::vector<float> sum = RampSum(6, kRsElems);
  ExpectResult(*ch[0], Slices(sum, 0, 0), DataType::kFloat32, {2, 2});
  ExpectResult(*ch[1], Slices(sum, 1, 3), DataType::kFloat32, {6, 2});
  ExpectResult(*ch[4], Slices(sum, 4, 5), DataType::kFloat32, {4, 2});
  for (int r : {2, 3, 5}) {
    EXPECT_THAT(ch[r]->sent(), IsEmpty()) << "rank " << r;
    EXPECT_TRUE(c->HasFinished(r));
  }
  EXPECT_FALSE(c->LeftAnyOut());
  EXPECT_TRUE(Settles(*c));
}

TEST_F(CollectiveSeveralRanksTest, ReduceScatterAverageDividesByRanks) {
  // Ranks 0-3 summed by one carrier, 4 and 5 alone: the mean of six
  // ranks, Ramp's (r + 1) * (i + 1) averaging to 3.5 * (i + 1).
  const std::vector<int> group = {0, 1, 2, 3, 4, 5};
  const Fingerprint fp = FloatReduceScatter(group, ReduceOp::kAvg);
  std::shared_ptr<Collective> c = Make(CollectiveKind::kReduceScatter, group);
  auto ch = Channels(6);
  ASSERT_TRUE(c->Attach(ch[0], 0, fp, "", {1, 2, 3}));
  ASSERT_TRUE(c->Attach(ch[5], 5, fp, ""));
  ASSERT_TRUE(c->Attach(ch[4], 4, fp, ""));
  Feed(*c, 0, Bytes(RampRange(0, 3, kRsElems)));
  Feed(*c, 4, Bytes(Ramp(4, kRsElems)));
  Feed(*c, 5, Bytes(Ramp(5, kRsElems)));
  std::vector<float> mean(kRsElems);
  for (int i = 0; i < kRsElems; ++i) mean[i] = 3.5f * static_cast<float>(i + 1);
  ExpectResult(*ch[0], Slices(mean, 0, 3), DataType::kFloat32, {8, 2});
  ExpectResult(*ch[4], Slices(mean, 4, 4), DataType::kFloat32, {2, 2});
  ExpectResult(*ch[5], Slices(mean, 5, 5), DataType::kFloat32, {2, 2});
}

TEST_F(CollectiveSeveralRanksTest, ReduceScatterCarriersResultIsKept) {
  // A carrier's result is kept whole for a replay, as any rank's is.
  keep_results_ = true;
  const std::vector<int> group = {0, 1, 2, 3, 4, 5};
  std::shared_ptr<Collective> c = Make(CollectiveKind::kReduceScatter, group);
  auto ch = Channels(6);
  ASSERT_TRUE(
      c->Attach(ch[2], 2, FloatReduceScatter(group), "s2/0", {3, 4, 5}));
  ASSERT_TRUE(c->Attach(ch[0], 0, FloatReduceScatter(group), "s0/0", {1}));
  Feed(*c, 2, Bytes(RampRange(2, 5, kRsElems)));
  Feed(*c, 0, Bytes(RampRange(0, 1, kRsElems)));
  const std::vector<float> sum = RampSum(6, kRsElems);
  ExpectResult(*ch[2], Slices(sum, 2, 5), DataType::kFloat32, {8, 2});
  ExpectResult(*ch[0], Slices(sum, 0, 1), DataType::kFloat32, {4, 2});
  EXPECT_EQ(KeptBytes(*kept_, "s2/0", 2), Slices(sum, 2, 5));
  EXPECT_EQ(KeptBytes(*kept_, "s0/0", 0), Slices(sum, 0, 1));
  EXPECT_TRUE(Settles(*c));
}

TEST_F(CollectiveSeveralRanksTest, ReduceScatterCarrierMismatchFailsEveryone) {
  // A carrier declares the whole input, like any rank: one that declares
  // only its ranks' slices disagrees, and every rank fails.
  const std::vector<int> group = {0, 1, 2};
  std::shared_ptr<Collective> c = Make(CollectiveKind::kReduceScatter, group);
  auto ch = Channels(3);
  ASSERT_TRUE(c->Attach(ch[2], 2,
                        Fp(CollectiveKind::kReduceScatter,
                           {Spec(DataType::kFloat32, {6})}, group),
                        ""));
  EXPECT_FALSE(c->Attach(ch[0], 0,
                         Fp(CollectiveKind::kReduceScatter,
                            {Spec(DataType::kFloat32, {3})}, group),
                         "", {1}));
  for (int r : {0, 2}) {
    ExpectFailed(*ch[r], absl::StatusCode::kFailedPrecondition, "mismatched");
  }
  EXPECT_TRUE(c->done());
  EXPECT_EQ(memory_->used(), 0u);
}

TEST_F(CollectiveSeveralRanksTest, ScatterGivesACarrierItsRanksParts) {
  // Root 2 carries ranks 1-3 and sends [10, 1] int32 of 100 + j; ranks 0
  // and 4 come alone. Every rank's part is two rows: rank r's are rows 2r
  // and 2r + 1, and the carrier gets rows 2..7.
  const std::vector<int> group = {0, 1, 2, 3, 4};
  std::vector<int32_t> input(10);
  for (int j = 0; j < 10; ++j) input[j] = 100 + j;
  auto rows = [&](int first, int last) {
    return Bytes(std::vector<int32_t>(input.begin() + 2 * first,
                                      input.begin() + 2 * (last + 1)));
  };
  std::shared_ptr<Collective> c = Make(CollectiveKind::kScatter, group);
  auto ch = Channels(5);
  ASSERT_TRUE(
      c->Attach(ch[0], 0, Fp(CollectiveKind::kScatter, {}, group, 2), ""));
  ASSERT_TRUE(c->Attach(
      ch[2], 2,
      Fp(CollectiveKind::kScatter, {Spec(DataType::kInt32, {10, 1})}, group, 2),
      "", {1, 3}));
  // Part of the root's payload before every rank is in: held back.
  c->OnData(
      2, 0,
      Range(Bytes(std::vector<int32_t>(input.begin(), input.begin() + 3))));
  ASSERT_TRUE(
      c->Attach(ch[4], 4, Fp(CollectiveKind::kScatter, {}, group, 2), ""));
  c->OnData(2, 12,
            Range(Bytes(std::vector<int32_t>(input.begin() + 3, input.end()))));
  ExpectResult(*ch[0], rows(0, 0), DataType::kInt32, {2, 1});
  ExpectResult(*ch[2], rows(1, 3), DataType::kInt32, {6, 1});
  ExpectResult(*ch[4], rows(4, 4), DataType::kInt32, {2, 1});
  for (int r : {1, 3}) EXPECT_THAT(ch[r]->sent(), IsEmpty()) << "rank " << r;
  EXPECT_TRUE(Settles(*c));
}

TEST_F(CollectiveSeveralRanksTest, ScatterToACarrierWithoutTheRoot) {
  // Root 0 alone; ranks 1-2 come as one call that sends nothing and gets
  // both their parts.
  const std::vector<int> group = {0, 1, 2};
  const std::vector<double> input = {0.5, 1.5, 2.5, 3.5, 4.5, 5.5};
  std::shared_ptr<Collective> c = Make(CollectiveKind::kScatter, group);
  auto ch = Channels(3);
  ASSERT_TRUE(
      c->Attach(ch[1], 1, Fp(CollectiveKind::kScatter, {}, group, 0), "", {2}));
  ASSERT_TRUE(c->Attach(
      ch[0], 0,
      Fp(CollectiveKind::kScatter, {Spec(DataType::kFloat64, {6})}, group, 0),
      ""));
  c->OnData(0, 0, Range(Bytes(input)));
  ExpectResult(*ch[0], Bytes(std::vector<double>{0.5, 1.5}), DataType::kFloat64,
               {2});
  ExpectResult(*ch[1], Bytes(std::vector<double>{2.5, 3.5, 4.5, 5.5}),
               DataType::kFloat64, {4});
  EXPECT_THAT(ch[2]->sent(), IsEmpty());
  EXPECT_TRUE(Settles(*c));
}

// All-to-all over 5 ranks: rank r sends [10, 2] int32, two rows to each
// rank d, whose element (k, e) (row k of the two, column e) is
// 1000 r + 100 d + 10 k + e.
constexpr int kA2aRanks = 5;
int32_t A2aValue(int from, int to, int row, int col) {
  return 1000 * from + 100 * to + 10 * row + col;
}

// What ranks first..last send as one contribution: per destination d in
// group order, their parts for d in rank order.
std::string A2aCombinedInput(int first, int last) {
  std::vector<int32_t> v;
  for (int d = 0; d < kA2aRanks; ++d) {
    for (int r = first; r <= last; ++r) {
      for (int k = 0; k < 2; ++k) {
        for (int e = 0; e < 2; ++e) v.push_back(A2aValue(r, d, k, e));
      }
    }
  }
  return Bytes(v);
}

// What ranks first..last get as one contribution: each one's result (the
// rows every rank sent it, in group order), in rank order.
std::string A2aCombinedResult(int first, int last) {
  std::vector<int32_t> v;
  for (int r = first; r <= last; ++r) {
    for (int s = 0; s < kA2aRanks; ++s) {
      for (int k = 0; k < 2; ++k) {
        for (int e = 0; e < 2; ++e) v.push_back(A2aValue(s, r, k, e));
      }
    }
  }
  return Bytes(v);
}

Fingerprint A2aFp(const std::vector<int>& group, int ranks) {
  return Fp(CollectiveKind::kAllToAll,
            {Spec(DataType::kInt32, {10 * ranks, 2})}, group);
}

TEST_F(CollectiveSeveralRanksTest, AllToAllGivesCarriersTheirRanksRows) {
  // Ranks 0-1 and 2-3 come as two carriers, rank 4 alone: every pair of a
  // sender and a receiver, alone or carried, is exercised.
  const std::vector<int> group = {0, 1, 2, 3, 4};
  std::shared_ptr<Collective> c = Make(CollectiveKind::kAllToAll, group);
  auto ch = Channels(kA2aRanks);
  ASSERT_TRUE(c->Attach(ch[2], 2, A2aFp(group, 2), "", {3}));
  ASSERT_TRUE(c->Attach(ch[0], 0, A2aFp(group, 2), "", {1}));
  // Part of a carrier's payload before every rank is in: held back.
  const std::string carried = A2aCombinedInput(2, 3);
  c->OnData(2, 0, Range(carried.substr(0, 44)));
  ASSERT_TRUE(c->Attach(ch[4], 4, A2aFp(group, 1), ""));
  c->OnData(2, 44, Range(carried.substr(44)));
  Feed(*c, 4, A2aCombinedInput(4, 4));
  Feed(*c, 0, A2aCombinedInput(0, 1));
  ExpectResult(*ch[0], A2aCombinedResult(0, 1), DataType::kInt32, {20, 2});
  ExpectResult(*ch[2], A2aCombinedResult(2, 3), DataType::kInt32, {20, 2});
  ExpectResult(*ch[4], A2aCombinedResult(4, 4), DataType::kInt32, {10, 2});
  for (int r : {1, 3}) EXPECT_THAT(ch[r]->sent(), IsEmpty()) << "rank " << r;
  EXPECT_TRUE(Settles(*c));
}

TEST_F(CollectiveSeveralRanksTest, AllToAllOfOneCarrierForEveryRank) {
  // One host of all five ranks: its result is its own input regrouped.
  const std::vector<int> group = {0, 1, 2, 3, 4};
  std::shared_ptr<Collective> c = Make(CollectiveKind::kAllToAll, group);
  auto ch = Channels(kA2aRanks);
  ASSERT_TRUE(c->Attach(ch[0], 0, A2aFp(group, 5), "", {1, 2, 3, 4}));
  Feed(*c, 0, A2aCombinedInput(0, 4));
  ExpectResult(*ch[0], A2aCombinedResult(0, 4), DataType::kInt32, {50, 2});
  EXPECT_TRUE(Settles(*c));
}

TEST_F(CollectiveSeveralRanksTest, AllToAllCarriersResultIsKept) {
  // A carrier's rows are kept whole for a replay, as any rank's are.
  keep_results_ = true;
  const std::vector<int> group = {0, 1, 2, 3, 4};
  std::shared_ptr<Collective> c = Make(CollectiveKind::kAllToAll, group);
  auto ch = Channels(kA2aRanks);
  ASSERT_TRUE(c->Attach(ch[1], 1, A2aFp(group, 4), "s1/0", {2, 3, 4}));
  ASSERT_TRUE(c->Attach(ch[0], 0, A2aFp(group, 1), "s0/0"));
  Feed(*c, 1, A2aCombinedInput(1, 4));
  Feed(*c, 0, A2aCombinedInput(0, 0));
  ExpectResult(*ch[1], A2aCombinedResult(1, 4), DataType::kInt32, {40, 2});
  ExpectResult(*ch[0], A2aCombinedResult(0, 0), DataType::kInt32, {10, 2});
  EXPECT_EQ(KeptBytes(*kept_, "s1/0", 1), A2aCombinedResult(1, 4));
  EXPECT_EQ(KeptBytes(*kept_, "s0/0", 0), A2aCombinedResult(0, 0));
  EXPECT_TRUE(Settles(*c));
}

TEST_F(CollectiveSeveralRanksTest, AllToAllCarrierMismatchFailsEveryone) {
  // A carrier for ranks 0-1 declares their rows; one that declares a
  // single rank's rows (as if it were alone) disagrees with rank 2's.
  const std::vector<int> group = {0, 1, 2};
  std::shared_ptr<Collective> c = Make(CollectiveKind::kAllToAll, group);
  auto ch = Channels(3);
  ASSERT_TRUE(c->Attach(
      ch[2], 2,
      Fp(CollectiveKind::kAllToAll, {Spec(DataType::kFloat32, {6})}, group),
      ""));
  EXPECT_FALSE(c->Attach(
      ch[0], 0,
      Fp(CollectiveKind::kAllToAll, {Spec(DataType::kFloat32, {6})}, group), "",
      {1}));
  for (int r : {0, 2}) {
    ExpectFailed(*ch[r], absl::StatusCode::kFailedPrecondition,
                 "mismatched shapes");
  }
  EXPECT_TRUE(c->done());
  EXPECT_EQ(memory_->used(), 0u);
}

TEST_F(CollectiveSeveralRanksTest, AllToAllCarrierOfAnotherDtypeFailsEveryone) {
  const std::vector<int> group = {0, 1, 2};
  std::shared_ptr<Collective> c = Make(CollectiveKind::kAllToAll, group);
  auto ch = Channels(3);
  ASSERT_TRUE(c->Attach(
      ch[0], 0,
      Fp(CollectiveKind::kAllToAll, {Spec(DataType::kFloat32, {12})}, group),
      "", {1}));
  EXPECT_FALSE(c->Attach(
      ch[2], 2,
      Fp(CollectiveKind::kAllToAll, {Spec(DataType::kInt32, {6})}, group), ""));
  for (int r : {0, 2}) {
    ExpectFailed(*ch[r], absl::StatusCode::kFailedPrecondition,
                 "mismatched dtypes");
  }
  EXPECT_TRUE(c->done());
}

}  // namespace
}  // namespace reducer
