// The one tensor of an asynchronous call's result
// (CollectiveHandle::Wait() gives a vector: one tensor for AllReduceAsync,
// BroadcastAsync, ReceiveAsync, ...).
#ifndef REDUCER_TESTS_SINGLE_TENSOR_H_
#define REDUCER_TESTS_SINGLE_TENSOR_H_

#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/tensor.h"

namespace reducer {
namespace testing {

// `got`'s one tensor; its error as it is; INTERNAL naming the count when
// it holds another number of tensors.
inline absl::StatusOr<Tensor> SingleOf(
    absl::StatusOr<std::vector<Tensor>> got) {
  if (!got.ok()) return got.status();
  if (got->size() != 1) {
    return absl::InternalError(
        absl::StrCat("got ", got->size(), " tensors, want 1"));
  }
  return std::move((*got)[0]);
}

}  // namespace testing
}  // namespace reducer

#endif  // REDUCER_TESTS_SINGLE_TENSOR_H_
