#include "core/data_type.h"

#include <iterator>

#include "absl/strings/str_cat.h"
#include "core/enum_tables.h"

namespace reducer {
namespace {

// Names in enumerator order.
constexpr absl::string_view kDataTypeNames[] = {
    "float32", "float64", "float16", "bfloat16", "int8",
    "uint8",   "int32",   "int64",   "bool"};
static_assert(std::size(kDataTypeNames) == kNumDataTypes);
constexpr absl::string_view kReduceOpNames[] = {
    "sum", "product", "min", "max", "avg", "bit_and", "bit_or", "bit_xor"};
static_assert(std::size(kReduceOpNames) == kNumReduceOps);

bool IsBitwise(ReduceOp op) {
  return op == ReduceOp::kBitAnd || op == ReduceOp::kBitOr ||
         op == ReduceOp::kBitXor;
}

}  // namespace

size_t DataTypeSize(DataType dtype) {
  switch (dtype) {
    case DataType::kFloat32:
    case DataType::kInt32:
      return 4;
    case DataType::kFloat64:
    case DataType::kInt64:
      return 8;
    case DataType::kFloat16:
    case DataType::kBFloat16:
      return 2;
    case DataType::kInt8:
    case DataType::kUInt8:
    case DataType::kBool:
      return 1;
  }
  return 0;  // Not a DataType: callers validate with CheckOpSupported first.
}

absl::string_view DataTypeName(DataType dtype) {
  return EnumName(dtype, kDataTypeNames, "unknown_dtype");
}

absl::string_view ReduceOpName(ReduceOp op) {
  return EnumName(op, kReduceOpNames, "unknown_op");
}

bool IsFloatingPoint(DataType dtype) {
  return dtype == DataType::kFloat32 || dtype == DataType::kFloat64 ||
         dtype == DataType::kFloat16 || dtype == DataType::kBFloat16;
}

absl::Status CheckOpSupported(ReduceOp op, DataType dtype) {
  if (!IsEnumerator(op, kNumReduceOps)) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown reduce op ", static_cast<int>(op)));
  }
  if (!IsEnumerator(dtype, kNumDataTypes)) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown dtype ", static_cast<int>(dtype)));
  }
  if (op == ReduceOp::kAvg && !IsFloatingPoint(dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat("avg is defined for floating-point dtypes only, not ",
                     DataTypeName(dtype)));
  }
  if (IsBitwise(op) && IsFloatingPoint(dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(
        ReduceOpName(op), " is defined for integer and bool dtypes only, not ",
        DataTypeName(dtype)));
  }
  return absl::OkStatus();
}

absl::StatusOr<DataType> DataTypeFromWire(int value) {
  return EnumFromWire<DataType>(value, kNumDataTypes, "dtype");
}

absl::StatusOr<ReduceOp> ReduceOpFromWire(int value) {
  return EnumFromWire<ReduceOp>(value, kNumReduceOps, "reduce op");
}

int DataTypeToWire(DataType dtype) { return static_cast<int>(dtype) + 1; }

int ReduceOpToWire(ReduceOp op) { return static_cast<int>(op) + 1; }

}  // namespace reducer
