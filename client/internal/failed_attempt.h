// FailedAttempt: the attempt of a contribution that failed before anything
// of it was sent (its inputs could not be read, its backend was full or
// broken): Wait() returns that status at once.
//
//   return std::make_unique<FailedAttempt>(absl::InternalError("..."));
//
// Thread-compatible; it holds no mutable state.
#ifndef REDUCER_CLIENT_INTERNAL_FAILED_ATTEMPT_H_
#define REDUCER_CLIENT_INTERNAL_FAILED_ATTEMPT_H_

#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/internal/collective_attempt.h"
#include "core/tensor.h"

namespace reducer {

class FailedAttempt final : public CollectiveAttempt {
 public:
  // `status` must not be OK.
  explicit FailedAttempt(absl::Status status) : status_(std::move(status)) {}
  absl::StatusOr<std::vector<Tensor>> Wait() override { return status_; }
  bool Ready() override { return true; }
  bool Settled() override { return true; }
  void Cancel() override {}
  bool received_any() const override { return false; }

 private:
  const absl::Status status_;
};

}  // namespace reducer

#endif  // REDUCER_CLIENT_INTERNAL_FAILED_ATTEMPT_H_
