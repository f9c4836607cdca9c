// Fault soak: thousands of small collectives across several jobs at once,
// with periodic faults (ranks sending the wrong shape every so often, a rank
// SIGKILLed and replaced several times), every result checked exactly.
// Afterwards reducerd's RSS must be back near what it was after a warm-up
// of the same kind, and it must still serve a new job.
//
// `--soak_scale=N` multiplies the iterations and kills (default 1, about
// two seconds here); the "manual" target fault_soak_long_test runs it
// with a larger scale.
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/fault_test_base.h"

namespace reducer {
namespace testing {
namespace {

// Set from --soak_scale in main() before any test runs; read-only after
// (the one process-wide setting of this test binary).
int soak_scale = 1;

// How much larger than after the warm-up reducerd's RSS may end. The
// warm-up fills its block pool and malloc arenas; a leak of per-collective
// state over thousands of collectives would exceed this.
constexpr int64_t kRssSlackKib = 16 * 1024;

int CountOccurrences(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t pos = text.find(what); pos != std::string::npos;
       pos = text.find(what, pos + what.size())) {
    ++n;
  }
  return n;
}

class SoakTest : public FaultTest {
 protected:
  absl::Duration TimeLimit() const override {
    return absl::Seconds(90) * soak_scale;
  }
};

TEST_F(SoakTest, ThousandsOfCollectivesWithPeriodicFaults) {
  ASSERT_TRUE(StartServer());
  const int iters = 5000 * soak_scale;
  const int kills = 3 * soak_scale;

  // Warm-up: the same mix, shorter, for the RSS baseline.
  {
    std::vector<std::unique_ptr<ChildProcess>> warm = StartJob(
        Job("warm"), 3, {"soak:iters=600,mismatch_every=50,seed=1"});
    for (const ProcessResult& r : WaitWorkers(warm)) {
      ExpectStep(r, "1", absl::StatusCode::kOk);
    }
  }
  absl::SleepFor(absl::Milliseconds(300));
  const int64_t baseline_kib = ServerRssKib();

  const std::string clean_steps = absl::StrCat("soak:iters=", iters, ",seed=2");
  const std::string mismatch_steps =
      absl::StrCat("soak:iters=", iters, ",mismatch_every=37,seed=3");
  // Each life of rank 2 is killed soon after it ran a fiftieth of its soak.
  const std::string kill_steps = absl::StrCat(
      "soak:iters=", iters / 2, ",seed=4,reconnects=", kills + 2,
      ",timeout_ms=30000,mark_at=", iters / 100);
  std::vector<std::unique_ptr<ChildProcess>> clean =
      StartJob(Job("clean"), 3, {clean_steps});
  std::vector<std::unique_ptr<ChildProcess>> mismatch =
      StartJob(Job("mismatch"), 3, {mismatch_steps});
  const std::string kill_job = Job("kills");
  std::vector<std::unique_ptr<ChildProcess>> killed =
      StartJob(kill_job, 3, {kill_steps});

  // Kill rank 2 of job "kills" every so often; once the survivors have
  // noticed, a new process takes its place.
  std::vector<std::unique_ptr<ChildProcess>> dead;
  int done_kills = 0;
  for (int k = 1; k <= kills; ++k) {
    // Kill only a rank that is mid-soak. On the same-host path the soak's
    // iterations take tens of microseconds: a kill at a fixed time after
    // the soak began found it finished, in one CI run of many.
    ASSERT_TRUE(WaitForOutput(*killed[2], "SOAKMARK"));
    if (!killed[2]->IsRunning()) break;  // the job finished first (slow kill)
    ASSERT_TRUE(killed[2]->Signal(SIGKILL));
    ++done_kills;
    killed[2]->Wait(absl::Seconds(10));
    dead.push_back(std::move(killed[2]));
    // Either both survivors notice the kill, or the kill came after the
    // job's final barrier (all three ranks passed it; rank 2 was on its way
    // out), so both finish their soak without noticing: then the job is
    // over and the kill interrupted nothing.
    const absl::Time deadline = absl::Now() + absl::Seconds(20);
    bool job_finished_first = false;
    while (CountOccurrences(killed[0]->ReadStdout(), "SOAKLOST") < k ||
           CountOccurrences(killed[1]->ReadStdout(), "SOAKLOST") < k) {
      if (absl::StrContains(killed[0]->ReadStdout(), "SOAK iterations=") &&
          absl::StrContains(killed[1]->ReadStdout(), "SOAK iterations=")) {
        job_finished_first = true;
        break;
      }
      ASSERT_LT(absl::Now(), deadline)
          << "the survivors did not notice kill " << k << "\n"
          << killed[0]->ReadStdout() << killed[1]->ReadStdout();
      absl::SleepFor(absl::Milliseconds(20));
    }
    if (job_finished_first) {
      --done_kills;
      killed.pop_back();  // moved to `dead`; the survivors' results remain
      break;
    }
    WorkerSpec again;
    again.job = kill_job;
    again.rank = 2;
    again.world_size = 3;
    again.steps = kill_steps;
    again.name = absl::StrCat(kill_job, ".rank2.life", k);
    killed[2] = StartWorker(again);
    ASSERT_NE(killed[2], nullptr);
  }

  int total_iterations = 0;
  for (auto* job : {&clean, &mismatch, &killed}) {
    for (const ProcessResult& r : WaitWorkers(*job)) {
      ExpectStep(r, "1", absl::StatusCode::kOk);
      for (absl::string_view line : absl::StrSplit(r.stdout_text, '\n')) {
        if (!absl::StartsWith(line, "SOAK iterations=")) continue;
        int n = 0;
        std::vector<absl::string_view> fields = absl::StrSplit(line, ' ');
        if (absl::SimpleAtoi(fields[1].substr(strlen("iterations=")), &n)) {
          total_iterations += n;
        }
      }
    }
  }
  for (const auto& r : dead) {
    // Killed mid-soak: no result, and no check failure before the kill.
    EXPECT_FALSE(absl::StrContains(r->ReadStdout(), "check=bad"))
        << r->ReadStdout();
  }
  std::printf("soak: %d collective calls checked across 3 jobs, %d kills\n",
              total_iterations, done_kills);
  EXPECT_GE(done_kills, 1);

  // reducerd still serves, and its memory is back near the baseline.
  std::vector<std::unique_ptr<ChildProcess>> after = StartJob(
      Job("after"), 2, {"allreduce:shape=1000,timeout_ms=20000;barrier"});
  for (const ProcessResult& r : WaitWorkers(after)) {
    ExpectStep(r, "1", absl::StatusCode::kOk);
    ExpectStep(r, "2", absl::StatusCode::kOk);
  }
  absl::SleepFor(absl::Milliseconds(300));
  const int64_t final_kib = ServerRssKib();
  std::printf("reducerd VmRSS: %lld KiB after the warm-up, %lld KiB after the "
              "soak\n",
              static_cast<long long>(baseline_kib),
              static_cast<long long>(final_kib));
  if (RssChecksApply()) {
    EXPECT_LE(final_kib, baseline_kib + kRssSlackKib)
        << "reducerd grew by " << (final_kib - baseline_kib) << " KiB";
  }
}

}  // namespace
}  // namespace testing
}  // namespace reducer

int main(int argc, char** argv) {
  // --soak_scale=N, taken out before gtest sees the arguments.
  std::vector<char*> rest;
  for (int i = 0; i < argc; ++i) {
    int scale = 0;
    if (std::strncmp(argv[i], "--soak_scale=", 13) == 0 &&
        absl::SimpleAtoi(argv[i] + 13, &scale) && scale > 0) {
      reducer::testing::soak_scale = scale;
      continue;
    }
    rest.push_back(argv[i]);
  }
  int rest_argc = static_cast<int>(rest.size());
  ::testing::InitGoogleTest(&rest_argc, rest.data());
  return RUN_ALL_TESTS();
}
