#include "client/internal/result_assembler.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "proto/reducer/v1/wire_conversion.h"

namespace reducer {
namespace {

size_t TotalSize(ResultPieces pieces) {
  size_t size = 0;
  for (absl::string_view piece : pieces) size += piece.size();
  return size;
}

// Copies bytes [begin, begin + n) of the concatenated `pieces` to `dest`.
void CopyRange(ResultPieces pieces, size_t begin, size_t n, char* dest) {
  for (absl::string_view piece : pieces) {
    if (n == 0) return;
    if (begin >= piece.size()) {
      begin -= piece.size();
      continue;
    }
    const size_t take = std::min(n, piece.size() - begin);
    std::memcpy(dest, piece.data() + begin, take);
    dest += take;
    n -= take;
    begin = 0;
  }
}

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

absl::Status ResultAssembler::Add(const v1::CollectiveResponse& fields,
                                  ResultPieces data) {
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
    if (into_ != nullptr) {
      if (!WhyNotFor(*into_, specs).empty()) {
        return absl::InternalError(absl::StrCat(
            "reducerd sent a result of ", DescribeTensors(specs), " where ",
            DescribeTensors(into_->specs), " was expected"));
      }
    } else {
      // Every byte is overwritten before Finish() hands the tensors out (it
      // checks that the whole result arrived), so skip zeroing them.
      for (TensorSpec& spec : specs) {
        result_.push_back(
            Tensor::Uninitialized(spec.dtype, std::move(spec.shape), buffers_));
      }
    }
    started_ = true;
  }
  const size_t begin = fields.offset();
  const size_t size = TotalSize(data);
  const size_t end = begin + size;
  if (end < begin || end > layout_.total_bytes) {
    return absl::DataLossError(absl::StrCat(
        "reducerd sent result bytes [", begin, ", ", end,
        ") outside the result's ", layout_.total_bytes, " bytes"));
  }
  ForEachTensorPiece(
      layout_, begin, end, [&](size_t i, size_t from, size_t to) {
        CopyRange(data, from - begin, to - from,
                  DataOf(i) + (from - layout_.offsets[i]));
        if (into_ != nullptr && into_->landed) {
          const size_t at = into_->offsets[i] + (from - layout_.offsets[i]);
          into_->landed(at, at + (to - from));
        }
      });
  received_ += size;
  return absl::OkStatus();
}

char* ResultAssembler::DataOf(size_t i) {
  if (into_ != nullptr) return into_->data[i];
  return static_cast<char*>(result_[i].mutable_data());
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
  if (into_ != nullptr) return LentTensors(*into_);
  return std::move(result_);
}

}  // namespace reducer
