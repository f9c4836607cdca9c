#include "core/packed_reduce.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/data_type.h"
#include "core/fingerprint.h"
#include "core/reduce.h"

namespace reducer {

// Walks the tensors that overlap [begin, end) in payload order: the padding
// before each one is zeroed, and its overlapping elements are reduced with its
// own op. Everything is checked before the first byte of `out` is written, so
// on error `out` is untouched.
absl::Status ReducePackedRange(const PayloadLayout& layout,
                               absl::Span<const TensorSpec> tensors,
                               absl::Span<const void* const> inputs,
                               size_t begin, size_t end, void* out,
                               size_t avg_divisor) {
  const size_t n = tensors.size();
  if (layout.offsets.size() != n || layout.sizes.size() != n) {
    return absl::InvalidArgumentError(absl::StrCat(
        "payload layout describes ", layout.offsets.size(), " offsets and ",
        layout.sizes.size(), " sizes for ", n, " tensors"));
  }
  if (begin > end || end > layout.total_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "byte range [", begin, ",", end, ") is not inside the payload of ",
        layout.total_bytes, " bytes"));
  }
  if (begin % kPayloadAlignment != 0 ||
      (end % kPayloadAlignment != 0 && end != layout.total_bytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat("byte range [", begin, ",", end, ") is not aligned to ",
                     kPayloadAlignment, " bytes"));
  }
  if (inputs.empty()) {
    return absl::InvalidArgumentError("reduce of a packed range needs inputs");
  }
  if (begin == end) return absl::OkStatus();
  if (out == nullptr) {
    return absl::InvalidArgumentError("reduce of a packed range: out is null");
  }
  for (size_t k = 0; k < inputs.size(); ++k) {
    if (inputs[k] == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("reduce of a packed range: input ", k, " is null"));
    }
  }

  // The first tensor that ends after `begin`. Zero-sized tensors may share
  // an offset with the next tensor; they need no work.
  size_t first = 0;
  {
    auto it =
        std::upper_bound(layout.offsets.begin(), layout.offsets.end(), begin);
    first = it == layout.offsets.begin()
                ? 0
                : static_cast<size_t>(it - layout.offsets.begin()) - 1;
  }
  size_t last = first;  // One past the last tensor that starts before `end`.
  while (last < n && layout.offsets[last] < end) ++last;

  for (size_t i = first; i < last; ++i) {
    const size_t elem = DataTypeSize(tensors[i].dtype);
    if (absl::Status s = CheckOpSupported(tensors[i].op, tensors[i].dtype);
        !s.ok()) {
      return WithTensorPrefix(i, s);
    }
    if (layout.offsets[i] % kPayloadAlignment != 0 ||
        layout.sizes[i] % elem != 0 ||
        (i > 0 &&
         layout.offsets[i] < layout.offsets[i - 1] + layout.sizes[i - 1])) {
      return absl::InvalidArgumentError(absl::StrCat(
          TensorPrefix(i), "payload layout is inconsistent (offset ",
          layout.offsets[i], ", size ", layout.sizes[i], ")"));
    }
  }

  std::vector<const void*> shifted(inputs.size());
  auto* out_bytes = static_cast<char*>(out);
  size_t pos = begin;  // Next byte of the range to produce.
  for (size_t i = first; i < last && pos < end; ++i) {
    const size_t t_begin = layout.offsets[i];
    const size_t t_end = t_begin + layout.sizes[i];
    if (pos < t_begin) {  // Padding before tensor i.
      const size_t pad_end = std::min(t_begin, end);
      std::memset(out_bytes + (pos - begin), 0, pad_end - pos);
      pos = pad_end;
    }
    const size_t r_begin = std::max(pos, t_begin);
    const size_t r_end = std::min(t_end, end);
    if (r_begin >= r_end) continue;
    const size_t elem = DataTypeSize(tensors[i].dtype);
    for (size_t k = 0; k < inputs.size(); ++k) {
      shifted[k] = static_cast<const char*>(inputs[k]) + (r_begin - begin);
    }
    absl::Status s = Reduce(tensors[i].op, tensors[i].dtype, shifted,
                            (r_end - r_begin) / elem,
                            out_bytes + (r_begin - begin), avg_divisor);
    if (!s.ok()) return WithTensorPrefix(i, s);
    pos = r_end;
  }
  if (pos < end) std::memset(out_bytes + (pos - begin), 0, end - pos);
  return absl::OkStatus();
}

}  // namespace reducer
