// Reduction of packed payloads (core/payload_layout.h) by byte range: the
// server reduces a collective chunk by chunk as the ranks' chunks arrive,
// each range holding parts of several tensors, each with its own op.
//
//   // inputs[r]: byte `begin` of rank r's payload; out: byte `begin` of the result
//   absl::Status s = ReducePackedRange(layout, fp.tensors, inputs, begin, end, out);
//
// Pure functions; thread-safe (touches only the memory it is given).
#ifndef REDUCER_CORE_PACKED_REDUCE_H_
#define REDUCER_CORE_PACKED_REDUCE_H_

#include <cstddef>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "core/fingerprint.h"
#include "core/payload_layout.h"

namespace reducer {

// Reduces the byte range [begin, end) of packed payloads laid out by
// `layout` for `tensors`: inputs[i] points at byte `begin` of rank i's
// payload, `out` at byte `begin` of the result. begin and end must be
// multiples of kPayloadAlignment (end may also equal layout.total_bytes),
// and every inputs[i] and `out` aligned to kPayloadAlignment in memory: the
// kernels read and write each tensor's elements in place through pointers
// of their type (Reduce needs each array aligned to its element's size).
// Padding bytes in the range are written as zero. Each tensor uses its own
// op; see Reduce() (core/reduce.h) for the numeric contract, and for
// `avg_divisor` (0: kAvg divides by inputs.size()).
// INVALID_ARGUMENT for a range outside the payload or misaligned, null
// pointers, an inconsistent layout or an op not defined on its tensor's
// dtype (naming the tensor); then `out` is untouched.
absl::Status ReducePackedRange(const PayloadLayout& layout,
                               absl::Span<const TensorSpec> tensors,
                               absl::Span<const void* const> inputs,
                               size_t begin, size_t end, void* out,
                               size_t avg_divisor = 0);

}  // namespace reducer

#endif  // REDUCER_CORE_PACKED_REDUCE_H_
