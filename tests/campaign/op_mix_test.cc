#include "tests/campaign/op_mix.h"

#include <set>

#include "gtest/gtest.h"

namespace reducer {
namespace testing {
namespace {

TEST(OpMixTest, EveryRankDrawsTheSameOpAndEveryKindComesUp) {
  std::set<CampaignKind> kinds;
  bool tiny = false, large = false;
  for (int64_t step = 0; step < 400; ++step) {
    CampaignOp a = DrawOp(5, step, 4, 1 << 20);
    CampaignOp b = DrawOp(5, step, 4, 1 << 20);
    ASSERT_EQ(a.kind, b.kind);
    ASSERT_EQ(a.elements, b.elements);
    ASSERT_EQ(a.root, b.root);
    ASSERT_EQ(a.named, b.named);
    EXPECT_GE(a.root, 0);
    EXPECT_LT(a.root, 4);
    kinds.insert(a.kind);
    tiny = tiny || a.elements == 0;
    large = large || a.elements > (512 << 10);
  }
  EXPECT_EQ(kinds.size(), 11u);
  EXPECT_TRUE(tiny);
  EXPECT_TRUE(large);
}

TEST(OpMixTest, SumExpectedIsTheSumOfTheInputsAndShowsADoubledRank) {
  const int w = 5;
  const int64_t n = 1000;
  std::vector<double> sum(n, 0.0);
  for (int r = 0; r < w; ++r) {
    std::vector<float> in = SumInput(n, 17, r, w);
    for (int64_t i = 0; i < n; ++i) sum[i] += in[i];
  }
  const std::vector<float> want = SumExpected(n, 17, w);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(sum[i], want[i]) << i;
  // Rank 2 counted twice changes every element it holds the one-hot of.
  std::vector<float> twice = SumInput(n, 17, 2, w);
  for (int64_t i = 2; i < n; i += w) EXPECT_NE(sum[i] + twice[i], want[i]);
}

TEST(OpMixTest, GatherRowsAreUnevenAndSomeRankSendsNone) {
  CampaignOp op = DrawOp(1, 0, 3, 1000);
  op.elements = 150;
  std::set<int64_t> rows;
  for (int r = 0; r < 3; ++r) rows.insert(GatherRows(op, r));
  EXPECT_EQ(rows.size(), 3u);
  EXPECT_EQ(*rows.begin(), 0);
  EXPECT_EQ(GatherExpected(op).size(),
            static_cast<size_t>((GatherRows(op, 0) + GatherRows(op, 1) + GatherRows(op, 2)) *
                                kGatherColumns));
}

}  // namespace
}  // namespace testing
}  // namespace reducer
