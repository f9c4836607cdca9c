// libFuzzer target over core/'s validation and decoding: arbitrary bytes
// become a contribution (wire enum values, shapes with any int64 dimension,
// groups, roots), which goes through the *FromWire decoders,
// ValidateContribution, ComputePayloadLayout and CheckAgreement; contributions
// that validate and are small are then reduced with ReducePackedRange.
//
// Input layout (missing bytes read as zero):
//   world_size, rank, kind, root, group_len, group[group_len],
//   tensor_count, then per tensor: dtype, op, ndims, ndims x int64 (LE),
//   then payload bytes for the reduction.
// The invariant checked: nothing crashes, and validation succeeds only for
// contributions whose layout can be computed.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/data_type.h"
#include "core/fingerprint.h"
#include "core/packed_reduce.h"
#include "core/payload_layout.h"
#include "core/validate.h"

namespace {

class ByteReader {
 public:
  ByteReader(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  uint8_t Byte() { return pos_ < size_ ? data_[pos_++] : 0; }
  int64_t Int64() {
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(Byte()) << (8 * i);
    return static_cast<int64_t>(v);
  }
  const uint8_t* rest() const { return data_ + pos_; }
  size_t remaining() const { return pos_ < size_ ? size_ - pos_ : 0; }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

// Largest payload the fuzzer reduces (keeps each run fast).
constexpr size_t kMaxReduceBytes = 4096;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace reducer;
  ByteReader in(data, size);
  const int world_size = in.Byte() % 9;  // 0 is invalid on purpose
  const int rank = static_cast<int8_t>(in.Byte());
  absl::StatusOr<CollectiveKind> kind = CollectiveKindFromWire(in.Byte() % 8);
  Fingerprint fp;
  fp.kind = kind.ok() ? *kind : CollectiveKind::kAllReduce;
  fp.root = static_cast<int8_t>(in.Byte());
  const int group_len = in.Byte() % 10;
  for (int i = 0; i < group_len; ++i) fp.group.push_back(static_cast<int8_t>(in.Byte()));
  const int tensor_count = in.Byte() % 5;
  for (int t = 0; t < tensor_count; ++t) {
    absl::StatusOr<DataType> dtype = DataTypeFromWire(in.Byte() % 12);
    absl::StatusOr<ReduceOp> op = ReduceOpFromWire(in.Byte() % 11);
    TensorSpec spec;
    spec.dtype = dtype.ok() ? *dtype : DataType::kFloat32;
    spec.op = op.ok() ? *op : ReduceOp::kSum;
    const int ndims = in.Byte() % 5;
    for (int d = 0; d < ndims; ++d) {
      // Mostly small dimensions, sometimes anything (negative, huge).
      const int64_t raw = in.Int64();
      spec.shape.push_back((raw & 1) ? raw >> 1 : (raw >> 1) % 64);
    }
    fp.tensors.push_back(spec);
  }

  absl::Status valid =
      ValidateContribution(fp, rank, world_size, /*max_payload_bytes=*/1 << 20);
  absl::StatusOr<PayloadLayout> layout = ComputePayloadLayout(fp.tensors);
  if (valid.ok() && !layout.ok()) __builtin_trap();  // validation let it by

  // Compare against a copy with one dimension changed.
  Fingerprint other = fp;
  if (!other.tensors.empty() && !other.tensors[0].shape.empty()) {
    other.tensors[0].shape[0] += 1;
  }
  (void)CheckAgreement(0, fp, 1, other);
  (void)DescribeTensor(fp.tensors.empty() ? TensorSpec{} : fp.tensors[0]);

  if (valid.ok() && layout.ok() && fp.kind == CollectiveKind::kAllReduce &&
      layout->total_bytes <= kMaxReduceBytes) {
    std::vector<uint8_t> a(layout->total_bytes), b(layout->total_bytes),
        out(layout->total_bytes);
    const size_t n = std::min(in.remaining(), a.size());
    if (n > 0) {
      std::memcpy(a.data(), in.rest(), n);
      std::memcpy(b.data(), in.rest(), n);
    }
    for (auto& byte : b) byte ^= 0x5a;
    const void* inputs[] = {a.data(), b.data()};
    (void)ReducePackedRange(*layout, fp.tensors, inputs, 0,
                            layout->total_bytes, out.data());
  }
  return 0;
}
