// Uneven data with Done(), real processes: W = 4 ranks hold 2, 5, 0 and 3
// batches of an Ignite-style accuracy metric synced every batch
// (tests/uneven_metric_worker). The ranks out of batches call Done() and
// their peers go on without them; afterwards every rank holds the metric a
// single process computes over all batches. On the gRPC and the same-host
// paths, and over three reducerd shards.
#include <stdlib.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/job_paths.h"
#include "tests/process_harness.h"
#include "tests/watchdog.h"

namespace reducer {
namespace testing {
namespace {

const std::vector<int> kBatches = {2, 5, 0, 3};

// The metric over every rank's batches, as one process computes it.
std::string SingleProcessFinal() {
  int64_t correct = 0, total = 0;
  for (int r = 0; r < static_cast<int>(kBatches.size()); ++r) {
    for (int b = 0; b < kBatches[r]; ++b) {
      correct += (7 * r + 3 * b) % 11;
      total += 10;
    }
  }
  return absl::StrCat("FINAL ", correct, " ", total, " ");
}

class UnevenDoneTest : public ::testing::TestWithParam<JobPath> {};

TEST_P(UnevenDoneTest, EveryRankEndsWithTheSingleProcessMetric) {
  Watchdog watchdog("EveryRankEndsWithTheSingleProcessMetric",
                    absl::Seconds(90));
  absl::StatusOr<JobPathServers> servers = StartJobPath(GetParam());
  ASSERT_TRUE(servers.ok()) << servers.status();
  std::vector<std::unique_ptr<ChildProcess>> ranks;
  for (int r = 0; r < static_cast<int>(kBatches.size()); ++r) {
    absl::StatusOr<std::unique_ptr<ChildProcess>> child =
        ChildProcess::Start({RunfilePath("tests/uneven_metric_worker").value(),
                             "--target=" + servers->target,
                             absl::StrCat("--job=uneven-", GetParam().name),
                             absl::StrCat("--rank=", r),
                             absl::StrCat("--world_size=", kBatches.size()),
                             absl::StrCat("--batches=", kBatches[r])},
                            absl::StrCat("rank", r));
    ASSERT_TRUE(child.ok()) << child.status();
    ranks.push_back(*std::move(child));
  }
  const std::string expected = SingleProcessFinal();
  for (const ProcessResult& result : WaitAll(ranks, absl::Seconds(60))) {
    EXPECT_TRUE(result.Succeeded()) << result.Describe();
    EXPECT_TRUE(absl::StartsWith(result.stdout_text, expected))
        << result.name << ": " << result.stdout_text << " expected "
        << expected;
  }
  for (const auto& server : servers->servers) {
    EXPECT_THAT(server->Stderr(), ::testing::HasSubstr("called Done()"));
  }
}

INSTANTIATE_TEST_SUITE_P(Paths, UnevenDoneTest, ::testing::ValuesIn(kJobPaths),
                         JobPathName);

}  // namespace
}  // namespace testing
}  // namespace reducer
