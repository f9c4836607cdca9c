#include "core/reduce_identity.h"

#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/data_type.h"
#include "core/reduce.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/matchers.h"

namespace reducer {
namespace {

// Bytes of one identity element.
std::vector<char> IdentityBytes(ReduceOp op, DataType dtype) {
  std::vector<char> bytes(DataTypeSize(dtype));
  absl::Status status = FillIdentity(op, dtype, bytes.data(), 1);
  EXPECT_TRUE(status.ok()) << status;
  return bytes;
}

// The identity element's bits, zero-extended: the float formats' elements
// are compared bit for bit.
uint64_t IdentityBits(ReduceOp op, DataType dtype) {
  std::vector<char> bytes = IdentityBytes(op, dtype);
  uint64_t bits = 0;
  std::memcpy(&bits, bytes.data(), bytes.size());  // little-endian
  return bits;
}

// The identity element as the integer it stands for.
int64_t IdentityValue(ReduceOp op, DataType dtype) {
  std::vector<char> bytes = IdentityBytes(op, dtype);
  switch (dtype) {
    case DataType::kInt8:
      return static_cast<int8_t>(bytes[0]);
    case DataType::kUInt8:
    case DataType::kBool:
      return static_cast<uint8_t>(bytes[0]);
    case DataType::kInt32: {
      int32_t v;
      std::memcpy(&v, bytes.data(), sizeof(v));
      return v;
    }
    case DataType::kInt64: {
      int64_t v;
      std::memcpy(&v, bytes.data(), sizeof(v));
      return v;
    }
    default:
      ADD_FAILURE() << DataTypeName(dtype) << " is not an integer type";
      return 0;
  }
}

// The expected elements, written out from the formats (IEEE 754 binary32,
// binary64, binary16, bfloat16's top half of binary32) and the integer
// ranges, not from the code under test: sum, product, min and max.
TEST(FillIdentityTest, FloatingTypesHaveNegativeZeroOneAndInfinities) {
  const ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kProduct, ReduceOp::kMin,
                           ReduceOp::kMax};
  const struct {
    DataType dtype;
    uint64_t bits[4];
  } kCases[] = {
      {DataType::kFloat32, {0x80000000, 0x3F800000, 0x7F800000, 0xFF800000}},
      {DataType::kFloat64,
       {0x8000000000000000, 0x3FF0000000000000, 0x7FF0000000000000,
        0xFFF0000000000000}},
      {DataType::kFloat16, {0x8000, 0x3C00, 0x7C00, 0xFC00}},
      {DataType::kBFloat16, {0x8000, 0x3F80, 0x7F80, 0xFF80}},
  };
  for (const auto& c : kCases) {
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(IdentityBits(kOps[i], c.dtype), c.bits[i])
          << ReduceOpName(kOps[i]) << " " << DataTypeName(c.dtype);
    }
  }
}

// Sum, product, min, max, bit_and, bit_or and bit_xor.
TEST(FillIdentityTest, IntegersAndBool) {
  const ReduceOp kOps[] = {
      ReduceOp::kSum,    ReduceOp::kProduct, ReduceOp::kMin,   ReduceOp::kMax,
      ReduceOp::kBitAnd, ReduceOp::kBitOr,   ReduceOp::kBitXor};
  const struct {
    DataType dtype;
    int64_t values[7];
  } kCases[] = {
      {DataType::kInt8, {0, 1, 127, -128, -1, 0, 0}},
      {DataType::kUInt8, {0, 1, 255, 0, 255, 0, 0}},
      {DataType::kInt32, {0, 1, 2147483647, -2147483647 - 1, -1, 0, 0}},
      {DataType::kInt64,
       {0, 1, 9223372036854775807, -9223372036854775807 - 1, -1, 0, 0}},
      {DataType::kBool, {0, 1, 1, 0, 1, 0, 0}},
  };
  for (const auto& c : kCases) {
    for (int i = 0; i < 7; ++i) {
      EXPECT_EQ(IdentityValue(kOps[i], c.dtype), c.values[i])
          << ReduceOpName(kOps[i]) << " " << DataTypeName(c.dtype);
    }
  }
}

TEST(FillIdentityTest, AvgTakesTheSumsIdentity) {
  for (DataType dtype : {DataType::kFloat32, DataType::kFloat64,
                         DataType::kFloat16, DataType::kBFloat16}) {
    EXPECT_EQ(IdentityBytes(ReduceOp::kAvg, dtype),
              IdentityBytes(ReduceOp::kSum, dtype))
        << DataTypeName(dtype);
  }
}

TEST(FillIdentityTest, FillsEveryElementAndRefusesUndefinedPairs) {
  std::vector<float> out(5, 7.0f);
  ASSERT_TRUE(
      FillIdentity(ReduceOp::kProduct, DataType::kFloat32, out.data(), 4).ok());
  EXPECT_EQ(out, (std::vector<float>{1, 1, 1, 1, 7}));

  std::vector<int32_t> untouched(3, 9);
  absl::Status status =
      FillIdentity(ReduceOp::kAvg, DataType::kInt32, untouched.data(), 3);
  EXPECT_THAT(status,
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("avg")));
  EXPECT_THAT(status.message(), HasSubstr("int32"));
  EXPECT_EQ(untouched, (std::vector<int32_t>(3, 9)));
  EXPECT_THAT(
      FillIdentity(ReduceOp::kBitXor, DataType::kFloat16, untouched.data(), 1),
      StatusIs(absl::StatusCode::kInvalidArgument));
}

// Element values to try for `dtype`, as raw bytes: every pattern of the
// 8- and 16-bit types, and for the wider ones their edges (zeros of both
// signs, infinities, NaN, the extremes, subnormals) plus random patterns.
std::vector<uint64_t> Samples(DataType dtype) {
  const size_t size = DataTypeSize(dtype);
  std::vector<uint64_t> samples;
  if (dtype == DataType::kBool) return {0, 1};
  if (size <= 2) {
    for (uint64_t bits = 0; bits < (uint64_t{1} << (8 * size)); ++bits) {
      samples.push_back(bits);
    }
    return samples;
  }
  const uint64_t sign = uint64_t{1} << (8 * size - 1);
  const uint64_t all = size == 8 ? ~uint64_t{0} : (uint64_t{1} << 32) - 1;
  samples = {0, sign, 1, sign | 1, all, all >> 1, sign - 1, 2};
  if (dtype == DataType::kFloat32) {
    samples.insert(samples.end(),
                   {0x7F800000, 0xFF800000, 0x7FC00000, 0x00800000, 0x007FFFFF,
                    0x7F7FFFFF, 0x3F800000});
  } else if (dtype == DataType::kFloat64) {
    samples.insert(
        samples.end(),
        {0x7FF0000000000000ull, 0xFFF0000000000000ull, 0x7FF8000000000000ull,
         0x0010000000000000ull, 0x000FFFFFFFFFFFFFull, 0x7FEFFFFFFFFFFFFFull});
  }
  std::mt19937_64 random(20261204);
  for (int i = 0; i < 20000; ++i) samples.push_back(random() & all);
  return samples;
}

bool IsNaN(DataType dtype, uint64_t bits) {
  switch (dtype) {
    case DataType::kFloat32:
      return (bits & 0x7F800000) == 0x7F800000 && (bits & 0x007FFFFF) != 0;
    case DataType::kFloat64:
      return (bits & 0x7FF0000000000000ull) == 0x7FF0000000000000ull &&
             (bits & 0x000FFFFFFFFFFFFFull) != 0;
    case DataType::kFloat16:
      return (bits & 0x7C00) == 0x7C00 && (bits & 0x03FF) != 0;
    case DataType::kBFloat16:
      return (bits & 0x7F80) == 0x7F80 && (bits & 0x007F) != 0;
    default:
      return false;
  }
}

// The contract itself: reducing x with the identity, on either side, gives
// x back (NaN stays NaN), for every defined pair but avg and every sample.
TEST(FillIdentityTest, ReducingWithTheIdentityGivesTheOtherInputBack) {
  for (int d = 0; d < kNumDataTypes; ++d) {
    const DataType dtype = static_cast<DataType>(d);
    const size_t size = DataTypeSize(dtype);
    const std::vector<uint64_t> samples = Samples(dtype);
    std::vector<char> xs(samples.size() * size);
    for (size_t i = 0; i < samples.size(); ++i) {
      std::memcpy(xs.data() + i * size, &samples[i], size);  // little-endian
    }
    for (int o = 0; o < kNumReduceOps; ++o) {
      const ReduceOp op = static_cast<ReduceOp>(o);
      if (op == ReduceOp::kAvg || !CheckOpSupported(op, dtype).ok()) continue;
      std::vector<char> identity(xs.size());
      ASSERT_TRUE(
          FillIdentity(op, dtype, identity.data(), samples.size()).ok());
      for (bool identity_first : {false, true}) {
        const void* inputs[] = {identity_first ? identity.data() : xs.data(),
                                identity_first ? xs.data() : identity.data()};
        std::vector<char> out(xs.size());
        ASSERT_TRUE(Reduce(op, dtype, inputs, samples.size(), out.data()).ok());
        int mismatches = 0;
        for (size_t i = 0; i < samples.size() && mismatches < 3; ++i) {
          uint64_t got = 0;
          std::memcpy(&got, out.data() + i * size, size);
          const bool same =
              IsNaN(dtype, samples[i]) ? IsNaN(dtype, got) : got == samples[i];
          if (!same) {
            ++mismatches;
            ADD_FAILURE() << ReduceOpName(op) << " on " << DataTypeName(dtype)
                          << (identity_first ? ", identity first" : "")
                          << ": x = 0x" << std::hex << samples[i] << " gave 0x"
                          << got;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace reducer
