#include "server/relay/landed_ranges.h"

#include <algorithm>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace reducer {
namespace {

TEST(LandedRangesTest, EmptyCoversOnlyEmptyRanges) {
  LandedRanges landed;
  EXPECT_TRUE(landed.Covers(5, 5));
  EXPECT_FALSE(landed.Covers(0, 1));
  landed.Add(7, 7);
  EXPECT_EQ(landed.pieces(), 0u);
}

TEST(LandedRangesTest, RangesOutOfOrderJoin) {
  LandedRanges landed;
  landed.Add(100, 200);
  EXPECT_TRUE(landed.Covers(100, 200));
  EXPECT_TRUE(landed.Covers(150, 160));
  EXPECT_FALSE(landed.Covers(99, 200));
  EXPECT_FALSE(landed.Covers(100, 201));
  landed.Add(0, 50);
  EXPECT_EQ(landed.pieces(), 2u);
  EXPECT_FALSE(landed.Covers(0, 100));
  landed.Add(50, 100);  // touches both
  EXPECT_EQ(landed.pieces(), 1u);
  EXPECT_TRUE(landed.Covers(0, 200));
}

TEST(LandedRangesTest, RepeatsAndOverlapsChangeNothingLanded) {
  LandedRanges landed;
  landed.Add(10, 20);
  landed.Add(10, 20);
  landed.Add(12, 18);
  EXPECT_EQ(landed.pieces(), 1u);
  landed.Add(5, 15);
  landed.Add(30, 40);
  landed.Add(18, 35);  // bridges both
  EXPECT_EQ(landed.pieces(), 1u);
  EXPECT_TRUE(landed.Covers(5, 40));
  EXPECT_FALSE(landed.Covers(4, 40));
  EXPECT_FALSE(landed.Covers(5, 41));
}

// Against a byte map: random ranges, each Covers answer checked byte by
// byte.
TEST(LandedRangesTest, AgreesWithAByteMap) {
  std::mt19937 random(7);
  for (int round = 0; round < 50; ++round) {
    constexpr size_t kBytes = 300;
    LandedRanges landed;
    std::vector<bool> bytes(kBytes, false);
    for (int step = 0; step < 40; ++step) {
      size_t a = random() % (kBytes + 1), b = random() % (kBytes + 1);
      if (a > b) std::swap(a, b);
      landed.Add(a, b);
      for (size_t i = a; i < b; ++i) bytes[i] = true;
      for (int probe = 0; probe < 20; ++probe) {
        size_t c = random() % (kBytes + 1), d = random() % (kBytes + 1);
        if (c > d) std::swap(c, d);
        const bool all = std::all_of(bytes.begin() + c, bytes.begin() + d,
                                     [](bool x) { return x; });
        ASSERT_EQ(landed.Covers(c, d), all) << "[" << c << ", " << d << ")";
      }
    }
    size_t runs = 0;
    for (size_t i = 0; i < kBytes; ++i) {
      if (bytes[i] && (i == 0 || !bytes[i - 1])) ++runs;
    }
    EXPECT_EQ(landed.pieces(), runs);
  }
}

}  // namespace
}  // namespace reducer
