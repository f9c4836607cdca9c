#include "core/data_type.h"

#include "absl/strings/str_cat.h"

namespace reducer {
namespace {

bool IsValid(DataType dtype) {
  const int v = static_cast<int>(dtype);
  return v >= 0 && v < kNumDataTypes;
}

bool IsValid(ReduceOp op) {
  const int v = static_cast<int>(op);
  return v >= 0 && v < kNumReduceOps;
}

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
  switch (dtype) {
    case DataType::kFloat32:
      return "float32";
    case DataType::kFloat64:
      return "float64";
    case DataType::kFloat16:
      return "float16";
    case DataType::kBFloat16:
      return "bfloat16";
    case DataType::kInt8:
      return "int8";
    case DataType::kUInt8:
      return "uint8";
    case DataType::kInt32:
      return "int32";
    case DataType::kInt64:
      return "int64";
    case DataType::kBool:
      return "bool";
  }
  return "unknown_dtype";
}

absl::string_view ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kProduct:
      return "product";
    case ReduceOp::kMin:
      return "min";
    case ReduceOp::kMax:
      return "max";
    case ReduceOp::kAvg:
      return "avg";
    case ReduceOp::kBitAnd:
      return "bit_and";
    case ReduceOp::kBitOr:
      return "bit_or";
    case ReduceOp::kBitXor:
      return "bit_xor";
  }
  return "unknown_op";
}

bool IsFloatingPoint(DataType dtype) {
  return dtype == DataType::kFloat32 || dtype == DataType::kFloat64 ||
         dtype == DataType::kFloat16 || dtype == DataType::kBFloat16;
}

absl::Status CheckOpSupported(ReduceOp op, DataType dtype) {
  if (!IsValid(op)) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown reduce op ", static_cast<int>(op)));
  }
  if (!IsValid(dtype)) {
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
  if (value == 0) {
    return absl::InvalidArgumentError("dtype is unspecified (wire value 0)");
  }
  if (value < 1 || value > kNumDataTypes) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown dtype wire value ", value));
  }
  return static_cast<DataType>(value - 1);
}

absl::StatusOr<ReduceOp> ReduceOpFromWire(int value) {
  if (value == 0) {
    return absl::InvalidArgumentError(
        "reduce op is unspecified (wire value 0)");
  }
  if (value < 1 || value > kNumReduceOps) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown reduce op wire value ", value));
  }
  return static_cast<ReduceOp>(value - 1);
}

int DataTypeToWire(DataType dtype) { return static_cast<int>(dtype) + 1; }

int ReduceOpToWire(ReduceOp op) { return static_cast<int>(op) + 1; }

}  // namespace reducer
