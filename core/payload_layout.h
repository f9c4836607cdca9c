// The packed payload layout shared by client and server: one rank's tensors
// back to back, each starting at a multiple of kPayloadAlignment bytes (zero
// padding in between), so that any chunk boundary at a multiple of
// kPayloadAlignment falls between elements.
//
//   absl::StatusOr<PayloadLayout> layout = ComputePayloadLayout(fp.tensors);
//   // tensor i occupies [layout->offsets[i], layout->offsets[i] + sizes[i])
//
// Pure functions; thread-safe.
#ifndef REDUCER_CORE_PAYLOAD_LAYOUT_H_
#define REDUCER_CORE_PAYLOAD_LAYOUT_H_

#include <algorithm>
#include <cstddef>
#include <vector>

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

// Calls fn(i, from, to) for every tensor i whose bytes payload bytes
// [begin, end) cover, in payload order, with [from, to) the covered part as
// payload offsets (never empty; padding between tensors is in no call).
// `layout` must be valid (ComputePayloadLayout's).
template <typename Fn>
void ForEachTensorPiece(const PayloadLayout& layout, size_t begin, size_t end,
                        Fn fn) {
  const size_t n = layout.offsets.size();
  // The last tensor starting at or before `begin`: every one before it ends
  // by its offset, so none of them is covered.
  size_t i = static_cast<size_t>(
      std::upper_bound(layout.offsets.begin(), layout.offsets.end(), begin) -
      layout.offsets.begin());
  if (i > 0) --i;
  for (; i < n && layout.offsets[i] < end; ++i) {
    const size_t from = std::max(begin, layout.offsets[i]);
    const size_t to = std::min(end, layout.offsets[i] + layout.sizes[i]);
    if (from < to) fn(i, from, to);
  }
}

// INVALID_ARGUMENT naming the tensor index for an unknown dtype, a negative
// dimension, or an element count or byte size that overflows int64.
absl::StatusOr<PayloadLayout> ComputePayloadLayout(
    absl::Span<const TensorSpec> tensors);

// Copies the tensors `inputs` (inputs[i] holds tensor i of `layout`) into
// `out`, which holds layout.total_bytes, each at its offset, padding zeroed:
// the packed payload in one piece.
void PackPayloadTo(const PayloadLayout& layout,
                   const std::vector<const void*>& inputs, char* out);

}  // namespace reducer

#endif  // REDUCER_CORE_PAYLOAD_LAYOUT_H_
