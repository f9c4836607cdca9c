// ReduceIdentity: the element a rank that has no data left contributes to a
// reduction so that it changes nothing (the rank has called Done(): uneven
// inputs, as hvd.join and torch's Join handle them).
//
//   std::vector<char> bytes(n * DataTypeSize(DataType::kFloat32));
//   absl::Status s = FillIdentity(ReduceOp::kMin, DataType::kFloat32,
//                                 bytes.data(), n);  // n x +inf
//
// Contract: for every op defined on the dtype (CheckOpSupported) except
// kAvg, and every value x of the dtype, Reduce(op, dtype, {x, e}) and
// Reduce(op, dtype, {e, x}) give x's bits, NaN payloads aside (core/reduce.h
// keeps NaN, not its payload):
//   kSum      -0.0 on floating types (x + -0.0 is x, also for x = -0.0,
//             which +0.0 would turn into +0.0); 0 on integers; false
//   kProduct  1; true
//   kMin      +inf on floating types; the largest value on integers; true
//   kMax      -inf on floating types; the smallest value on integers; false
//   kBitAnd   every bit set; true
//   kBitOr, kBitXor   0; false
// kAvg has no identity (it divides by the number of inputs): it gets kSum's,
// and whoever reduces must divide by the ranks that contributed values, not
// count this one.
//
// Pure and thread-safe.
#ifndef REDUCER_CORE_REDUCE_IDENTITY_H_
#define REDUCER_CORE_REDUCE_IDENTITY_H_

#include <cstddef>

#include "absl/status/status.h"
#include "core/data_type.h"

namespace reducer {

// Writes `num_elements` copies of the identity of `op` on `dtype` into
// `out` (num_elements * DataTypeSize(dtype) bytes). INVALID_ARGUMENT naming
// both when the op is not defined on the dtype; then `out` is untouched.
absl::Status FillIdentity(ReduceOp op, DataType dtype, void* out,
                          size_t num_elements);

}  // namespace reducer

#endif  // REDUCER_CORE_REDUCE_IDENTITY_H_
