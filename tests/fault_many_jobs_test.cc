// Fault tests: six jobs on one reducerd at once, three of them hit by a
// fault (a rank killed, a rank sending the wrong shape, a rank that never
// arrives). The other three must finish every collective bit-exact, and
// each fault must be reported to its own job only, as the contract says.
#include <signal.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/fault_test_base.h"

namespace reducer {
namespace testing {
namespace {

class ManyJobsTest : public FaultTest {
 protected:
  absl::Duration TimeLimit() const override { return absl::Seconds(90); }
};

TEST_F(ManyJobsTest, FaultsInHalfTheJobsLeaveTheOtherHalfExact) {
  ASSERT_TRUE(StartServer());
  // Clean jobs: mixed small collectives (the soak) plus larger all-reduces
  // spanning several chunks, all checked exactly.
  const std::string clean = absl::StrCat(
      "soak:iters=300,seed=21,timeout_ms=30000;"
      "allreduce:shape=300000,seed=22,timeout_ms=30000;"
      "allreduce_inplace:shape=300000,dtype=int64,seed=23,timeout_ms=30000;"
      "allgather:shape=1000x3,seed=24,timeout_ms=30000;"
      "soak:iters=300,seed=25,timeout_ms=30000");
  std::vector<std::unique_ptr<ChildProcess>> clean_a =
      StartJob(Job("clean-a"), 3, {clean});
  std::vector<std::unique_ptr<ChildProcess>> clean_b =
      StartJob(Job("clean-b"), 2, {clean});
  std::vector<std::unique_ptr<ChildProcess>> clean_c =
      StartJob(Job("clean-c"), 3, {clean});

  // Faulty jobs.
  const std::string kill_job = Job("kill");
  std::vector<std::unique_ptr<ChildProcess>> killed = StartJob(
      kill_job, 3,
      {"allreduce:shape=100000,timeout_ms=60000",
       "allreduce:shape=100000,timeout_ms=60000", "hang"});
  const std::string mismatch_job = Job("mismatch");
  std::vector<std::unique_ptr<ChildProcess>> mismatched = StartJob(
      mismatch_job, 2,
      {"allreduce:shape=4x3,timeout_ms=20000",
       "sleep:ms=200;allreduce:shape=3x4,timeout_ms=20000"});
  const std::string missing_job = Job("missing");
  std::vector<std::unique_ptr<ChildProcess>> missing = StartJob(
      missing_job, 3,
      {"barrier:timeout_ms=3000", "barrier:timeout_ms=3000", "sleep:ms=4000"});

  for (int r = 0; r < 2; ++r) ASSERT_TRUE(WaitForOutput(*killed[r], "BEGIN 1 "));
  ASSERT_TRUE(WaitForOutput(*killed[2], "BEGIN 1 hang"));
  absl::SleepFor(absl::Milliseconds(300));
  ASSERT_TRUE(killed[2]->Signal(SIGKILL));
  killed[2]->Wait(absl::Seconds(10));
  killed.pop_back();

  for (auto* job : {&clean_a, &clean_b, &clean_c}) {
    std::vector<ProcessResult> results = WaitWorkers(*job);
    for (const ProcessResult& r : results) {
      for (const char* step : {"1", "2", "3", "4", "5"}) {
        ExpectStep(r, step, absl::StatusCode::kOk);
      }
    }
  }
  std::vector<ProcessResult> k = WaitWorkers(killed);
  for (const ProcessResult& r : k) {
    ExpectStep(r, "1", absl::StatusCode::kAborted,
               {absl::StrCat("job ", kill_job,
                             " epoch 1 aborted: rank 2's session was lost")},
               absl::Seconds(20));
  }
  std::vector<ProcessResult> m = WaitWorkers(mismatched);
  ExpectStep(m[0], "1", absl::StatusCode::kFailedPrecondition,
             {absl::StrCat("allreduce #0 in job ", mismatch_job,
                           ": mismatched shapes: rank 0 sent [4,3] float32, "
                           "rank 1 sent [3,4] float32")},
             absl::Seconds(5));
  ExpectStep(m[1], "2", absl::StatusCode::kFailedPrecondition,
             {"mismatched shapes: rank 0 sent [4,3] float32, rank 1 sent [3,4] "
              "float32"},
             absl::Seconds(5));
  std::vector<ProcessResult> d = WaitWorkers(missing);
  for (int r = 0; r < 2; ++r) {
    ExpectStep(d[r], "1", absl::StatusCode::kDeadlineExceeded,
               {absl::StrCat("barrier #0 in job ", missing_job,
                             " timed out after 3s: rank 2 never arrived")},
               absl::Seconds(10));
  }
}

}  // namespace
}  // namespace testing
}  // namespace reducer
