// Closed-form inputs and expected results for end-to-end tests of the
// reductions: what rank r contributes for an (op, dtype) pair, and the exact
// bytes every rank must get back, computed by plain arithmetic independently
// of core/reduce.
//
//   std::vector<uint8_t> in = ClosedFormInput(ReduceOp::kSum,
//       DataType::kBFloat16, /*rank=*/2, /*n=*/1000, /*seed=*/7);
//   std::vector<uint8_t> want = ClosedFormExpected(ReduceOp::kSum,
//       DataType::kBFloat16, /*ranks=*/{0, 1, 2, 3}, 1000, 7);
//   absl::Status s = CompareElements(DataType::kBFloat16, got, want.data(),
//                                    1000, "allreduce sum bfloat16 n=1000");
//
// Values are chosen so that every floating-point result is exact in its dtype
// (small multiples of 1/2 and 1/4, products of powers of two) for groups of
// up to 16 ranks, whatever order the reduction is done in; only kAvg rounds,
// once, as the contract says (float32 accumulation and division for float16,
// bfloat16 and float32; float64 for float64). Integer inputs span the full
// range of their type, so sums and products wrap and min/max see both signs.
// Bool inputs are 0 or 1, biased so that and/or/xor results are all mixed.
//
// Everything here is a pure function and thread-safe.
#ifndef REDUCER_TESTS_CLOSED_FORM_H_
#define REDUCER_TESTS_CLOSED_FORM_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/data_type.h"

namespace reducer {
namespace testing {

inline constexpr DataType kAllDataTypes[] = {
    DataType::kFloat32, DataType::kFloat64, DataType::kFloat16,
    DataType::kBFloat16, DataType::kInt8,   DataType::kUInt8,
    DataType::kInt32,   DataType::kInt64,   DataType::kBool,
};

inline constexpr ReduceOp kAllReduceOps[] = {
    ReduceOp::kSum,    ReduceOp::kProduct, ReduceOp::kMin,
    ReduceOp::kMax,    ReduceOp::kAvg,     ReduceOp::kBitAnd,
    ReduceOp::kBitOr,  ReduceOp::kBitXor,
};

// The API's rule, restated here rather than taken from core/: kAvg on
// floating types only, the bitwise ops on integer types and kBool only, the
// others on every type.
bool IsFloatingType(DataType dtype);
bool OpAllowed(ReduceOp op, DataType dtype);

// Bytes per element (4, 8, 2, 2, 1, 1, 4, 8, 1): core's DataTypeSize, 0 for
// a value that is no DataType.
size_t ElementSize(DataType dtype);

// Reference conversions, rounding to nearest even. NaN stays NaN (quiet).
uint16_t FloatToHalfBits(float value);
float HalfBitsToFloat(uint16_t bits);
uint16_t FloatToBFloat16Bits(float value);
float BFloat16BitsToFloat(uint16_t bits);

// splitmix64 of `x`: a fixed, well-mixed hash.
uint64_t Mix64(uint64_t x);

// FNV-1a, 64 bits, of `size` bytes.
uint64_t Fnv1a64(const void* data, size_t size);

// Rank `rank`'s n elements of `dtype` for a reduction with `op`, packed
// little-endian. `seed` varies the values (use a different seed per tensor,
// job or test). Requires OpAllowed(op, dtype).
std::vector<uint8_t> ClosedFormInput(ReduceOp op, DataType dtype, int rank,
                                     int64_t n, uint64_t seed);

// The result every member of `ranks` must get when each contributes
// ClosedFormInput(op, dtype, rank, n, seed). `ranks` is the group, any order.
std::vector<uint8_t> ClosedFormExpected(ReduceOp op, DataType dtype,
                                        absl::Span<const int> ranks, int64_t n,
                                        uint64_t seed);

// `op` over the integers `values` as the contract defines it for integer
// dtypes: two's complement, sums and products wrapping mod 2^64, the
// bitwise ops on the 64-bit patterns (a narrower dtype keeps the low bits
// of the result). 0 for an op with no integer form (avg).
uint64_t ReduceIntegers(ReduceOp op, absl::Span<const int64_t> values);

// Element i of a packed array, as text: "1.5", "-3", "true", "nan".
std::string ElementToString(DataType dtype, const void* data, int64_t i);

// OK when the n elements at `got` and `want` are equal byte for byte.
// Otherwise FAILED_PRECONDITION starting with `context`, naming the number of
// differing elements and the first few (index, got, want).
absl::Status CompareElements(DataType dtype, const void* got, const void* want,
                             int64_t n, absl::string_view context);

}  // namespace testing
}  // namespace reducer

#endif  // REDUCER_TESTS_CLOSED_FORM_H_
