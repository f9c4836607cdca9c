// What a call makes of the result tensors a collective returned: the one
// tensor of a blocking call, or a caller's buffer written all or nothing
// (the last step of every in-place call, blocking or not).
//
// Functions only; thread-compatible. Internal to the client library.
#ifndef REDUCER_CLIENT_INTERNAL_CALL_RESULTS_H_
#define REDUCER_CLIENT_INTERNAL_CALL_RESULTS_H_

#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "client/staging/device_staging.h"
#include "core/tensor.h"

namespace reducer {

// The one tensor of `result`; INTERNAL when reducerd returned another
// number of them. An error is returned as it is.
absl::StatusOr<Tensor> Single(absl::StatusOr<std::vector<Tensor>> result);

// The one tensor of a rooted collective's result: the root's, or an empty
// Tensor() for a rank that gets none.
absl::StatusOr<Tensor> SingleOrNone(absl::StatusOr<std::vector<Tensor>> result);

// OK when `result` can be written into `inout` (same dtype, shape and
// device); else FAILED_PRECONDITION naming both, from `what`.
absl::Status CheckFits(const Tensor& result, const MutableTensorView& inout,
                       absl::string_view what);

// Copies `result` into `inout` once it is known to fit exactly (CheckFits's
// error otherwise, `inout` untouched): the all-or-nothing step of every
// in-place call. On a GPU through `staging` (not owned), ordered after the
// work queued on `cuda_stream`.
absl::Status CopyInto(const Tensor& result, const MutableTensorView& inout,
                      absl::string_view what, DeviceStaging* staging,
                      void* cuda_stream);

// Where an in-place call's result goes once its collective succeeded.
struct InPlaceTarget {
  MutableTensorView buffer;
  absl::string_view what;  // the call, in errors; a string literal
  DeviceStaging* staging;  // the session's; outlives the call
  void* cuda_stream = nullptr;
  // A non-root rank of ReduceInPlace: no result comes, the buffer is only
  // read; `rank` names it should reducerd return one anyway.
  bool gets_result = true;
  int rank = -1;
};

// Writes `result`, a collective's results, into `target.buffer` (all or
// nothing, as CopyInto); for a target that gets no result, OK when there
// is none, else INTERNAL.
absl::Status Deliver(std::vector<Tensor> result, const InPlaceTarget& target);

}  // namespace reducer

#endif  // REDUCER_CLIENT_INTERNAL_CALL_RESULTS_H_
