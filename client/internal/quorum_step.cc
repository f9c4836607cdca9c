#include "client/internal/quorum_step.h"

#include <algorithm>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "core/reduce.h"
#include "core/reduce_identity.h"

namespace reducer {
namespace {

template <typename T>
void Divide(Tensor& sum, int count) {
  for (T& x : sum.mutable_values<T>()) x /= static_cast<T>(count);
}

template <float (*ToFloat)(uint16_t), uint16_t (*FromFloat)(float)>
void DivideHalf(Tensor& sum, int count) {
  for (uint16_t& x : sum.mutable_values<uint16_t>()) {
    x = FromFloat(ToFloat(x) / static_cast<float>(count));
  }
}

}  // namespace

absl::StatusOr<QuorumMarks> ReadQuorumMarks(const Tensor& marks, int world_size,
                                            int rank) {
  if (marks.dtype() != DataType::kInt32 ||
      marks.shape() != std::vector<int64_t>{world_size}) {
    return absl::InternalError(absl::StrCat(
        "reducerd answered a quorum step with ", ShapeToString(marks.shape()),
        " ", DataTypeName(marks.dtype()), " where [", world_size,
        "] int32 marks were expected"));
  }
  QuorumMarks out;
  absl::Span<const int32_t> values = marks.values<int32_t>();
  for (int r = 0; r < world_size; ++r) {
    switch (values[r]) {
      case 0:
        continue;
      case 1:
        out.contributors.push_back(r);
        break;
      case 2:
        out.joined.push_back(r);
        break;
      default:
        return absl::InternalError(absl::StrCat("reducerd marked rank ", r,
                                                " of a quorum step ", values[r],
                                                "; marks are 0, 1 or 2"));
    }
    out.taking_part.push_back(r);
  }
  if (out.contributors.empty() ||
      !std::binary_search(out.taking_part.begin(), out.taking_part.end(),
                          rank)) {
    return absl::InternalError(absl::StrCat(
        "reducerd answered rank ", rank, "'s quorum step with marks that ",
        out.contributors.empty() ? "name no contributor" : "leave it out"));
  }
  return out;
}

std::string QuorumBarrierName(const std::string& base, int attempt) {
  return attempt == 0 ? base : absl::StrCat(base, " try ", attempt);
}

std::string QuorumDataName(const std::string& base, int attempt) {
  return absl::StrCat(QuorumBarrierName(base, attempt), " data");
}

absl::StatusOr<Tensor> IdentityTensor(ReduceOp op, DataType dtype,
                                      const std::vector<int64_t>& shape) {
  Tensor identity(dtype, shape);
  absl::Status filled =
      FillIdentity(op, dtype, identity.mutable_data(),
                   static_cast<size_t>(identity.num_elements()));
  if (!filled.ok()) return filled;
  return identity;
}

absl::Status DivideInPlace(Tensor& sum, int count) {
  if (!sum.device().is_cpu()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "a quorum step's kAvg over joining ranks divides on the host, but "
        "the result is on ",
        sum.device().ToString(),
        "; use kSum and divide by the contributors' count"));
  }
  switch (sum.dtype()) {
    case DataType::kFloat32:
      Divide<float>(sum, count);
      break;
    case DataType::kFloat64:
      Divide<double>(sum, count);
      break;
    case DataType::kFloat16:
      DivideHalf<HalfToFloat, FloatToHalf>(sum, count);
      break;
    case DataType::kBFloat16:
      DivideHalf<BFloat16ToFloat, FloatToBFloat16>(sum, count);
      break;
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "kAvg is for floating types; got ", DataTypeName(sum.dtype())));
  }
  return absl::OkStatus();
}

}  // namespace reducer
