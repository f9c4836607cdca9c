#include "core/validate.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/data_type.h"
#include "core/reduce.h"
#include "core/tensor.h"

namespace reducer {
namespace {

constexpr size_t kMaxPayloadBytes =
    static_cast<size_t>(std::numeric_limits<int64_t>::max());

std::string GroupToString(const std::vector<int>& group) {
  return absl::StrCat("[", absl::StrJoin(group, ","), "]");
}

std::string TensorPrefix(size_t index) {
  return absl::StrCat("tensor ", index, ": ");
}

absl::Status WithTensorPrefix(size_t index, const absl::Status& s) {
  return absl::Status(s.code(), absl::StrCat(TensorPrefix(index), s.message()));
}

bool IsValidKind(CollectiveKind kind) {
  const int v = static_cast<int>(kind);
  return v >= 0 && v < kNumCollectiveKinds;
}

bool IsValidDataType(DataType dtype) {
  const int v = static_cast<int>(dtype);
  return v >= 0 && v < kNumDataTypes;
}

absl::Status CheckGroup(const std::vector<int>& group, int rank,
                        int world_size) {
  if (group.empty()) {
    return absl::InvalidArgumentError(
        "group is empty (an empty group means all ranks and must be expanded "
        "before validation)");
  }
  for (size_t i = 0; i < group.size(); ++i) {
    if (group[i] < 0 || group[i] >= world_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("group ", GroupToString(group), ": rank ", group[i],
                       " outside world of ", world_size));
    }
    if (i > 0 && group[i] <= group[i - 1]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "group ", GroupToString(group), " is not sorted or has duplicates"));
    }
  }
  if (!std::binary_search(group.begin(), group.end(), rank)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rank ", rank, " is not in its group ", GroupToString(group)));
  }
  return absl::OkStatus();
}

absl::Status CheckTensorCount(const Fingerprint& fp, int rank) {
  const size_t n = fp.tensors.size();
  const absl::string_view kind = CollectiveKindName(fp.kind);
  switch (fp.kind) {
    case CollectiveKind::kAllReduce:
      if (n >= 1) return absl::OkStatus();
      return absl::InvalidArgumentError(
          absl::StrCat(kind, " needs at least one tensor, got 0"));
    case CollectiveKind::kAllGather:
    case CollectiveKind::kReduceScatter:
      if (n == 1) return absl::OkStatus();
      return absl::InvalidArgumentError(
          absl::StrCat(kind, " needs exactly one tensor, got ", n));
    case CollectiveKind::kBroadcast:
      if (rank == fp.root && n != 1) {
        return absl::InvalidArgumentError(absl::StrCat(
            "broadcast root ", rank, " needs exactly one tensor, got ", n));
      }
      if (n > 1) {
        return absl::InvalidArgumentError(
            absl::StrCat("broadcast needs at most one tensor, got ", n));
      }
      return absl::OkStatus();
    case CollectiveKind::kBarrier:
      if (n == 0) return absl::OkStatus();
      return absl::InvalidArgumentError(
          absl::StrCat("barrier takes no tensors, got ", n));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown collective kind ", static_cast<int>(fp.kind)));
}

}  // namespace

absl::StatusOr<PayloadLayout> ComputePayloadLayout(
    absl::Span<const TensorSpec> tensors) {
  PayloadLayout layout;
  layout.offsets.reserve(tensors.size());
  layout.sizes.reserve(tensors.size());
  size_t end = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (!IsValidDataType(tensors[i].dtype)) {
      return absl::InvalidArgumentError(
          absl::StrCat(TensorPrefix(i), "unknown dtype ",
                       static_cast<int>(tensors[i].dtype)));
    }
    absl::StatusOr<int64_t> bytes =
        NumBytes(tensors[i].dtype, tensors[i].shape);
    if (!bytes.ok()) return WithTensorPrefix(i, bytes.status());
    const size_t size = static_cast<size_t>(*bytes);
    // end <= kMaxPayloadBytes, so rounding it up cannot wrap size_t.
    const size_t offset =
        (end + kPayloadAlignment - 1) / kPayloadAlignment * kPayloadAlignment;
    if (offset > kMaxPayloadBytes || size > kMaxPayloadBytes - offset) {
      return absl::InvalidArgumentError(absl::StrCat(
          TensorPrefix(i), "payload size overflows int64 at tensor ",
          DescribeTensor(tensors[i])));
    }
    layout.offsets.push_back(offset);
    layout.sizes.push_back(size);
    end = offset + size;
  }
  layout.total_bytes = end;
  return layout;
}

absl::Status ValidateContribution(const Fingerprint& fp, int rank,
                                  int world_size, size_t max_payload_bytes) {
  if (world_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("world size ", world_size, " is less than 1"));
  }
  if (rank < 0 || rank >= world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank, " outside world of ", world_size));
  }
  if (!IsValidKind(fp.kind)) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown collective kind ", static_cast<int>(fp.kind)));
  }
  const absl::string_view kind = CollectiveKindName(fp.kind);
  if (absl::Status s = CheckGroup(fp.group, rank, world_size); !s.ok()) {
    return s;
  }
  if (fp.kind == CollectiveKind::kBroadcast &&
      !std::binary_search(fp.group.begin(), fp.group.end(), fp.root)) {
    return absl::InvalidArgumentError(absl::StrCat("broadcast root ", fp.root,
                                                   " is not in group ",
                                                   GroupToString(fp.group)));
  }
  if (absl::Status s = CheckTensorCount(fp, rank); !s.ok()) return s;

  const bool reduces = fp.kind == CollectiveKind::kAllReduce ||
                       fp.kind == CollectiveKind::kReduceScatter;
  for (size_t i = 0; i < fp.tensors.size(); ++i) {
    const TensorSpec& t = fp.tensors[i];
    if (!IsValidDataType(t.dtype)) {
      return absl::InvalidArgumentError(absl::StrCat(
          TensorPrefix(i), "unknown dtype ", static_cast<int>(t.dtype)));
    }
    if (reduces) {
      if (absl::Status s = CheckOpSupported(t.op, t.dtype); !s.ok()) {
        return WithTensorPrefix(i, s);
      }
    }
  }
  absl::StatusOr<PayloadLayout> layout = ComputePayloadLayout(fp.tensors);
  if (!layout.ok()) return layout.status();

  if (fp.kind == CollectiveKind::kAllGather ||
      fp.kind == CollectiveKind::kReduceScatter) {
    const TensorSpec& t = fp.tensors[0];
    if (t.shape.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(TensorPrefix(0), kind,
                       " needs at least one dimension, got shape []"));
    }
    const int64_t group_size = static_cast<int64_t>(fp.group.size());
    if (fp.kind == CollectiveKind::kReduceScatter &&
        t.shape[0] % group_size != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(TensorPrefix(0), "reducescatter dimension 0 of shape ",
                       ShapeToString(t.shape),
                       " is not divisible by the group size ", group_size));
    }
  }
  if (layout->total_bytes > max_payload_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        kind, " payload of ", layout->total_bytes,
        " bytes exceeds the limit of ", max_payload_bytes, " bytes"));
  }
  return absl::OkStatus();
}

// Walks the tensors that overlap [begin, end) in payload order: the padding
// before each one is zeroed, and its overlapping elements are reduced with its
// own op. Everything is checked before the first byte of `out` is written, so
// on error `out` is untouched.
absl::Status ReducePackedRange(const PayloadLayout& layout,
                               absl::Span<const TensorSpec> tensors,
                               absl::Span<const void* const> inputs,
                               size_t begin, size_t end, void* out) {
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
    absl::Status s =
        Reduce(tensors[i].op, tensors[i].dtype, shifted,
               (r_end - r_begin) / elem, out_bytes + (r_begin - begin));
    if (!s.ok()) return WithTensorPrefix(i, s);
    pos = r_end;
  }
  if (pos < end) std::memset(out_bytes + (pos - begin), 0, end - pos);
  return absl::OkStatus();
}

}  // namespace reducer
