// Validation of one rank's contribution before the server accepts it, and the
// packed payload layout shared by client and server.
//
// A contribution's payload holds its tensors back to back, each starting at a
// multiple of kPayloadAlignment bytes (zero padding in between), so that any
// chunk boundary at a multiple of kPayloadAlignment falls between elements.
//
//   absl::StatusOr<PayloadLayout> layout = ComputePayloadLayout(fp.tensors);
//   absl::Status s = ValidateContribution(fp, /*rank=*/2, /*world_size=*/4);
//
// Pure functions; thread-safe.
#ifndef REDUCER_CORE_VALIDATE_H_
#define REDUCER_CORE_VALIDATE_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/fingerprint.h"

namespace reducer {

// Every tensor in a packed payload starts at a multiple of this. 8 is the
// largest element size, so chunk boundaries at multiples of 8 never split an
// element.
inline constexpr size_t kPayloadAlignment = 8;

struct PayloadLayout {
  std::vector<size_t> offsets;  // byte offset of each tensor
  std::vector<size_t> sizes;    // byte size of each tensor
  size_t total_bytes = 0;       // end of the last tensor (no trailing pad)
};

// INVALID_ARGUMENT naming the tensor index for a negative dimension or an
// element count or byte size that overflows int64.
absl::StatusOr<PayloadLayout> ComputePayloadLayout(
    absl::Span<const TensorSpec> tensors);

// Checks a contribution from `rank` of a job of `world_size` ranks:
// - world_size >= 1 and rank in [0, world_size);
// - group sorted, without duplicates, within [0, world_size), containing
//   `rank` (an empty group is invalid here: callers expand "all ranks");
// - tensor counts as Fingerprint documents for the kind;
// - every op defined on its dtype (CheckOpSupported), no negative dimension,
//   no overflow of elements x element size;
// - kBroadcast: root inside the group; kAllGather and kReduceScatter: at least
//   one dimension; kReduceScatter: dimension 0 divisible by the group size;
// - total payload bytes at most `max_payload_bytes`.
// Returns INVALID_ARGUMENT naming the field and value ("rank 5 outside world
// of 4", "tensor 1: negative dimension -3 in shape [2,-3]"), except
// RESOURCE_EXHAUSTED when the payload exceeds `max_payload_bytes` (the limit
// is named in the message).
absl::Status ValidateContribution(const Fingerprint& fp, int rank,
                                  int world_size, size_t max_payload_bytes);

// Reduces the byte range [begin, end) of packed payloads laid out by
// `layout` for `tensors`: inputs[i] points at byte `begin` of rank i's
// payload, `out` at byte `begin` of the result. begin and end must be
// multiples of kPayloadAlignment (end may also equal layout.total_bytes).
// Padding bytes in the range are written as zero. Each tensor uses its own
// op; see Reduce() for the numeric contract.
absl::Status ReducePackedRange(const PayloadLayout& layout,
                               absl::Span<const TensorSpec> tensors,
                               absl::Span<const void* const> inputs,
                               size_t begin, size_t end, void* out);

}  // namespace reducer

#endif  // REDUCER_CORE_VALIDATE_H_
