// reducerd and its ranks on separate hosts (tests/netns_harness.h): one
// reducerd in host s0, W = 4 fault_worker ranks in hosts w0..w3, every link
// capped at 200 Mbit/s. All-reduces small and of several MiB, in place and
// out of place, against the closed form; then one worker's link is cut in
// the middle of a 16 MiB all-reduce, and every other rank must fail promptly
// with ABORTED naming it, and reducerd still exits 0 on SIGTERM. Sharded:
// S = 2 reducerd shards in hosts s0 and s1, the same four ranks naming both,
// all-reduces below and above the 128 KiB that two partitions need against
// the closed form.
//
// Skips (saying why) where network namespaces cannot be made.
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/fault_test_base.h"
#include "tests/netns_harness.h"
#include "tests/process_harness.h"

namespace reducer {
namespace testing {
namespace {

constexpr int kWorld = 4;

// Every host's link, both ways. Two cores drive 200 Mbit/s through five
// namespaces easily (the 8 Mbit/s of the harness test would make a 16 MiB
// collective take half a minute), and it keeps each test to seconds.
constexpr char kLinkRate[] = "200mbit";
constexpr double kLinkBitsPerSecond = 200e6;

// A silent peer is dropped after keepalive 1 s + 2 s (as the loopback
// liveness tests do). Each shard listens on its namespace's own address,
// with neither TLS nor tokens: --allow_unauthenticated.
const std::vector<std::string> kServerFlags = {"--keepalive_time=1s",
                                               "--keepalive_timeout=2s",
                                               "--allow_unauthenticated"};

// One 4 MiB float32 tensor per rank (1 Mi elements), and the 16 MiB one of
// the cut (4 Mi elements): 2.7 s through s0's link at the cap, so the cut
// lands while it is on the wire.
constexpr int64_t kMediumElements = 1 << 20;
constexpr int64_t kLargeElements = 4 << 20;

// How soon the ranks left must hear of the cut: keepalive (3 s) plus
// scheduling; far below the collective timeout (60 s).
constexpr absl::Duration kPromptly = absl::Seconds(10);

class NetnsE2eTest : public FaultTest {
 protected:
  absl::Duration TimeLimit() const override { return absl::Seconds(120); }

  // How many reducerd shards run, shard s in host "s<s>".
  virtual int Shards() const { return 1; }

  void SetUp() override {
    absl::Status available = VirtualNetwork::Available();
    if (!available.ok()) GTEST_SKIP() << available;
    FaultTest::SetUp();
    if (HasFatalFailure()) return;
    VirtualNetwork::Options options;
    for (int s = 0; s < Shards(); ++s) options.hosts.push_back(absl::StrCat("s", s));
    for (int r = 0; r < kWorld; ++r) options.hosts.push_back(absl::StrCat("w", r));
    options.rate = kLinkRate;
    absl::StatusOr<std::unique_ptr<VirtualNetwork>> net =
        VirtualNetwork::Create(options);
    ASSERT_TRUE(net.ok()) << net.status();
    net_ = *std::move(net);
    for (int s = 0; s < Shards(); ++s) {
      const std::string host = absl::StrCat("s", s);
      absl::StatusOr<std::unique_ptr<ReducerdProcess>> server =
          ReducerdProcess::StartPlaced(net_->Placement(host), kServerFlags);
      ASSERT_TRUE(server.ok()) << server.status();
      reducerds_.push_back(*std::move(server));
      EXPECT_EQ(reducerds_.back()->address().rfind(net_->Address(host) + ":", 0),
                0u)
          << reducerds_.back()->address();
    }
  }

  void TearDown() override {
    for (std::unique_ptr<ReducerdProcess>& reducerd : reducerds_) {
      const ProcessResult stopped = reducerd->Stop(absl::Seconds(15));
      EXPECT_TRUE(stopped.Succeeded())
          << "reducerd must drain and exit 0 on SIGTERM\n"
          << stopped.Describe();
    }
    reducerds_.clear();
    net_.reset();  // after every process in it has ended
    FaultTest::TearDown();
  }

  // Every shard's address, in order, comma-separated (ClientOptions::target).
  std::string Target() const {
    std::vector<std::string> addresses;
    for (const auto& reducerd : reducerds_) addresses.push_back(reducerd->address());
    return absl::StrJoin(addresses, ",");
  }

  // Ranks 0..3 of `job`, rank r in host "w<r>", all running `steps`.
  std::vector<std::unique_ptr<ChildProcess>> StartRanks(const std::string& job,
                                                        const std::string& steps) {
    std::vector<std::unique_ptr<ChildProcess>> workers;
    for (int r = 0; r < kWorld; ++r) {
      WorkerSpec spec{job, r, kWorld, steps, Target()};
      spec.command_prefix = net_->CommandPrefix(absl::StrCat("w", r));
      workers.push_back(StartWorker(spec));
    }
    return workers;
  }

  std::unique_ptr<VirtualNetwork> net_;
  std::vector<std::unique_ptr<ReducerdProcess>> reducerds_;  // shard order
};

// S = 2 shards, each in a host of its own.
class NetnsShardsTest : public NetnsE2eTest {
 protected:
  int Shards() const override { return 2; }
};

TEST_F(NetnsE2eTest, AllReducesAcrossHostsMatchTheClosedForm) {
  const std::string steps = absl::StrCat(
      "allreduce:shape=8;"                                    // 1
      "allreduce_inplace:shape=4x3,seed=2;"                   // 2
      "allreduce:shape=16,dtype=int64,op=max,seed=3;"         // 3
      "barrier;"                                              // 4
      "allreduce:shape=", kMediumElements, ",seed=4;"         // 5
      "barrier;"                                              // 6
      "allreduce_inplace:shape=", kMediumElements, ",seed=5;" // 7
      "allreduce_inplace:shape=", kMediumElements / 2,
      ",dtype=float64,op=avg,seed=6");                        // 8
  std::vector<std::unique_ptr<ChildProcess>> workers =
      StartRanks(Job(), steps);
  std::vector<ProcessResult> results = WaitWorkers(workers);
  ASSERT_EQ(results.size(), static_cast<size_t>(kWorld));
  // The 4 MiB all-reduces after a barrier: reducerd must take in 4 x 4 MiB
  // through its one capped link, which bounds each rank's call from below.
  const absl::Duration at_cap = absl::Seconds(
      kWorld * kMediumElements * 4 * 8 / kLinkBitsPerSecond);
  for (int r = 0; r < kWorld; ++r) {
    for (const char* step : {"0", "1", "2", "3", "4", "5", "6", "7", "8"}) {
      ExpectStep(results[r], step, absl::StatusCode::kOk);
    }
    for (const char* step : {"5", "7"}) {
      const StepResult big = Step(results[r], step);
      std::printf("NETNS rank %d step %s: 4 MiB all-reduce in %s (cap "
                  "bound %s)\n",
                  r, step, absl::FormatDuration(big.elapsed).c_str(),
                  absl::FormatDuration(at_cap).c_str());
      EXPECT_GE(big.elapsed, at_cap * 0.8)
          << "rank " << r << " step " << step
          << ": faster than s0's capped link can carry 16 MiB";
    }
  }
}

TEST_F(NetnsE2eTest, CutLinkAbortsEveryOtherRankNamingIt) {
  const std::string job = Job();
  const std::string steps = absl::StrCat(
      "barrier;allreduce_inplace:shape=", kLargeElements,
      ",timeout_ms=60000");
  std::vector<std::unique_ptr<ChildProcess>> workers = StartRanks(job, steps);
  for (int r = 0; r < kWorld; ++r) {
    ASSERT_NE(workers[r], nullptr);
    ASSERT_TRUE(WaitForOutput(*workers[r], "BEGIN 2 "));
  }
  // Well inside the 2.7 s the tensors need to reach reducerd.
  absl::SleepFor(absl::Milliseconds(500));
  const absl::Time cut_at = absl::Now();
  ASSERT_TRUE(net_->SetLinkUp("w3", false).ok());
  for (int r = 0; r < kWorld - 1; ++r) {
    ASSERT_TRUE(WaitForOutput(*workers[r], "RESULT 2 ", absl::Seconds(30)));
    const absl::Duration heard = absl::Now() - cut_at;
    std::printf("NETNS rank %d heard of the cut after %s\n", r,
                absl::FormatDuration(heard).c_str());
    EXPECT_LT(heard, kPromptly) << "rank " << r;
  }
  std::vector<ProcessResult> results = WaitWorkers(workers, absl::Seconds(40));
  ASSERT_EQ(results.size(), static_cast<size_t>(kWorld));
  for (int r = 0; r < kWorld - 1; ++r) {
    ExpectStep(results[r], "1", absl::StatusCode::kOk);
    // Whichever reducerd notices first, the session or the data call of
    // rank 3, the message names the job and rank 3.
    ExpectStep(results[r], "2", absl::StatusCode::kAborted,
               {absl::StrCat("job ", job),
                "rank 3's session was lost || rank 3's call was cancelled"},
               kPromptly + absl::Seconds(3), /*require_check=*/false);
    EXPECT_NE(Step(results[r], "2").check, "bad") << "rank " << r;
  }
  // The cut rank fails too (its peer went silent), and never with a result.
  const StepResult cut = Step(results[3], "2");
  EXPECT_NE(cut.code, absl::StatusCode::kOk) << cut.message;
  EXPECT_NE(cut.check, "bad") << cut.message;
}

// Four ranks on hosts of their own against two shards on hosts of their
// own: collectives below 128 KiB go whole to one shard (a partition is at
// least 64 KiB), those above are cut over both; every result is the closed form, in place and out of place.
TEST_F(NetnsShardsTest, AllReducesOverTwoShardsMatchTheClosedForm) {
  const std::string steps = absl::StrCat(
      "allreduce:shape=8;"                                     // 1
      "allreduce_inplace:shape=4x3,seed=2;"                    // 2
      "allreduce:shape=200000,dtype=int32,op=min,seed=3;"      // 3: 800 KB
      "barrier;"                                               // 4
      "allreduce:shape=", kMediumElements, ",seed=4;"          // 5: 4 MiB
      "allreduce_inplace:shape=", kMediumElements + 3,
      ",dtype=int64,op=max,seed=5;"                            // 6: 8 MiB
      "allreduce:shape=", kMediumElements / 2 + 1,
      ",dtype=float64,op=avg,seed=6;"                          // 7: 4 MiB
      "many:shape=300001,count=3,seed=7;"                      // 8: 3.4 MiB
      "allreduce:shape=16,dtype=int8,op=product,seed=8");      // 9
  std::vector<std::unique_ptr<ChildProcess>> workers = StartRanks(Job(), steps);
  std::vector<ProcessResult> results = WaitWorkers(workers);
  ASSERT_EQ(results.size(), static_cast<size_t>(kWorld));
  for (int r = 0; r < kWorld; ++r) {
    for (const char* step : {"0", "1", "2", "3", "4", "5", "6", "7", "8", "9"}) {
      ExpectStep(results[r], step, absl::StatusCode::kOk);
    }
    for (const char* step : {"5", "6", "7", "8"}) {
      std::printf("NETNS shards rank %d step %s in %s\n", r, step,
                  absl::FormatDuration(Step(results[r], step).elapsed).c_str());
    }
  }
}

}  // namespace
}  // namespace testing
}  // namespace reducer
