#include "core/reduce.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "core/data_type_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/matchers.h"

namespace reducer {
namespace {

// Reference arithmetic -------------------------------------------------------
//
// Everything below computes expected values without the kernels' code: float
// formats are decoded with ldexp from their fields and rounded with
// nearbyint on exact doubles. Rounding a float32 sum, product or quotient
// computed in double (53 >= 2 * 24 + 2 bits) gives the correctly rounded
// float32 result; float64 uses __float128 (113 >= 2 * 53 + 2) the same way.

struct FloatFormat {
  int mantissa_bits;
  int min_exponent;  // of the smallest normal
  double max_finite;
};
constexpr FloatFormat kF32Format{23, -126, FLT_MAX};
constexpr FloatFormat kF16Format{10, -14, 65504.0};
constexpr FloatFormat kBF16Format{7, -126, 0x1.fep127};  // 0x7f7f

// `v` rounded to nearest even in `format`, with overflow to infinity.
double RefRound(double v, const FloatFormat& format) {
  if (std::isnan(v) || std::isinf(v) || v == 0) return v;
  const double a = std::fabs(v);
  const int e = std::max(std::ilogb(a), format.min_exponent);
  const double quantum = std::ldexp(1.0, e - format.mantissa_bits);
  double r = std::nearbyint(a / quantum) * quantum;
  if (r > format.max_finite) r = INFINITY;
  return std::copysign(r, v);
}

double RefRoundF32(double v) { return RefRound(v, kF32Format); }

// The value of `bits` in a 16-bit IEEE 754-style binary format: a sign bit,
// `exponent_bits` of biased exponent and `mantissa_bits` of fraction.
double RefDecode16(uint16_t bits, int exponent_bits, int mantissa_bits) {
  const int sign = bits >> 15;
  const int max_exponent = (1 << exponent_bits) - 1;  // infinities and NaNs
  const int bias = max_exponent / 2;
  const int exponent = (bits >> mantissa_bits) & max_exponent;
  const int mantissa = bits & ((1 << mantissa_bits) - 1);
  double v;
  if (exponent == 0) {
    v = std::ldexp(mantissa, 1 - bias - mantissa_bits);
  } else if (exponent == max_exponent) {
    v = mantissa == 0 ? INFINITY : NAN;
  } else {
    v = std::ldexp((1 << mantissa_bits) + mantissa,
                   exponent - bias - mantissa_bits);
  }
  return sign ? -v : v;
}

double RefHalfToDouble(uint16_t bits) { return RefDecode16(bits, 5, 10); }

double RefBFloat16ToDouble(uint16_t bits) { return RefDecode16(bits, 8, 7); }

float FloatFromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

// NaN equals NaN; otherwise equal values, and equal signs of zero when
// `zero_sign_matters`.
::testing::AssertionResult SameValue(double actual, double expected,
                                     bool zero_sign_matters = true) {
  if (std::isnan(actual) && std::isnan(expected)) {
    return ::testing::AssertionSuccess();
  }
  if (actual == expected &&
      (!zero_sign_matters || std::signbit(actual) == std::signbit(expected))) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure()
         << "actual " << actual << ", expected " << expected;
}

// The reference folds ---------------------------------------------------------

double RefMinMax(ReduceOp op, double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return NAN;
  return op == ReduceOp::kMin ? std::min(a, b) : std::max(a, b);
}

// Folds float32 values (or float16/bfloat16 values accumulated in float32).
double RefFoldFloat32(ReduceOp op, const std::vector<double>& x) {
  double acc = x[0];
  for (size_t k = 1; k < x.size(); ++k) {
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg:
        acc = RefRoundF32(acc + x[k]);
        break;
      case ReduceOp::kProduct:
        acc = RefRoundF32(acc * x[k]);
        break;
      default:
        acc = RefMinMax(op, acc, x[k]);
    }
  }
  if (op == ReduceOp::kAvg) acc = RefRoundF32(acc / x.size());
  return acc;
}

double RefFoldFloat64(ReduceOp op, const std::vector<double>& x) {
  double acc = x[0];
  for (size_t k = 1; k < x.size(); ++k) {
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg:
        acc = static_cast<double>(static_cast<__float128>(acc) + x[k]);
        break;
      case ReduceOp::kProduct:
        acc = static_cast<double>(static_cast<__float128>(acc) * x[k]);
        break;
      default:
        acc = RefMinMax(op, acc, x[k]);
    }
  }
  if (op == ReduceOp::kAvg) {
    acc = static_cast<double>(static_cast<__float128>(acc) /
                              static_cast<__float128>(x.size()));
  }
  return acc;
}

// Integers: folded mod 2^64 (unsigned, so wrapping is defined), then
// truncated to the type; min and max on the exact values.
int64_t TruncateTo(DataType dtype, uint64_t v) {
  switch (dtype) {
    case DataType::kInt8:
      return static_cast<int8_t>(static_cast<uint8_t>(v & 0xff));
    case DataType::kUInt8:
      return static_cast<int64_t>(v & 0xff);
    case DataType::kInt32:
      return static_cast<int32_t>(static_cast<uint32_t>(v & 0xffffffffu));
    default:
      return static_cast<int64_t>(v);
  }
}

int64_t RefFoldInteger(DataType dtype, ReduceOp op,
                       const std::vector<int64_t>& x) {
  if (dtype == DataType::kBool) {
    int trues = 0;
    for (int64_t v : x) trues += v != 0;
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kMax:
      case ReduceOp::kBitOr:
        return trues > 0;
      case ReduceOp::kProduct:
      case ReduceOp::kMin:
      case ReduceOp::kBitAnd:
        return trues == static_cast<int>(x.size());
      default:
        return trues % 2;
    }
  }
  uint64_t acc = static_cast<uint64_t>(x[0]);
  int64_t extreme = x[0];
  for (size_t k = 1; k < x.size(); ++k) {
    const uint64_t u = static_cast<uint64_t>(x[k]);
    switch (op) {
      case ReduceOp::kSum:
        acc += u;
        break;
      case ReduceOp::kProduct:
        acc *= u;
        break;
      case ReduceOp::kBitAnd:
        acc &= u;
        break;
      case ReduceOp::kBitOr:
        acc |= u;
        break;
      case ReduceOp::kBitXor:
        acc ^= u;
        break;
      case ReduceOp::kMin:
        extreme = std::min(extreme, x[k]);
        break;
      case ReduceOp::kMax:
        extreme = std::max(extreme, x[k]);
        break;
      default:
        ADD_FAILURE() << "no integer reference for " << ReduceOpName(op);
    }
  }
  if (op == ReduceOp::kMin || op == ReduceOp::kMax) return extreme;
  return TruncateTo(dtype, acc);
}

// Element access on raw bytes -------------------------------------------------

double ReadFloating(DataType dtype, const uint8_t* p, size_t i) {
  switch (dtype) {
    case DataType::kFloat32: {
      float f;
      std::memcpy(&f, p + 4 * i, 4);
      return f;
    }
    case DataType::kFloat64: {
      double d;
      std::memcpy(&d, p + 8 * i, 8);
      return d;
    }
    default: {
      uint16_t h;
      std::memcpy(&h, p + 2 * i, 2);
      return dtype == DataType::kFloat16 ? RefHalfToDouble(h)
                                         : RefBFloat16ToDouble(h);
    }
  }
}

int64_t ReadInteger(DataType dtype, const uint8_t* p, size_t i) {
  switch (dtype) {
    case DataType::kInt8:
      return static_cast<int8_t>(p[i]);
    case DataType::kUInt8:
    case DataType::kBool:
      return p[i];
    case DataType::kInt32: {
      int32_t v;
      std::memcpy(&v, p + 4 * i, 4);
      return v;
    }
    default: {
      int64_t v;
      std::memcpy(&v, p + 8 * i, 8);
      return v;
    }
  }
}

// Random inputs covering each type's range: full-range bit patterns (finite
// for the float types) mixed with values of moderate size, where sums round.
std::vector<uint8_t> RandomInput(DataType dtype, size_t n,
                                 std::mt19937_64& rng) {
  const size_t size = DataTypeSize(dtype);
  std::vector<uint8_t> bytes(n * size);
  for (size_t i = 0; i < n; ++i) {
    uint8_t* p = bytes.data() + i * size;
    const uint64_t r = rng();
    const bool moderate = (r >> 63) != 0;
    switch (dtype) {
      case DataType::kFloat32:
      case DataType::kFloat64: {
        // Magnitudes 2^-20 to 2^22 keep products of nine inputs finite.
        std::uniform_real_distribution<double> unit(-4.0, 4.0);
        const int scale = moderate ? 0 : static_cast<int>(r % 41) - 20;
        const double v = std::ldexp(unit(rng), scale);
        if (dtype == DataType::kFloat32) {
          const float f = static_cast<float>(v);
          std::memcpy(p, &f, 4);
        } else {
          std::memcpy(p, &v, 8);
        }
        break;
      }
      case DataType::kFloat16:
      case DataType::kBFloat16: {
        // The fields RefDecode16 reads: moderate values get an exponent
        // within 3 of the bias.
        const int mantissa_bits = dtype == DataType::kFloat16 ? 10 : 7;
        const int max_exponent = (1 << (15 - mantissa_bits)) - 1;
        const int bias = max_exponent / 2;
        uint16_t h = static_cast<uint16_t>(r);
        if (moderate) {
          h = (h & (0x8000 | ((1 << mantissa_bits) - 1))) |
              static_cast<uint16_t>((bias - 3 + r % 7) << mantissa_bits);
        }
        if (((h >> mantissa_bits) & max_exponent) == max_exponent) {
          h &= 0xbfff;  // keep it finite
        }
        std::memcpy(p, &h, 2);
        break;
      }
      case DataType::kBool: {
        const uint8_t choices[] = {0, 1, 2, 255};  // any nonzero byte is true
        p[0] = choices[r % 4];
        break;
      }
      default:
        std::memcpy(p, &r, size);  // little-endian: the low bytes
    }
  }
  return bytes;
}

// The op x dtype x world size x length sweep ----------------------------------

// Reduces `world` random inputs of `n` elements with the kernel and checks
// every element against the reference fold. Every buffer starts `shift` bytes
// past an allocation, and with `in_place` the output is inputs[0].
void ExpectReduceMatchesReference(DataType dtype, ReduceOp op, int world,
                                  size_t n, bool in_place, size_t shift) {
  const size_t size = DataTypeSize(dtype);
  std::mt19937_64 rng(1000003 * static_cast<int>(dtype) +
                      10007 * static_cast<int>(op) + 101 * world + n);
  std::vector<std::vector<uint8_t>> inputs;
  for (int k = 0; k < world; ++k) {
    std::vector<uint8_t> in(shift, 0x77);
    const std::vector<uint8_t> values = RandomInput(dtype, n, rng);
    in.insert(in.end(), values.begin(), values.end());
    inputs.push_back(std::move(in));
  }
  const std::vector<std::vector<uint8_t>> originals = inputs;
  std::vector<uint8_t> separate_out(shift + n * size, 0xab);
  uint8_t* out = (in_place ? inputs[0].data() : separate_out.data()) + shift;
  std::vector<const void*> pointers;
  for (const auto& in : inputs) pointers.push_back(in.data() + shift);

  const absl::Status status = Reduce(op, dtype, pointers, n, out);

  if (!CheckOpSupported(op, dtype).ok()) {
    EXPECT_THAT(status, StatusIs(absl::StatusCode::kInvalidArgument));
    EXPECT_THAT(std::string(status.message()),
                HasSubstr(std::string(ReduceOpName(op))));
    EXPECT_THAT(std::string(status.message()),
                HasSubstr(std::string(DataTypeName(dtype))));
    EXPECT_EQ(inputs, originals) << "out must be untouched on error";
    EXPECT_EQ(separate_out, std::vector<uint8_t>(shift + n * size, 0xab));
    return;
  }
  ASSERT_TRUE(status.ok()) << status;
  for (int k = in_place ? 1 : 0; k < world; ++k) {
    ASSERT_EQ(inputs[k], originals[k]) << "input " << k << " was modified";
  }
  const std::vector<uint8_t>& out_buffer = in_place ? inputs[0] : separate_out;
  ASSERT_TRUE(std::all_of(out_buffer.begin(), out_buffer.begin() + shift,
                          [&](uint8_t b) { return b == out_buffer[0]; }))
      << "bytes before the output were written";
  int failures = 0;
  for (size_t i = 0; i < n && failures < 10; ++i) {
    if (IsFloatingPoint(dtype)) {
      std::vector<double> x;
      for (const auto& in : originals) {
        x.push_back(ReadFloating(dtype, in.data() + shift, i));
      }
      double expected = dtype == DataType::kFloat64 ? RefFoldFloat64(op, x)
                                                    : RefFoldFloat32(op, x);
      if (dtype == DataType::kFloat16)
        expected = RefRound(expected, kF16Format);
      if (dtype == DataType::kBFloat16)
        expected = RefRound(expected, kBF16Format);
      const bool zero_sign_matters =
          op != ReduceOp::kMin && op != ReduceOp::kMax;
      ::testing::AssertionResult same =
          SameValue(ReadFloating(dtype, out, i), expected, zero_sign_matters);
      if (!same) {
        ++failures;
        ADD_FAILURE() << "element " << i << ": " << same.message();
      }
    } else {
      std::vector<int64_t> x;
      for (const auto& in : originals) {
        x.push_back(ReadInteger(dtype, in.data() + shift, i));
      }
      const int64_t expected = RefFoldInteger(dtype, op, x);
      const int64_t actual = ReadInteger(dtype, out, i);
      if (actual != expected) {
        ++failures;
        ADD_FAILURE() << "element " << i << ": actual " << actual
                      << ", expected " << expected;
      }
    }
  }
}

// dtype index, op index, number of inputs, elements, out aliases inputs[0].
using SweepParam = std::tuple<int, int, int, size_t, bool>;

class ReduceSweepTest : public ::testing::TestWithParam<SweepParam> {};

TEST_P(ReduceSweepTest, MatchesReferenceOrIsRejected) {
  const auto [d, o, world, n, in_place] = GetParam();
  ExpectReduceMatchesReference(kAllDataTypes[d], kAllReduceOps[o], world, n,
                               in_place, /*shift=*/0);
}

std::string SweepName(const ::testing::TestParamInfo<SweepParam>& info) {
  const auto [d, o, world, n, in_place] = info.param;
  return absl::StrCat(DataTypeName(kAllDataTypes[d]), "_",
                      ReduceOpName(kAllReduceOps[o]), "_W", world, "_n", n,
                      in_place ? "_inplace" : "");
}

// 17000 elements cross the 16 KiB tile boundary of every accumulator type
// with a partial last tile; 5 and 9 inputs need more than one fold pass.
INSTANTIATE_TEST_SUITE_P(AllPairs, ReduceSweepTest,
                         ::testing::Combine(::testing::Range(0, kNumDataTypes),
                                            ::testing::Range(0, kNumReduceOps),
                                            ::testing::Values(1, 2, 3, 4, 5, 9),
                                            ::testing::Values<size_t>(1, 37,
                                                                      17000),
                                            ::testing::Bool()),
                         SweepName);

// Results of several MiB: many tiles, at unaligned output addresses.
TEST(ReduceLargeTest, Float32SumOfFiveMatchesReference) {
  ExpectReduceMatchesReference(DataType::kFloat32, ReduceOp::kSum, 5,
                               (size_t{5} << 20) / 4 + 1001, false, 4);
}

TEST(ReduceLargeTest, Float32SumInPlaceMatchesReference) {
  ExpectReduceMatchesReference(DataType::kFloat32, ReduceOp::kSum, 2,
                               (size_t{4} << 20) / 4 + 17, true, 0);
}

TEST(ReduceLargeTest, Float16AvgMatchesReference) {
  ExpectReduceMatchesReference(DataType::kFloat16, ReduceOp::kAvg, 3,
                               (size_t{4} << 20) / 2 + 77, true, 2);
}

TEST(ReduceLargeTest, BFloat16MaxMatchesReference) {
  ExpectReduceMatchesReference(DataType::kBFloat16, ReduceOp::kMax, 2,
                               (size_t{4} << 20) / 2 + 5, false, 6);
}

TEST(ReduceLargeTest, BoolXorInPlaceMatchesReference) {
  ExpectReduceMatchesReference(DataType::kBool, ReduceOp::kBitXor, 3,
                               (size_t{4} << 20) + 3, true, 1);
}

TEST(ReduceLargeTest, Int64ProductMatchesReference) {
  ExpectReduceMatchesReference(DataType::kInt64, ReduceOp::kProduct, 4,
                               (size_t{4} << 20) / 8 + 9, false, 8);
}

TEST(ReduceLargeTest, Float64MinInPlaceMatchesReference) {
  ExpectReduceMatchesReference(DataType::kFloat64, ReduceOp::kMin, 2,
                               (size_t{4} << 20) / 8 - 1, true, 8);
}

TEST(ReduceManyInputsTest, MoreRanksThanTheInlinePointerArrayMatchReference) {
  ExpectReduceMatchesReference(DataType::kFloat32, ReduceOp::kSum, 70, 5000,
                               false, 0);
  ExpectReduceMatchesReference(DataType::kInt32, ReduceOp::kProduct, 65, 300,
                               true, 0);
  ExpectReduceMatchesReference(DataType::kBFloat16, ReduceOp::kAvg, 100, 4100,
                               false, 0);
}

// Contract details ------------------------------------------------------------

template <typename T>
std::vector<T> ReduceValues(ReduceOp op, DataType dtype,
                            const std::vector<std::vector<T>>& inputs) {
  std::vector<const void*> pointers;
  for (const auto& in : inputs) pointers.push_back(in.data());
  std::vector<T> out(inputs[0].size());
  absl::Status s = Reduce(op, dtype, pointers, out.size(), out.data());
  EXPECT_TRUE(s.ok()) << s;
  return out;
}

std::vector<float> Float32(ReduceOp op,
                           const std::vector<std::vector<float>>& in) {
  return ReduceValues<float>(op, DataType::kFloat32, in);
}

uint16_t Half(ReduceOp op, std::vector<uint16_t> values) {
  std::vector<std::vector<uint16_t>> inputs;
  for (uint16_t v : values) inputs.push_back({v});
  return ReduceValues<uint16_t>(op, DataType::kFloat16, inputs)[0];
}

uint16_t BFloat16(ReduceOp op, std::vector<uint16_t> values) {
  std::vector<std::vector<uint16_t>> inputs;
  for (uint16_t v : values) inputs.push_back({v});
  return ReduceValues<uint16_t>(op, DataType::kBFloat16, inputs)[0];
}

TEST(ReduceTest, FoldsStrictlyInInputOrder) {
  // In float32, 1e8 + 1 rounds back to 1e8, so the order is visible.
  EXPECT_EQ(Float32(ReduceOp::kSum, {{1e8f}, {1.0f}, {-1e8f}})[0], 0.0f);
  EXPECT_EQ(Float32(ReduceOp::kSum, {{1e8f}, {-1e8f}, {1.0f}})[0], 1.0f);
  EXPECT_EQ(Float32(ReduceOp::kSum, {{1.0f}, {1e8f}, {-1e8f}})[0], 0.0f);
}

TEST(ReduceTest, ArrivalOrderDoesNotChangeBitsWhenInputsArePassedInRankOrder) {
  // Ranks' contributions arrive in every order; the caller files them by rank
  // and passes them in rank order, so every arrival order gives the same bits.
  std::mt19937_64 rng(7);
  const size_t n = 5000;
  std::vector<std::vector<float>> by_rank(4, std::vector<float>(n));
  std::uniform_real_distribution<float> dist(-1e6f, 1e6f);
  for (auto& v : by_rank) {
    for (float& x : v) x = dist(rng);
  }
  std::vector<int> arrival = {0, 1, 2, 3};
  std::vector<uint32_t> first_bits;
  int orders = 0;
  do {
    std::map<int, const float*> arrived;
    for (int rank : arrival) arrived[rank] = by_rank[rank].data();
    std::vector<const void*> rank_order;
    for (const auto& [rank, data] : arrived) rank_order.push_back(data);
    std::vector<float> out(n);
    ASSERT_TRUE(
        Reduce(ReduceOp::kSum, DataType::kFloat32, rank_order, n, out.data())
            .ok());
    std::vector<uint32_t> bits(n);
    std::memcpy(bits.data(), out.data(), n * 4);
    if (first_bits.empty()) {
      first_bits = bits;
      for (size_t i = 0; i < n; ++i) {
        std::vector<double> x;
        for (const auto& v : by_rank) x.push_back(v[i]);
        ASSERT_TRUE(SameValue(out[i], RefFoldFloat32(ReduceOp::kSum, x)))
            << "element " << i;
      }
    } else {
      ASSERT_EQ(bits, first_bits) << "arrival order " << orders;
    }
    ++orders;
  } while (std::next_permutation(arrival.begin(), arrival.end()));
  EXPECT_EQ(orders, 24);
  // The test can fail: a different input order does change the bits.
  std::vector<float> reversed(n);
  std::vector<const void*> reverse_order = {
      by_rank[3].data(), by_rank[2].data(), by_rank[1].data(),
      by_rank[0].data()};
  ASSERT_TRUE(Reduce(ReduceOp::kSum, DataType::kFloat32, reverse_order, n,
                     reversed.data())
                  .ok());
  EXPECT_NE(std::memcmp(reversed.data(), first_bits.data(), n * 4), 0);
}

TEST(ReduceTest, EmptyTensorsNeedNoPointersAndWriteNothing) {
  for (DataType dtype : kAllDataTypes) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
      std::vector<const void*> inputs = {nullptr, nullptr, nullptr};
      EXPECT_TRUE(Reduce(op, dtype, inputs, 0, nullptr).ok());
      uint8_t sentinel = 0x5a;
      EXPECT_TRUE(Reduce(op, dtype, inputs, 0, &sentinel).ok());
      EXPECT_EQ(sentinel, 0x5a);
    }
  }
}

TEST(ReduceTest, NoInputsIsInvalid) {
  float out = 3.0f;
  absl::Status s = Reduce(ReduceOp::kSum, DataType::kFloat32, {}, 1, &out);
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(std::string(s.message()), HasSubstr("at least one input"));
  EXPECT_EQ(out, 3.0f);
}

TEST(ReduceTest, NullInputIsInvalidAndNamed) {
  float a = 1, out = 3;
  std::vector<const void*> inputs = {&a, nullptr};
  absl::Status s = Reduce(ReduceOp::kSum, DataType::kFloat32, inputs, 1, &out);
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(std::string(s.message()), HasSubstr("input 1 is null"));
  EXPECT_EQ(out, 3.0f);
}

TEST(ReduceTest, UnsupportedPairNamesOpAndDtypeAndLeavesOutUntouched) {
  int32_t a = 1, b = 2, out = 77;
  std::vector<const void*> inputs = {&a, &b};
  absl::Status s = Reduce(ReduceOp::kAvg, DataType::kInt32, inputs, 1, &out);
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(std::string(s.message()), HasSubstr("avg"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("int32"));
  EXPECT_EQ(out, 77);
  float f = 1, out_f = 5;
  std::vector<const void*> float_inputs = {&f, &f};
  s = Reduce(ReduceOp::kBitOr, DataType::kFloat32, float_inputs, 1, &out_f);
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(std::string(s.message()), HasSubstr("bit_or"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("float32"));
  EXPECT_EQ(out_f, 5.0f);
}

TEST(ReduceTest, OutOfRangeEnumsAreInvalid) {
  int32_t a = 1, out = 0;
  std::vector<const void*> inputs = {&a};
  EXPECT_THAT(
      Reduce(static_cast<ReduceOp>(9), DataType::kInt32, inputs, 1, &out),
      StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(
      Reduce(ReduceOp::kSum, static_cast<DataType>(42), inputs, 1, &out),
      StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(ReduceTest, IntegerSumsAndProductsWrapAround) {
  using I32 = std::numeric_limits<int32_t>;
  using I64 = std::numeric_limits<int64_t>;
  EXPECT_EQ(ReduceValues<int32_t>(ReduceOp::kSum, DataType::kInt32,
                                  {{I32::max()}, {1}})[0],
            I32::min());
  EXPECT_EQ(ReduceValues<int32_t>(ReduceOp::kSum, DataType::kInt32,
                                  {{I32::min()}, {-1}, {-1}})[0],
            I32::max() - 1);
  EXPECT_EQ(ReduceValues<int64_t>(ReduceOp::kSum, DataType::kInt64,
                                  {{I64::min()}, {-1}})[0],
            I64::max());
  EXPECT_EQ(
      ReduceValues<int8_t>(ReduceOp::kSum, DataType::kInt8, {{127}, {1}})[0],
      -128);
  EXPECT_EQ(ReduceValues<uint8_t>(ReduceOp::kSum, DataType::kUInt8,
                                  {{255}, {1}, {2}})[0],
            2);
  EXPECT_EQ(ReduceValues<int32_t>(ReduceOp::kProduct, DataType::kInt32,
                                  {{65536}, {65536}})[0],
            0);
  EXPECT_EQ(ReduceValues<int32_t>(ReduceOp::kProduct, DataType::kInt32,
                                  {{I32::min()}, {-1}})[0],
            I32::min());
  EXPECT_EQ(ReduceValues<int64_t>(ReduceOp::kProduct, DataType::kInt64,
                                  {{I64::max()}, {I64::max()}})[0],
            1);
  EXPECT_EQ(ReduceValues<int8_t>(ReduceOp::kProduct, DataType::kInt8,
                                 {{-128}, {-1}})[0],
            -128);
  EXPECT_EQ(ReduceValues<uint8_t>(ReduceOp::kProduct, DataType::kUInt8,
                                  {{16}, {16}})[0],
            0);
}

TEST(ReduceTest, SignedMinMaxUseSignedOrder) {
  EXPECT_EQ(ReduceValues<int8_t>(ReduceOp::kMin, DataType::kInt8,
                                 {{5}, {-100}, {3}})[0],
            -100);
  EXPECT_EQ(ReduceValues<uint8_t>(ReduceOp::kMax, DataType::kUInt8,
                                  {{5}, {200}, {3}})[0],
            200);
  EXPECT_EQ(
      ReduceValues<int64_t>(ReduceOp::kMax, DataType::kInt64,
                            {{-1}, {std::numeric_limits<int64_t>::min()}})[0],
      -1);
}

TEST(ReduceTest, BoolOpsAreLogicalAndTreatAnyNonzeroByteAsTrue) {
  const std::vector<std::vector<uint8_t>> in = {{0, 2, 255, 0}, {0, 1, 7, 9}};
  EXPECT_EQ(ReduceValues<uint8_t>(ReduceOp::kSum, DataType::kBool, in),
            (std::vector<uint8_t>{0, 1, 1, 1}));
  EXPECT_EQ(ReduceValues<uint8_t>(ReduceOp::kProduct, DataType::kBool, in),
            (std::vector<uint8_t>{0, 1, 1, 0}));
  EXPECT_EQ(ReduceValues<uint8_t>(ReduceOp::kBitXor, DataType::kBool, in),
            (std::vector<uint8_t>{0, 0, 0, 1}));
  EXPECT_EQ(ReduceValues<uint8_t>(ReduceOp::kMin, DataType::kBool, in),
            (std::vector<uint8_t>{0, 1, 1, 0}));
  EXPECT_EQ(ReduceValues<uint8_t>(ReduceOp::kMax, DataType::kBool, {{0, 4}}),
            (std::vector<uint8_t>{0, 1}));
}

TEST(ReduceTest, BoolInPlaceNormalisesTheFirstInput) {
  std::vector<uint8_t> inout = {0, 2, 200, 1};
  std::vector<uint8_t> other = {0, 0, 3, 1};
  std::vector<const void*> inputs = {inout.data(), other.data()};
  ASSERT_TRUE(
      Reduce(ReduceOp::kBitAnd, DataType::kBool, inputs, 4, inout.data()).ok());
  EXPECT_EQ(inout, (std::vector<uint8_t>{0, 0, 1, 1}));
}

TEST(ReduceTest, AvgDividesTheSumByTheNumberOfInputs) {
  EXPECT_EQ(Float32(ReduceOp::kAvg, {{1.0f}, {2.0f}, {4.0f}})[0], 7.0f / 3.0f);
  EXPECT_EQ(ReduceValues<double>(ReduceOp::kAvg, DataType::kFloat64,
                                 {{1.0}, {2.0}, {4.0}, {5.0}})[0],
            3.0);
  // float16: 1 + 2 + 4 = 7 in float32, 7/3 rounded once to float16.
  EXPECT_EQ(Half(ReduceOp::kAvg, {0x3c00, 0x4000, 0x4400}),
            FloatToHalf(7.0f / 3.0f));
}

// NaN propagation -------------------------------------------------------------

TEST(ReduceTest, MinAndMaxPropagateNaNFromAnyPosition) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for (ReduceOp op : {ReduceOp::kMin, ReduceOp::kMax}) {
    for (int pos = 0; pos < 3; ++pos) {
      std::vector<std::vector<float>> in = {
          {1.0f, -inf}, {-2.0f, inf}, {3.0f, 0.0f}};
      in[pos] = {nan, nan};
      std::vector<float> out = Float32(op, in);
      EXPECT_TRUE(std::isnan(out[0])) << ReduceOpName(op) << " pos " << pos;
      EXPECT_TRUE(std::isnan(out[1])) << ReduceOpName(op) << " pos " << pos;
    }
  }
  const double dnan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_TRUE(std::isnan(ReduceValues<double>(
      ReduceOp::kMax, DataType::kFloat64, {{1.0}, {dnan}})[0]));
  EXPECT_TRUE(std::isnan(ReduceValues<double>(
      ReduceOp::kMin, DataType::kFloat64, {{dnan}, {1.0}})[0]));
}

TEST(ReduceTest, HalfAndBFloat16MinMaxPropagateNaN) {
  for (ReduceOp op : {ReduceOp::kMin, ReduceOp::kMax}) {
    EXPECT_TRUE(std::isnan(RefHalfToDouble(Half(op, {0x3c00, 0x7e00}))));
    EXPECT_TRUE(std::isnan(RefHalfToDouble(Half(op, {0x7e00, 0xfc00}))));
    EXPECT_TRUE(
        std::isnan(RefBFloat16ToDouble(BFloat16(op, {0x3f80, 0x7fc0}))));
    EXPECT_TRUE(
        std::isnan(RefBFloat16ToDouble(BFloat16(op, {0xffc1, 0x3f80}))));
  }
}

TEST(ReduceTest, SumAndProductPropagateNaNAndInfinities) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(std::isnan(Float32(ReduceOp::kSum, {{1.0f}, {nan}, {2.0f}})[0]));
  EXPECT_TRUE(std::isnan(Float32(ReduceOp::kSum, {{inf}, {-inf}})[0]));
  EXPECT_TRUE(std::isnan(Float32(ReduceOp::kProduct, {{inf}, {0.0f}})[0]));
  EXPECT_EQ(Float32(ReduceOp::kSum, {{FLT_MAX}, {FLT_MAX}})[0], inf);
  EXPECT_TRUE(
      std::isnan(RefHalfToDouble(Half(ReduceOp::kSum, {0x3c00, 0x7e00}))));
  EXPECT_TRUE(std::isnan(
      RefBFloat16ToDouble(BFloat16(ReduceOp::kAvg, {0x7f80, 0xff80}))));
}

// float16 and bfloat16 rounding through the kernels ---------------------------

TEST(ReduceTest, HalfSumRoundsOnceAfterAccumulatingInFloat32) {
  // 1 + 2^-11 + 2^-11: rounding after each step would give 1.0 (0x3c00).
  EXPECT_EQ(Half(ReduceOp::kSum, {0x3c00, 0x1000, 0x1000}), 0x3c01);
}

TEST(ReduceTest, HalfSumRoundsTiesToEven) {
  EXPECT_EQ(Half(ReduceOp::kSum, {0x3c00, 0x1000}), 0x3c00);  // 1 + 2^-11
  EXPECT_EQ(Half(ReduceOp::kSum, {0x3c01, 0x1000}), 0x3c02);  // up to even
  EXPECT_EQ(Half(ReduceOp::kSum, {0xbc00, 0x9000}), 0xbc00);  // negative tie
}

TEST(ReduceTest, HalfSumOverflowsToInfinity) {
  EXPECT_EQ(Half(ReduceOp::kSum, {0x7bff, 0x4c00}), 0x7c00);  // 65504 + 16
  EXPECT_EQ(Half(ReduceOp::kSum, {0x7bff, 0x4800}), 0x7bff);  // 65504 + 8
  EXPECT_EQ(Half(ReduceOp::kSum, {0xfbff, 0xfbff}), 0xfc00);
  EXPECT_EQ(Half(ReduceOp::kProduct, {0x5c00, 0x5c00}), 0x7c00);  // 256 * 256
  // The float32 accumulator does not overflow: 65504 * 2 / 2 stays finite.
  EXPECT_EQ(Half(ReduceOp::kAvg, {0x7bff, 0x7bff}), 0x7bff);
}

TEST(ReduceTest, HalfSubnormalsAddAndRoundToEven) {
  EXPECT_EQ(Half(ReduceOp::kSum, {0x0001, 0x0001}), 0x0002);
  EXPECT_EQ(Half(ReduceOp::kSum, {0x03ff, 0x0001}), 0x0400);      // into normal
  EXPECT_EQ(Half(ReduceOp::kAvg, {0x0001, 0x0000}), 0x0000);      // 2^-25 tie
  EXPECT_EQ(Half(ReduceOp::kAvg, {0x0003, 0x0000}), 0x0002);      // 1.5 ulp tie
  EXPECT_EQ(Half(ReduceOp::kProduct, {0x0001, 0x3800}), 0x0000);  // x0.5 tie
  EXPECT_EQ(Half(ReduceOp::kSum, {0x8001, 0x0001}), 0x0000);
}

TEST(ReduceTest, BFloat16SumRoundsOnceAndTiesToEven) {
  // 1 + 2^-8 + 2^-8: per-step rounding would give 1.0 (0x3f80).
  EXPECT_EQ(BFloat16(ReduceOp::kSum, {0x3f80, 0x3b80, 0x3b80}), 0x3f81);
  EXPECT_EQ(BFloat16(ReduceOp::kSum, {0x3f80, 0x3b80}), 0x3f80);  // tie, even
  EXPECT_EQ(BFloat16(ReduceOp::kSum, {0x3f81, 0x3b80}), 0x3f82);  // tie, up
}

TEST(ReduceTest, BFloat16OverflowsToInfinity) {
  EXPECT_EQ(BFloat16(ReduceOp::kSum, {0x7f7f, 0x7f7f}), 0x7f80);
  EXPECT_EQ(BFloat16(ReduceOp::kSum, {0xff7f, 0xff7f}), 0xff80);
  EXPECT_EQ(BFloat16(ReduceOp::kSum, {0x7f7f, 0x7300}), 0x7f7f);
}

// Conversions -----------------------------------------------------------------

// A 16-bit float format: its conversions under test and its reference
// decoding.
struct Float16Format {
  const char* name;
  float (*to_float)(uint16_t);
  uint16_t (*from_float)(float);
  double (*reference)(uint16_t);
};

class Float16ConversionTest : public ::testing::TestWithParam<Float16Format> {};

INSTANTIATE_TEST_SUITE_P(
    Formats, Float16ConversionTest,
    ::testing::Values(Float16Format{"Half", &HalfToFloat, &FloatToHalf,
                                    &RefHalfToDouble},
                      Float16Format{"BFloat16", &BFloat16ToFloat,
                                    &FloatToBFloat16, &RefBFloat16ToDouble}),
    [](const ::testing::TestParamInfo<Float16Format>& info) {
      return std::string(info.param.name);
    });

TEST_P(Float16ConversionTest, ToFloatMatchesReferenceForEveryBitPattern) {
  const Float16Format& format = GetParam();
  for (uint32_t b = 0; b <= 0xffff; ++b) {
    ASSERT_TRUE(SameValue(format.to_float(static_cast<uint16_t>(b)),
                          format.reference(static_cast<uint16_t>(b))))
        << "bits 0x" << std::hex << b;
  }
}

TEST_P(Float16ConversionTest, EveryPatternRoundTripsAndNaNStaysNaNWithItsSign) {
  const Float16Format& format = GetParam();
  for (uint32_t b = 0; b <= 0xffff; ++b) {
    const uint16_t v = static_cast<uint16_t>(b);
    const uint16_t back = format.from_float(format.to_float(v));
    if (std::isnan(format.reference(v))) {
      ASSERT_TRUE(std::isnan(format.reference(back))) << std::hex << b;
      ASSERT_EQ(back & 0x8000, v & 0x8000) << std::hex << b;
    } else {
      ASSERT_EQ(back, v) << std::hex << b;
    }
  }
}

TEST(HalfConversionTest, MidpointsRoundToEvenAndNeighboursRoundToNearest) {
  for (uint16_t h = 0; h < 0x7bff; ++h) {
    const float lo = static_cast<float>(RefHalfToDouble(h));
    const float hi = static_cast<float>(RefHalfToDouble(h + 1));
    const float mid = static_cast<float>((static_cast<double>(lo) + hi) / 2);
    ASSERT_EQ(static_cast<double>(mid), (static_cast<double>(lo) + hi) / 2);
    const uint16_t even = (h & 1) ? h + 1 : h;
    ASSERT_EQ(FloatToHalf(mid), even) << std::hex << h;
    ASSERT_EQ(FloatToHalf(-mid), even | 0x8000) << std::hex << h;
    ASSERT_EQ(FloatToHalf(std::nextafter(mid, 0.0f)), h) << std::hex << h;
    ASSERT_EQ(FloatToHalf(std::nextafter(mid, 1e9f)), h + 1) << std::hex << h;
  }
}

TEST(HalfConversionTest, NamedCases) {
  EXPECT_EQ(FloatToHalf(0.0f), 0x0000);
  EXPECT_EQ(FloatToHalf(-0.0f), 0x8000);
  EXPECT_EQ(FloatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7bff);
  EXPECT_EQ(FloatToHalf(65519.99f), 0x7bff);
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7c00);  // tie with 65536: even is inf
  EXPECT_EQ(FloatToHalf(1e6f), 0x7c00);
  EXPECT_EQ(FloatToHalf(-1e6f), 0xfc00);
  EXPECT_EQ(FloatToHalf(FLT_MAX), 0x7c00);
  EXPECT_EQ(FloatToHalf(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_EQ(FloatToHalf(-std::numeric_limits<float>::infinity()), 0xfc00);
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -25)), 0x0000);  // tie to even zero
  EXPECT_EQ(FloatToHalf(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(FloatToHalf(std::ldexp(3.0f, -25)), 0x0002);  // tie to even 2
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -14)), 0x0400);  // smallest normal
  EXPECT_EQ(FloatToHalf(std::ldexp(2047.0f, -25)),
            0x0400);  // rounds up into it
  EXPECT_EQ(FloatToHalf(FLT_MIN), 0x0000);
  EXPECT_EQ(FloatToHalf(-FLT_MIN), 0x8000);
  EXPECT_EQ(FloatToHalf(std::numeric_limits<float>::denorm_min()), 0x0000);
  const uint16_t nan = FloatToHalf(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(nan & 0x7c00, 0x7c00);
  EXPECT_NE(nan & 0x03ff, 0);
  // A signalling NaN whose payload is only in the low float bits.
  const uint16_t snan = FloatToHalf(FloatFromBits(0x7f800001));
  EXPECT_TRUE(std::isnan(RefHalfToDouble(snan)));
  EXPECT_EQ(HalfToFloat(0x7c00), std::numeric_limits<float>::infinity());
  EXPECT_EQ(HalfToFloat(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(HalfToFloat(0x3555), 0.333251953125f);
}

TEST(HalfConversionTest, MatchesReferenceOnRandomFloats) {
  std::mt19937_64 rng(11);
  for (int i = 0; i < 2000000; ++i) {
    uint32_t u = static_cast<uint32_t>(rng());
    // Half the draws near float16's range (exponents 2^-30 to 2^17).
    if (i % 2 == 0) u = (u & 0x807fffffu) | ((97u + (u >> 8) % 48) << 23);
    const float f = FloatFromBits(u);
    if (std::isnan(f)) continue;
    ASSERT_TRUE(
        SameValue(RefHalfToDouble(FloatToHalf(f)), RefRound(f, kF16Format)))
        << "float bits 0x" << std::hex << u;
  }
}

#if defined(__FLT16_MANT_DIG__)
// The compiler's own _Float16 (libgcc's soft-float conversions) as a second,
// independent reference.
TEST(HalfConversionTest, AgreesWithTheCompilersFloat16) {
  std::mt19937_64 rng(13);
  for (int i = 0; i < 2000000; ++i) {
    uint32_t u = static_cast<uint32_t>(rng());
    if (i % 2 == 0) u = (u & 0x807fffffu) | ((97u + (u >> 8) % 48) << 23);
    const float f = FloatFromBits(u);
    if (std::isnan(f)) continue;
    const _Float16 h = static_cast<_Float16>(f);
    uint16_t bits;
    std::memcpy(&bits, &h, 2);
    ASSERT_EQ(FloatToHalf(f), bits) << "float bits 0x" << std::hex << u;
  }
  for (uint32_t b = 0; b <= 0xffff; ++b) {
    const uint16_t bits = static_cast<uint16_t>(b);
    _Float16 h;
    std::memcpy(&h, &bits, 2);
    ASSERT_TRUE(SameValue(HalfToFloat(bits), static_cast<float>(h))) << b;
  }
}
#endif

TEST(BFloat16ConversionTest, MidpointsRoundToEven) {
  for (uint16_t v = 0; v < 0x7f7f; ++v) {
    const uint32_t lo = static_cast<uint32_t>(v) << 16;
    const float mid = FloatFromBits(lo | 0x8000);
    const uint16_t even = (v & 1) ? v + 1 : v;
    ASSERT_EQ(FloatToBFloat16(mid), even) << std::hex << v;
    ASSERT_EQ(FloatToBFloat16(FloatFromBits(lo | 0x7fff)), v) << std::hex << v;
    ASSERT_EQ(FloatToBFloat16(FloatFromBits(lo | 0x8001)), v + 1)
        << std::hex << v;
  }
}

TEST(BFloat16ConversionTest, NamedCases) {
  EXPECT_EQ(FloatToBFloat16(1.0f), 0x3f80);
  EXPECT_EQ(FloatToBFloat16(-0.0f), 0x8000);
  EXPECT_EQ(FloatToBFloat16(FLT_MAX), 0x7f80);  // rounds up to infinity
  EXPECT_EQ(FloatToBFloat16(-FLT_MAX), 0xff80);
  EXPECT_EQ(FloatToBFloat16(FloatFromBits(0x7f7f7fff)), 0x7f7f);
  EXPECT_EQ(FloatToBFloat16(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_EQ(FloatToBFloat16(FloatFromBits(0x00000001)), 0x0000);  // subnormal
  EXPECT_EQ(FloatToBFloat16(FloatFromBits(0x00008000)), 0x0000);  // tie, even
  EXPECT_EQ(FloatToBFloat16(FloatFromBits(0x00018000)), 0x0002);  // tie, up
  EXPECT_EQ(FloatToBFloat16(FloatFromBits(0x007fffff)), 0x0080);  // to FLT_MIN
  // NaN is kept, even one whose payload is only in the low bits.
  EXPECT_EQ(FloatToBFloat16(FloatFromBits(0x7f800001)), 0x7fc0);
  EXPECT_EQ(FloatToBFloat16(FloatFromBits(0xffc00000)), 0xffc0);
  EXPECT_EQ(FloatToBFloat16(FloatFromBits(0x7fffffff)), 0x7fff);
  EXPECT_EQ(BFloat16ToFloat(0x4049), 3.140625f);
}

TEST(BFloat16ConversionTest, MatchesReferenceOnRandomFloatsAndKeepsNaN) {
  std::mt19937_64 rng(17);
  for (int i = 0; i < 2000000; ++i) {
    const uint32_t u = static_cast<uint32_t>(rng());
    const float f = FloatFromBits(u);
    const uint16_t b = FloatToBFloat16(f);
    if (std::isnan(f)) {
      ASSERT_TRUE(std::isnan(RefBFloat16ToDouble(b))) << std::hex << u;
      ASSERT_EQ(b >> 15, u >> 31) << std::hex << u;
      continue;
    }
    ASSERT_TRUE(SameValue(RefBFloat16ToDouble(b), RefRound(f, kBF16Format)))
        << "float bits 0x" << std::hex << u;
  }
}

}  // namespace
}  // namespace reducer

namespace reducer {
namespace {

// kAvg over inputs that each stand for several ranks (a relay's sums):
// the divisor is the number of ranks, not of inputs. Small integers keep
// every sum exact, so the reference is plain arithmetic.
TEST(ReduceAvgDivisorTest, DividesByTheRanksTheInputsStandFor) {
  const std::vector<float> three_ranks = {3.0f, 6.0f, -9.0f, 12.0f};  // sums
  const std::vector<float> one_rank = {1.0f, 2.0f, 1.0f, 4.0f};
  const void* inputs[] = {three_ranks.data(), one_rank.data()};
  std::vector<float> out(4);
  ASSERT_TRUE(Reduce(ReduceOp::kAvg, DataType::kFloat32, inputs, 4, out.data(),
                     /*avg_divisor=*/4)
                  .ok());
  EXPECT_EQ(out, (std::vector<float>{1.0f, 2.0f, -2.0f, 4.0f}));
  // 0 keeps the old rule: the number of inputs.
  ASSERT_TRUE(
      Reduce(ReduceOp::kAvg, DataType::kFloat32, inputs, 4, out.data()).ok());
  EXPECT_EQ(out, (std::vector<float>{2.0f, 4.0f, -4.0f, 8.0f}));
  // Other ops ignore it.
  ASSERT_TRUE(Reduce(ReduceOp::kSum, DataType::kFloat32, inputs, 4, out.data(),
                     /*avg_divisor=*/4)
                  .ok());
  EXPECT_EQ(out, (std::vector<float>{4.0f, 8.0f, -8.0f, 16.0f}));
}

}  // namespace
}  // namespace reducer
