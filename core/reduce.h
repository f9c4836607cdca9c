// Element-wise reduction kernels for every allowed ReduceOp x DataType pair.
//
//   const void* inputs[] = {rank0_bytes, rank1_bytes, rank2_bytes};
//   absl::Status s = Reduce(ReduceOp::kSum, DataType::kFloat32, inputs,
//                           /*num_elements=*/n, out);
//
// Contract
// - The result is folded in the order of `inputs` (callers pass them in
//   group-rank order), so the same inputs give the same bits whatever order
//   they arrived in.
// - float16 and bfloat16 accumulate in float32 and round once, to nearest
//   even. kAvg divides the sum by inputs.size(), in the accumulation type,
//   or by `avg_divisor` when it is not 0: inputs that each already sum
//   several ranks' values (a relay's) count for that many.
// - Integer arithmetic wraps (two's complement) without undefined behaviour.
// - kMin and kMax propagate NaN, as torch does.
// - On kBool the inputs hold 0 or 1 per byte; kSum/kMax/kBitOr are logical
//   or, kProduct/kMin/kBitAnd logical and, kBitXor logical xor; the output
//   holds 0 or 1. Any nonzero input byte counts as true.
// - `out` may alias inputs[0] (in-place accumulation) but no other input.
//
// Thread-safe: kernels touch only the memory they are given.
#ifndef REDUCER_CORE_REDUCE_H_
#define REDUCER_CORE_REDUCE_H_

#include <cstddef>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "core/data_type.h"

namespace reducer {

// Reduces inputs.size() arrays of `num_elements` elements of `dtype` into
// `out`; each array, `out` included, aligned to DataTypeSize(dtype). INVALID_ARGUMENT if the op is not defined on the dtype or `inputs`
// is empty; then `out` is untouched.
absl::Status Reduce(ReduceOp op, DataType dtype,
                    absl::Span<const void* const> inputs, size_t num_elements,
                    void* out, size_t avg_divisor = 0);

// Conversions used by the kernels, exposed for tests and tools.
float HalfToFloat(uint16_t bits);
uint16_t FloatToHalf(float value);        // round to nearest even
float BFloat16ToFloat(uint16_t bits);
uint16_t FloatToBFloat16(float value);    // round to nearest even, NaN kept

}  // namespace reducer

#endif  // REDUCER_CORE_REDUCE_H_
