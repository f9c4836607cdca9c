#include "core/reduce_identity.h"

#include <cstdint>
#include <cstring>
#include <limits>

#include "core/reduce.h"
#include "core/status_macros.h"

namespace reducer {
namespace {

// The identity of `op` on a float or double.
template <typename T>
T FloatIdentity(ReduceOp op) {
  switch (op) {
    case ReduceOp::kProduct:
      return T(1);
    case ReduceOp::kMin:
      return std::numeric_limits<T>::infinity();
    case ReduceOp::kMax:
      return -std::numeric_limits<T>::infinity();
    default:  // kSum, kAvg (bitwise ops are not defined on floats)
      return -T(0);
  }
}

// The identity of `op` on an integer type.
template <typename T>
T IntegerIdentity(ReduceOp op) {
  switch (op) {
    case ReduceOp::kProduct:
      return T(1);
    case ReduceOp::kMin:
      return std::numeric_limits<T>::max();
    case ReduceOp::kMax:
      return std::numeric_limits<T>::lowest();
    case ReduceOp::kBitAnd:
      return static_cast<T>(~T(0));
    default:  // kSum, kBitOr, kBitXor (kAvg is not defined on integers)
      return T(0);
  }
}

// kSum, kMax, kBitOr and kBitXor are or/xor on bool (identity false);
// kProduct, kMin and kBitAnd are and (identity true).
uint8_t BoolIdentity(ReduceOp op) {
  switch (op) {
    case ReduceOp::kProduct:
    case ReduceOp::kMin:
    case ReduceOp::kBitAnd:
      return 1;
    default:
      return 0;
  }
}

template <typename T>
void Fill(T value, void* out, size_t num_elements) {
  char* bytes = static_cast<char*>(out);
  for (size_t i = 0; i < num_elements; ++i) {
    std::memcpy(bytes + i * sizeof(T), &value, sizeof(T));
  }
}

}  // namespace

absl::Status FillIdentity(ReduceOp op, DataType dtype, void* out,
                          size_t num_elements) {
  REDUCER_RETURN_IF_ERROR(CheckOpSupported(op, dtype));
  switch (dtype) {
    case DataType::kFloat32:
      Fill(FloatIdentity<float>(op), out, num_elements);
      break;
    case DataType::kFloat64:
      Fill(FloatIdentity<double>(op), out, num_elements);
      break;
    case DataType::kFloat16:  // -0, 1 and the infinities convert exactly
      Fill(FloatToHalf(FloatIdentity<float>(op)), out, num_elements);
      break;
    case DataType::kBFloat16:
      Fill(FloatToBFloat16(FloatIdentity<float>(op)), out, num_elements);
      break;
    case DataType::kInt8:
      Fill(IntegerIdentity<int8_t>(op), out, num_elements);
      break;
    case DataType::kUInt8:
      Fill(IntegerIdentity<uint8_t>(op), out, num_elements);
      break;
    case DataType::kInt32:
      Fill(IntegerIdentity<int32_t>(op), out, num_elements);
      break;
    case DataType::kInt64:
      Fill(IntegerIdentity<int64_t>(op), out, num_elements);
      break;
    case DataType::kBool:
      Fill(BoolIdentity(op), out, num_elements);
      break;
  }
  return absl::OkStatus();
}

}  // namespace reducer
