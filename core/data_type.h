// DataType and ReduceOp: the element types and reduction operators Reducer
// supports, with their sizes, names and the op x dtype pairs that are allowed.
//
//   size_t n = DataTypeSize(DataType::kBFloat16);          // 2
//   absl::Status s = CheckOpSupported(ReduceOp::kAvg, DataType::kInt32);
//   // s is INVALID_ARGUMENT: "avg is defined for floating-point dtypes only ..."
//
// Everything here is a pure function and thread-safe.
#ifndef REDUCER_CORE_DATA_TYPE_H_
#define REDUCER_CORE_DATA_TYPE_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace reducer {

// The numeric values are the wire values of reducer.v1.DataType minus one
// (the wire reserves 0 for "unspecified").
enum class DataType {
  kFloat32,
  kFloat64,
  kFloat16,
  kBFloat16,
  kInt8,
  kUInt8,
  kInt32,
  kInt64,
  kBool,
};
inline constexpr int kNumDataTypes = 9;

// On kBool the bitwise ops are logical and/or/xor. The numeric values are the
// wire values of reducer.v1.ReduceOp minus one.
enum class ReduceOp {
  kSum,
  kProduct,
  kMin,
  kMax,
  kAvg,
  kBitAnd,
  kBitOr,
  kBitXor,
};
inline constexpr int kNumReduceOps = 8;

// Bytes per element: 4, 8, 2, 2, 1, 1, 4, 8, 1.
size_t DataTypeSize(DataType dtype);

// Lower-case names as torch prints them: "float32", "bfloat16", "bool", ...
absl::string_view DataTypeName(DataType dtype);

// "sum", "product", "min", "max", "avg", "bit_and", "bit_or", "bit_xor".
absl::string_view ReduceOpName(ReduceOp op);

// True for float32, float64, float16 and bfloat16.
bool IsFloatingPoint(DataType dtype);

// OK when `op` is defined on `dtype`: kAvg on floating types only; the bitwise
// ops on integer types and kBool only; the rest on every type. Otherwise
// INVALID_ARGUMENT naming both.
absl::Status CheckOpSupported(ReduceOp op, DataType dtype);

// Decode wire enum values (reducer.v1 numbering, where 0 is "unspecified").
// INVALID_ARGUMENT naming the value for 0 and for unknown values.
absl::StatusOr<DataType> DataTypeFromWire(int value);
absl::StatusOr<ReduceOp> ReduceOpFromWire(int value);
int DataTypeToWire(DataType dtype);
int ReduceOpToWire(ReduceOp op);

}  // namespace reducer

#endif  // REDUCER_CORE_DATA_TYPE_H_
