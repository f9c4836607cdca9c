// The load test: one reducerd serving 32 jobs of 4 ranks and one job of 64
// ranks at once, 192 ranks in all, each running the same plan of
// collectives (tests/load_worker.cc: small and medium all-reduces, uneven
// all-gathers, broadcasts, barriers and scalars, by call order and by name)
// with every result checked against its closed form. Ranks are threads of a
// few load_worker processes, each with its own Client; reducerd is a real
// process.
//
// Nothing may be lost: every rank reports ok == planned with no failed
// call and no wrong result, and reducerd's own count of collectives that
// succeeded (reducer_collectives_total{outcome="OK"}) equals the jobs'
// plans exactly (a collective served twice or dropped shows there).
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/fault_test_base.h"
#include "tests/http_get.h"
#include "tests/process_harness.h"

namespace reducer {
namespace testing {
namespace {

constexpr int kSmallJobs = 32;
constexpr int kSmallWorldSize = 4;
constexpr int kBigWorldSize = 64;
// Small jobs per load_worker process, and processes for the big job's
// ranks: 8 + 4 processes of 16 rank threads each.
constexpr int kSmallJobsPerProcess = 4;
constexpr int kBigJobProcesses = 4;

// Calls per rank: 33 jobs x 2000 = 66,000 collectives (256,000 calls of the
// small jobs' ranks, 128,000 of the big job's), about 100 s on 2 cores
// (asan builds run a quarter of it; see CollectivesPerRank).
constexpr int kCollectivesPerRank = 2000;

int CollectivesPerRank() {
#if defined(__SANITIZE_ADDRESS__)
  // AddressSanitizer makes every process several times slower; the load's
  // shape (jobs, ranks, kinds) stays the same.
  return kCollectivesPerRank / 4;
#else
  return kCollectivesPerRank;
#endif
}

// The key=value fields of a LOAD line; every field load_worker prints is
// present (empty when missing), so that at() cannot throw.
std::map<std::string, std::string> Fields(absl::string_view line) {
  std::map<std::string, std::string> fields = {
      {"job", ""}, {"rank", ""}, {"ok", ""}, {"failed", ""}, {"wrong", ""},
      {"planned", ""}};
  for (absl::string_view kv : absl::StrSplit(line, ' ', absl::SkipEmpty())) {
    std::pair<std::string, std::string> p =
        absl::StrSplit(kv, absl::MaxSplits('=', 1));
    if (fields.count(p.first) != 0) fields[p.first] = p.second;
  }
  return fields;
}

class LoadTest : public FaultTest {
 protected:
  // About 2 minutes unloaded; room for a busy machine.
  absl::Duration TimeLimit() const override { return absl::Seconds(420); }

  // Starts a load_worker running ranks [first, first + count) of `jobs`.
  std::unique_ptr<ChildProcess> StartLoadWorker(
      const std::vector<std::string>& jobs, int world_size, int first,
      int count, const std::string& name) {
    absl::StatusOr<std::string> binary = RunfilePath("tests/load_worker");
    EXPECT_TRUE(binary.ok()) << binary.status();
    if (!binary.ok()) return nullptr;
    absl::StatusOr<std::unique_ptr<ChildProcess>> child = ChildProcess::Start(
        {*binary, absl::StrCat("--target=", server()->address()),
         absl::StrCat("--jobs=", absl::StrJoin(jobs, ",")),
         absl::StrCat("--world_size=", world_size),
         absl::StrCat("--first_rank=", first),
         absl::StrCat("--num_ranks=", count),
         absl::StrCat("--collectives=", CollectivesPerRank())},
        name);
    EXPECT_TRUE(child.ok()) << child.status();
    return child.ok() ? *std::move(child) : nullptr;
  }
};

TEST_F(LoadTest, ThirtyTwoSmallJobsAndOneOf64RanksLoseNothing) {
  ASSERT_TRUE(StartServer({"--metrics_listen=127.0.0.1:0"}));
  const int metrics_port = server()->MetricsPort();
  ASSERT_NE(metrics_port, 0) << server()->Logs();

  // Every (job, rank) that must report, with its world size.
  std::map<std::pair<std::string, int>, bool> expected;
  std::vector<std::unique_ptr<ChildProcess>> workers;
  for (int p = 0; p < kSmallJobs / kSmallJobsPerProcess; ++p) {
    std::vector<std::string> jobs;
    for (int j = 0; j < kSmallJobsPerProcess; ++j) {
      jobs.push_back(Job(absl::StrCat("small", p * kSmallJobsPerProcess + j)));
      for (int r = 0; r < kSmallWorldSize; ++r) expected[{jobs.back(), r}] = false;
    }
    workers.push_back(StartLoadWorker(jobs, kSmallWorldSize, 0, kSmallWorldSize,
                                      absl::StrCat("load.small", p)));
  }
  const std::string big = Job("big");
  const int per_process = kBigWorldSize / kBigJobProcesses;
  for (int p = 0; p < kBigJobProcesses; ++p) {
    workers.push_back(StartLoadWorker({big}, kBigWorldSize, p * per_process,
                                      per_process, absl::StrCat("load.big", p)));
  }
  for (int r = 0; r < kBigWorldSize; ++r) expected[{big, r}] = false;

  const absl::Time start = absl::Now();
  std::vector<ProcessResult> results = WaitWorkers(workers);
  const absl::Duration took = absl::Now() - start;
  const int planned = CollectivesPerRank();
  const int jobs = kSmallJobs + 1;
  std::printf("load: %d jobs, %zu ranks, %d collectives per rank, %d "
              "collectives in %s\n",
              jobs, expected.size(), planned, jobs * planned,
              absl::FormatDuration(took).c_str());

  // Every rank: ok == planned, nothing failed or wrong.
  for (const ProcessResult& r : results) {
    for (absl::string_view l : absl::StrSplit(r.stdout_text, '\n')) {
      if (absl::StartsWith(l, "LOADFAIL")) ADD_FAILURE() << r.name << ": " << l;
      if (!absl::StartsWith(l, "LOAD ")) continue;
      const std::map<std::string, std::string> f = Fields(l);
      int rank = -1, ok = -1, failed = -1, wrong = -1, plan = -1;
      const bool parsed = absl::SimpleAtoi(f.at("rank"), &rank) &&
                          absl::SimpleAtoi(f.at("ok"), &ok) &&
                          absl::SimpleAtoi(f.at("failed"), &failed) &&
                          absl::SimpleAtoi(f.at("wrong"), &wrong) &&
                          absl::SimpleAtoi(f.at("planned"), &plan);
      if (!parsed) {
        ADD_FAILURE() << r.name << ": cannot read " << l;
        continue;
      }
      auto it = expected.find({f.at("job"), rank});
      if (it == expected.end()) {
        ADD_FAILURE() << r.name << " reported an unexpected rank: " << l;
        continue;
      }
      EXPECT_FALSE(it->second) << "reported twice: " << l;
      it->second = true;
      EXPECT_EQ(ok, planned) << l;
      EXPECT_EQ(failed, 0) << l;
      EXPECT_EQ(wrong, 0) << l;
      EXPECT_EQ(plan, planned) << l;
    }
  }
  int missing = 0;
  for (const auto& [key, seen] : expected) {
    if (!seen && ++missing <= 5) {
      ADD_FAILURE() << "no report from " << key.first << " rank " << key.second;
    }
  }
  EXPECT_EQ(missing, 0) << "ranks that never reported";

  // reducerd served each planned collective once, plus each job's final
  // barrier, and failed none.
  absl::StatusOr<std::string> body = HttpGet(metrics_port, "/metrics");
  ASSERT_TRUE(body.ok()) << body.status();
  absl::StatusOr<std::vector<Sample>> samples = ParseExposition(*body);
  ASSERT_TRUE(samples.ok()) << samples.status();
  double ok = 0, not_ok = 0;
  for (const Sample& s : *samples) {
    if (s.name != "reducer_collectives_total") continue;
    auto outcome = s.labels.find("outcome");
    if (outcome != s.labels.end() && outcome->second == "OK") {
      ok += s.value;
    } else {
      not_ok += s.value;
    }
  }
  EXPECT_EQ(ok, jobs * (planned + 1));
  EXPECT_EQ(not_ok, 0);
}

}  // namespace
}  // namespace testing
}  // namespace reducer
