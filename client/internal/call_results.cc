#include "client/internal/call_results.h"

#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/data_type.h"
#include "core/status_macros.h"

namespace reducer {

absl::Status CheckFits(const Tensor& result, const MutableTensorView& inout,
                       absl::string_view what) {
  if (result.dtype() == inout.dtype() && result.shape() == inout.shape() &&
      result.device() == inout.device()) {
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(absl::StrCat(
      what, ": the result is ", ShapeToString(result.shape()), " ",
      DataTypeName(result.dtype()), " on ", result.device().ToString(),
      " but the buffer is ", ShapeToString(inout.shape()), " ",
      DataTypeName(inout.dtype()), " on ", inout.device().ToString(),
      "; the buffer was left unchanged"));
}

// Copies `result` into `inout` once it is known to fit exactly: the
// all-or-nothing step of every in-place call. On a GPU through `staging`,
// ordered after the work queued on `cuda_stream`.
absl::Status CopyInto(const Tensor& result, const MutableTensorView& inout,
                      absl::string_view what, DeviceStaging* staging,
                      void* cuda_stream) {
  REDUCER_RETURN_IF_ERROR(CheckFits(result, inout, what));
  if (inout.device().is_cuda()) {
    return staging->CopyInto(result, inout, cuda_stream);
  }
  if (result.num_bytes() > 0) {
    std::memcpy(inout.data(), result.data(), result.num_bytes());
  }
  return absl::OkStatus();
}

absl::StatusOr<Tensor> Single(absl::StatusOr<std::vector<Tensor>> result) {
  if (!result.ok()) return result.status();
  if (result->size() != 1) {
    return absl::InternalError(absl::StrCat(
        "reducerd returned ", result->size(), " tensors where 1 was expected"));
  }
  return std::move((*result)[0]);
}

absl::StatusOr<Tensor> SingleOrNone(
    absl::StatusOr<std::vector<Tensor>> result) {
  if (result.ok() && result->empty()) return Tensor();
  return Single(std::move(result));
}

absl::Status Deliver(std::vector<Tensor> result, const InPlaceTarget& target) {
  if (!target.gets_result) {
    if (result.empty()) return absl::OkStatus();
    return absl::InternalError(absl::StrCat(
        target.what, ": reducerd returned ", result.size(),
        " tensors to non-root rank ", target.rank, " where none was expected"));
  }
  REDUCER_ASSIGN_OR_RETURN(Tensor one, Single(std::move(result)));
  return CopyInto(one, target.buffer, target.what, target.staging,
                  target.cuda_stream);
}

}  // namespace reducer
