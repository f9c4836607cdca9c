#include "core/data_type.h"

#include <string>
#include <tuple>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace reducer {
namespace {

using ::testing::HasSubstr;

constexpr DataType kAllDataTypes[] = {
    DataType::kFloat32,  DataType::kFloat64, DataType::kFloat16,
    DataType::kBFloat16, DataType::kInt8,    DataType::kUInt8,
    DataType::kInt32,    DataType::kInt64,   DataType::kBool};

constexpr ReduceOp kAllReduceOps[] = {
    ReduceOp::kSum, ReduceOp::kProduct, ReduceOp::kMin,   ReduceOp::kMax,
    ReduceOp::kAvg, ReduceOp::kBitAnd,  ReduceOp::kBitOr, ReduceOp::kBitXor};

TEST(DataTypeTest, SizesMatchTorchElementSizes) {
  const size_t expected[] = {4, 8, 2, 2, 1, 1, 4, 8, 1};
  for (int i = 0; i < kNumDataTypes; ++i) {
    EXPECT_EQ(DataTypeSize(kAllDataTypes[i]), expected[i]) << "dtype " << i;
  }
}

TEST(DataTypeTest, NamesAreTorchNames) {
  const char* expected[] = {"float32", "float64", "float16", "bfloat16", "int8",
                            "uint8",   "int32",   "int64",   "bool"};
  for (int i = 0; i < kNumDataTypes; ++i) {
    EXPECT_EQ(DataTypeName(kAllDataTypes[i]), expected[i]);
  }
}

TEST(DataTypeTest, OpNamesAreLowerCase) {
  const char* expected[] = {"sum", "product", "min",    "max",
                            "avg", "bit_and", "bit_or", "bit_xor"};
  for (int i = 0; i < kNumReduceOps; ++i) {
    EXPECT_EQ(ReduceOpName(kAllReduceOps[i]), expected[i]);
  }
}

TEST(DataTypeTest, OnlyTheFourFloatTypesAreFloatingPoint) {
  EXPECT_TRUE(IsFloatingPoint(DataType::kFloat32));
  EXPECT_TRUE(IsFloatingPoint(DataType::kFloat64));
  EXPECT_TRUE(IsFloatingPoint(DataType::kFloat16));
  EXPECT_TRUE(IsFloatingPoint(DataType::kBFloat16));
  EXPECT_FALSE(IsFloatingPoint(DataType::kInt8));
  EXPECT_FALSE(IsFloatingPoint(DataType::kUInt8));
  EXPECT_FALSE(IsFloatingPoint(DataType::kInt32));
  EXPECT_FALSE(IsFloatingPoint(DataType::kInt64));
  EXPECT_FALSE(IsFloatingPoint(DataType::kBool));
}

// The support matrix, written out by hand: one row per dtype, one column per
// op in the order sum, product, min, max, avg, bit_and, bit_or, bit_xor.
class OpSupportTest : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(OpSupportTest, MatchesTheDocumentedMatrix) {
  const char* kMatrix[] = {
      "YYYYYNNN",  // float32
      "YYYYYNNN",  // float64
      "YYYYYNNN",  // float16
      "YYYYYNNN",  // bfloat16
      "YYYYNYYY",  // int8
      "YYYYNYYY",  // uint8
      "YYYYNYYY",  // int32
      "YYYYNYYY",  // int64
      "YYYYNYYY",  // bool
  };
  const auto [d, o] = GetParam();
  const DataType dtype = kAllDataTypes[d];
  const ReduceOp op = kAllReduceOps[o];
  absl::Status s = CheckOpSupported(op, dtype);
  if (kMatrix[d][o] == 'Y') {
    EXPECT_TRUE(s.ok()) << s;
  } else {
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(s.message()),
                HasSubstr(std::string(ReduceOpName(op))));
    EXPECT_THAT(std::string(s.message()),
                HasSubstr(std::string(DataTypeName(dtype))));
  }
}

INSTANTIATE_TEST_SUITE_P(AllPairs, OpSupportTest,
                         ::testing::Combine(::testing::Range(0, kNumDataTypes),
                                            ::testing::Range(0,
                                                             kNumReduceOps)));

TEST(DataTypeTest, AvgOnIntegerSaysFloatingOnly) {
  absl::Status s = CheckOpSupported(ReduceOp::kAvg, DataType::kInt32);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "avg is defined for floating-point dtypes only, not int32");
}

TEST(DataTypeTest, BitwiseOnFloatSaysIntegerAndBoolOnly) {
  absl::Status s = CheckOpSupported(ReduceOp::kBitXor, DataType::kBFloat16);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      s.message(),
      "bit_xor is defined for integer and bool dtypes only, not bfloat16");
}

TEST(DataTypeTest, OutOfRangeEnumsAreRejected) {
  absl::Status s = CheckOpSupported(static_cast<ReduceOp>(8), DataType::kInt32);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("unknown reduce op 8"));
  s = CheckOpSupported(ReduceOp::kSum, static_cast<DataType>(-1));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("unknown dtype -1"));
}

TEST(DataTypeTest, WireValuesAreEnumPlusOneAndRoundTrip) {
  for (int i = 0; i < kNumDataTypes; ++i) {
    EXPECT_EQ(DataTypeToWire(kAllDataTypes[i]), i + 1);
    absl::StatusOr<DataType> d = DataTypeFromWire(i + 1);
    ASSERT_TRUE(d.ok()) << d.status();
    EXPECT_EQ(*d, kAllDataTypes[i]);
  }
  for (int i = 0; i < kNumReduceOps; ++i) {
    EXPECT_EQ(ReduceOpToWire(kAllReduceOps[i]), i + 1);
    absl::StatusOr<ReduceOp> op = ReduceOpFromWire(i + 1);
    ASSERT_TRUE(op.ok()) << op.status();
    EXPECT_EQ(*op, kAllReduceOps[i]);
  }
}

TEST(DataTypeTest, UnspecifiedWireDataTypeIsInvalid) {
  absl::StatusOr<DataType> d = DataTypeFromWire(0);
  EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(d.status().message()), HasSubstr("unspecified"));
}

TEST(DataTypeTest, UnknownWireDataTypesNameTheValue) {
  for (int v : {10, 11, -1, 1000}) {
    absl::StatusOr<DataType> d = DataTypeFromWire(v);
    EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument) << v;
    EXPECT_THAT(std::string(d.status().message()),
                HasSubstr("unknown dtype wire value " + std::to_string(v)));
  }
}

TEST(DataTypeTest, UnspecifiedWireReduceOpIsInvalid) {
  absl::StatusOr<ReduceOp> op = ReduceOpFromWire(0);
  EXPECT_EQ(op.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(op.status().message()), HasSubstr("unspecified"));
}

TEST(DataTypeTest, UnknownWireReduceOpsNameTheValue) {
  for (int v : {9, -3, 77}) {
    absl::StatusOr<ReduceOp> op = ReduceOpFromWire(v);
    EXPECT_EQ(op.status().code(), absl::StatusCode::kInvalidArgument) << v;
    EXPECT_THAT(std::string(op.status().message()),
                HasSubstr("unknown reduce op wire value " + std::to_string(v)));
  }
}

}  // namespace
}  // namespace reducer
