// Fault tests: ranks that never arrive, die, leave, or vanish from the
// network. Nothing may hang: a missing rank is named in DEADLINE_EXCEEDED at
// the collective's timeout (after a stall warning in reducerd's log); a
// killed rank, a connection that goes silent (paused by a TcpProxy, found by
// keepalive) or one that is cut is named in ABORTED within seconds, long
// before the collective's (long) timeout; and the job then goes on in a new
// epoch once every rank has connected again. reducerd's memory comes back
// to where it was.
#include <signal.h>

#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/fault_test_base.h"
#include "tests/tcp_proxy.h"

namespace reducer {
namespace testing {
namespace {

using ::testing::HasSubstr;

// A collective timeout far beyond anything these tests wait for: losses
// must be reported long before it.
constexpr int kLongTimeoutMs = 60000;
// How soon a lost rank must be reported (from the start of the waiting
// call, which began shortly before the fault).
constexpr absl::Duration kSoon = absl::Seconds(10);

// reducerd's keepalive for the network tests: a silent peer is dropped
// after about 1 s + 2 s.
const std::vector<std::string> kKeepaliveFlags = {"--keepalive_time=1s",
                                                  "--keepalive_timeout=2s"};

class LivenessTest : public FaultTest {
 protected:
  void TearDown() override {
    proxy_.reset();
    FaultTest::TearDown();
  }

  // Starts reducerd with `flags`, and proxy_, a TcpProxy in front of it.
  void StartServerAndProxy(std::vector<std::string> flags = {}) {
    ASSERT_TRUE(StartServer(std::move(flags)));
    absl::StatusOr<std::unique_ptr<TcpProxy>> proxy =
        TcpProxy::Start(server()->port());
    ASSERT_TRUE(proxy.ok()) << proxy.status();
    proxy_ = *std::move(proxy);
  }

  // Starts the 3-rank `job`, rank r running steps[r] (or steps[0] for
  // all), rank 2 through proxy_.
  std::vector<std::unique_ptr<ChildProcess>> StartRank2BehindProxy(
      const std::string& job, const std::vector<std::string>& steps) {
    return StartJob(job, 3, steps, {"", "", proxy_->address()});
  }

  // Starts the 3-rank `job` running `steps`, rank 2 through proxy_
  // throttled to about 3 MB/s, and returns once every rank began step 1
  // and rank 2's data connection (the proxy's connection 1) has moved
  // 2 MiB of it: mid-transfer.
  void StartMidTransfer(const std::string& job, const std::string& steps,
                        std::vector<std::unique_ptr<ChildProcess>>* workers) {
    *workers = StartRank2BehindProxy(job, {steps});
    ASSERT_TRUE(WaitForOutput(*(*workers)[2], "RESULT 0 connect"));
    proxy_->SetDelay(absl::Milliseconds(20), 64 << 10);  // ~3 MB/s
    for (auto& w : *workers) ASSERT_TRUE(WaitForOutput(*w, "BEGIN 1 "));
    ASSERT_TRUE(proxy_->WaitForBytes(1, TcpProxy::kUpstream, 2 << 20,
                                     absl::Seconds(20)));
  }

  // The steps of a rank that outlives a lost peer: an all-reduce that the
  // loss aborts, a new connection, and an all-reduce with the peer's
  // replacement.
  static std::string SurvivorSteps() {
    return absl::StrCat(
        "allreduce:timeout_ms=", kLongTimeoutMs,
        ";reconnect:timeout_ms=30000;allreduce:seed=5,timeout_ms=30000");
  }

  // Starts a new process for rank 2 of the 3-rank `job` (named
  // "<job>.rank2.restarted") running `steps`, waits for ranks 0 and 1 of
  // `workers` and for it, and expects step 1 of ranks 0 and 1 to have
  // ended ABORTED within `within` for the loss of rank 2's session. Sets
  // *results to the results of ranks 0, 1 and the new rank 2.
  void RestartRank2(std::vector<std::unique_ptr<ChildProcess>>& workers,
                    const std::string& job, const std::string& steps,
                    absl::Duration within,
                    std::vector<ProcessResult>* results) {
    WorkerSpec again{job, 2, 3, steps};
    again.name = absl::StrCat(job, ".rank2.restarted");
    std::vector<std::unique_ptr<ChildProcess>> ranks;
    ranks.push_back(std::move(workers[0]));
    ranks.push_back(std::move(workers[1]));
    ranks.push_back(StartWorker(again));
    *results = WaitWorkers(ranks);
    ASSERT_EQ(results->size(), 3u);
    for (int r = 0; r < 2; ++r) {
      ExpectStep((*results)[r], "1", absl::StatusCode::kAborted,
                 {absl::StrCat("job ", job,
                               " epoch 1 aborted: rank 2's session was lost")},
                 within);
    }
  }

  // The line of reducerd's stderr holding all of `parts`, and its position
  // (npos if none).
  size_t FindLogLine(const std::string& log,
                     const std::vector<std::string>& parts,
                     std::string* line_out) {
    size_t pos = 0;
    for (absl::string_view line : absl::StrSplit(log, '\n')) {
      bool all = true;
      for (const std::string& p : parts) {
        all = all && absl::StrContains(line, p);
      }
      if (all) {
        *line_out = std::string(line);
        return pos;
      }
      pos += line.size() + 1;
    }
    return std::string::npos;
  }

  // The proxy of a test that started one (StartProxy).
  std::unique_ptr<TcpProxy> proxy_;
};

TEST_F(LivenessTest, MissingRankTimesOutNamingItAfterAStallWarning) {
  ASSERT_TRUE(StartServer());
  const std::string job = Job();
  // Rank 2 is connected but does not call until after the timeout; then all
  // three go on with a named all-reduce.
  const std::string after = "allreduce:name=after,seed=3,timeout_ms=20000";
  std::vector<std::unique_ptr<ChildProcess>> workers = StartJob(
      job, 3,
      {absl::StrCat("allreduce:timeout_ms=2000;", after),
       absl::StrCat("allreduce:timeout_ms=2000;", after),
       absl::StrCat("sleep:ms=3500;", after)});
  std::vector<ProcessResult> results = WaitWorkers(workers);
  ASSERT_EQ(results.size(), 3u);
  const std::string want = absl::StrCat(
      "allreduce #0 in job ", job,
      " timed out after 2s: rank 2 never arrived (ranks 0,1 waited)");
  for (int r = 0; r < 2; ++r) {
    ExpectStep(results[r], "1", absl::StatusCode::kDeadlineExceeded, {want},
               absl::Seconds(6));
    EXPECT_GE(Step(results[r], "1").elapsed, absl::Milliseconds(1900))
        << "rank " << r << " gave up before the timeout";
  }
  for (const ProcessResult& r : results) ExpectStep(r, "2", absl::StatusCode::kOk);

  // The stall warning names the missing rank, and comes before the failure.
  const std::string log = server()->Stderr();
  std::string stall_line, fail_line;
  const size_t stall = FindLogLine(
      log, {"WARN", "allreduce #0 in job " + job, "stalled", "rank 2 never arrived"},
      &stall_line);
  const size_t fail =
      FindLogLine(log, {"DEADLINE_EXCEEDED", "allreduce #0 in job " + job},
                  &fail_line);
  ASSERT_NE(stall, std::string::npos) << "no stall warning in:\n" << log;
  ASSERT_NE(fail, std::string::npos) << "no failure logged in:\n" << log;
  EXPECT_LT(stall, fail) << stall_line << "\n" << fail_line;
}

TEST_F(LivenessTest, SeveralMissingRanksAreAllNamed) {
  ASSERT_TRUE(StartServer());
  const std::string job = Job();
  std::vector<std::unique_ptr<ChildProcess>> workers = StartJob(
      job, 4,
      {"barrier:timeout_ms=1500", "barrier:timeout_ms=1500", "sleep:ms=2500",
       "sleep:ms=2500"});
  std::vector<ProcessResult> results = WaitWorkers(workers);
  ASSERT_EQ(results.size(), 4u);
  for (int r = 0; r < 2; ++r) {
    ExpectStep(results[r], "1", absl::StatusCode::kDeadlineExceeded,
               {absl::StrCat("barrier #0 in job ", job, " timed out after "
                             "1.5s: ranks 2,3 never arrived (ranks 0,1 "
                             "waited)")},
               absl::Seconds(6));
  }
}

// A rank that closes its client on purpose while the others wait for it:
// they fail at once with FAILED_PRECONDITION naming it (not ABORTED, and
// not at the timeout).
TEST_F(LivenessTest, RankThatLeavesIsNamedAtOnce) {
  ASSERT_TRUE(StartServer());
  const std::string job = Job();
  std::vector<std::unique_ptr<ChildProcess>> workers = StartJob(
      job, 3,
      {absl::StrCat("allreduce:timeout_ms=", kLongTimeoutMs),
       absl::StrCat("allreduce:timeout_ms=", kLongTimeoutMs),
       "sleep:ms=500;disconnect"});
  std::vector<ProcessResult> results = WaitWorkers(workers);
  ASSERT_EQ(results.size(), 3u);
  for (int r = 0; r < 2; ++r) {
    ExpectStep(results[r], "1", absl::StatusCode::kFailedPrecondition,
               {"rank 2 left the job"}, kSoon);
  }
}

// Rank 2 is SIGKILLed after ranks 0 and 1 have contributed to a 4 MiB
// all-reduce with a 60 s timeout. They must get ABORTED naming rank 2
// within seconds; then they connect again, a new rank 2 process joins, and
// the job runs exact collectives in its new epoch. reducerd's RSS ends near
// what it was after a fault-free job of the same size.
TEST_F(LivenessTest, KilledRankAbortsPeersAndTheJobRestarts) {
  ASSERT_TRUE(StartServer());
  const std::string big = "shape=1048576";  // float32: 4 MiB

  // Warm-up: the same collectives without a fault, twice, for the baseline.
  for (int round = 0; round < 2; ++round) {
    std::vector<std::unique_ptr<ChildProcess>> warm =
        StartJob(Job(absl::StrCat("warm", round)), 3,
                 {absl::StrCat("allreduce:", big, ",timeout_ms=30000;"
                               "allreduce:seed=5,timeout_ms=30000")});
    std::vector<ProcessResult> done = WaitWorkers(warm);
    for (const ProcessResult& r : done) {
      ExpectStep(r, "1", absl::StatusCode::kOk);
      ExpectStep(r, "2", absl::StatusCode::kOk);
    }
  }
  absl::SleepFor(absl::Milliseconds(300));
  const int64_t baseline_kib = ServerRssKib();

  const std::string job = Job();
  const std::string survivor = absl::StrCat(
      "allreduce:", big, ",timeout_ms=", kLongTimeoutMs,
      ";reconnect:timeout_ms=30000;allreduce:seed=5,timeout_ms=30000;",
      "allreduce:", big, ",seed=6,timeout_ms=30000");
  std::vector<std::unique_ptr<ChildProcess>> workers =
      StartJob(job, 3, {survivor, survivor, "hang"});
  ASSERT_TRUE(WaitForOutput(*workers[0], "BEGIN 1 "));
  ASSERT_TRUE(WaitForOutput(*workers[1], "BEGIN 1 "));
  ASSERT_TRUE(WaitForOutput(*workers[2], "BEGIN 1 hang"));
  absl::SleepFor(absl::Milliseconds(500));  // their bytes reach reducerd
  const absl::Time killed_at = absl::Now();
  ASSERT_TRUE(workers[2]->Signal(SIGKILL));
  const ProcessResult killed = workers[2]->Wait(absl::Seconds(10));
  EXPECT_EQ(killed.term_signal, SIGKILL) << killed.Describe();

  // A new process takes rank 2 once the peers have learned of the loss.
  ASSERT_TRUE(WaitForOutput(*workers[0], "RESULT 1 ", kSoon));
  ASSERT_TRUE(WaitForOutput(*workers[1], "RESULT 1 ", kSoon));
  const absl::Duration noticed = absl::Now() - killed_at;
  EXPECT_LT(noticed, kSoon);
  std::vector<ProcessResult> results;
  ASSERT_NO_FATAL_FAILURE(RestartRank2(
      workers, job,
      absl::StrCat("allreduce:seed=5,timeout_ms=30000;allreduce:", big,
                   ",seed=6,timeout_ms=30000"),
      kSoon, &results));
  for (int r = 0; r < 2; ++r) {
    ExpectStep(results[r], "2", absl::StatusCode::kOk);  // Connect again
    ExpectStep(results[r], "3", absl::StatusCode::kOk);
    ExpectStep(results[r], "4", absl::StatusCode::kOk);
  }
  ExpectStep(results[2], "1", absl::StatusCode::kOk);
  ExpectStep(results[2], "2", absl::StatusCode::kOk);

  // Every worker has exited, so the job is gone; memory is back.
  absl::SleepFor(absl::Milliseconds(300));
  const int64_t after_kib = ServerRssKib();
  std::printf("reducerd VmRSS: baseline %lld KiB, after the fault %lld KiB\n",
              static_cast<long long>(baseline_kib),
              static_cast<long long>(after_kib));
  if (RssChecksApply()) {
    EXPECT_LE(after_kib, baseline_kib + 16 * 1024)
        << "reducerd kept " << (after_kib - baseline_kib)
        << " KiB more than after a fault-free job of the same size";
  }
}

// Rank 2 is killed in the middle of sending its own 16 MiB (its link is
// throttled by a TcpProxy, so the transfer takes seconds): its peers, whose
// contributions are partly reduced, must get ABORTED naming it, within
// seconds, and keep their in-place buffers.
//
// To make the order of events deterministic, the proxy holds rank 2's
// session connection just before the kill: reducerd first sees the data
// stream break (the kill closes it), and the session only ends through
// keepalive, seconds later. A dying rank's broken stream must count as a
// lost rank (ABORTED), not as a malformed request.
TEST_F(LivenessTest, RankKilledMidTransferAbortsPeers) {
  ASSERT_NO_FATAL_FAILURE(StartServerAndProxy(kKeepaliveFlags));
  const std::string job = Job();
  const std::string step = absl::StrCat("allreduce_inplace:shape=4194304,timeout_ms=",
                                        kLongTimeoutMs);
  std::vector<std::unique_ptr<ChildProcess>> workers;
  ASSERT_NO_FATAL_FAILURE(StartMidTransfer(job, step, &workers));
  proxy_->Pause(0, TcpProxy::kBoth);
  ASSERT_TRUE(workers[2]->Signal(SIGKILL));
  std::vector<std::unique_ptr<ChildProcess>> peers;
  peers.push_back(std::move(workers[0]));
  peers.push_back(std::move(workers[1]));
  std::vector<ProcessResult> results = WaitWorkers(peers);
  ASSERT_EQ(results.size(), 2u);
  for (const ProcessResult& r : results) {
    // In-place: the buffers keep their bytes (check=bad otherwise).
    // Not INVALID_ARGUMENT "rank 2 closed its stream after ... payload
    // bytes": a broken connection is not a half-close.
    ExpectStep(r, "1", absl::StatusCode::kAborted, {"rank 2"},
               absl::Seconds(15));
  }
}

// Only rank 2's data connection is cut, in the middle of its 16 MiB; its
// session stays. The collective cannot complete: every rank must get an
// error promptly (the peers ABORTED naming rank 2, since its call was lost,
// not malformed), and the job goes on with a named all-reduce.
TEST_F(LivenessTest, DataConnectionCutMidTransferAbortsTheCollective) {
  ASSERT_NO_FATAL_FAILURE(StartServerAndProxy());
  const std::string job = Job();
  const std::string steps = absl::StrCat(
      "allreduce_inplace:shape=4194304,timeout_ms=", kLongTimeoutMs,
      ";allreduce:name=after,seed=3,timeout_ms=8000");
  std::vector<std::unique_ptr<ChildProcess>> workers;
  ASSERT_NO_FATAL_FAILURE(StartMidTransfer(job, steps, &workers));
  proxy_->Drop(1);
  proxy_->SetDelay(absl::ZeroDuration());
  std::vector<ProcessResult> results = WaitWorkers(workers);
  ASSERT_EQ(results.size(), 3u);
  for (int r = 0; r < 2; ++r) {
    ExpectStep(results[r], "1", absl::StatusCode::kAborted, {"rank 2"},
               absl::Seconds(15));
  }
  // Rank 2's own call fails too, promptly: its client retries (it had no
  // answer yet), and the retry of a consumed contribution is refused at
  // once rather than starting a new collective #0 that waits alone.
  const StepResult cut = Step(results[2], "1");
  EXPECT_NE(cut.code, absl::StatusCode::kOk) << cut.message;
  EXPECT_NE(cut.check, "bad") << cut.message;
  EXPECT_LE(cut.elapsed, absl::Seconds(5)) << cut.message;
  for (const ProcessResult& r : results) ExpectStep(r, "2", absl::StatusCode::kOk);
}

// Rank 1's data connection is cut while idle and no new connection gets
// through (its session connection stays): its next small all-reduce, which
// has to open a new Collectives stream, must fail promptly with UNAVAILABLE
// after its retries, not wait for its deadline. Once connections get
// through again, the next collective reconnects and succeeds at once.
TEST_F(LivenessTest, UnreachableDataPathFailsSmallCallsPromptly) {
  ASSERT_NO_FATAL_FAILURE(StartServerAndProxy());
  std::vector<std::unique_ptr<ChildProcess>> workers =
      StartJob(Job(), 2,
               {"allreduce:timeout_ms=20000;wait_file:path=open;"
                "allreduce:name=after,seed=3,timeout_ms=20000",
                "allreduce:timeout_ms=20000;wait_file:path=cut;"
                "allreduce:seed=2,timeout_ms=20000;wait_file:path=open;"
                "allreduce:name=after,seed=3,timeout_ms=20000"},
               {"", proxy_->address()});
  for (auto& w : workers) ASSERT_TRUE(WaitForOutput(*w, "RESULT 1 "));
  ASSERT_GE(proxy_->num_connections(), 2);  // session, then data
  proxy_->SetRefuseNew(true);
  proxy_->Drop(1);
  absl::SleepFor(absl::Milliseconds(200));
  Touch("cut");
  ASSERT_TRUE(WaitForOutput(*workers[1], "RESULT 3 ", absl::Seconds(20)));
  proxy_->SetRefuseNew(false);
  Touch("open");
  std::vector<ProcessResult> results = WaitWorkers(workers);
  ASSERT_EQ(results.size(), 2u);
  // Its retries (about 3 s) outlast the channel's reconnect backoff.
  ExpectStep(results[1], "3", absl::StatusCode::kUnavailable, {},
             absl::Seconds(6));
  ExpectStep(results[1], "5", absl::StatusCode::kOk, {}, absl::Seconds(5));
  ExpectStep(results[0], "3", absl::StatusCode::kOk);
}

// Rank 2 reaches reducerd through a TcpProxy that stops forwarding (no FIN,
// no RST: a partition). reducerd's keepalive (1 s + 2 s) must find the
// silent peer, and ranks 0 and 1 get ABORTED naming rank 2 within seconds.
TEST_F(LivenessTest, SilentRankIsFoundByKeepaliveAndNamed) {
  ASSERT_NO_FATAL_FAILURE(StartServerAndProxy(kKeepaliveFlags));
  const std::string job = Job();
  const std::string survivor = SurvivorSteps();
  std::vector<std::unique_ptr<ChildProcess>> workers =
      StartRank2BehindProxy(job, {survivor, survivor, "hang"});
  for (int r = 0; r < 2; ++r) ASSERT_TRUE(WaitForOutput(*workers[r], "BEGIN 1 "));
  ASSERT_TRUE(WaitForOutput(*workers[2], "BEGIN 1 hang"));
  absl::SleepFor(absl::Milliseconds(300));
  const absl::Time paused_at = absl::Now();
  proxy_->PauseAll();

  ASSERT_TRUE(WaitForOutput(*workers[0], "RESULT 1 ", absl::Seconds(20)));
  const absl::Duration noticed = absl::Now() - paused_at;
  EXPECT_LT(noticed, absl::Seconds(10))
      << "keepalive 1 s + 2 s should find the silent rank";
  // The silent process is gone for good; a new one takes rank 2.
  workers[2]->Signal(SIGKILL);
  workers[2]->Wait(absl::Seconds(10));
  std::vector<ProcessResult> results;
  ASSERT_NO_FATAL_FAILURE(RestartRank2(workers, job,
                                       "allreduce:seed=5,timeout_ms=30000",
                                       absl::Seconds(15), &results));
  for (int r = 0; r < 2; ++r) {
    ExpectStep(results[r], "2", absl::StatusCode::kOk);
    ExpectStep(results[r], "3", absl::StatusCode::kOk);
  }
  ExpectStep(results[2], "1", absl::StatusCode::kOk);
}

// Rank 2's connections are cut (both sides closed by the proxy): ranks 0
// and 1 get ABORTED naming it at once; the same rank 2 process connects
// again through the proxy, and the job goes on.
TEST_F(LivenessTest, CutConnectionAbortsPeersAndTheRankReconnects) {
  ASSERT_NO_FATAL_FAILURE(StartServerAndProxy(kKeepaliveFlags));
  const std::string job = Job();
  const std::string survivor = SurvivorSteps();
  // Rank 2 takes part in one collective (so that its data connection is
  // open too), then waits for the cut, then connects again.
  std::vector<std::unique_ptr<ChildProcess>> workers = StartRank2BehindProxy(
      job,
      {absl::StrCat("barrier;", survivor), absl::StrCat("barrier;", survivor),
       "barrier;wait_file:path=cut;allreduce:timeout_ms=5000;"
       "reconnect:timeout_ms=30000;allreduce:seed=5,timeout_ms=30000"});
  for (int r = 0; r < 2; ++r) ASSERT_TRUE(WaitForOutput(*workers[r], "BEGIN 2 "));
  ASSERT_TRUE(WaitForOutput(*workers[2], "BEGIN 2 wait_file"));
  EXPECT_GE(proxy_->num_connections(), 2) << "session and data connections";
  absl::SleepFor(absl::Milliseconds(300));
  const absl::Time cut_at = absl::Now();
  proxy_->DropAll();
  ASSERT_TRUE(WaitForOutput(*workers[0], "RESULT 2 ", absl::Seconds(20)));
  EXPECT_LT(absl::Now() - cut_at, absl::Seconds(5));
  Touch("cut");
  std::vector<ProcessResult> results = WaitWorkers(workers);
  ASSERT_EQ(results.size(), 3u);
  for (int r = 0; r < 2; ++r) {
    ExpectStep(results[r], "1", absl::StatusCode::kOk);
    ExpectStep(results[r], "2", absl::StatusCode::kAborted,
               {absl::StrCat("job ", job, " epoch 1 aborted: rank 2's session "
                             "was lost")},
               kSoon);
    ExpectStep(results[r], "3", absl::StatusCode::kOk);
    ExpectStep(results[r], "4", absl::StatusCode::kOk);
  }
  // Rank 2's own call after the cut fails (its session is gone) and says so.
  const StepResult lost = Step(results[2], "3");
  EXPECT_THAT(lost.code, ::testing::AnyOf(absl::StatusCode::kUnavailable,
                                          absl::StatusCode::kAborted))
      << lost.message;
  ExpectStep(results[2], "4", absl::StatusCode::kOk);
  ExpectStep(results[2], "5", absl::StatusCode::kOk);
}


// The root of a Gather, and of a Reduce, never arrives: the other ranks
// (which only send) fail at the deadline naming it, not before.
TEST_F(LivenessTest, RootThatNeverArrivesIsNamedAtTheDeadline) {
  ASSERT_TRUE(StartServer());
  const std::string job = Job();
  const std::string after = "allreduce:name=after,seed=3,timeout_ms=20000";
  const std::string waiting = absl::StrCat(
      "gather:shape=3x2,root=2,timeout_ms=1500;"
      "reduce:name=r,shape=5,root=2,timeout_ms=1500;",
      after);
  std::vector<std::unique_ptr<ChildProcess>> workers = StartJob(
      job, 3, {waiting, waiting, absl::StrCat("sleep:ms=3500;", after)});
  std::vector<ProcessResult> results = WaitWorkers(workers);
  ASSERT_EQ(results.size(), 3u);
  for (int r = 0; r < 2; ++r) {
    SCOPED_TRACE(absl::StrCat("rank ", r));
    ExpectStep(results[r], "1", absl::StatusCode::kDeadlineExceeded,
               {absl::StrCat("gather #0 in job ", job, " timed out after "
                             "1.5s: rank 2 never arrived (ranks 0,1 waited)")},
               absl::Seconds(6));
    ExpectStep(results[r], "2", absl::StatusCode::kDeadlineExceeded,
               {absl::StrCat("reduce \"r\" in job ", job, " timed out after "
                             "1.5s: rank 2 never arrived (ranks 0,1 waited)")},
               absl::Seconds(6));
    for (const char* step : {"1", "2"}) {
      EXPECT_GE(Step(results[r], step).elapsed, absl::Milliseconds(1400))
          << "step " << step << " gave up before the timeout";
    }
    ExpectStep(results[r], "3", absl::StatusCode::kOk);
  }
  ExpectStep(results[2], "2", absl::StatusCode::kOk);
}

// Ranks 0 (the root) and 1 are in a Reduce when rank 2's process is
// SIGKILLed before it called: both get ABORTED naming rank 2 within
// seconds, long before their timeout.
TEST_F(LivenessTest, RankKilledMidReduceAbortsTheOthers) {
  ASSERT_TRUE(StartServer());
  const std::string job = Job();
  const std::string waiting =
      absl::StrCat("reduce:shape=50000,root=0,timeout_ms=", kLongTimeoutMs);
  std::vector<std::unique_ptr<ChildProcess>> workers =
      StartJob(job, 3, {waiting, waiting, "hang"});
  ASSERT_EQ(workers.size(), 3u);
  for (int r = 0; r < 2; ++r) {
    ASSERT_NE(workers[r], nullptr);
    ASSERT_TRUE(WaitForOutput(*workers[r], "BEGIN 1 "));
  }
  ASSERT_NE(workers[2], nullptr);
  ASSERT_TRUE(WaitForOutput(*workers[2], "BEGIN 1 hang"));
  // Their contributions reach reducerd.
  absl::SleepFor(absl::Milliseconds(500));
  ASSERT_TRUE(workers[2]->Signal(SIGKILL));
  const ProcessResult killed = workers[2]->Wait(absl::Seconds(10));
  EXPECT_EQ(killed.term_signal, SIGKILL) << killed.Describe();
  workers.pop_back();
  std::vector<ProcessResult> results = WaitWorkers(workers);
  ASSERT_EQ(results.size(), 2u);
  for (const ProcessResult& r : results) {
    ExpectStep(r, "1", absl::StatusCode::kAborted, {"rank 2"}, kSoon);
  }
}

}  // namespace
}  // namespace testing
}  // namespace reducer
