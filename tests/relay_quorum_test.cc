// Quorum steps through relays, end to end: real reducerd processes for the
// shards and two relays (reducerd --upstream) of two ranks each, the ranks as
// threads of this test using the public client. Rank 3 reaches its relay
// through a TcpProxy; after a few steps the proxy cuts it off (its connection
// drops, as when its process dies). Its relay reports it upstream as that
// rank's loss, so the job goes on as if the ranks were connected to the shard
// directly: the other three finish the later steps over ranks 0, 1 and 2, with
// their sums, well within the steps' grace, and none of them sees ABORTED. Then
// rank 3 connects to its relay again: it is admitted into the running job at
// once, its first step lists it as joined, and from the next one on all four
// contribute again; lost once more, it is left out again. Outside quorum mode
// the same loss ends the epoch, naming the rank, and the four start a new epoch
// through their relays. A rank that closes its client at its relay in quorum
// mode is left out as well. Each case runs with one shard upstream and with two
// (the steps' data cut over both).
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/reducer_client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/process_harness.h"
#include "tests/rank_threads.h"
#include "tests/status_matchers.h"
#include "tests/tcp_proxy.h"
#include "tests/watchdog.h"

namespace reducer {
namespace testing {
namespace {

constexpr int kWorld = 4;
constexpr int kSteps = 9;
constexpr int kLostAt = 3;    // rank 3 takes part in steps 0..kLostAt-1
constexpr int kRejoinAt = 6;  // and again from this step on
// 128 KiB of float32: two partitions when two shards are upstream.
constexpr int64_t kN = 1 << 15;
// Far longer than the test waits for a step: the steps after the loss
// must end because the shard knows rank 3 is lost, not by the grace.
constexpr absl::Duration kGrace = absl::Seconds(60);

// Element i of rank r's input at step s: exact in float32, and so are the
// sums of any ranks' inputs.
float Input(int rank, int step, int64_t i) {
  return static_cast<float>((rank + 1) * (step + 1) + 100 * i);
}

// The sum over `contributors` of their inputs at `step`, element `i`.
float SumOf(const std::vector<int>& contributors, int step, int64_t i) {
  float sum = 0;
  for (int r : contributors) sum += Input(r, step, i);
  return sum;
}

// The parameter: how many shards the relays have upstream.
class RelayQuorumTest : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    std::vector<std::string> addresses;
    for (int s = 0; s < GetParam(); ++s) {
      absl::StatusOr<std::unique_ptr<ReducerdProcess>> shard =
          ReducerdProcess::Start();
      ASSERT_THAT(shard, IsOk());
      addresses.push_back((*shard)->address());
      shards_.push_back(*std::move(shard));
    }
    for (int host = 0; host < 2; ++host) {
      absl::StatusOr<std::unique_ptr<ReducerdProcess>> relay =
          ReducerdProcess::Start(
              {"--upstream=" + absl::StrJoin(addresses, ",")});
      ASSERT_THAT(relay, IsOk());
      relays_.push_back(*std::move(relay));
    }
    absl::StatusOr<std::unique_ptr<TcpProxy>> proxy =
        TcpProxy::Start(relays_[1]->port());
    ASSERT_THAT(proxy, IsOk());
    proxy_ = *std::move(proxy);
  }

  // Ranks 0 and 1 on the first relay, 2 and 3 on the second; rank 3
  // through proxy_, on gRPC alone (so that all of its traffic crosses it).
  // `target`, when given, instead.
  absl::StatusOr<std::unique_ptr<Client>> Connect(
      int rank, const std::string& job, const std::string& target = "") {
    ClientOptions options;
    options.target = !target.empty() ? target
                     : rank == 3     ? proxy_->address()
                                     : relays_[rank / 2]->address();
    options.job = job;
    options.rank = rank;
    options.world_size = kWorld;
    options.local_world_size = 2;
    options.timeout = absl::Seconds(90);
    if (rank == 3) options.shared_memory = SharedMemory::kOff;
    return Client::Connect(options);
  }

  // Every process's log, for a failure's message.
  std::string Logs() const {
    std::string logs;
    for (size_t s = 0; s < shards_.size(); ++s) {
      absl::StrAppend(&logs, "shard ", s, ":\n", shards_[s]->Stderr(), "\n");
    }
    for (size_t r = 0; r < relays_.size(); ++r) {
      absl::StrAppend(&logs, "relay ", r, ":\n", relays_[r]->Stderr(), "\n");
    }
    return logs;
  }

  std::vector<std::unique_ptr<ReducerdProcess>> shards_;
  std::vector<std::unique_ptr<ReducerdProcess>> relays_;
  std::unique_ptr<TcpProxy> proxy_;
};

TEST_P(RelayQuorumTest, ARankLostOnItsRelayIsLeftOutAndRejoinsThroughIt) {
  Watchdog watchdog("ARankLostOnItsRelayIsLeftOutAndRejoinsThroughIt",
                    absl::Seconds(150));
  const std::string job = "relay-quorum";
  std::vector<std::unique_ptr<Client>> clients(kWorld);
  RankFailures failures;
  std::atomic<bool> lost{false};
  std::atomic<bool> rejoined{false};
  std::atomic<int> survivors_at_rejoin{0};  // done with the steps without 3
  // Each survivor's time for the steps after the loss.
  std::vector<absl::Duration> after_loss(kWorld);
  QuorumOptions quorum;
  quorum.min_ranks = 3;
  quorum.grace = kGrace;

  RunOnEveryRank(kWorld, [&](int rank) {
    auto fail = [&](const std::string& what) {
      failures.Add(absl::StrCat("rank ", rank, ": ", what));
    };
    absl::StatusOr<std::unique_ptr<Client>> client = Connect(rank, job);
    if (!client.ok()) return fail(client.status().ToString());
    clients[rank] = *std::move(client);
    absl::Time lost_since = absl::InfiniteFuture();
    for (int s = 0; s < kSteps; ++s) {
      if (rank == 3 && s == kLostAt) {
        // Cut off, as when its process dies: its connections drop, and no
        // new one gets through. It connects again, to its relay, once the
        // others have run steps without it.
        proxy_->SetRefuseNew(true);
        proxy_->DropAll();
        lost.store(true);
        clients[rank].reset();
        while (survivors_at_rejoin.load() < 3) {
          absl::SleepFor(absl::Milliseconds(1));
        }
        s = kRejoinAt;
        absl::StatusOr<std::unique_ptr<Client>> again =
            Connect(rank, job, relays_[1]->address());
        if (!again.ok()) {
          return fail(absl::StrCat("again: ", again.status().ToString()));
        }
        clients[rank] = *std::move(again);
        rejoined.store(true);
      }
      if (rank != 3 && s == kLostAt) {
        // Wait for the loss, so that the time below counts from it.
        while (!lost.load()) absl::SleepFor(absl::Milliseconds(1));
        lost_since = absl::Now();
      }
      if (rank != 3 && s == kRejoinAt) {
        after_loss[rank] = absl::Now() - lost_since;
        survivors_at_rejoin.fetch_add(1);
        while (!rejoined.load()) absl::SleepFor(absl::Milliseconds(1));
      }
      std::vector<float> x(kN);
      for (int64_t i = 0; i < kN; ++i) x[i] = Input(rank, s, i);
      absl::StatusOr<QuorumResult> step = clients[rank]->AllReduceQuorum(
          TensorView::Of<float>(x), ReduceOp::kSum, quorum);
      if (!step.ok()) {
        return fail(absl::StrCat("step ", s, ": ", step.status().ToString()));
      }
      const bool without_3 = s >= kLostAt && s <= kRejoinAt;
      const std::vector<int> want =
          without_3 ? std::vector<int>{0, 1, 2} : std::vector<int>{0, 1, 2, 3};
      const std::vector<int> joined =
          s == kRejoinAt ? std::vector<int>{3} : std::vector<int>{};
      if (step->step != static_cast<uint64_t>(s) ||
          step->contributors != want || step->joined != joined) {
        return fail(absl::StrCat(
            "step ", s, ": numbered ", step->step, ", contributors [",
            absl::StrJoin(step->contributors, ","), "] joined [",
            absl::StrJoin(step->joined, ","), "], want [",
            absl::StrJoin(want, ","), "] joined [", absl::StrJoin(joined, ","),
            "]"));
      }
      for (int64_t i = 0; i < kN; ++i) {
        const float got = step->tensor.values<float>()[i];
        if (got != SumOf(want, s, i)) {
          return fail(absl::StrCat("step ", s, "[", i, "] = ", got, ", want ",
                                   SumOf(want, s, i)));
        }
      }
    }
  });
  failures.ExpectNone();
  for (int r = 0; r < 3; ++r) {
    EXPECT_LT(after_loss[r], absl::Seconds(30))
        << "rank " << r << " waited for the lost rank";
  }
  clients.clear();
  if (HasFailure()) ADD_FAILURE() << Logs();
}

// A rank that rejoined through its relay (on an upstream session of its
// own) and is lost again is left out again: the others' steps go on, and
// nobody sees ABORTED.
TEST_P(RelayQuorumTest, ARankLostAgainAfterItRejoinedIsLeftOutAgain) {
  Watchdog watchdog("ARankLostAgainAfterItRejoinedIsLeftOutAgain",
                    absl::Seconds(150));
  const std::string job = "relay-twice";
  constexpr int kRounds = 6;
  // Rank 3 is cut off before step 1 and before step 4; it joins again
  // at step 2 (listed as joined there) and contributes to 0 and 3.
  auto contributes = [](int step) { return step == 0 || step == 3; };
  std::vector<std::unique_ptr<Client>> clients(kWorld);
  RankFailures failures;
  std::atomic<int> cut{0};       // how many times rank 3 was cut off
  std::atomic<int> rejoined{0};  // and joined again
  std::atomic<int> waiting{0};   // survivors at step 2, waiting for it
  QuorumOptions quorum;
  quorum.min_ranks = 3;
  quorum.grace = kGrace;
  RunOnEveryRank(kWorld, [&](int rank) {
    auto fail = [&](const std::string& what) {
      failures.Add(absl::StrCat("rank ", rank, ": ", what));
    };
    absl::StatusOr<std::unique_ptr<Client>> client = Connect(rank, job);
    if (!client.ok()) return fail(client.status().ToString());
    clients[rank] = *std::move(client);
    for (int s = 0; s < kRounds; ++s) {
      if (rank == 3 && (s == 1 || s == 4)) {
        if (s == 1) {
          proxy_->SetRefuseNew(true);
          proxy_->DropAll();
          clients[rank].reset();
          cut.store(1);
          // Back through the proxy once the survivors wait at step 2.
          while (waiting.load() < 3) absl::SleepFor(absl::Milliseconds(1));
          proxy_->SetRefuseNew(false);
          absl::StatusOr<std::unique_ptr<Client>> again = Connect(rank, job);
          if (!again.ok()) {
            return fail(absl::StrCat("again: ", again.status().ToString()));
          }
          clients[rank] = *std::move(again);
          rejoined.store(1);
          s = 1;  // the loop's next step is 2
          continue;
        }
        // Before step 4: cut off for good.
        proxy_->SetRefuseNew(true);
        proxy_->DropAll();
        clients[rank].reset();
        cut.store(2);
        return;
      }
      if (rank != 3 && s == 1) {
        while (cut.load() < 1) absl::SleepFor(absl::Milliseconds(1));
      }
      if (rank != 3 && s == 2) {
        waiting.fetch_add(1);
        while (rejoined.load() < 1) absl::SleepFor(absl::Milliseconds(1));
      }
      if (rank != 3 && s == 4) {
        while (cut.load() < 2) absl::SleepFor(absl::Milliseconds(1));
      }
      std::vector<float> x(kN);
      for (int64_t i = 0; i < kN; ++i) x[i] = Input(rank, s, i);
      absl::StatusOr<QuorumResult> step = clients[rank]->AllReduceQuorum(
          TensorView::Of<float>(x), ReduceOp::kSum, quorum);
      if (!step.ok()) {
        return fail(absl::StrCat("step ", s, ": ", step.status().ToString()));
      }
      const std::vector<int> want = contributes(s)
                                        ? std::vector<int>{0, 1, 2, 3}
                                        : std::vector<int>{0, 1, 2};
      if (step->contributors != want ||
          step->tensor.values<float>()[0] != SumOf(want, s, 0) ||
          step->tensor.values<float>()[kN - 1] != SumOf(want, s, kN - 1)) {
        return fail(absl::StrCat("step ", s, ": contributors [",
                                 absl::StrJoin(step->contributors, ","),
                                 "], want [", absl::StrJoin(want, ","), "]"));
      }
      const std::vector<int> joined =
          s == 2 ? std::vector<int>{3} : std::vector<int>{};
      if (step->joined != joined) {
        return fail(absl::StrCat("step ", s, ": joined [",
                                 absl::StrJoin(step->joined, ","), "]"));
      }
    }
  });
  failures.ExpectNone();
  clients.clear();
  if (HasFailure()) ADD_FAILURE() << Logs();
}

// Outside quorum mode a rank lost on its relay ends the epoch for every
// rank of the job, naming that rank (not its relay's first), as when it
// is connected directly.
TEST_P(RelayQuorumTest, OutsideQuorumModeALostRankEndsTheEpochNamingIt) {
  Watchdog watchdog("OutsideQuorumModeALostRankEndsTheEpochNamingIt",
                    absl::Seconds(120));
  const std::string job = "relay-plain";
  std::vector<std::unique_ptr<Client>> clients(kWorld);
  RankFailures failures;
  std::atomic<bool> lost{false};
  std::atomic<int> aborted{0};
  RunOnEveryRank(kWorld, [&](int rank) {
    auto fail = [&](const std::string& what) {
      failures.Add(absl::StrCat("rank ", rank, ": ", what));
    };
    absl::StatusOr<std::unique_ptr<Client>> client = Connect(rank, job);
    if (!client.ok()) return fail(client.status().ToString());
    clients[rank] = *std::move(client);
    absl::Status first = clients[rank]->Barrier();
    if (!first.ok()) return fail(absl::StrCat("first: ", first.ToString()));
    if (rank == 3) {
      proxy_->SetRefuseNew(true);
      proxy_->DropAll();
      lost.store(true);
      return;
    }
    while (!lost.load()) absl::SleepFor(absl::Milliseconds(1));
    absl::Status second = clients[rank]->Barrier();
    if (second.code() != absl::StatusCode::kAborted ||
        !absl::StrContains(second.message(), "rank 3's session was lost")) {
      fail(absl::StrCat("second: ", second.ToString(),
                        "; want ABORTED naming rank 3's session"));
    }
    aborted.fetch_add(1);
  });
  failures.ExpectNone();
  ASSERT_EQ(aborted.load(), 3);

  // The job starts again: every rank connects anew through its relay (rank
  // 3 past the proxy, which refuses it), and a new epoch sums all four.
  clients.clear();
  RunOnEveryRank(kWorld, [&](int rank) {
    auto fail = [&](const std::string& what) {
      failures.Add(absl::StrCat("rank ", rank, " again: ", what));
    };
    absl::StatusOr<std::unique_ptr<Client>> client =
        Connect(rank, job, relays_[rank / 2]->address());
    if (!client.ok()) return fail(client.status().ToString());
    std::vector<float> x(kN);
    for (int64_t i = 0; i < kN; ++i) x[i] = Input(rank, 0, i);
    absl::StatusOr<Tensor> sum =
        (*client)->AllReduce(TensorView::Of<float>(x), ReduceOp::kSum);
    if (!sum.ok()) return fail(sum.status().ToString());
    for (int64_t i = 0; i < kN; ++i) {
      if (sum->values<float>()[i] != SumOf({0, 1, 2, 3}, 0, i)) {
        return fail(absl::StrCat("[", i, "] = ", sum->values<float>()[i],
                                 ", want ", SumOf({0, 1, 2, 3}, 0, i)));
      }
    }
  });
  failures.ExpectNone();
  if (HasFailure()) ADD_FAILURE() << Logs();
}

// In quorum mode a rank that closes its client at its relay departs as it
// would connected directly: it is absent, and the others' next steps go on
// without it at once.
TEST_P(RelayQuorumTest, InQuorumModeARankThatClosesItsClientIsLeftOut) {
  Watchdog watchdog("InQuorumModeARankThatClosesItsClientIsLeftOut",
                    absl::Seconds(120));
  const std::string job = "relay-close";
  std::vector<std::unique_ptr<Client>> clients(kWorld);
  RankFailures failures;
  std::atomic<bool> closed{false};
  QuorumOptions quorum;
  quorum.min_ranks = 3;
  quorum.grace = kGrace;
  std::vector<absl::Duration> after_close(kWorld);
  RunOnEveryRank(kWorld, [&](int rank) {
    auto fail = [&](const std::string& what) {
      failures.Add(absl::StrCat("rank ", rank, ": ", what));
    };
    absl::StatusOr<std::unique_ptr<Client>> client =
        Connect(rank, job, relays_[rank / 2]->address());
    if (!client.ok()) return fail(client.status().ToString());
    clients[rank] = *std::move(client);
    for (int s = 0; s < 3; ++s) {
      if (rank == 3 && s == 1) {
        clients[rank].reset();  // Close: a Leave, then its stream ends
        closed.store(true);
        return;
      }
      absl::Time start = absl::Now();
      if (s == 1) {
        while (!closed.load()) absl::SleepFor(absl::Milliseconds(1));
        start = absl::Now();
      }
      std::vector<float> x(kN);
      for (int64_t i = 0; i < kN; ++i) x[i] = Input(rank, s, i);
      absl::StatusOr<QuorumResult> step = clients[rank]->AllReduceQuorum(
          TensorView::Of<float>(x), ReduceOp::kSum, quorum);
      if (!step.ok()) {
        return fail(absl::StrCat("step ", s, ": ", step.status().ToString()));
      }
      if (s == 1) after_close[rank] = absl::Now() - start;
      const std::vector<int> want =
          s == 0 ? std::vector<int>{0, 1, 2, 3} : std::vector<int>{0, 1, 2};
      if (step->contributors != want ||
          step->tensor.values<float>()[0] != SumOf(want, s, 0) ||
          step->tensor.values<float>()[kN - 1] != SumOf(want, s, kN - 1)) {
        return fail(absl::StrCat("step ", s, ": contributors [",
                                 absl::StrJoin(step->contributors, ","), "]"));
      }
    }
  });
  failures.ExpectNone();
  for (int r = 0; r < 3; ++r) {
    EXPECT_LT(after_close[r], absl::Seconds(30))
        << "rank " << r << " waited for the closed rank";
  }
}

INSTANTIATE_TEST_SUITE_P(Shards, RelayQuorumTest, ::testing::Values(1, 2),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return info.param == 1 ? std::string("OneShard")
                                                  : std::string("TwoShards");
                         });

}  // namespace
}  // namespace testing
}  // namespace reducer
