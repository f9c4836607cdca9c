// Sharded reducerd: ClientOptions::target naming several reducerd shards
// (client/shards/shard_targets.h), with real processes: three reducerd daemons on
// loopback and W = 4 rank processes.
//
// - Every collective kind (both forms, the async forms, named and by call
//   order, every op x dtype pair, payloads below 128 KiB and from a few
//   hundred KB to several MiB, which client/shards/partition_plan.h cuts over
//   the shards) runs once with one shard and once with three: every result
//   equals the closed form (conformance_worker's check=ok), the digests of
//   the result bytes of the two runs are equal step by step, and with three
//   shards every shard carried payload.
// - Send and Receive around the ring, and ReceiveAny from several senders,
//   over one shard and over two give the same closed-form results, and each
//   of the two shards carries messages.
// - A rank whose shard list differs from the others' (same shards, another
//   order, or one of them alone) fails Connect with FAILED_PRECONDITION
//   naming both lists; a rank with the right list then joins and the job
//   runs.
// - A shard SIGKILLed in the middle of a 64 MiB in-place all-reduce fails
//   that call and the next on every rank within seconds, naming the shard,
//   with every buffer as it was; once the shard is back on its port, a new
//   Connect of every rank reduces exactly.
// - A shard's link to one rank stalled past the client's keepalive watchdog,
//   after the collective's result was decided and the other ranks had
//   theirs, but within the call's deadline: that rank still gets its result
//   (from what the shard kept), so every rank ends the call OK; likewise
//   with the shard's process SIGSTOPped past the replay budget.
// - A rank SIGKILLed while the others wait on a small and a large
//   collective aborts both on every other rank, naming it.
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/retry_sequence.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/fault_test_base.h"
#include "tests/http_get.h"
#include "tests/matchers.h"
#include "tests/process_harness.h"
#include "tests/tcp_proxy.h"

namespace reducer {
namespace testing {
namespace {

using ::testing::AnyOf;

constexpr int kWorld = 4;
constexpr int kShards = 3;

// A failure that must come within seconds, far below the calls' timeouts.
constexpr absl::Duration kPromptly = absl::Seconds(10);

// A shard that is gone is known for gone once its partition's replays have
// had their budget (kReplayBudget: a link that is down may come back): the
// bound for the calls a lost shard fails, still far below their timeouts.
const absl::Duration kAfterReplays = kReplayBudget + absl::Seconds(10);

// The conformance_worker steps both runs share: sizes below the 128 KiB
// that two partitions need (whole collectives, spread by their keys'
// hashes), a few hundred KB (cut over the shards in 64 KiB or more), and of
// several MiB with odd element counts (cut over the shards on element
// boundaries, pieces spanning tensor boundaries for AllReduceMany).
// AddressSanitizer makes the closed forms of the heavy steps take minutes;
// asan builds leave them out (every kind still runs at several MiB).
struct SuiteStep {
  const char* script;
  bool heavy;
};
constexpr SuiteStep kSuiteSteps[] = {
    {"allreduce:bytes=4099", false},  // every op x dtype, both forms, scalars
    {"allreduce:bytes=300001,dtype=int32", false},
    {"allreduce:bytes=3145733,dtype=float32,op=sum", false},
    {"allreduce:bytes=5242885,dtype=bfloat16,op=avg", true},
    {"allreduce:bytes=4194311,dtype=int64,op=max", true},
    {"allreduce:bytes=2097153,dtype=uint8,op=bit_xor", true},
    {"many:bytes=100000", false},
    {"many:bytes=4194304", false},
    {"allgather:bytes=1000", false},
    {"allgather:bytes=2097152,dtype=float32", false},
    {"broadcast:bytes=1000", false},
    {"broadcast:bytes=2097152,dtype=float32", true},
    {"reducescatter:bytes=1000", false},
    {"reducescatter:bytes=3145728,dtype=float32", false},
    {"reducescatter:bytes=3145728", true},
    {"metricsync:bytes=64", false},
    {"barrier", false},
    {"async:bytes=2097152", false},
    {"asynckinds:bytes=1048576", false},
    {"allreduce:bytes=3145733,dtype=float64,op=product,name=n_allreduce", false},
    {"many:bytes=2097152,name=n_many", false},
    {"allgather:bytes=300,name=n_allgather", false},
    {"broadcast:bytes=300,dtype=int64,name=n_broadcast", false},
    {"reducescatter:bytes=2097152,dtype=float16,name=n_reducescatter", false},
    {"async:bytes=1048576,name=n_async", false},
    {"barrier:name=n_barrier", false},
};

// The steps this build runs, in order.
std::vector<std::string> Suite() {
#if defined(__SANITIZE_ADDRESS__)
  constexpr bool kLight = true;
#else
  constexpr bool kLight = false;
#endif
  std::vector<std::string> steps;
  for (const SuiteStep& step : kSuiteSteps) {
    if (!(kLight && step.heavy)) steps.push_back(step.script);
  }
  return steps;
}

// The sum of every sample of metric `name` that reducerd serves on
// `metrics_port`; -1 (with a failure recorded) when it cannot be read.
double MetricTotal(int metrics_port, const std::string& name) {
  absl::StatusOr<double> total = ScrapeSum(metrics_port, name);
  EXPECT_TRUE(total.ok()) << total.status();
  return total.ok() ? *total : -1;
}

// The DIGEST lines of a conformance_worker's stdout, by step index.
std::map<std::string, std::string> Digests(const std::string& stdout_text) {
  std::map<std::string, std::string> digests;
  for (absl::string_view line : absl::StrSplit(stdout_text, '\n')) {
    std::vector<std::string> words = absl::StrSplit(line, ' ');
    if (words.size() == 3 && words[0] == "DIGEST") digests[words[1]] = words[2];
  }
  return digests;
}

class ShardsTest : public FaultTest {
 protected:
  absl::Duration TimeLimit() const override { return absl::Seconds(100); }

  void StartWithRank3sResultHeldBack(
      TcpProxy& proxy, std::vector<std::unique_ptr<ChildProcess>>* workers);

  void SetUp() override {
    FaultTest::SetUp();
    if (HasFatalFailure()) return;
    fault_worker_ = worker_binary_;
    ASSERT_NO_FATAL_FAILURE(
        FindRunfile("tests/conformance_worker", &conformance_worker_));
    for (int s = 0; s < kShards; ++s) {
      absl::StatusOr<std::unique_ptr<ReducerdProcess>> shard =
          ReducerdProcess::Start(kShardFlags);
      ASSERT_TRUE(shard.ok()) << shard.status();
      shards_.push_back(*std::move(shard));
      metrics_ports_.push_back(shards_.back()->MetricsPort());
      ASSERT_NE(metrics_ports_.back(), 0) << shards_.back()->Logs();
    }
  }

  void TearDown() override {
    // Every shard drains at once (each takes a while), one thread each.
    std::vector<ProcessResult> stopped(shards_.size());
    std::vector<std::thread> stopping;
    for (size_t s = 0; s < shards_.size(); ++s) {
      if (shards_[s] == nullptr || killed_[s]) continue;
      stopping.emplace_back([this, s, &stopped] {
        stopped[s] = shards_[s]->Stop(absl::Seconds(10));
      });
    }
    for (std::thread& t : stopping) t.join();
    for (size_t s = 0; s < shards_.size(); ++s) {
      if (shards_[s] == nullptr || killed_[s]) continue;
      EXPECT_TRUE(stopped[s].Succeeded())
          << "shard " << s << " must drain and exit 0 on SIGTERM\n"
          << stopped[s].Describe();
    }
    shards_.clear();
    old_shards_.clear();
    FaultTest::TearDown();
  }

  // The target naming the first `n` shards, in order.
  std::string Target(int n) const {
    std::vector<std::string> addresses;
    for (int s = 0; s < n; ++s) addresses.push_back(shards_[s]->address());
    return absl::StrJoin(addresses, ",");
  }

  // Ranks 0..kWorld-1 of `job` running `binary` with `steps` against
  // `target` (one script for every rank, or one per rank).
  std::vector<std::unique_ptr<ChildProcess>> StartRanks(
      const std::string& binary, const std::string& job,
      const std::string& target, const std::vector<std::string>& steps,
      const std::vector<std::string>& extra_flags = {}) {
    worker_binary_ = binary;
    return StartJob(job, kWorld, steps,
                    std::vector<std::string>(kWorld, target), extra_flags);
  }

  // A TcpProxy in front of shard 1, and ranks of Job() running fault_worker
  // `steps` over gRPC with the proxy's address in shard 1's place in the
  // target. Over gRPC because the faults are injected in the proxy's TCP
  // streams, which the same-host path would go around.
  struct ProxiedRanks {
    std::unique_ptr<TcpProxy> proxy;  // null if it could not start
    std::vector<std::unique_ptr<ChildProcess>> workers;
  };
  // ProxiedRanks whose every rank has connected; a null proxy (and a
  // failure recorded) when that did not happen.
  ProxiedRanks StartRanksWithShard1Proxied(const std::string& steps) {
    ProxiedRanks ranks;
    absl::StatusOr<std::unique_ptr<TcpProxy>> proxy =
        TcpProxy::Start(shards_[1]->port());
    if (!proxy.ok()) {
      ADD_FAILURE() << proxy.status();
      return ranks;
    }
    const std::string target = absl::StrJoin(
        {shards_[0]->address(), (*proxy)->address(), shards_[2]->address()},
        ",");
    ranks.workers = StartRanks(fault_worker_, Job(), target, {steps},
                               {"--shared_memory=off"});
    bool connected = ranks.workers.size() == static_cast<size_t>(kWorld);
    for (auto& w : ranks.workers) {
      connected = connected && w != nullptr &&
                  WaitForOutput(*w, "RESULT 0 connect");
    }
    if (connected) ranks.proxy = *std::move(proxy);
    EXPECT_TRUE(connected) << "not every rank connected";
    return ranks;
  }

  // Every shard's reducer_payload_received_bytes_total.
  std::vector<double> ReceivedBytes() {
    std::vector<double> bytes;
    for (int port : metrics_ports_) {
      bytes.push_back(MetricTotal(port, "reducer_payload_received_bytes_total"));
    }
    return bytes;
  }

  // Waits until every shard reports at least `ranks` ranks connected.
  bool WaitForRanksConnected(int ranks, absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    while (absl::Now() < deadline) {
      bool all = true;
      for (int port : metrics_ports_) {
        all = all && MetricTotal(port, "reducer_ranks_connected") >= ranks;
      }
      if (all) return true;
      absl::SleepFor(absl::Milliseconds(50));
    }
    return false;
  }

  // Runs `steps` (a conformance_worker script) on every rank of `job` over
  // `target` and expects every rank and step exact; returns each rank's
  // digests by step.
  std::vector<std::map<std::string, std::string>> RunExact(
      const std::string& job, const std::string& target,
      const std::vector<std::string>& steps) {
    std::vector<std::unique_ptr<ChildProcess>> workers = StartRanks(
        conformance_worker_, job, target, {absl::StrJoin(steps, ";")});
    std::vector<ProcessResult> results = WaitWorkers(workers);
    EXPECT_EQ(results.size(), static_cast<size_t>(kWorld));
    std::vector<std::map<std::string, std::string>> digests;
    for (size_t r = 0; r < results.size(); ++r) {
      ExpectStep(results[r], "0", absl::StatusCode::kOk);
      for (size_t i = 0; i < steps.size(); ++i) {
        SCOPED_TRACE(
            absl::StrCat(job, " rank ", r, " step ", i + 1, ": ", steps[i]));
        ExpectStep(results[r], absl::StrCat(i + 1), absl::StatusCode::kOk);
      }
      digests.push_back(Digests(results[r].stdout_text));
    }
    return digests;
  }

  // Expects two runs' digests of `steps` (RunExact's) equal, rank by rank
  // and step by step; `differ` says what a difference means.
  static void ExpectSameDigests(
      const std::vector<std::map<std::string, std::string>>& one,
      const std::vector<std::map<std::string, std::string>>& other,
      const std::vector<std::string>& steps, const std::string& differ) {
    ASSERT_EQ(one.size(), static_cast<size_t>(kWorld));
    ASSERT_EQ(other.size(), static_cast<size_t>(kWorld));
    for (int r = 0; r < kWorld; ++r) {
      for (size_t i = 0; i < steps.size(); ++i) {
        const std::string step = absl::StrCat(i + 1);
        SCOPED_TRACE(absl::StrCat("rank ", r, " step ", step, ": ", steps[i]));
        ASSERT_EQ(one[r].count(step), 1u);
        ASSERT_EQ(other[r].count(step), 1u);
        EXPECT_EQ(one[r].at(step), other[r].at(step)) << differ;
      }
    }
  }

  // Fixed 1 MiB chunks (--chunk_time=0): the cuts below are timed against a
  // window of whole chunks still travelling. Paced to the throttled proxy
  // links (about 6 MB/s) a job's chunks would be 128 KiB, and its last
  // results through 100 ms after its last input.
  static inline const std::vector<std::string> kShardFlags = {
      "--metrics_listen=127.0.0.1:0", "--chunk_time=0"};

  std::string fault_worker_;
  std::string conformance_worker_;
  std::vector<std::unique_ptr<ReducerdProcess>> shards_;
  std::vector<int> metrics_ports_;
  bool killed_[kShards] = {};
  // Shards replaced by a restart: kept for their logs, already dead.
  std::vector<std::unique_ptr<ReducerdProcess>> old_shards_;
};

TEST_F(ShardsTest, EveryCollectiveIsBitIdenticalOverOneAndThreeShards) {
  const std::vector<std::string> suite = Suite();
  const std::vector<std::map<std::string, std::string>> one =
      RunExact(Job("one"), Target(1), suite);
  const std::vector<double> after_one = ReceivedBytes();
  const std::vector<std::map<std::string, std::string>> three =
      RunExact(Job("three"), Target(kShards), suite);
  const std::vector<double> after_three = ReceivedBytes();
  ASSERT_NO_FATAL_FAILURE(ExpectSameDigests(
      one, three, suite,
      "the results over three shards differ from those over one"));
  // One shard: shard 0 carried everything. Three: each shard carried a
  // share of the multi-MiB payloads (each rank sends every shard ~10 MiB
  // of them, 4 MiB at the very least).
  EXPECT_GT(after_one[0], 0);
  EXPECT_EQ(after_one[1], 0);
  EXPECT_EQ(after_one[2], 0);
  for (int s = 0; s < kShards; ++s) {
    const double carried = after_three[s] - after_one[s];
    std::printf("SHARDS shard %d received %.1f MiB over three shards\n", s,
                carried / (1 << 20));
    EXPECT_GT(carried, kWorld * 4.0 * (1 << 20))
        << "shard " << s << " carried too little of the three-shard run";
  }
}

// Reduce, Gather and Scatter from every root, AllToAll, and AllToAllV over
// groups of 2, 3 and 4 ranks, over two shards, small and of several MiB (a
// Reduce of 2 MiB is cut over both shards, each part a Reduce with the same
// root; the others go whole to one shard): every result equals the closed
// form.
TEST_F(ShardsTest, RootedKindsAndAllToAllAreExactOverTwoShards) {
  const std::vector<std::string> steps = {
      "reduce:bytes=1000",
      "reduce:bytes=2097152,dtype=float32,op=sum",
      "gather:bytes=1000",
      "gather:bytes=1048576,dtype=float32",
      "scatter:bytes=1000",
      "scatter:bytes=2097152,dtype=float32",
      "alltoall:bytes=1000",
      "alltoall:bytes=2097152,dtype=float32",
      "reduce:bytes=300,name=n_reduce",
      "alltoall:bytes=300,name=n_alltoall",
      "alltoallv:bytes=1000",
      "alltoallv:bytes=700000",
      "alltoallv:bytes=300,name=n_alltoallv"};
  RunExact(Job(), Target(2), steps);
}

// Send and Receive around the ring (conformance_worker's sendreceive: both
// orders, interleaved tags, in place, async), and ReceiveAny from several
// senders mixed with Receive (its receiveany), small and of several MiB,
// over one shard and then two: every result equals the closed form, the
// digests of the two runs are equal step by step, and each message going
// whole to the shard its destination and tag hash to, both shards carried
// some.
TEST_F(ShardsTest, SendReceiveIsBitIdenticalOverOneAndTwoShards) {
  const std::vector<std::string> steps = {
      "sendreceive:bytes=1000", "sendreceive:bytes=2097153",
      "receiveany:bytes=1000", "receiveany:bytes=1048577"};
  const std::vector<double> before = ReceivedBytes();
  const std::vector<std::map<std::string, std::string>> one =
      RunExact(Job("one"), Target(1), steps);
  const std::vector<double> after_one = ReceivedBytes();
  const std::vector<std::map<std::string, std::string>> two =
      RunExact(Job("two"), Target(2), steps);
  const std::vector<double> after_two = ReceivedBytes();
  ASSERT_NO_FATAL_FAILURE(ExpectSameDigests(
      one, two, steps,
      "the messages received over two shards differ from those over one"));
  EXPECT_GT(after_one[0] - before[0], 0);
  EXPECT_EQ(after_one[1] - before[1], 0) << "one shard: shard 1 carried bytes";
  for (int s = 0; s < 2; ++s) {
    EXPECT_GT(after_two[s] - after_one[s], 0)
        << "shard " << s << " carried no message of the two-shard run";
  }
}

// Ranks 0-2 name the shards A,B,C; rank 3 names B,A,C, then A alone. Once
// ranks 0-2 have joined every shard, each of rank 3's Connects fails naming
// both lists; then rank 3 with A,B,C joins, and the job reduces.
TEST_F(ShardsTest, RankWithAnotherShardListFailsToConnectNamingBoth) {
  const std::string right = Target(kShards);
  const std::string wrong = absl::StrJoin(
      {shards_[1]->address(), shards_[0]->address(), shards_[2]->address()}, ",");
  const std::string job = Job();
  const std::string steps =
      "allreduce:shape=786433,seed=3,timeout_ms=30000;"
      "allreduce:shape=8,seed=4,timeout_ms=30000";
  worker_binary_ = fault_worker_;
  std::vector<std::unique_ptr<ChildProcess>> workers;
  for (int r = 0; r + 1 < kWorld; ++r) {
    WorkerSpec spec;
    spec.job = job;
    spec.rank = r;
    spec.world_size = kWorld;
    spec.steps = steps;
    spec.target = right;
    workers.push_back(StartWorker(spec));
  }
  ASSERT_TRUE(WaitForRanksConnected(kWorld - 1, absl::Seconds(30)))
      << "ranks 0-2 did not join every shard";
  WorkerSpec odd;
  odd.job = job;
  odd.rank = kWorld - 1;
  odd.world_size = kWorld;
  odd.steps = steps;
  odd.target = wrong;
  // Another order of the same shards, then shard 0 alone (one shard never
  // meets a list of several).
  const std::string alone = shards_[0]->address();
  for (const std::string& list : {wrong, alone}) {
    odd.target = list;
    odd.name = absl::StrCat(job, ".rank3.", list == alone ? "one" : "other_order");
    std::unique_ptr<ChildProcess> refused = StartWorker(odd);
    ASSERT_NE(refused, nullptr);
    const ProcessResult refused_result = refused->Wait(absl::Seconds(30));
    ASSERT_TRUE(refused_result.Succeeded()) << refused_result.Describe();
    std::printf("SHARDS %s: %s\n", refused_result.name.c_str(),
                refused_result.stdout_text.c_str());
    SCOPED_TRACE(refused_result.name);
    ExpectStep(refused_result, "0", absl::StatusCode::kFailedPrecondition,
               {absl::StrCat("[", list, "]"), absl::StrCat("[", right, "]")},
               kPromptly);
  }

  odd.target = right;
  odd.name = absl::StrCat(job, ".rank3.same_list");
  workers.push_back(StartWorker(odd));
  std::vector<ProcessResult> results = WaitWorkers(workers);
  ASSERT_EQ(results.size(), static_cast<size_t>(kWorld));
  for (const ProcessResult& r : results) {
    for (const char* step : {"0", "1", "2"}) {
      ExpectStep(r, step, absl::StatusCode::kOk);
    }
  }
}

// Shard 1 sits behind a throttled TcpProxy (its address in the list is the
// proxy's), so that its partition of the 64 MiB all-reduce is still on the
// wire when it is SIGKILLed. Every rank's two calls (the pending one, once
// its partition's replays have given up, and the next) fail naming the lost
// shard's address.
TEST_F(ShardsTest, ShardKilledMidAllReduceFailsEveryRankThenConnectWorks) {
  const std::string steps =
      "allreduce_inplace:shape=16777216,timeout_ms=60000;"  // 64 MiB float32
      "allreduce:shape=8,seed=2,timeout_ms=60000;"
      "wait_file:path=restarted;"
      "reconnect:timeout_ms=30000,attempts=20;"
      "allreduce_inplace:shape=1572865,seed=5,timeout_ms=30000;"
      "allreduce:shape=8,seed=6,timeout_ms=30000";
  ProxiedRanks ranks = StartRanksWithShard1Proxied(steps);
  ASSERT_NE(ranks.proxy, nullptr);
  TcpProxy& proxy = *ranks.proxy;
  std::vector<std::unique_ptr<ChildProcess>>& workers = ranks.workers;
  const std::string lost = proxy.address();
  proxy.SetDelay(absl::Milliseconds(10), 64 << 10);  // ~6 MB/s a link
  for (auto& w : workers) ASSERT_TRUE(WaitForOutput(*w, "BEGIN 1 "));
  // 4 MiB of the ~84 MiB the ranks send shard 1 have passed.
  ASSERT_TRUE(proxy.WaitForBytesForwarded(TcpProxy::kUpstream, uint64_t{4} << 20,
                                          absl::Seconds(30)))
      << "the all-reduce never reached shard 1";
  const absl::Time killed_at = absl::Now();
  shards_[1]->Kill();
  killed_[1] = true;
  // The kernel resets a killed process's connections at once; the proxy
  // would let its throttled queues drain first, so it resets them too.
  proxy.DropAll();
  for (auto& w : workers) {
    ASSERT_TRUE(WaitForOutput(*w, "RESULT 2 ", absl::Seconds(30)));
  }
  const absl::Duration heard = absl::Now() - killed_at;
  std::printf("SHARDS every rank failed both calls %s after the kill\n",
              absl::FormatDuration(heard).c_str());
  EXPECT_LT(heard, kAfterReplays)
      << "every rank should learn of the loss once its replays gave up";

  proxy.SetDelay(absl::ZeroDuration());
  absl::StatusOr<std::unique_ptr<ReducerdProcess>> back =
      ReducerdProcess::StartOnPort(shards_[1]->port(), kShardFlags);
  ASSERT_TRUE(back.ok()) << back.status();
  old_shards_.push_back(std::move(shards_[1]));
  shards_[1] = *std::move(back);
  killed_[1] = false;
  Touch("restarted");

  std::vector<ProcessResult> results = WaitWorkers(workers);
  ASSERT_EQ(results.size(), static_cast<size_t>(kWorld));
  for (const ProcessResult& r : results) {
    for (const char* step : {"1", "2"}) {
      SCOPED_TRACE(absl::StrCat(r.name, " step ", step));
      const StepResult s = Step(r, step);
      EXPECT_THAT(s.code, AnyOf(absl::StatusCode::kUnavailable,
                                absl::StatusCode::kAborted))
          << s.message;
      EXPECT_THAT(s.message, HasSubstr(lost)) << "the lost shard is not named";
      // check=bad: the in-place buffer changed although the call failed.
      EXPECT_NE(s.check, "bad") << s.message;
    }
    // Step 1's time counts the throttled transfer before the kill too;
    // `heard` bounds it from the kill. The next call fails at once.
    EXPECT_LT(Step(r, "2").elapsed, kPromptly);
    for (const char* step : {"4", "5", "6"}) {
      ExpectStep(r, step, absl::StatusCode::kOk);
    }
  }
}

// Shard 1 sits behind a throttled TcpProxy, which cuts every connection
// once all of a 12 MiB in-place all-reduce's inputs (partitioned over the
// three shards) have reached shard 1 (its result is decided there) while
// its results still travel. Each rank's partition on shard 1 asks for its result again, on
// a new connection, and gets all of it from what shard 1 kept, without its
// contribution being sent again: every rank's buffer holds the exact sum,
// although the cut also ended every rank's session with shard 1 (the
// next call says so).
TEST_F(ShardsTest, APartitionsLostAnswerIsSentAgainAndTheWholeIsExact) {
  const std::string steps =
      "wait_file:path=go;"
      "allreduce_inplace:shape=3145728,seed=3,timeout_ms=60000;"  // 12 MiB
      "allreduce:shape=8,seed=4,timeout_ms=60000";
  ProxiedRanks ranks = StartRanksWithShard1Proxied(steps);
  ASSERT_NE(ranks.proxy, nullptr);
  TcpProxy& proxy = *ranks.proxy;
  std::vector<std::unique_ptr<ChildProcess>>& workers = ranks.workers;
  const uint64_t up_before = proxy.BytesForwarded(TcpProxy::kUpstream);
  proxy.SetDelay(absl::Milliseconds(10), 64 << 10);  // ~6 MB/s a link
  Touch("go");
  // Every rank's 4 MiB partition is in (shard 1's result is decided) while
  // its results, held back by the throttle and the window, still travel.
  const uint64_t inputs = uint64_t{kWorld} * (4u << 20);
  ASSERT_TRUE(proxy.WaitForBytesForwarded(TcpProxy::kUpstream,
                                          up_before + inputs, absl::Seconds(40)))
      << "the partitions never reached shard 1";
  absl::SleepFor(absl::Milliseconds(100));  // the last chunk is reduced
  proxy.DropAll();
  proxy.SetDelay(absl::ZeroDuration());
  std::vector<ProcessResult> results = WaitWorkers(workers);
  ASSERT_EQ(results.size(), static_cast<size_t>(kWorld));
  for (const ProcessResult& r : results) {
    ExpectStep(r, "2", absl::StatusCode::kOk);
    // The cut took the sessions too: the next call says so.
    ExpectStep(r, "3", absl::StatusCode::kUnavailable,
               {"lost the session with reducerd at " + proxy.address()});
  }
  const std::string log = shards_[1]->Stderr();
  EXPECT_THAT(log, AnyOf(HasSubstr("sent again from what was kept"),
                         HasSubstr("asked again for its result")));
  EXPECT_THAT(log, Not(HasSubstr("retried a contribution")));
}

// The start both stalled-shard tests share: kWorld ranks, shard 1 behind
// `proxy`, a 12 MiB in-place all-reduce then a small one (60 s deadlines).
// Returns once rank 3's partition is in at shard 1 and its result is held
// back on its link (the others get theirs).
void ShardsTest::StartWithRank3sResultHeldBack(
    TcpProxy& proxy, std::vector<std::unique_ptr<ChildProcess>>* workers) {
  const std::string target = absl::StrJoin(
      {shards_[0]->address(), proxy.address(), shards_[2]->address()}, ",");
  const std::string job = Job();
  worker_binary_ = fault_worker_;
  for (int r = 0; r < kWorld; ++r) {
    WorkerSpec spec;
    spec.job = job;
    spec.rank = r;
    spec.world_size = kWorld;
    spec.steps = absl::StrCat(
        "wait_file:path=", r + 1 < kWorld ? "go" : "go_last",
        ";allreduce_inplace:shape=3145728,seed=3,timeout_ms=60000;"  // 12 MiB
        "allreduce:shape=8,seed=4,timeout_ms=60000");
    spec.target = target;
    spec.extra_flags = {"--shared_memory=off"};
    workers->push_back(StartWorker(spec));
    ASSERT_NE(workers->back(), nullptr);
    ASSERT_TRUE(proxy.WaitForConnections(r + 1, absl::Seconds(30)));
  }
  for (auto& w : *workers) ASSERT_TRUE(WaitForOutput(*w, "RESULT 0 connect"));
  ASSERT_EQ(proxy.num_connections(), kWorld) << "one session each";
  proxy.SetDelay(absl::Milliseconds(10), 64 << 10);  // ~6 MB/s a link
  Touch("go");
  ASSERT_TRUE(proxy.WaitForConnections(2 * kWorld - 1, absl::Seconds(30)));
  Touch("go_last");
  ASSERT_TRUE(proxy.WaitForConnections(2 * kWorld, absl::Seconds(30)));
  const int last_data = 2 * kWorld - 1;
  ASSERT_TRUE(proxy.WaitForBytes(last_data, TcpProxy::kUpstream, 4u << 20,
                                 absl::Seconds(40)))
      << "rank 3's partition never reached shard 1";
  // Its last input bytes still travel: its result cannot have passed yet.
  // Held from now on; the inputs end and the result is decided.
  proxy.Pause(last_data, TcpProxy::kDownstream);
}

// Every rank reaches shard 1 through a throttled TcpProxy; ranks 0-2 start
// first, so that rank 3's session is connection 3 and its collectives'
// connection the last to open. Once rank 3's partition of a 12 MiB
// in-place all-reduce is in (shard 1's result is decided; the others get
// theirs), both of rank 3's connections stall, then every connection, open
// or new, for longer than the client's keepalive watchdog (about 3 s, which
// ends rank 3's session with shard 1 while its result is on the way) but
// less than the call's deadline. All or nothing: rank 3 asks shard 1 for its
// result again until it answers, and every rank ends the call OK with the
// exact sum; rank 3's next call reports the lost session.
TEST_F(ShardsTest, AStalledShardLinkWithinTheDeadlineLeavesEveryRankOk) {
  absl::StatusOr<std::unique_ptr<TcpProxy>> started =
      TcpProxy::Start(shards_[1]->port());
  ASSERT_TRUE(started.ok()) << started.status();
  TcpProxy& proxy = **started;
  std::vector<std::unique_ptr<ChildProcess>> workers;
  StartWithRank3sResultHeldBack(proxy, &workers);
  if (HasFatalFailure()) return;
  const int last_session = kWorld - 1;
  const int last_data = 2 * kWorld - 1;
  absl::SleepFor(absl::Milliseconds(300));
  proxy.Pause(last_session, TcpProxy::kBoth);
  proxy.Pause(last_data, TcpProxy::kBoth);
  for (int r = 0; r + 1 < kWorld; ++r) {
    EXPECT_TRUE(WaitForOutput(*workers[r], "RESULT 2 ", absl::Seconds(30)));
  }
  proxy.PauseAll();
  absl::SleepFor(absl::Seconds(6));  // twice the keepalive watchdog
  proxy.SetDelay(absl::ZeroDuration());
  proxy.ResumeAll();
  std::vector<ProcessResult> results = WaitWorkers(workers);
  ASSERT_EQ(results.size(), static_cast<size_t>(kWorld));
  for (const ProcessResult& r : results) {
    SCOPED_TRACE(r.name);
    ExpectStep(r, "2", absl::StatusCode::kOk);
  }
  // The stall did end rank 3's session with shard 1 (by the watchdog): its
  // next call says so.
  ExpectStep(results[kWorld - 1], "3", absl::StatusCode::kUnavailable,
             {"lost the session with reducerd at " + proxy.address(),
              "keepalive watchdog timeout"});
}

// As above, but once ranks 0-2 have their result (rank 3's held back on
// its link), shard 1's process is SIGSTOPped for 14 s (kReplayBudget + 4 s): longer than a lost
// session's replay budget (kReplayBudget), less than the call's deadline.
// Rank 3's watchdog ends its session; its replays wait on the stopped shard
// and, once it runs again, get the result it kept: every rank ends OK.
TEST_F(ShardsTest,
       AShardStoppedPastTheReplayBudgetWithinTheDeadlineLeavesEveryRankOk) {
  absl::StatusOr<std::unique_ptr<TcpProxy>> started =
      TcpProxy::Start(shards_[1]->port());
  ASSERT_TRUE(started.ok()) << started.status();
  TcpProxy& proxy = **started;
  std::vector<std::unique_ptr<ChildProcess>> workers;
  StartWithRank3sResultHeldBack(proxy, &workers);
  if (HasFatalFailure()) return;
  const int last_data = 2 * kWorld - 1;
  for (int r = 0; r + 1 < kWorld; ++r) {
    EXPECT_TRUE(WaitForOutput(*workers[r], "RESULT 2 ", absl::Seconds(30)));
  }
  kill(shards_[1]->pid(), SIGSTOP);
  proxy.SetDelay(absl::ZeroDuration());
  proxy.Resume(last_data, TcpProxy::kDownstream);
  absl::SleepFor(kReplayBudget + absl::Seconds(4));
  kill(shards_[1]->pid(), SIGCONT);
  std::vector<ProcessResult> results = WaitWorkers(workers);
  ASSERT_EQ(results.size(), static_cast<size_t>(kWorld));
  for (const ProcessResult& r : results) {
    SCOPED_TRACE(r.name);
    ExpectStep(r, "2", absl::StatusCode::kOk);
  }
  // The stall did end rank 3's session with shard 1 (by the watchdog): its
  // next call says so.
  ExpectStep(results[kWorld - 1], "3", absl::StatusCode::kUnavailable,
             {"lost the session with reducerd at " + proxy.address(),
              "keepalive watchdog timeout"});
}

// Ranks 0-2 wait in a small and a large (partitioned) all-reduce when rank
// 3's process is SIGKILLed: both fail ABORTED naming rank 3, promptly.
TEST_F(ShardsTest, KilledRankAbortsTheOthersNamingIt) {
  const std::string waiting =
      "async_allreduce:name=k_small,shape=16,timeout_ms=60000;"
      "async_allreduce_inplace:name=k_large,shape=1572864,timeout_ms=60000;"
      "join";
  std::vector<std::unique_ptr<ChildProcess>> workers =
      StartRanks(fault_worker_, Job(), Target(kShards),
                 {waiting, waiting, waiting, "hang"});
  ASSERT_EQ(workers.size(), static_cast<size_t>(kWorld));
  ASSERT_NO_FATAL_FAILURE(KillLastRankDuringTwoSteps(&workers, kPromptly));
  ExpectTwoStepsAbortedNaming(workers, "rank 3", kPromptly,
                              /*require_check=*/false);
}

}  // namespace
}  // namespace testing
}  // namespace reducer
