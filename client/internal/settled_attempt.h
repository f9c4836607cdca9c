// SettledAttempt: an attempt whose outcome was known when it was made:
// Wait() returns it at once, and nothing is left to cancel. FailedAttempt:
// the attempt of a contribution that failed before anything of it was sent
// (its inputs could not be read, its backend was full or broken).
//
//   return std::make_unique<FailedAttempt>(absl::InternalError("..."));
//
// Thread-compatible; it holds no mutable state.
#ifndef REDUCER_CLIENT_INTERNAL_SETTLED_ATTEMPT_H_
#define REDUCER_CLIENT_INTERNAL_SETTLED_ATTEMPT_H_

#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/internal/collective_attempt.h"
#include "core/tensor.h"

namespace reducer {

class SettledAttempt : public CollectiveAttempt {
 public:
  // `received_any`: what received_any() says (whether `outcome` came from
  // an answer).
  SettledAttempt(absl::StatusOr<std::vector<Tensor>> outcome, bool received_any)
      : outcome_(std::move(outcome)), received_any_(received_any) {}
  absl::StatusOr<std::vector<Tensor>> Wait() override { return outcome_; }
  bool Ready() override { return true; }
  bool Settled() override { return true; }
  void Cancel() override {}
  bool received_any() const override { return received_any_; }

 private:
  const absl::StatusOr<std::vector<Tensor>> outcome_;
  const bool received_any_;
};

class FailedAttempt final : public SettledAttempt {
 public:
  // `status` must not be OK.
  explicit FailedAttempt(absl::Status status)
      : SettledAttempt(std::move(status), /*received_any=*/false) {}
};

}  // namespace reducer

#endif  // REDUCER_CLIENT_INTERNAL_SETTLED_ATTEMPT_H_
