#include "client/call_payload.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "proto/reducer/v1/wire_conversion.h"

namespace reducer {
namespace {

// Padding between packed tensors is at most kPayloadAlignment - 1 bytes.
constexpr char kZeros[kPayloadAlignment] = {};

}  // namespace

absl::StatusOr<PayloadLayout> LayoutOfSpecs(
    const google::protobuf::RepeatedPtrField<v1::TensorSpec>& specs,
    absl::string_view field, std::vector<TensorSpec>* out) {
  out->reserve(out->size() + specs.size());
  for (int i = 0; i < specs.size(); ++i) {
    REDUCER_ASSIGN_OR_RETURN(
        TensorSpec spec,
        TensorSpecFromWire(specs.Get(i), /*with_op=*/false, field, i));
    out->push_back(std::move(spec));
  }
  return ComputePayloadLayout(*out);
}

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

absl::Status ResultAssembler::Add(const v1::CollectiveResponse& fields,
                                  const SliceRange& data) {
  if (!started_) {
    std::vector<TensorSpec> specs;
    absl::StatusOr<PayloadLayout> layout =
        LayoutOfSpecs(fields.result(), "result", &specs);
    if (!layout.ok()) {
      return absl::InternalError(absl::StrCat(
          "reducerd sent a result header that does not parse: ",
          layout.status().message()));
    }
    layout_ = *std::move(layout);
    // Every byte is overwritten before Finish() hands the tensors out (it
    // checks that the whole result arrived), so skip zeroing them.
    for (TensorSpec& spec : specs) {
      result_.push_back(
          Tensor::Uninitialized(spec.dtype, std::move(spec.shape), buffers_));
    }
    started_ = true;
  }
  const size_t begin = fields.offset();
  const size_t end = begin + data.size();
  if (end < begin || end > layout_.total_bytes) {
    return absl::DataLossError(absl::StrCat(
        "reducerd sent result bytes [", begin, ", ", end,
        ") outside the result's ", layout_.total_bytes, " bytes"));
  }
  ForEachTensorPiece(layout_, begin, end, [&](size_t i, size_t from, size_t to) {
    data.CopyTo(from - begin, to - from,
                static_cast<char*>(result_[i].mutable_data()) +
                    (from - layout_.offsets[i]));
  });
  received_ += data.size();
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Tensor>> ResultAssembler::Finish() {
  if (!started_) {
    return absl::InternalError(
        "reducerd ended the collective with OK but sent no result");
  }
  if (received_ != layout_.total_bytes) {
    return absl::DataLossError(absl::StrCat(
        "reducerd ended the collective after ", received_, " of ",
        layout_.total_bytes, " result bytes"));
  }
  return std::move(result_);
}

}  // namespace reducer
