#include "core/data_type.h"

#include <string>
#include <tuple>

#include "absl/status/status.h"
#include "core/data_type_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/matchers.h"

namespace reducer {
namespace {

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
    EXPECT_THAT(s, IsOk());
  } else {
    EXPECT_THAT(
        s, StatusIs(absl::StatusCode::kInvalidArgument,
                    AllOf(HasSubstr(std::string(ReduceOpName(op))),
                          HasSubstr(std::string(DataTypeName(dtype))))));
  }
}

INSTANTIATE_TEST_SUITE_P(AllPairs, OpSupportTest,
                         ::testing::Combine(::testing::Range(0, kNumDataTypes),
                                            ::testing::Range(0,
                                                             kNumReduceOps)));

TEST(DataTypeTest, AvgOnIntegerSaysFloatingOnly) {
  EXPECT_THAT(CheckOpSupported(ReduceOp::kAvg, DataType::kInt32),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "avg is defined for floating-point dtypes only, not "
                       "int32"));
}

TEST(DataTypeTest, BitwiseOnFloatSaysIntegerAndBoolOnly) {
  EXPECT_THAT(CheckOpSupported(ReduceOp::kBitXor, DataType::kBFloat16),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "bit_xor is defined for integer and bool dtypes only, "
                       "not bfloat16"));
}

TEST(DataTypeTest, OutOfRangeEnumsAreRejected) {
  EXPECT_THAT(CheckOpSupported(static_cast<ReduceOp>(8), DataType::kInt32),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("unknown reduce op 8")));
  EXPECT_THAT(CheckOpSupported(ReduceOp::kSum, static_cast<DataType>(-1)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("unknown dtype -1")));
}

TEST(DataTypeTest, WireValuesAreEnumPlusOneAndRoundTrip) {
  for (int i = 0; i < kNumDataTypes; ++i) {
    EXPECT_EQ(DataTypeToWire(kAllDataTypes[i]), i + 1);
    absl::StatusOr<DataType> d = DataTypeFromWire(i + 1);
    ASSERT_THAT(d, IsOk());
    EXPECT_EQ(*d, kAllDataTypes[i]);
  }
  for (int i = 0; i < kNumReduceOps; ++i) {
    EXPECT_EQ(ReduceOpToWire(kAllReduceOps[i]), i + 1);
    absl::StatusOr<ReduceOp> op = ReduceOpFromWire(i + 1);
    ASSERT_THAT(op, IsOk());
    EXPECT_EQ(*op, kAllReduceOps[i]);
  }
}

TEST(DataTypeTest, UnspecifiedWireDataTypeIsInvalid) {
  EXPECT_THAT(DataTypeFromWire(0), StatusIs(absl::StatusCode::kInvalidArgument,
                                            HasSubstr("unspecified")));
}

TEST(DataTypeTest, UnknownWireDataTypesNameTheValue) {
  for (int v : {10, 11, -1, 1000}) {
    EXPECT_THAT(DataTypeFromWire(v),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("unknown dtype wire value " +
                                   std::to_string(v))));
  }
}

TEST(DataTypeTest, UnspecifiedWireReduceOpIsInvalid) {
  EXPECT_THAT(ReduceOpFromWire(0), StatusIs(absl::StatusCode::kInvalidArgument,
                                            HasSubstr("unspecified")));
}

TEST(DataTypeTest, UnknownWireReduceOpsNameTheValue) {
  for (int v : {9, -3, 77}) {
    EXPECT_THAT(ReduceOpFromWire(v),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("unknown reduce op wire value " +
                                   std::to_string(v))));
  }
}

}  // namespace
}  // namespace reducer
