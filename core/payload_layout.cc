#include "core/payload_layout.h"

#include <cstdint>
#include <cstring>
#include <limits>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/data_type.h"
#include "core/enum_tables.h"
#include "core/fingerprint.h"
#include "core/tensor.h"

namespace reducer {
namespace {

constexpr size_t kMaxPayloadBytes =
    static_cast<size_t>(std::numeric_limits<int64_t>::max());

}  // namespace

absl::StatusOr<PayloadLayout> ComputePayloadLayout(
    absl::Span<const TensorSpec> tensors) {
  PayloadLayout layout;
  layout.offsets.reserve(tensors.size());
  layout.sizes.reserve(tensors.size());
  size_t end = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (!IsEnumerator(tensors[i].dtype, kNumDataTypes)) {
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

void PackPayloadTo(const PayloadLayout& layout,
                   const std::vector<const void*>& inputs, char* out) {
  size_t pos = 0;
  for (size_t i = 0; i < layout.offsets.size(); ++i) {
    std::memset(out + pos, 0, layout.offsets[i] - pos);  // padding
    if (layout.sizes[i] > 0) {
      std::memcpy(out + layout.offsets[i], inputs[i], layout.sizes[i]);
    }
    pos = layout.offsets[i] + layout.sizes[i];
  }
}

}  // namespace reducer
