// Quorum steps with real processes: a W = 4 training loop
// (examples/quorum_worker) where rank 3 is SIGKILLed, or SIGSTOPped and let go
// again, before a step. The survivors' step ends over [0, 1, 2] without
// waiting for the collective's timeout, the later steps go on without
// anyone restarting, rank 3 connects again into the running job, takes the
// parameters by Broadcast and contributes again, and every rank ends with
// the parameters of the closed form below. On the gRPC path, on the
// same-host path, and over three reducerd shards.
#include <signal.h>
#include <stdlib.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/job_paths.h"
#include "tests/process_harness.h"
#include "tests/watchdog.h"

namespace reducer {
namespace testing {
namespace {

constexpr int kWorld = 4;
constexpr int kSteps = 60;
constexpr int kParams = 64;
constexpr int kPauseAt = 5;
constexpr absl::Duration kGrace = absl::Seconds(2);
// Far below the collective timeout (the client's, 60 s): the step must
// end by the quorum rule, not by a timeout.
constexpr absl::Duration kMargin = absl::Seconds(5);

// One STEP line of a worker.
struct Step {
  std::string contributors;
  std::string joined;
  absl::Duration elapsed;
};

// A worker's STEP lines by step, and its other report lines.
struct Report {
  std::map<int, Step> steps;
  int joined_at = -1;  // its JOINED line
  int left_out_at = -1;
  std::string final_params;
  std::string errors;
};

Report Parse(const std::string& out) {
  Report r;
  for (absl::string_view line : absl::StrSplit(out, '\n')) {
    std::vector<std::string> f = absl::StrSplit(line, ' ');
    int s = -1;
    if (f.size() >= 2) (void)absl::SimpleAtoi(f[1], &s);
    if (f[0] == "STEP" && f.size() == 5) {
      int64_t ms = 0;
      (void)absl::SimpleAtoi(absl::StripPrefix(f[4], "ms="), &ms);
      r.steps[s] = Step{std::string(absl::StripPrefix(f[2], "contributors=")),
                        std::string(absl::StripPrefix(f[3], "joined=")),
                        absl::Milliseconds(ms)};
    } else if (f[0] == "JOINED") {
      r.joined_at = s;
    } else if (f[0] == "LEFT_OUT") {
      r.left_out_at = s;
    } else if (f[0] == "FINAL" && f.size() == 2) {
      r.final_params = f[1];
    } else if (f[0] == "ERROR") {
      absl::StrAppend(&r.errors, line, "\n");
    }
  }
  return r;
}

// The parameters after kSteps steps when every step before `first_out`
// and after `rejoined` sums all ranks' gradients, and the steps from
// `first_out` to `rejoined` (inclusive) those of ranks 0, 1 and 2 only;
// printed as quorum_worker prints them.
std::string ClosedForm(int first_out, int rejoined) {
  std::vector<std::string> values;
  for (int i = 0; i < kParams; ++i) {
    double p = i / 2.0;
    for (int s = 0; s < kSteps; ++s) {
      const int ranks = (s >= first_out && s <= rejoined) ? 3 : 4;
      for (int r = 0; r < ranks; ++r) p -= (r + 1.0) * (s + 1) + i % 7;
    }
    values.push_back(absl::StrFormat("%.17g", p));
  }
  return absl::StrJoin(values, ",");
}

// Waits until `child`'s stdout holds `text`; false past `timeout`.
bool WaitForOutput(const ChildProcess& child, const std::string& text,
                   absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    if (absl::StrContains(child.ReadStdout(), text)) return true;
    absl::SleepFor(absl::Milliseconds(2));
  }
  return false;
}

class QuorumStepsTest : public ::testing::TestWithParam<JobPath> {
 protected:
  void SetUp() override {
    absl::StatusOr<JobPathServers> servers = StartJobPath(GetParam());
    ASSERT_TRUE(servers.ok()) << servers.status();
    servers_ = *std::move(servers);
  }

  std::unique_ptr<ChildProcess> StartRank(int rank, const std::string& name,
                                          std::vector<std::string> extra = {}) {
    std::vector<std::string> argv = {
        RunfilePath("examples/quorum_worker").value(),
        "--target=" + servers_.target,
        "--job=quorum-" + std::string(GetParam().name),
        absl::StrCat("--rank=", rank),
        absl::StrCat("--world_size=", kWorld),
        absl::StrCat("--steps=", kSteps),
        absl::StrCat("--params=", kParams),
        "--min_ranks=3",
        absl::StrCat("--grace_ms=", absl::ToInt64Milliseconds(kGrace))};
    argv.insert(argv.end(), extra.begin(), extra.end());
    absl::StatusOr<std::unique_ptr<ChildProcess>> child =
        ChildProcess::Start(argv, name);
    EXPECT_TRUE(child.ok()) << child.status();
    return child.ok() ? *std::move(child) : nullptr;
  }

  // Starts ranks 0..3 into *ranks, rank 3 with --pause_at=kPauseAt and
  // `rank3_flags`, and waits until rank 3 paused at step kPauseAt. Fatal
  // failures when a rank does not start or rank 3 does not pause.
  void StartPausingRank3(const std::vector<std::string>& rank3_flags,
                         std::vector<std::unique_ptr<ChildProcess>>* ranks) {
    for (int r = 0; r < kWorld; ++r) {
      std::vector<std::string> flags;
      if (r == 3) {
        flags.push_back(absl::StrCat("--pause_at=", kPauseAt));
        flags.insert(flags.end(), rank3_flags.begin(), rank3_flags.end());
      }
      ranks->push_back(StartRank(r, absl::StrCat("rank", r), flags));
      ASSERT_NE(ranks->back(), nullptr);
    }
    ChildProcess& rank3 = *(*ranks)[3];
    ASSERT_TRUE(WaitForOutput(rank3, absl::StrCat("PAUSE ", kPauseAt),
                              absl::Seconds(60)))
        << rank3.ReadStdout() << rank3.ReadStderr();
  }

  // Checks every final worker's report: the survivors' step kPauseAt
  // ended over [0,1,2] within the grace plus the margin, rank 3 joined at
  // some later step (where it is listed as joined) and contributed from
  // the next one on, and everyone ends with the closed form.
  void ExpectTrainedThrough(const std::vector<ProcessResult>& results,
                            int rank3_index) {
    std::vector<Report> reports;
    for (const ProcessResult& r : results) {
      EXPECT_TRUE(r.Succeeded()) << r.Describe();
      reports.push_back(Parse(r.stdout_text));
      EXPECT_EQ(reports.back().errors, "") << r.name;
    }
    const Report& rank3 = reports[rank3_index];
    const int joined = rank3.joined_at;
    ASSERT_GE(joined, kPauseAt) << results[rank3_index].Describe();
    ASSERT_LT(joined, kSteps);
    for (int r = 0; r < 3; ++r) {
      const Report& survivor = reports[r];
      ASSERT_EQ(survivor.steps.size(), static_cast<size_t>(kSteps)) << r;
      const Step& out = survivor.steps.at(kPauseAt);
      EXPECT_EQ(out.contributors, "0,1,2") << r;
      EXPECT_LE(out.elapsed, kGrace + kMargin) << r;
      for (const auto& [s, step] : survivor.steps) {
        const bool without = s >= kPauseAt && s <= joined;
        EXPECT_EQ(step.contributors, without ? "0,1,2" : "0,1,2,3")
            << "rank " << r << " step " << s;
        EXPECT_EQ(step.joined, s == joined ? "3" : "")
            << "rank " << r << " step " << s;
      }
    }
    for (const auto& [s, step] : rank3.steps) {
      EXPECT_EQ(step.contributors, reports[0].steps[s].contributors) << s;
    }
    EXPECT_EQ(rank3.steps.rbegin()->first, kSteps - 1);
    const std::string expected = ClosedForm(kPauseAt, joined);
    for (const Report& r : reports) EXPECT_EQ(r.final_params, expected);
  }

  JobPathServers servers_;
};

TEST_P(QuorumStepsTest, AKilledRankIsLeftOutAndRejoinsWithoutARestart) {
  Watchdog watchdog("AKilledRankIsLeftOutAndRejoinsWithoutARestart",
                    absl::Seconds(120));
  std::vector<std::unique_ptr<ChildProcess>> ranks;
  ASSERT_NO_FATAL_FAILURE(StartPausingRank3({}, &ranks));
  ASSERT_TRUE(ranks[3]->Signal(SIGKILL));
  EXPECT_EQ(ranks[3]->Wait(absl::Seconds(10)).term_signal, SIGKILL);
  // A new process takes rank 3 while the others train on.
  ranks.push_back(StartRank(3, "rank3-again"));
  ASSERT_NE(ranks.back(), nullptr);
  std::vector<std::unique_ptr<ChildProcess>> final_ranks;
  for (int r : {0, 1, 2, 4}) final_ranks.push_back(std::move(ranks[r]));
  ExpectTrainedThrough(WaitAll(final_ranks, absl::Seconds(90)), 3);
  EXPECT_THAT(servers_.Logs(), ::testing::HasSubstr("rank 3 is absent"));
  EXPECT_THAT(servers_.Logs(),
              ::testing::Not(::testing::HasSubstr("epoch 1 aborted")));
}

TEST_P(QuorumStepsTest, ALateRankIsLeftOutAndRejoinsWithoutARestart) {
  Watchdog watchdog("ALateRankIsLeftOutAndRejoinsWithoutARestart",
                    absl::Seconds(120));
  std::vector<std::unique_ptr<ChildProcess>> ranks;
  ASSERT_NO_FATAL_FAILURE(StartPausingRank3({"--pause_ms=300"}, &ranks));
  ASSERT_TRUE(ranks[3]->Signal(SIGSTOP));
  // The others end the step without it, at the grace's end.
  ASSERT_TRUE(WaitForOutput(*ranks[0], absl::StrCat("STEP ", kPauseAt, " "),
                            absl::Seconds(30)));
  ASSERT_TRUE(ranks[3]->Signal(SIGCONT));
  std::vector<ProcessResult> results = WaitAll(ranks, absl::Seconds(90));
  const Report late = Parse(results[3].stdout_text);
  EXPECT_EQ(late.left_out_at, kPauseAt) << results[3].Describe();
  EXPECT_THAT(results[3].stdout_text,
              ::testing::HasSubstr(absl::StrCat(
                  "finished without rank 3: it arrived after the step ended")));
  const Report rank0 = Parse(results[0].stdout_text);
  const Step& out = rank0.steps.at(kPauseAt);
  EXPECT_GE(out.elapsed, kGrace - absl::Milliseconds(100));
  ExpectTrainedThrough(results, 3);
}

INSTANTIATE_TEST_SUITE_P(Paths, QuorumStepsTest, ::testing::ValuesIn(kJobPaths),
                         JobPathName);

}  // namespace
}  // namespace testing
}  // namespace reducer
