// A test's view of a running reducerd's Admin.Status (what reducerctl
// status shows): its jobs, each one's ranks and pending collectives, and
// on a relay its upstream and the bytes it saved.
#ifndef REDUCER_TESTS_ADMIN_STATUS_H_
#define REDUCER_TESTS_ADMIN_STATUS_H_

#include <string>

#include "absl/status/statusor.h"
#include "proto/reducer/v1/admin.pb.h"

namespace reducer {
namespace testing {

// Admin.Status of the plaintext reducerd at `address` (host:port), asked
// with a deadline of 3 s; UNAVAILABLE naming gRPC's error when it went
// unanswered.
absl::StatusOr<v1::StatusResponse> AdminStatusOf(const std::string& address);

}  // namespace testing
}  // namespace reducer

#endif  // REDUCER_TESTS_ADMIN_STATUS_H_
