// End-to-end tests of Reducer with real processes: each test starts reducerd
// on a free loopback port and one e2e_worker process per rank (see
// e2e_worker.cc for what each scenario checks), asserts that every worker
// exits 0, and that reducerd exits 0 when stopped with SIGTERM. A worker's
// stderr (and reducerd's logs) are printed when it fails.
//
// Every test has a hard time limit of its own (a watchdog aborts the test
// process, whose children then die with it), well inside the Bazel timeout.
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/process_harness.h"
#include "tests/watchdog.h"

namespace reducer {
namespace testing {
namespace {

// Default hard limit of one test, from start of reducerd to its exit. The
// slowest test (8 workers of all_ops on 2 cores) takes well under half.
constexpr absl::Duration kTestLimit = absl::Seconds(100);

class E2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const ::testing::TestInfo* info =
        ::testing::UnitTest::GetInstance()->current_test_info();
    test_name_ = absl::StrCat(info->test_suite_name(), ".", info->name());
    for (char& c : test_name_) {
      if (c == '/') c = '_';
    }
    watchdog_ = std::make_unique<Watchdog>(test_name_, kTestLimit);
    deadline_ = absl::Now() + kTestLimit;

    absl::StatusOr<std::string> worker = RunfilePath("tests/e2e_worker");
    ASSERT_TRUE(worker.ok()) << worker.status();
    worker_binary_ = *worker;
    scratch_dir_ = absl::StrCat(TestTempDir(), "/", test_name_);
    ASSERT_TRUE(mkdir(scratch_dir_.c_str(), 0755) == 0 || errno == EEXIST)
        << scratch_dir_;

    absl::StatusOr<std::unique_ptr<ReducerdProcess>> server =
        ReducerdProcess::Start();
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
  }

  void TearDown() override {
    if (server_ != nullptr) {
      EXPECT_EQ(server_->StopDrained(), "")
          << "reducerd must drain and exit 0 on SIGTERM";
      server_.reset();
    }
    watchdog_.reset();
  }

  // Starts one worker per rank of `job`, each with `flags` after the
  // standard ones. Names them "<job>.rank<r>" (plus `suffix`).
  void StartJob(const std::string& job, int world_size,
                const std::vector<std::string>& flags,
                std::vector<std::unique_ptr<ChildProcess>>* workers,
                const std::string& suffix = "") {
    for (int rank = 0; rank < world_size; ++rank) {
      workers->push_back(StartWorker(job, rank, world_size, flags,
                                     absl::StrCat(job, ".rank", rank, suffix)));
    }
  }

  std::unique_ptr<ChildProcess> StartWorker(
      const std::string& job, int rank, int world_size,
      const std::vector<std::string>& flags, const std::string& name) {
    std::vector<std::string> argv = {
        worker_binary_,
        absl::StrCat("--target=", server_->address()),
        absl::StrCat("--job=", job),
        absl::StrCat("--rank=", rank),
        absl::StrCat("--world_size=", world_size),
        absl::StrCat("--scratch_dir=", scratch_dir_),
    };
    argv.insert(argv.end(), flags.begin(), flags.end());
    absl::StatusOr<std::unique_ptr<ChildProcess>> child =
        ChildProcess::Start(std::move(argv), absl::StrCat(test_name_, ".", name));
    EXPECT_TRUE(child.ok()) << child.status();
    return child.ok() ? *std::move(child) : nullptr;
  }

  // Waits for every worker (until a little before the test's own limit) and
  // expects each to exit 0; prints the stderr of those that did not, and
  // reducerd's logs once if any failed. Returns true when all succeeded.
  bool WaitAndExpectSuccess(
      const std::vector<std::unique_ptr<ChildProcess>>& workers) {
    for (const auto& w : workers) {
      if (w == nullptr) return false;  // a start already failed the test
    }
    const absl::Duration budget = deadline_ - absl::Now() -
                                  ReducerdProcess::kDrainGrace -
                                  absl::Seconds(5);
    const std::vector<ProcessResult> results =
        WaitAll(workers, std::max(budget, absl::Seconds(1)));
    bool all_ok = true;
    for (const ProcessResult& result : results) {
      EXPECT_TRUE(result.Succeeded()) << result.Describe();
      all_ok = all_ok && result.Succeeded();
    }
    if (!all_ok) ADD_FAILURE() << "server logs:\n" << server_->Logs();
    return all_ok;
  }

  std::string test_name_;
  std::string worker_binary_;
  std::string scratch_dir_;
  absl::Time deadline_;
  std::unique_ptr<Watchdog> watchdog_;
  std::unique_ptr<ReducerdProcess> server_;
};

// all_ops over W = 1, 2, 4, 8 workers: every op x dtype pair and size, both
// forms, every other collective, then the even and odd ranks in two groups.
class AllOpsTest : public E2eTest,
                   public ::testing::WithParamInterface<int> {};

TEST_P(AllOpsTest, EveryCollectiveIsExactInBothForms) {
  const int world_size = GetParam();
  std::vector<std::string> flags = {"--scenario=all_ops"};
  if (world_size >= 8) {
    // 8 processes on 2 cores: the multi-chunk size for kSum on every dtype
    // and for every op on float32, not for every pair.
    flags.push_back("--big_all_pairs=false");
  }
  std::vector<std::unique_ptr<ChildProcess>> workers;
  StartJob(absl::StrCat("all-ops-w", world_size), world_size, flags, &workers);
  WaitAndExpectSuccess(workers);
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, AllOpsTest, ::testing::Values(1, 2, 4, 8),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return absl::StrCat("W", info.param);
                         });

TEST_F(E2eTest, ResultBitsDoNotDependOnArrivalOrder) {
  constexpr int kWorldSize = 4;
  const std::vector<std::string> orders = {"0,1,2,3", "3,2,1,0", "2,0,3,1"};
  std::vector<std::string> out_files;
  for (size_t k = 0; k < orders.size(); ++k) {
    const std::string job = absl::StrCat("determinism-", k);
    std::vector<std::unique_ptr<ChildProcess>> workers;
    for (int rank = 0; rank < kWorldSize; ++rank) {
      const std::string out =
          absl::StrCat(scratch_dir_, "/", job, ".rank", rank, ".txt");
      out_files.push_back(out);
      workers.push_back(StartWorker(
          job, rank, kWorldSize,
          {"--scenario=determinism", "--delay_order=" + orders[k],
           "--delay_ms=150", "--out=" + out},
          absl::StrCat(job, ".rank", rank)));
    }
    ASSERT_TRUE(WaitAndExpectSuccess(workers)) << "arrival order " << orders[k];
  }
  const absl::StatusOr<std::string> first = ReadFileToString(out_files.front());
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_FALSE(first->empty()) << out_files.front();
  for (const std::string& file : out_files) {
    const absl::StatusOr<std::string> contents = ReadFileToString(file);
    ASSERT_TRUE(contents.ok()) << contents.status();
    EXPECT_EQ(*contents, *first) << file << " differs from " << out_files.front();
  }
}

// pipeline over W = 2, 4, 8 workers: a running sum passed from rank to rank
// with Send and Receive, checked against its closed form at every rank.
class PipelineTest : public E2eTest,
                     public ::testing::WithParamInterface<int> {};

TEST_P(PipelineTest, RunningSumPassedRankToRankIsExact) {
  const int world_size = GetParam();
  std::vector<std::unique_ptr<ChildProcess>> workers;
  StartJob(absl::StrCat("pipeline-w", world_size), world_size,
           {"--scenario=pipeline"}, &workers);
  WaitAndExpectSuccess(workers);
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, PipelineTest, ::testing::Values(2, 4, 8),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return absl::StrCat("W", info.param);
                         });

TEST_F(E2eTest, TwoJobsAtOnceDoNotDisturbEachOther) {
  // Different world sizes and values (salt); both run the all_ops suite at
  // the same time on one reducerd.
  const std::vector<std::string> common = {
      "--scenario=all_ops", "--sizes=0,7,1000", "--big_all_pairs=false"};
  std::vector<std::string> flags_a = common;
  flags_a.push_back("--salt=1");
  std::vector<std::string> flags_b = common;
  flags_b.push_back("--salt=2");
  std::vector<std::unique_ptr<ChildProcess>> workers;
  StartJob("job-a", 3, flags_a, &workers);
  StartJob("job-b", 2, flags_b, &workers);
  WaitAndExpectSuccess(workers);
}

TEST_F(E2eTest, TwoGroupsOfOneJobAtOnceDoNotDisturbEachOther) {
  // Groups {0, 2, 4} and {1, 3} of one job of 5 run the whole suite at once.
  std::vector<std::unique_ptr<ChildProcess>> workers;
  StartJob("two-groups", 5,
           {"--scenario=all_ops", "--group_split=parity", "--sizes=0,7,1000",
            "--big_all_pairs=false"},
           &workers);
  WaitAndExpectSuccess(workers);
}

TEST_F(E2eTest, SecondProcessForATakenRankIsRejected) {
  // Ranks 0 and 1 join; then a third process claims rank 0 and must get
  // ALREADY_EXISTS, after which ranks 0 and 1 still run collectives.
  std::vector<std::unique_ptr<ChildProcess>> workers;
  StartJob("dup", 2, {"--scenario=duplicate_rank", "--role=member"}, &workers);
  workers.push_back(StartWorker(
      "dup", 0, 2, {"--scenario=duplicate_rank", "--role=intruder"},
      "dup.intruder"));
  WaitAndExpectSuccess(workers);
}

// reducerd sizes a job's chunks to the pace of its inputs (--chunk_time).
// With a chunk time so short that any pace gives the smallest chunk,
// 64 KiB, the job switches after its first large all-reduce, the clients
// are told (JobPace) and cut their payloads at it, and every collective of
// all_ops after that is still exact.
TEST_F(E2eTest, PacedChunksKeepEveryCollectiveExact) {
  ASSERT_TRUE(server_->Stop(ReducerdProcess::kDrainGrace).Succeeded());
  absl::StatusOr<std::unique_ptr<ReducerdProcess>> paced =
      ReducerdProcess::Start({"--chunk_time=1us"});
  ASSERT_TRUE(paced.ok()) << paced.status();
  server_ = *std::move(paced);
  std::vector<std::unique_ptr<ChildProcess>> workers;
  StartJob("paced", 2, {"--scenario=all_ops"}, &workers);
  ASSERT_TRUE(WaitAndExpectSuccess(workers));
  EXPECT_NE(server_->Logs().find("its reductions now use chunks of 64 KiB"), std::string::npos)
      << server_->Logs();
}

TEST_F(E2eTest, AsyncAllReducesInFlightTogetherAreExact) {
  std::vector<std::unique_ptr<ChildProcess>> workers;
  StartJob("async", 3, {"--scenario=async"}, &workers);
  WaitAndExpectSuccess(workers);
}

TEST_F(E2eTest, MetricSyncOverFourWorkersMatchesClosedForm) {
  std::vector<std::unique_ptr<ChildProcess>> workers;
  StartJob("metrics", 4, {"--scenario=metric_sync"}, &workers);
  WaitAndExpectSuccess(workers);
}

}  // namespace
}  // namespace testing
}  // namespace reducer
