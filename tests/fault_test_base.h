// FaultTest: the fixture of Reducer's fault tests. Each test starts reducerd
// (with the flags it needs) and fault_worker processes, one per rank, each
// running a script (see fault_worker.cc); it injects faults for real (kills
// processes, cuts connections through a TcpProxy, sends malformed requests
// with a raw gRPC client) and then judges every rank's per-step results:
// exact status codes, message substrings, and how long each call took.
//
//   TEST_F(FaultTest, Example) {
//     ASSERT_TRUE(StartServer({"--max_jobs=4"}));
//     std::vector<std::unique_ptr<ChildProcess>> w =
//         StartJob(Job(), /*world_size=*/2, {"allreduce:timeout_ms=5000"});
//     std::vector<ProcessResult> done = WaitWorkers(w);
//     ExpectStep(done[0], "1", absl::StatusCode::kOk);
//   }
//
// Every test has a hard time limit of its own (a watchdog aborts the test
// process, whose children die with it), and reducerd must still exit 0 on
// SIGTERM at the end of every test, however it was treated.
//
// Not thread-safe: use from the test's main thread.
#ifndef REDUCER_TESTS_FAULT_TEST_BASE_H_
#define REDUCER_TESTS_FAULT_TEST_BASE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/process_harness.h"
#include "tests/watchdog.h"

namespace reducer {
namespace testing {

// One step's report from a fault_worker (its RESULT line).
struct StepResult {
  bool found = false;
  std::string index;
  std::string verb;
  absl::StatusCode code = absl::StatusCode::kUnknown;
  absl::Duration elapsed;
  std::string check;  // ok | none | bad
  std::string message;
};

// False when this build runs under AddressSanitizer, whose quarantine keeps
// freed memory resident: bounds on reducerd's RSS then say nothing.
bool RssChecksApply();

// The RESULT lines of a worker's stdout, by step index ("0" is Connect).
absl::flat_hash_map<std::string, StepResult> ParseStepResults(
    const std::string& stdout_text);

// How a test starts one worker.
struct WorkerSpec {
  std::string job;
  int rank = 0;
  int world_size = 1;
  std::string steps;
  std::string target;  // default: the server's address
  std::vector<std::string> extra_flags;
  std::string name;    // default: "<job>.rank<r>"
  // Put before the worker's argv (e.g. `ip netns exec NS`: another host).
  std::vector<std::string> command_prefix;
};

class FaultTest : public ::testing::Test {
 protected:
  // The hard limit of one test; override for longer tests.
  virtual absl::Duration TimeLimit() const { return absl::Seconds(60); }

  void SetUp() override;
  void TearDown() override;

  // Starts reducerd on a free port with `flags`; false (with a failure
  // recorded) if it does not come up.
  bool StartServer(std::vector<std::string> flags = {});
  // Kills reducerd with SIGKILL; it is not stopped again in TearDown.
  void KillServer();
  // Starts reducerd again on the port of the one before, with its flags.
  bool RestartServerOnSamePort();
  ReducerdProcess* server() { return server_.get(); }

  // Starts a fault_worker; null (with a failure recorded) if it cannot.
  std::unique_ptr<ChildProcess> StartWorker(const WorkerSpec& spec);
  // Starts ranks 0..world_size-1 of `job`, rank r running steps[r] (or
  // steps[0] for every rank when only one script is given), each with
  // `extra_flags` added to its command line.
  std::vector<std::unique_ptr<ChildProcess>> StartJob(
      const std::string& job, int world_size,
      const std::vector<std::string>& steps,
      const std::vector<std::string>& targets = {},
      const std::vector<std::string>& extra_flags = {});

  // Runs any other program (`argv[0]` a path) to completion, at most 30 s;
  // records a failure and returns an empty result if it cannot start.
  ProcessResult RunToCompletion(std::vector<std::string> argv,
                                const std::string& name);

  // Waits for every worker (until `timeout`, or a little before the test's
  // limit) and expects each to exit 0. Returns their results in order.
  std::vector<ProcessResult> WaitWorkers(
      const std::vector<std::unique_ptr<ChildProcess>>& workers,
      absl::Duration timeout = absl::InfiniteDuration());

  // Waits until `worker` has written `text` on stdout; false at timeout.
  bool WaitForOutput(ChildProcess& worker, const std::string& text,
                     absl::Duration timeout = absl::Seconds(30));

  // Kills the last of `workers` with SIGKILL once every other one has begun
  // its steps 1 and 2 (asynchronous calls that wait for it) and the last one
  // its "hang"; then expects every other one to report the results of both
  // steps within `within` of the kill. Removes the killed worker from
  // `workers`. Failures are fatal (call under ASSERT_NO_FATAL_FAILURE).
  void KillLastRankDuringTwoSteps(
      std::vector<std::unique_ptr<ChildProcess>>* workers,
      absl::Duration within);

  // Waits for `workers`, the others of a rank killed by
  // KillLastRankDuringTwoSteps, and expects steps 1 and 2 of each to have
  // ended ABORTED naming it (`killed`, as "rank 3"), as ExpectStep checks
  // them with `max_elapsed` and `require_check`.
  void ExpectTwoStepsAbortedNaming(
      const std::vector<std::unique_ptr<ChildProcess>>& workers,
      const std::string& killed,
      absl::Duration max_elapsed = absl::InfiniteDuration(),
      bool require_check = true);

  // Sets *path to the runfile `runfile` (RunfilePath); a fatal failure
  // when it is missing.
  static void FindRunfile(const std::string& runfile, std::string* path);

  // The RESULT of step `index` of a finished worker; records a failure
  // (with the worker's output) when it is missing.
  StepResult Step(const ProcessResult& worker, const std::string& index);

  // Expects step `index` of `worker` to have ended with `code`, with a
  // message containing each of `substrings` (one of "a || b" will do), within `max_elapsed`, and (for
  // an OK tensor collective) with check=ok unless `require_check` is
  // false; never check=bad.
  void ExpectStep(const ProcessResult& worker, const std::string& index,
                  absl::StatusCode code,
                  const std::vector<std::string>& substrings = {},
                  absl::Duration max_elapsed = absl::InfiniteDuration(),
                  bool require_check = true);

  // A job name unique to this test: "<test>-<suffix>".
  std::string Job(const std::string& suffix = "job") const;
  // Creates `name` in the scratch directory the workers share.
  void Touch(const std::string& name);
  // reducerd's VmRSS in KiB (0, with a failure recorded, if unreadable).
  int64_t ServerRssKib();

  std::string test_name_;
  std::string scratch_dir_;
  std::string worker_binary_;
  absl::Time deadline_;

 private:
  std::unique_ptr<Watchdog> watchdog_;
  std::unique_ptr<ReducerdProcess> server_;
  std::vector<std::string> server_flags_;
  int server_port_ = 0;
  // Servers replaced by a restart: kept for their logs, already dead.
  std::vector<std::unique_ptr<ReducerdProcess>> old_servers_;
  bool server_killed_ = false;
};

}  // namespace testing
}  // namespace reducer

#endif  // REDUCER_TESTS_FAULT_TEST_BASE_H_
