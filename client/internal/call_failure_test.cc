#include "client/internal/call_failure.h"

#include <string>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/matchers.h"

namespace reducer {
namespace {

const absl::Status kSessionLost = absl::AbortedError(
    "job j1 epoch 1 aborted: rank 0's session was lost (killed); Connect "
    "again to go on");

TEST(SessionFailureWithCallTest, AnotherKindOfCallFailureIsAddedInBrackets) {
  const absl::Status reported = SessionFailureWithCall(
      kSessionLost, absl::UnavailableError("recvmsg:Connection reset by peer"));
  EXPECT_THAT(reported,
              StatusIs(absl::StatusCode::kAborted,
                       "job j1 epoch 1 aborted: rank 0's session was lost "
                       "(killed); Connect again to go on [this call: "
                       "UNAVAILABLE: recvmsg:Connection reset by peer]"));
}

TEST(SessionFailureWithCallTest, ACallFailedForTheSameReasonAddsNothing) {
  const absl::Status reported = SessionFailureWithCall(
      kSessionLost, absl::AbortedError(
                        "allreduce #3 in job j1: job j1 epoch 1 aborted: ..."));
  EXPECT_EQ(reported, kSessionLost);
}

TEST(SessionFailureWithCallTest, ADeadlineIsNamed) {
  const absl::Status reported = SessionFailureWithCall(
      kSessionLost, absl::DeadlineExceededError("timed out after 5s"));
  EXPECT_THAT(std::string(reported.message()),
              ::testing::EndsWith("[this call: DEADLINE_EXCEEDED: timed out "
                                  "after 5s]"));
}

}  // namespace
}  // namespace reducer
