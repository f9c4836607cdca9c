// The conformance suite: one set of contract checks, written once and run
// against every way a collective can travel, as tensorstore's
// TestKeyValueReadWriteOps holds every key-value driver to one contract.
//
// There are three client transports, the suite's parameter:
//   default        over gRPC (REDUCER_SHARED_MEMORY=off): a collective whose
//                  payload fits one chunk goes on the shared Collectives
//                  stream (reducerd's CollectivesReactor), a larger one on a
//                  Collective stream of its own (CollectiveReactor);
//   per_call       also REDUCER_CLIENT_TRANSPORT=per_call: every collective
//                  on a stream of its own;
//   shared_memory  REDUCER_SHARED_MEMORY=required: the same-host path
//                  (docs/same_host.md), no collective over gRPC at all;
// so every server transport is held to the same contract. The suite's
// second parameter is the route: directly to one reducerd, or through
// node-local relays (reducerd --upstream) as a rank of a multi-host job
// goes, over one shard (one relay holding all four ranks,
// local_world_size 0) and over two shards (two relays of two ranks each,
// local_world_size 2), on the default transport. Every case
// starts one reducerd (--chunk_bytes=64 KiB, so that several chunks stay
// cheap) and four real rank processes with the parameter's environment, and
// ends by reading the gRPC metrics of the reducerds the ranks reach (the
// relays when there are) to prove which stream kinds
// carried the case (per_call: never the Collectives stream; shared_memory:
// neither).
//
// The checks: every collective kind (Reduce, Gather and Scatter from every
// root; AllToAllV over groups of 2, 3 and 4; ReceiveAny from several
// senders) out of place and in place at 0 bytes,
// one element, exactly one chunk, one chunk + 1 byte and several chunks,
// bit-identical to the closed form (conformance_worker); a mismatch of
// shape, dtype or op fails every rank with FAILED_PRECONDITION naming both
// ranks and leaves in-place buffers as they were; a missing rank gives
// DEADLINE_EXCEEDED naming it; a rank SIGKILLed mid-call gives ABORTED on
// the others; named collectives match whatever order ranks call them in
// (fault_worker scripts).
#include <stdlib.h>

#include <csignal>
#include <cstdlib>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
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

constexpr int kWorldSize = 4;

// reducerd's --chunk_bytes here: small, so that "several chunks" is cheap.
constexpr int64_t kChunk = 64 * 1024;

// The payload sizes every result check runs at (bytes per rank, rounded up
// to whole elements): empty, one element, exactly one chunk (the largest
// payload the shared stream carries), one byte more, and several chunks
// with a partial last one.
struct Size {
  const char* label;
  int64_t bytes;
};
constexpr Size kSizes[] = {{"empty", 0},
                           {"one element", 1},
                           {"one chunk", kChunk},
                           {"one chunk + 1 byte", kChunk + 1},
                           {"several chunks", 3 * kChunk + 5}};

// Float32 elements in exactly one chunk, and one element more.
constexpr int64_t kChunkFloats = kChunk / 4;

// A failure that must come long before the collective's timeout.
constexpr absl::Duration kFast = absl::Seconds(10);

enum class Transport { kDefault, kPerCall, kSharedMemory };

std::string TransportName(Transport t) {
  switch (t) {
    case Transport::kPerCall:
      return "per_call";
    case Transport::kSharedMemory:
      return "shared_memory";
    default:
      return "default";
  }
}

// How the ranks reach the shards: directly (relays == 0), or through
// `relays` relays, each holding kWorldSize / relays consecutive ranks, over
// `shards` shards.
struct Route {
  Transport transport;
  int relays = 0;
  int shards = 1;
};

std::string RouteName(const Route& route) {
  if (route.relays == 0) return TransportName(route.transport);
  return absl::StrCat(TransportName(route.transport), "_", route.relays,
                      "_relays_", route.shards, "_shards");
}

void PrintTo(const Route& route, std::ostream* os) { *os << RouteName(route); }

// "rank 0 sent X || rank 1 sent X || ...": the agreeing rank the server
// compared with may be any of ranks 0..2, whichever arrived first.
std::string AnyAgreeingRankSent(const std::string& what) {
  std::vector<std::string> alternatives;
  for (int r = 0; r + 1 < kWorldSize; ++r) {
    alternatives.push_back(absl::StrCat("rank ", r, " sent ", what));
  }
  return absl::StrJoin(alternatives, " || ");
}

// `message` without the sharded client's "reducerd shard I of S at ADDR
// (partition P of S): " that says which shard it came from.
std::string WithoutShardPrefix(const std::string& message) {
  if (!absl::StartsWith(message, "reducerd shard ")) return message;
  const size_t end = message.find(": ");
  return end == std::string::npos ? message : message.substr(end + 2);
}

class ConformanceTest : public FaultTest,
                        public ::testing::WithParamInterface<Route> {
 protected:
  absl::Duration TimeLimit() const override { return absl::Seconds(90); }

  void SetUp() override {
    // The rank processes inherit the test's environment (ChildProcess
    // execs with it); set before FaultTest starts its watchdog thread.
    if (transport() == Transport::kPerCall) {
      setenv("REDUCER_CLIENT_TRANSPORT", "per_call", 1);
    } else {
      unsetenv("REDUCER_CLIENT_TRANSPORT");
    }
    setenv("REDUCER_SHARED_MEMORY",
           transport() == Transport::kSharedMemory ? "required" : "off", 1);
    FaultTest::SetUp();
    if (HasFatalFailure()) return;
    fault_worker_ = worker_binary_;
    ASSERT_NO_FATAL_FAILURE(
        FindRunfile("tests/conformance_worker", &conformance_worker_));
    ASSERT_TRUE(StartServer({absl::StrCat("--chunk_bytes=", kChunk),
                             "--metrics_listen=127.0.0.1:0"}));
    if (GetParam().relays == 0) {
      metrics_ports_.push_back(server()->MetricsPort());
      ASSERT_NE(metrics_ports_.back(), 0) << server()->Logs();
      return;
    }
    ASSERT_NO_FATAL_FAILURE(StartRelays());
  }

  // The other shards and the relays; the ranks' targets and flags.
  void StartRelays() {
    const Route& route = GetParam();
    std::vector<std::string> shards = {server()->address()};
    for (int s = 1; s < route.shards; ++s) {
      absl::StatusOr<std::unique_ptr<ReducerdProcess>> shard =
          ReducerdProcess::Start({absl::StrCat("--chunk_bytes=", kChunk)});
      ASSERT_TRUE(shard.ok()) << shard.status();
      shards.push_back((*shard)->address());
      other_shards_.push_back(*std::move(shard));
    }
    const int ranks_per_relay = kWorldSize / route.relays;
    for (int i = 0; i < route.relays; ++i) {
      absl::StatusOr<std::unique_ptr<ReducerdProcess>> relay =
          ReducerdProcess::Start(
              {absl::StrCat("--upstream=", absl::StrJoin(shards, ",")),
               absl::StrCat("--chunk_bytes=", kChunk),
               "--metrics_listen=127.0.0.1:0"});
      ASSERT_TRUE(relay.ok()) << relay.status();
      metrics_ports_.push_back((*relay)->MetricsPort());
      ASSERT_NE(metrics_ports_.back(), 0) << (*relay)->Logs();
      for (int r = 0; r < ranks_per_relay; ++r) {
        targets_.push_back((*relay)->address());
      }
      relays_.push_back(*std::move(relay));
    }
    if (route.relays > 1) {
      worker_flags_.push_back(
          absl::StrCat("--local_world_size=", ranks_per_relay));
    }
  }

  Transport transport() const { return GetParam().transport; }

  void TearDown() override {
    FaultTest::TearDown();
    relays_.clear();
    other_shards_.clear();
    unsetenv("REDUCER_CLIENT_TRANSPORT");
    unsetenv("REDUCER_SHARED_MEMORY");
  }

  // Runs conformance_worker `verb` at every size of kSizes on all ranks and
  // expects every step exact.
  void RunAtEverySize(const std::string& verb) {
    std::vector<std::string> steps;
    for (const Size& size : kSizes) {
      steps.push_back(absl::StrCat(verb, ":bytes=", size.bytes));
    }
    RunChecks(absl::StrJoin(steps, ";"), steps.size(), [&](size_t i) {
      return absl::StrCat(verb, " at ", kSizes[i].label, " (", kSizes[i].bytes,
                          " bytes)");
    });
    ExpectStreamsUsed(/*small=*/true, /*large=*/true);
  }

  // Runs `script` (of `count` conformance_worker steps) on every rank and
  // expects each step OK and exact; `label(i)` names step i + 1.
  template <typename Label>
  void RunChecks(const std::string& script, size_t count, Label label) {
    worker_binary_ = conformance_worker_;
    std::vector<std::unique_ptr<ChildProcess>> workers =
        StartJob(Job(), kWorldSize, {script}, targets_, worker_flags_);
    std::vector<ProcessResult> results = WaitWorkers(workers);
    ASSERT_EQ(results.size(), static_cast<size_t>(kWorldSize));
    for (int r = 0; r < kWorldSize; ++r) {
      ExpectStep(results[r], "0", absl::StatusCode::kOk);
      for (size_t i = 0; i < count; ++i) {
        SCOPED_TRACE(absl::StrCat(label(i), ", rank ", r));
        ExpectStep(results[r], absl::StrCat(i + 1), absl::StatusCode::kOk);
      }
    }
  }

  // Starts ranks running fault_worker scripts (one per rank).
  std::vector<std::unique_ptr<ChildProcess>> StartScripts(
      const std::vector<std::string>& scripts) {
    worker_binary_ = fault_worker_;
    return StartJob(Job(), kWorldSize, scripts, targets_, worker_flags_);
  }

  // The value of the gRPC server metric `name` for Reducer method `method`,
  // summed over the reducerds the ranks reach.
  double MethodMetric(const std::string& name, const std::string& method) {
    double sum = 0;
    for (int port : metrics_ports_) {
      absl::StatusOr<double> total =
          ScrapeSum(port, name, [&](const Sample& s) {
            auto it = s.labels.find("grpc_method");
            return it != s.labels.end() && it->second == method;
          });
      EXPECT_TRUE(total.ok()) << total.status();
      if (!total.ok()) return -1;
      sum += *total;
    }
    return sum;
  }

  // Proves the parameter reached the ranks: per_call never opens the shared
  // Collectives stream and opens Collective streams; default opens the
  // shared stream when the case had `small` payloads (one chunk or less)
  // and Collective streams exactly when it had `large` ones.
  void ExpectStreamsUsed(bool small, bool large) {
    const double shared =
        MethodMetric("grpc_server_started_total", "Collectives");
    const double per_call =
        MethodMetric("grpc_server_started_total", "Collective");
    SCOPED_TRACE(absl::StrCat("route ", RouteName(GetParam()),
                              ": Collectives streams ", shared,
                              ", Collective streams ", per_call));
    if (transport() == Transport::kPerCall) {
      EXPECT_EQ(shared, 0) << "a per_call rank used the shared stream";
      EXPECT_GT(per_call, 0);
      return;
    }
    if (transport() == Transport::kSharedMemory) {
      EXPECT_EQ(shared + per_call, 0)
          << "a collective went over gRPC although shared memory was required";
      return;
    }
    if (small) {
      EXPECT_GT(shared, 0);
    }
    if (large) {
      EXPECT_GT(per_call, 0);
    } else {
      EXPECT_EQ(per_call, 0) << "a small payload went on a stream of its own";
    }
  }

  std::string fault_worker_;
  std::string conformance_worker_;
  // The metrics ports of the reducerds the ranks reach: the server, or
  // the relays.
  std::vector<int> metrics_ports_;
  // Empty when the ranks reach the server; else the relay of each rank and
  // the ranks' --local_world_size.
  std::vector<std::string> targets_;
  std::vector<std::string> worker_flags_;
  std::vector<std::unique_ptr<ReducerdProcess>> relays_;
  std::vector<std::unique_ptr<ReducerdProcess>> other_shards_;
};

// -------------------------------------------------------------------------
// Results: every kind, out of place and in place, at every size.

TEST_P(ConformanceTest, AllReduceEveryOpAndDtypeIsExactInBothForms) {
  RunAtEverySize("allreduce");
}

TEST_P(ConformanceTest, AllReduceManyIsExact) { RunAtEverySize("many"); }

TEST_P(ConformanceTest, AllGatherConcatenatesUnevenDim0) {
  RunAtEverySize("allgather");
}

TEST_P(ConformanceTest, BroadcastFromEveryRootWithAndWithoutViews) {
  RunAtEverySize("broadcast");
}

TEST_P(ConformanceTest, ReduceScatterGivesEachRankItsSlice) {
  RunAtEverySize("reducescatter");
}

TEST_P(ConformanceTest, MetricSyncReducesOutOfPlaceAndInPlace) {
  RunAtEverySize("metricsync");
}

TEST_P(ConformanceTest, ReduceToEveryRootOutOfPlaceAndInPlace) {
  RunAtEverySize("reduce");
}

TEST_P(ConformanceTest, GatherToEveryRootConcatenatesUnevenDim0) {
  RunAtEverySize("gather");
}

TEST_P(ConformanceTest, ScatterFromEveryRootGivesEachRankItsPart) {
  RunAtEverySize("scatter");
}

TEST_P(ConformanceTest, AllToAllGivesEachRankItsPartOfEveryRank) {
  RunAtEverySize("alltoall");
}

// AllReduceManyAsync, AllGatherAsync, BroadcastAsync, ReduceScatterAsync
// and BarrierAsync all in flight at once, waited for in reverse order; then
// ReduceAsync, GatherAsync, ScatterAsync and AllToAllAsync likewise.
TEST_P(ConformanceTest, AsyncFormOfEveryKindIsExact) {
  RunAtEverySize("asynckinds");
}

// Point to point around the ring, both orders, tags interleaved, in place
// and async (conformance_worker's sendreceive).
TEST_P(ConformanceTest, SendReceiveRingMatchesByTagInCallOrder) {
  RunAtEverySize("sendreceive");
}

// Uneven all-to-all over groups of 2, 3 and 4 ranks, rows of zero for a
// quarter of the pairs, blocking, with the expected rows and async, then an
// exchange of nothing (conformance_worker's alltoallv).
TEST_P(ConformanceTest, AllToAllVGivesEachRankTheRowsSentToIt) {
  RunAtEverySize("alltoallv");
}

// ReceiveAny from three senders: each message once, from the source it
// names, in its source's order; ReceiveAny then Receive from that source;
// ReceiveAnyAsync with a ReceiveAsync started while they are unanswered
// (conformance_worker's receiveany).
TEST_P(ConformanceTest, ReceiveAnyTakesEachMessageOnceNamingItsSource) {
  RunAtEverySize("receiveany");
}

TEST_P(ConformanceTest, BarrierWaitsForEveryRank) {
  RunChecks("barrier;barrier;barrier", 3,
            [](size_t i) { return absl::StrCat("barrier ", i + 1); });
  ExpectStreamsUsed(/*small=*/true, /*large=*/false);
}

// -------------------------------------------------------------------------
// Errors.

// Rank 3 disagrees in one field per step; steps are named, so that each
// matches across ranks whatever the failures did to call order. In-place
// steps also check (fault_worker's check=bad) that the buffer kept its
// bytes. The first step's payloads straddle the chunk boundary: on the
// default transport ranks 0-2 use the shared stream and rank 3 its own.
TEST_P(ConformanceTest, MismatchFailsEveryRankNamingBothAndKeepsBuffers) {
  const std::string tail = ",timeout_ms=30000";
  const std::string agree = absl::StrCat(
      "allreduce_inplace:name=m_shape,shape=", kChunkFloats, tail,
      ";allreduce_inplace:name=m_dtype,shape=4x3", tail,
      ";allreduce:name=m_op,shape=50000,op=sum", tail,
      ";broadcast_inplace:name=m_bshape,shape=7,root=0", tail,
      ";allreduce:name=after,shape=5,seed=7", tail);
  const std::string differ = absl::StrCat(
      "allreduce_inplace:name=m_shape,shape=", kChunkFloats + 1, tail,
      ";allreduce_inplace:name=m_dtype,shape=4x3,dtype=float64", tail,
      ";allreduce:name=m_op,shape=50000,op=max", tail,
      ";broadcast_inplace:name=m_bshape,shape=8,root=0", tail,
      ";allreduce:name=after,shape=5,seed=7", tail);
  std::vector<std::unique_ptr<ChildProcess>> workers =
      StartScripts({agree, agree, agree, differ});
  std::vector<ProcessResult> results = WaitWorkers(workers);
  ASSERT_EQ(results.size(), static_cast<size_t>(kWorldSize));
  const std::string job = Job();
  const std::string one_chunk = absl::StrCat("[", kChunkFloats, "] float32");
  const std::map<std::string, std::vector<std::string>> want = {
      {"1",
       {absl::StrCat("allreduce \"m_shape\" in job ", job), "mismatched shapes",
        absl::StrCat("rank 3 sent [", kChunkFloats + 1, "] float32"),
        AnyAgreeingRankSent(one_chunk)}},
      {"2",
       {absl::StrCat("allreduce \"m_dtype\" in job ", job), "mismatched dtypes",
        "rank 3 sent [4,3] float64", AnyAgreeingRankSent("[4,3] float32")}},
      {"3",
       {absl::StrCat("allreduce \"m_op\" in job ", job), "mismatched ops",
        "rank 3 sent max", AnyAgreeingRankSent("sum")}},
      {"4",
       {absl::StrCat("broadcast \"m_bshape\" in job ", job), "mismatched shapes",
        "rank 3 sent [8] float32", AnyAgreeingRankSent("[7] float32")}},
  };
  for (const auto& [step, substrings] : want) {
    for (int r = 0; r < kWorldSize; ++r) {
      SCOPED_TRACE(absl::StrCat("step ", step, ", rank ", r));
      ExpectStep(results[r], step, absl::StatusCode::kFailedPrecondition,
                 substrings, kFast);
    }
    // One failure, the same message for every rank (over several shards,
    // each shard judges its own partition: which of them told a rank is
    // its own prefix).
    for (int r = 1; r < kWorldSize; ++r) {
      EXPECT_EQ(WithoutShardPrefix(Step(results[r], step).message),
                WithoutShardPrefix(Step(results[0], step).message))
          << "step " << step << ": rank " << r << " against rank 0";
    }
  }
  // The job goes on.
  for (const ProcessResult& r : results) ExpectStep(r, "5", absl::StatusCode::kOk);
  ExpectStreamsUsed(/*small=*/true, /*large=*/true);
}

// Rank 3 is connected but calls neither collective: after its timeout every
// waiting rank gets DEADLINE_EXCEEDED naming rank 3, not before, and its
// in-place buffer as it was. Then the whole job goes on.
TEST_P(ConformanceTest, MissingRankTimesOutNamingIt) {
  const std::string after = "allreduce:name=after,shape=5,seed=3,timeout_ms=30000";
  const std::string waiting = absl::StrCat(
      "allreduce_inplace:name=d_small,shape=16,timeout_ms=1500;"
      "allreduce_inplace:name=d_large,shape=50000,timeout_ms=1500;",
      after);
  std::vector<std::unique_ptr<ChildProcess>> workers = StartScripts(
      {waiting, waiting, waiting, absl::StrCat("sleep:ms=3500;", after)});
  std::vector<ProcessResult> results = WaitWorkers(workers);
  ASSERT_EQ(results.size(), static_cast<size_t>(kWorldSize));
  const std::string job = Job();
  for (int r = 0; r + 1 < kWorldSize; ++r) {
    for (const char* step : {"1", "2"}) {
      SCOPED_TRACE(absl::StrCat("step ", step, ", rank ", r));
      ExpectStep(results[r], step, absl::StatusCode::kDeadlineExceeded,
                 {absl::StrCat("in job ", job), "rank 3 never arrived"}, kFast);
      EXPECT_GE(Step(results[r], step).elapsed, absl::Milliseconds(1400))
          << "gave up before the 1.5 s timeout";
    }
    ExpectStep(results[r], "3", absl::StatusCode::kOk);
  }
  ExpectStep(results[3], "2", absl::StatusCode::kOk);
  ExpectStreamsUsed(/*small=*/true, /*large=*/true);
}

// Ranks 0-2 wait in a small and a large collective (both in flight at once)
// when rank 3's process is SIGKILLed: both fail with ABORTED naming rank 3
// within seconds, long before their 60 s timeout.
TEST_P(ConformanceTest, KilledRankAbortsThePendingCallsOfTheOthers) {
  const std::string waiting =
      "async_allreduce:name=k_small,shape=16,timeout_ms=60000;"
      "async_allreduce_inplace:name=k_large,shape=50000,timeout_ms=60000;join";
  std::vector<std::unique_ptr<ChildProcess>> workers =
      StartScripts({waiting, waiting, waiting, "hang"});
  ASSERT_EQ(workers.size(), static_cast<size_t>(kWorldSize));
  ASSERT_NO_FATAL_FAILURE(KillLastRankDuringTwoSteps(&workers, kFast));
  ExpectTwoStepsAbortedNaming(workers, "rank 3");
  ExpectStreamsUsed(/*small=*/true, /*large=*/true);
}

// Named collectives of every kind, started concurrently in a different
// order on every rank, each match their namesakes; a collective matched by
// call order afterwards is unaffected by them.
TEST_P(ConformanceTest, NamedCollectivesMatchInAnyOrder) {
  const std::vector<std::string> named = {
      "allreduce:name=n_a,shape=9,seed=2",
      "allgather:name=n_b,shape=3x2,seed=3",
      "broadcast:name=n_c,shape=6,root=2,noinput=1,seed=4",
      "reducescatter:name=n_d,shape=8x3,seed=5",
      absl::StrCat("allreduce:name=n_e,shape=", 3 * kChunkFloats, ",seed=6"),
      "many:name=n_f,shape=5,count=3,seed=7",
      "barrier:name=n_g",
  };
  std::vector<std::string> scripts;
  for (int r = 0; r < kWorldSize; ++r) {
    std::vector<std::string> steps;
    for (size_t i = 0; i < named.size(); ++i) {
      // Rank r starts them rotated by 2r, odd ranks in reverse.
      const size_t k = (i + 2 * r) % named.size();
      const size_t j = r % 2 == 1 ? named.size() - 1 - k : k;
      steps.push_back(absl::StrCat("async_", named[j], ",timeout_ms=30000"));
    }
    steps.push_back("join");
    steps.push_back("allreduce:shape=4,seed=9,timeout_ms=30000");
    scripts.push_back(absl::StrJoin(steps, ";"));
  }
  std::vector<std::unique_ptr<ChildProcess>> workers = StartScripts(scripts);
  std::vector<ProcessResult> results = WaitWorkers(workers);
  ASSERT_EQ(results.size(), static_cast<size_t>(kWorldSize));
  for (const ProcessResult& r : results) {
    for (size_t i = 1; i <= named.size(); ++i) {
      ExpectStep(r, absl::StrCat(i), absl::StatusCode::kOk);
    }
    // Step named.size() + 1 is the join; then the by-order all-reduce.
    ExpectStep(r, absl::StrCat(named.size() + 2), absl::StatusCode::kOk);
  }
  ExpectStreamsUsed(/*small=*/true, /*large=*/true);
}

INSTANTIATE_TEST_SUITE_P(
    Transports, ConformanceTest,
    ::testing::Values(Route{Transport::kDefault}, Route{Transport::kPerCall},
                      Route{Transport::kSharedMemory},
                      Route{Transport::kDefault, /*relays=*/1, /*shards=*/1},
                      Route{Transport::kDefault, /*relays=*/2, /*shards=*/2}),
    [](const ::testing::TestParamInfo<Route>& info) {
      return RouteName(info.param);
    });

}  // namespace
}  // namespace testing
}  // namespace reducer
