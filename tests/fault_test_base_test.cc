#include "tests/fault_test_base.h"

#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace reducer {
namespace testing {
namespace {

TEST(ParseStepResultsTest, ReadsEveryResultLine) {
  const std::string out =
      "BEGIN 0 connect\n"
      "RESULT 0 connect code=OK ms=12 check=none msg=\n"
      "BEGIN 1 allreduce\n"
      "RESULT 1 allreduce code=FAILED_PRECONDITION ms=405 check=none "
      "msg=allreduce #0 in job j: mismatched shapes: rank 0 sent [4,3] "
      "float32, rank 2 sent [4,4] float32\n"
      "SOAK iterations=3 mismatches=0 reconnects=0\n"
      "RESULT 2 soak code=OK ms=7 check=bad msg= | CHECK: x=1 y=2\n";
  const auto results = ParseStepResults(out);
  ASSERT_EQ(results.size(), 3u);
  const StepResult& connect = results.at("0");
  EXPECT_TRUE(connect.found);
  EXPECT_EQ(connect.verb, "connect");
  EXPECT_EQ(connect.code, absl::StatusCode::kOk);
  EXPECT_EQ(connect.elapsed, absl::Milliseconds(12));
  EXPECT_EQ(connect.message, "");
  const StepResult& failed = results.at("1");
  EXPECT_EQ(failed.code, absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(failed.elapsed, absl::Milliseconds(405));
  EXPECT_EQ(failed.message,
            "allreduce #0 in job j: mismatched shapes: rank 0 sent [4,3] "
            "float32, rank 2 sent [4,4] float32");
  EXPECT_EQ(results.at("2").check, "bad");
  EXPECT_EQ(results.at("2").message, " | CHECK: x=1 y=2");
}

TEST(ParseStepResultsTest, IgnoresOtherLinesAndTruncatedOnes) {
  const auto results =
      ParseStepResults("hello\nRESULT 3 allreduce code=OK\nBEGIN 4 x\n");
  EXPECT_TRUE(results.empty());
}

}  // namespace
}  // namespace testing
}  // namespace reducer
