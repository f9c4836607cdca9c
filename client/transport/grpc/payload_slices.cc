#include "client/transport/grpc/payload_slices.h"

#include <vector>

namespace reducer {
namespace {

// Padding between packed tensors is at most kPayloadAlignment - 1 bytes.
constexpr char kZeros[kPayloadAlignment] = {};

}  // namespace

std::vector<grpc::Slice> PayloadSlices(const PayloadLayout& layout,
                                       const std::vector<const void*>& inputs,
                                       size_t begin, size_t end) {
  std::vector<grpc::Slice> data;
  size_t pos = begin;
  auto pad_to = [&](size_t next) {
    if (pos < next) data.emplace_back(kZeros, next - pos, grpc::Slice::STATIC_SLICE);
    pos = next;
  };
  ForEachTensorPiece(layout, begin, end, [&](size_t i, size_t from, size_t to) {
    pad_to(from);
    data.emplace_back(static_cast<const char*>(inputs[i]) + (from - layout.offsets[i]),
                      to - from, grpc::Slice::STATIC_SLICE);
    pos = to;
  });
  pad_to(end);
  return data;
}

grpc::Slice PackPayload(const PayloadLayout& layout,
                        const std::vector<const void*>& inputs) {
  grpc::Slice packed(layout.total_bytes);
  // A fresh slice of our own: its bytes are ours to write.
  PackPayloadTo(layout, inputs,
                reinterpret_cast<char*>(const_cast<uint8_t*>(packed.begin())));
  return packed;
}

std::vector<absl::string_view> PiecesOf(const SliceRange& data) {
  std::vector<absl::string_view> pieces;
  pieces.reserve(data.slices().size());
  for (const grpc::Slice& slice : data.slices()) {
    pieces.emplace_back(reinterpret_cast<const char*>(slice.begin()),
                        slice.size());
  }
  return pieces;
}

}  // namespace reducer
