// The same-host path's own cases (docs/same_host.md), beyond the contract
// that conformance_test holds it to: how ClientOptions::shared_memory
// decides (kRequired fails Connect saying why, kAuto falls back to gRPC and
// still works) when reducerd does not offer the path or a worker cannot map
// its segment; a rank SIGKILLed mid-collective, whose segments reducerd
// then frees; reducerd SIGKILLed and restarted with clients connected.
//
// Real reducerd and fault_worker processes, as in every fault test. Which
// path carried a case is read from reducerd's gRPC metrics (collectives
// over gRPC open Collective or Collectives streams; over shared memory
// none) and from its descriptors (/proc/PID/fd links reading
// "/memfd:reducer-..."): each shared-memory session holds two memfds, its
// control and input segments, and each job with a session holds one more,
// the result segment all its sessions share; so S sessions of one job hold
// 2 S + 1, and none once the job's last session ended.
#include <dirent.h>
#include <stdlib.h>
#include <unistd.h>

#include <csignal>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/fault_test_base.h"
#include "tests/http_get.h"
#include "tests/process_harness.h"

namespace reducer {
namespace testing {
namespace {

// Names of the entries of `dir` (empty if it cannot be read).
std::set<std::string> ListDir(const std::string& dir) {
  std::set<std::string> names;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return names;
  while (dirent* e = readdir(d)) names.insert(e->d_name);
  closedir(d);
  return names;
}

// How many of `pid`'s descriptors are the same-host path's memfds.
int SegmentDescriptors(pid_t pid) {
  const std::string dir = absl::StrCat("/proc/", pid, "/fd");
  int count = 0;
  for (const std::string& name : ListDir(dir)) {
    char target[256];
    const ssize_t n =
        readlink((dir + "/" + name).c_str(), target, sizeof(target) - 1);
    if (n <= 0) continue;
    if (absl::StrContains(std::string(target, n), "memfd:reducer-")) ++count;
  }
  return count;
}

// Polls SegmentDescriptors(pid) until it equals `want` or 10 s passed.
int WaitForSegmentDescriptors(pid_t pid, int want) {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  int now = SegmentDescriptors(pid);
  while (now != want && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
    now = SegmentDescriptors(pid);
  }
  return now;
}

class SharedMemoryTest : public FaultTest {
 protected:
  void SetUp() override {
    // The modes come from each worker's --shared_memory flag here.
    unsetenv("REDUCER_SHARED_MEMORY");
    FaultTest::SetUp();
  }

  bool StartServerWithMetrics(std::vector<std::string> flags = {}) {
    flags.push_back("--metrics_listen=127.0.0.1:0");
    if (!StartServer(flags)) return false;
    metrics_port_ = server()->MetricsPort();
    EXPECT_NE(metrics_port_, 0) << server()->Logs();
    return metrics_port_ != 0;
  }

  // Collective and Collectives streams reducerd started: the collectives
  // that went over gRPC.
  double GrpcCollectiveStreams() {
    absl::StatusOr<double> total = ScrapeSum(
        metrics_port_, "grpc_server_started_total", [](const Sample& s) {
          auto it = s.labels.find("grpc_method");
          return it != s.labels.end() &&
                 (it->second == "Collective" || it->second == "Collectives");
        });
    EXPECT_TRUE(total.ok()) << total.status();
    return total.ok() ? *total : -1;
  }

  int metrics_port_ = 0;
};

TEST_F(SharedMemoryTest, RequiredFailsConnectWhenReducerdDoesNotOfferIt) {
  ASSERT_TRUE(StartServerWithMetrics({"--shared_memory=false"}));
  std::vector<std::unique_ptr<ChildProcess>> w =
      StartJob(Job(), 1, {"allreduce"}, {}, {"--shared_memory=required"});
  std::vector<ProcessResult> done = WaitWorkers(w);
  ASSERT_EQ(done.size(), 1u);
  ExpectStep(done[0], "0", absl::StatusCode::kFailedPrecondition,
             {"kRequired", "does not offer it", "--shared_memory=false"});
}

TEST_F(SharedMemoryTest, AutoFallsBackToGrpcWhenReducerdDoesNotOfferIt) {
  ASSERT_TRUE(StartServerWithMetrics({"--shared_memory=false"}));
  std::vector<std::unique_ptr<ChildProcess>> w =
      StartJob(Job(), 2, {"allreduce;allreduce:shape=300000"}, {},
               {"--shared_memory=auto"});
  std::vector<ProcessResult> done = WaitWorkers(w);
  ASSERT_EQ(done.size(), 2u);
  for (const ProcessResult& r : done) {
    ExpectStep(r, "0", absl::StatusCode::kOk);
    ExpectStep(r, "1", absl::StatusCode::kOk);
    ExpectStep(r, "2", absl::StatusCode::kOk);
  }
  EXPECT_GT(GrpcCollectiveStreams(), 0);
}

TEST_F(SharedMemoryTest, WorkerThatCannotMapFailsRequiredAndAutoFallsBack) {
  ASSERT_TRUE(StartServerWithMetrics());
  // An input segment larger than any machine's memory: CheckMemoryRoom
  // refuses it before anything is committed.
  const std::string too_big =
      absl::StrCat("--shared_memory_bytes=", 1ull << 50);
  std::vector<std::unique_ptr<ChildProcess>> required =
      StartJob(Job("required"), 1, {"allreduce"}, {},
               {"--shared_memory=required", too_big});
  std::vector<ProcessResult> refused = WaitWorkers(required);
  ASSERT_EQ(refused.size(), 1u);
  ExpectStep(refused[0], "0", absl::StatusCode::kFailedPrecondition,
             {"kRequired", "cannot be used", "MemAvailable || memory.max"});

  std::vector<std::unique_ptr<ChildProcess>> fallback =
      StartJob(Job("auto"), 2, {"allreduce;allreduce_inplace:shape=300000"}, {},
               {"--shared_memory=auto", too_big});
  std::vector<ProcessResult> done = WaitWorkers(fallback);
  ASSERT_EQ(done.size(), 2u);
  for (const ProcessResult& r : done) {
    ExpectStep(r, "1", absl::StatusCode::kOk);
    ExpectStep(r, "2", absl::StatusCode::kOk);
  }
  EXPECT_GT(GrpcCollectiveStreams(), 0);
  EXPECT_EQ(SegmentDescriptors(server()->pid()), 0);
}

TEST_F(SharedMemoryTest,
       KilledRankMidCollectiveFailsTheOthersAndFreesItsSegments) {
  ASSERT_TRUE(StartServerWithMetrics());
  const std::set<std::string> dev_shm_before = ListDir("/dev/shm");
  // After one large all-reduce, ranks 0 and 1 send their parts of a second
  // one (reducerd holds rank 1's straight from its input segment) while
  // rank 2 holds back; rank 1 is then killed.
  const std::string second = "async_allreduce:shape=300000,timeout_ms=20000";
  std::vector<std::unique_ptr<ChildProcess>> w =
      StartJob(Job(), 3,
               {absl::StrCat("allreduce:shape=300000;", second,
                             ";join;wait_file:path=end"),
                absl::StrCat("allreduce:shape=300000;", second, ";hang"),
                "allreduce:shape=300000;wait_file:path=end"},
               {}, {"--shared_memory=required"});
  ASSERT_EQ(w.size(), 3u);
  ASSERT_TRUE(WaitForOutput(*w[0], "BEGIN 2 allreduce"));
  ASSERT_TRUE(WaitForOutput(*w[1], "BEGIN 3 hang"));
  ASSERT_TRUE(WaitForOutput(*w[2], "BEGIN 2 wait_file"));
  absl::SleepFor(absl::Milliseconds(500));  // their parts reach reducerd
  // Two memfds per session (control, input) and the job's result segment:
  // 2 * 3 + 1.
  EXPECT_EQ(WaitForSegmentDescriptors(server()->pid(), 7), 7);
  ASSERT_TRUE(w[1]->Signal(SIGKILL));
  const ProcessResult killed = w[1]->Wait(absl::Seconds(10));
  EXPECT_EQ(killed.term_signal, SIGKILL) << killed.Describe();
  ASSERT_TRUE(WaitForOutput(*w[0], "RESULT 2 ", absl::Seconds(10)));
  // reducerd let go of the dead rank's segments, and only of those: the
  // two others' sessions and their job's result segment are left, 2 * 2 + 1.
  EXPECT_EQ(WaitForSegmentDescriptors(server()->pid(), 5), 5);
  Touch("end");
  w.erase(w.begin() + 1);
  std::vector<ProcessResult> done = WaitWorkers(w);
  ASSERT_EQ(done.size(), 2u);
  ExpectStep(done[0], "1", absl::StatusCode::kOk);
  ExpectStep(done[0], "2", absl::StatusCode::kAborted, {"rank 1"},
             absl::Seconds(10));
  ExpectStep(done[1], "1", absl::StatusCode::kOk);
  // Every rank is gone by now: nothing is left.
  EXPECT_EQ(WaitForSegmentDescriptors(server()->pid(), 0), 0);
  EXPECT_EQ(GrpcCollectiveStreams(), 0);
  EXPECT_EQ(ListDir("/dev/shm"), dev_shm_before)
      << "the same-host path must leave nothing in /dev/shm";
}

TEST_F(SharedMemoryTest, ReducerdKilledAndRestartedWithClientsConnected) {
  ASSERT_TRUE(StartServerWithMetrics());
  const std::string script =
      "allreduce:shape=300000;wait_file:path=restarted;"
      "allreduce:timeout_ms=5000;wait_file:path=failed;"
      "reconnect:timeout_ms=5000,attempts=20;"
      "allreduce:shape=300000;allreduce";
  std::vector<std::unique_ptr<ChildProcess>> w =
      StartJob(Job(), 2, {script}, {}, {"--shared_memory=required"});
  ASSERT_EQ(w.size(), 2u);
  for (auto& worker : w) ASSERT_TRUE(WaitForOutput(*worker, "RESULT 1 "));
  const pid_t old_pid = server()->pid();
  // Two sessions of one job: 2 * 2 + 1.
  EXPECT_EQ(WaitForSegmentDescriptors(old_pid, 5), 5);
  KillServer();
  ASSERT_TRUE(RestartServerOnSamePort());
  metrics_port_ = server()->MetricsPort();
  Touch("restarted");
  // The call after the kill goes over gRPC when the client already saw its
  // shared-memory session end (the new reducerd then refuses the unknown
  // session), and through the dead session's segment otherwise; either
  // way it fails. What comes after the reconnect is counted from here.
  for (auto& worker : w) ASSERT_TRUE(WaitForOutput(*worker, "RESULT 3 "));
  const double streams_before_reconnect = GrpcCollectiveStreams();
  Touch("failed");
  std::vector<ProcessResult> done = WaitWorkers(w);
  ASSERT_EQ(done.size(), 2u);
  for (const ProcessResult& r : done) {
    ExpectStep(r, "1", absl::StatusCode::kOk);
    // The call after the kill fails fast, naming the lost reducerd.
    ExpectStep(r, "3", absl::StatusCode::kUnavailable, {"reducerd"},
               absl::Seconds(5));
    ExpectStep(r, "5", absl::StatusCode::kOk);
    ExpectStep(r, "6", absl::StatusCode::kOk);
    ExpectStep(r, "7", absl::StatusCode::kOk);
  }
  // The new reducerd carried the reconnected job over shared memory too.
  EXPECT_EQ(GrpcCollectiveStreams(), streams_before_reconnect);
}

}  // namespace
}  // namespace testing
}  // namespace reducer
