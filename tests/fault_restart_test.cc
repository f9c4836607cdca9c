// Fault tests: reducerd itself dies. It is SIGKILLed (no drain) while a
// large all-reduce is in flight; every rank must get an error (never a
// partial or wrong result; in-place buffers keep their bytes), and once
// reducerd is back on the same port the ranks connect again and run exact
// collectives.
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
#include "tests/tcp_proxy.h"

namespace reducer {
namespace testing {
namespace {

using ::testing::AnyOf;
using ::testing::HasSubstr;

class RestartTest : public FaultTest {
 protected:
  absl::Duration TimeLimit() const override { return absl::Seconds(90); }
};

// 16 MiB per rank, in place; rank 2's link is throttled by a TcpProxy so
// that the all-reduce is still in flight (ranks 0 and 1 have part of their
// result, rank 2 has sent part of its input) when reducerd is killed.
TEST_F(RestartTest, KilledMidAllReduceThenRanksConnectAgain) {
  ASSERT_TRUE(StartServer());
  absl::StatusOr<std::unique_ptr<TcpProxy>> proxy =
      TcpProxy::Start(server()->port());
  ASSERT_TRUE(proxy.ok()) << proxy.status();
  const std::string big = "shape=4194304";  // float32
  const std::string steps = absl::StrCat(
      "allreduce_inplace:", big, ",timeout_ms=60000;"
      "wait_file:path=restarted;"
      "reconnect:timeout_ms=30000,attempts=20;"
      "allreduce:seed=5,timeout_ms=30000;"
      "allreduce_inplace:", big, ",seed=6,timeout_ms=60000;"
      "allreduce:", big, ",seed=7,timeout_ms=60000");
  std::vector<std::unique_ptr<ChildProcess>> workers =
      StartJob(Job(), 3, {steps}, {"", "", (*proxy)->address()});
  ASSERT_TRUE(WaitForOutput(*workers[2], "RESULT 0 connect"));
  (*proxy)->SetDelay(absl::Milliseconds(20), 64 << 10);  // ~3 MB/s
  for (auto& w : workers) ASSERT_TRUE(WaitForOutput(*w, "BEGIN 1 "));
  ASSERT_TRUE((*proxy)->WaitForBytes(1, TcpProxy::kUpstream, 2 << 20,
                                     absl::Seconds(30)));
  const absl::Time killed_at = absl::Now();
  KillServer();
  for (auto& w : workers) {
    ASSERT_TRUE(WaitForOutput(*w, "RESULT 1 ", absl::Seconds(20)));
  }
  EXPECT_LT(absl::Now() - killed_at, absl::Seconds(10))
      << "every rank should learn of the crash within seconds";

  (*proxy)->SetDelay(absl::ZeroDuration());
  ASSERT_TRUE(RestartServerOnSamePort());
  Touch("restarted");
  std::vector<ProcessResult> results = WaitWorkers(workers);
  ASSERT_EQ(results.size(), 3u);
  for (const ProcessResult& r : results) {
    // An error, and the buffer untouched (check=bad otherwise).
    const StepResult s = Step(r, "1");
    EXPECT_THAT(s.code, AnyOf(absl::StatusCode::kUnavailable,
                              absl::StatusCode::kAborted))
        << r.name << ": " << s.message;
    EXPECT_NE(s.check, "bad") << r.name << ": " << s.message;
    // The transport's bare error is named: the collective, its job and the
    // reducerd that was lost.
    EXPECT_THAT(s.message, HasSubstr(absl::StrCat("allreduce #0 in job ", Job())))
        << r.name;
    EXPECT_THAT(s.message, HasSubstr("reducerd at 127.0.0.1:")) << r.name;
    ExpectStep(r, "3", absl::StatusCode::kOk);  // Connect again
    ExpectStep(r, "4", absl::StatusCode::kOk);
    ExpectStep(r, "5", absl::StatusCode::kOk);
    ExpectStep(r, "6", absl::StatusCode::kOk);
  }
}

// reducerd dies while the job is idle. The next collective of every rank
// fails promptly with UNAVAILABLE (the session is gone: Connect again);
// after the restart the ranks connect again and go on.
TEST_F(RestartTest, KilledWhileIdleThenNextCallFailsAndRanksConnectAgain) {
  ASSERT_TRUE(StartServer());
  const std::string steps =
      "allreduce:timeout_ms=20000;wait_file:path=killed;"
      "allreduce:seed=2,timeout_ms=20000;wait_file:path=restarted;"
      "reconnect:timeout_ms=30000,attempts=20;allreduce:seed=3,timeout_ms=20000";
  std::vector<std::unique_ptr<ChildProcess>> workers = StartJob(Job(), 2, {steps});
  for (auto& w : workers) ASSERT_TRUE(WaitForOutput(*w, "RESULT 1 "));
  KillServer();
  absl::SleepFor(absl::Milliseconds(200));
  Touch("killed");
  for (auto& w : workers) {
    ASSERT_TRUE(WaitForOutput(*w, "RESULT 3 ", absl::Seconds(20)));
  }
  ASSERT_TRUE(RestartServerOnSamePort());
  Touch("restarted");
  std::vector<ProcessResult> results = WaitWorkers(workers);
  ASSERT_EQ(results.size(), 2u);
  for (const ProcessResult& r : results) {
    ExpectStep(r, "1", absl::StatusCode::kOk);
    ExpectStep(r, "3", absl::StatusCode::kUnavailable, {"Connect again"},
               absl::Seconds(5));
    ExpectStep(r, "5", absl::StatusCode::kOk);
    ExpectStep(r, "6", absl::StatusCode::kOk);
  }
}

}  // namespace
}  // namespace testing
}  // namespace reducer
