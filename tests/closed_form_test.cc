#include "tests/closed_form.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/status_matchers.h"

namespace reducer {
namespace testing {
namespace {

using ::testing::HasSubstr;

TEST(ClosedFormTest, HalfConversionRoundsToNearestEven) {
  EXPECT_EQ(FloatToHalfBits(1.0f), 0x3c00);
  EXPECT_EQ(FloatToHalfBits(-2.0f), 0xc000);
  EXPECT_EQ(FloatToHalfBits(65504.0f), 0x7bff);
  EXPECT_EQ(FloatToHalfBits(65519.0f), 0x7bff);
  EXPECT_EQ(FloatToHalfBits(65520.0f), 0x7c00);  // ties to even: infinity
  // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties to the even 1.
  EXPECT_EQ(FloatToHalfBits(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  // 1 + 3 * 2^-11 is halfway between 1 + 2^-10 and 1 + 2^-9: to 1 + 2^-9.
  EXPECT_EQ(FloatToHalfBits(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  EXPECT_EQ(FloatToHalfBits(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20)),
            0x3c01);
  EXPECT_EQ(FloatToHalfBits(std::ldexp(1.0f, -24)), 0x0001);  // subnormal
  EXPECT_EQ(FloatToHalfBits(std::ldexp(1.0f, -25)), 0x0000);  // tie to even 0
  EXPECT_EQ(FloatToHalfBits(std::ldexp(3.0f, -25)), 0x0002);  // tie to even 2
  EXPECT_EQ(FloatToHalfBits(std::ldexp(1023.5f, -24)), 0x0400);  // to normal
  EXPECT_EQ(FloatToHalfBits(-0.0f), 0x8000);
  EXPECT_EQ(FloatToHalfBits(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_TRUE(std::isnan(HalfBitsToFloat(
      FloatToHalfBits(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(ClosedFormTest, HalfRoundTripsEveryFiniteHalf) {
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    const uint16_t h = static_cast<uint16_t>(bits);
    if ((h & 0x7c00) == 0x7c00) continue;  // inf and NaN
    ASSERT_EQ(FloatToHalfBits(HalfBitsToFloat(h)), h) << "bits 0x" << std::hex
                                                      << bits;
  }
}

TEST(ClosedFormTest, BFloat16ConversionRoundsToNearestEven) {
  EXPECT_EQ(FloatToBFloat16Bits(1.0f), 0x3f80);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to the even 1.
  EXPECT_EQ(FloatToBFloat16Bits(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  EXPECT_EQ(FloatToBFloat16Bits(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
  EXPECT_EQ(BFloat16BitsToFloat(0xc0a0), -5.0f);
  EXPECT_TRUE(std::isnan(BFloat16BitsToFloat(
      FloatToBFloat16Bits(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(ClosedFormTest, OpAllowedFollowsTheApiRule) {
  EXPECT_TRUE(OpAllowed(ReduceOp::kAvg, DataType::kBFloat16));
  EXPECT_FALSE(OpAllowed(ReduceOp::kAvg, DataType::kInt32));
  EXPECT_FALSE(OpAllowed(ReduceOp::kAvg, DataType::kBool));
  EXPECT_TRUE(OpAllowed(ReduceOp::kBitXor, DataType::kBool));
  EXPECT_TRUE(OpAllowed(ReduceOp::kBitAnd, DataType::kUInt8));
  EXPECT_FALSE(OpAllowed(ReduceOp::kBitOr, DataType::kFloat64));
  EXPECT_TRUE(OpAllowed(ReduceOp::kProduct, DataType::kBool));
}

// The float closed form is exact: the expected sum equals the sum of the
// inputs decoded to double, for every floating dtype and up to 16 ranks.
TEST(ClosedFormTest, FloatingSumsAreExactInEveryDtype) {
  for (DataType dtype : {DataType::kFloat32, DataType::kFloat64,
                         DataType::kFloat16, DataType::kBFloat16}) {
    for (int ranks : {1, 3, 8, 16}) {
      std::vector<int> group;
      for (int r = 0; r < ranks; ++r) group.push_back(r);
      constexpr int64_t kN = 500;
      const std::vector<uint8_t> want =
          ClosedFormExpected(ReduceOp::kSum, dtype, group, kN, 42);
      std::vector<double> sums(kN, 0.0);
      for (int r : group) {
        const std::vector<uint8_t> in =
            ClosedFormInput(ReduceOp::kSum, dtype, r, kN, 42);
        for (int64_t i = 0; i < kN; ++i) {
          sums[i] += std::stod(ElementToString(dtype, in.data(), i));
        }
      }
      for (int64_t i = 0; i < kN; ++i) {
        ASSERT_EQ(std::stod(ElementToString(dtype, want.data(), i)), sums[i])
            << DataTypeName(dtype) << " ranks=" << ranks << " element " << i;
      }
    }
  }
}

TEST(ClosedFormTest, IntegerSumsWrap) {
  const std::vector<int> group = {0, 1, 2, 3, 4, 5, 6, 7};
  const std::vector<uint8_t> want =
      ClosedFormExpected(ReduceOp::kSum, DataType::kInt8, group, 64, 3);
  int wrapped = 0;
  for (int64_t i = 0; i < 64; ++i) {
    int sum = 0;
    for (int r : group) {
      const std::vector<uint8_t> in =
          ClosedFormInput(ReduceOp::kSum, DataType::kInt8, r, 64, 3);
      sum += static_cast<int8_t>(in[i]);
    }
    if (sum < -128 || sum > 127) ++wrapped;
    ASSERT_EQ(static_cast<int8_t>(want[i]), static_cast<int8_t>(sum & 0xff))
        << "element " << i;
  }
  EXPECT_GT(wrapped, 0) << "the int8 closed form never overflows";
}

TEST(ClosedFormTest, BoolResultsAreMixed) {
  const std::vector<int> group = {0, 1, 2, 3, 4, 5, 6, 7};
  for (ReduceOp op : {ReduceOp::kBitAnd, ReduceOp::kBitOr, ReduceOp::kBitXor,
                      ReduceOp::kSum, ReduceOp::kProduct}) {
    const std::vector<uint8_t> want =
        ClosedFormExpected(op, DataType::kBool, group, 4096, 9);
    int trues = 0;
    for (uint8_t b : want) {
      ASSERT_LE(b, 1);
      trues += b;
    }
    EXPECT_GT(trues, 0) << ReduceOpName(op);
    EXPECT_LT(trues, 4096) << ReduceOpName(op);
  }
}

TEST(ClosedFormTest, CompareElementsNamesTheFirstDifference) {
  const float got[] = {1.0f, 2.0f, 3.0f};
  const float want[] = {1.0f, 2.5f, 3.0f};
  const absl::Status s = CompareElements(DataType::kFloat32, got, want, 3, "ctx");
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kFailedPrecondition,
                          HasSubstr("ctx: 1 of 3 float32 elements differ")));
  EXPECT_THAT(s.message(), HasSubstr("element 1: got 2 "));
  EXPECT_THAT(s.message(), HasSubstr("want 2.5 "));
  EXPECT_TRUE(CompareElements(DataType::kFloat32, got, got, 3, "ctx").ok());
}

}  // namespace
}  // namespace testing
}  // namespace reducer
