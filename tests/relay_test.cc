// Ranks through relays (reducerd --upstream), end to end: real reducerd
// processes for the shards and for each host's relay, the ranks as
// threads of this test using the public client. Every collective kind,
// with the ranks of a host combined (all-reduce, reduce, reduce-scatter,
// all-gather, gather, broadcast, scatter, all-to-all, barrier) or
// forwarded alone (the others); expected results in closed form, as if
// each rank had reached the shards directly.
// A relay whose link to the shards goes down (a TcpProxy paused) loses its
// upstream session, and still hands its ranks the results decided upstream.
#include <atomic>
#include <cstdint>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/reducer_client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/reducer/v1/admin.pb.h"
#include "tests/admin_status.h"
#include "tests/http_get.h"
#include "tests/process_harness.h"
#include "tests/rank_threads.h"
#include "tests/status_matchers.h"
#include "tests/tcp_proxy.h"

namespace reducer {
namespace testing {
namespace {

using ::reducer::testing::StatusIs;
using ::testing::HasSubstr;

constexpr int kWorld = 4;

// Element i of rank r's all-reduce input: exact in float32, and so are the
// sums and means of four of them.
float Value(int rank, int64_t i) {
  return static_cast<float>(rank * 1000 + i % 997);
}

// "N jobs", or why Admin.Status went unanswered: what a test compares.
std::string Jobs(const absl::StatusOr<int>& jobs) {
  return jobs.ok() ? absl::StrCat(*jobs, " jobs") : jobs.status().ToString();
}

class RelayTest : public ::testing::Test {
 protected:
  // `shards` reducerds upstream; one relay per entry of `hosts`, each
  // serving that many ranks (in rank order). With `proxied_host`, that
  // host's relay reaches the one shard through proxy_ (its link).
  void Start(int shards, const std::vector<int>& hosts, int proxied_host = -1) {
    std::vector<std::string> addresses;
    for (int s = 0; s < shards; ++s) {
      absl::StatusOr<std::unique_ptr<ReducerdProcess>> shard =
          ReducerdProcess::Start();
      ASSERT_THAT(shard, IsOk());
      addresses.push_back((*shard)->address());
      shards_.push_back(*std::move(shard));
    }
    if (proxied_host >= 0) {
      ASSERT_EQ(shards, 1) << "a proxy forwards to one shard";
      absl::StatusOr<std::unique_ptr<TcpProxy>> proxy =
          TcpProxy::Start(shards_[0]->port());
      ASSERT_THAT(proxy, IsOk());
      proxy_ = *std::move(proxy);
    }
    for (int ranks : hosts) {
      const bool proxied = static_cast<int>(relays_.size()) == proxied_host;
      absl::StatusOr<std::unique_ptr<ReducerdProcess>> relay =
          ReducerdProcess::Start(
              {absl::StrCat("--upstream=", proxied
                                               ? proxy_->address()
                                               : absl::StrJoin(addresses, ",")),
               "--metrics_listen=127.0.0.1:0"});
      ASSERT_THAT(relay, IsOk());
      for (int i = 0; i < ranks; ++i) {
        relay_of_rank_.push_back(static_cast<int>(relays_.size()));
      }
      local_world_size_.push_back(hosts.size() == 1 ? 0 : ranks);
      relays_.push_back(*std::move(relay));
    }
  }

  // Rank `rank` of job `job` through its relay; Connect and each call
  // bounded by `timeout`.
  absl::StatusOr<std::unique_ptr<Client>> Connect(
      int rank, const std::string& job,
      absl::Duration timeout = absl::Seconds(30)) {
    const int relay = relay_of_rank_[rank];
    ClientOptions options;
    options.target = relays_[relay]->address();
    options.job = job;
    options.rank = rank;
    options.world_size = kWorld;
    options.local_world_size = local_world_size_[relay];
    options.timeout = timeout;
    return Client::Connect(options);
  }

  // Rank `rank` of `job` connected; null, the failure added, when it
  // could not connect.
  std::unique_ptr<Client> ConnectOrFail(int rank, const std::string& job,
                                        RankFailures& failures) {
    absl::StatusOr<std::unique_ptr<Client>> client = Connect(rank, job);
    if (!client.ok()) {
      failures.Add(
          absl::StrCat("rank ", rank, ": ", client.status().ToString()));
      return nullptr;
    }
    return *std::move(client);
  }

  // Rank `rank` of `job` connected, once its first barrier has returned on
  // every rank of the job (`warmed` counts them); null, the failure added,
  // when it could not connect.
  std::unique_ptr<Client> ConnectAndWarm(int rank, const std::string& job,
                                         std::atomic<int>& warmed,
                                         RankFailures& failures) {
    std::unique_ptr<Client> client = ConnectOrFail(rank, job, failures);
    if (client == nullptr) return nullptr;
    absl::Status warm = client->Barrier();
    if (!warm.ok()) {
      failures.Add(absl::StrCat("rank ", rank, ": ", warm.ToString()));
    }
    warmed.fetch_add(1);
    while (warmed.load() < kWorld) absl::SleepFor(absl::Milliseconds(1));
    return client;
  }

  // Polls `daemon`'s Admin.Status until it holds `want` jobs or `within`
  // passed; returns the last count, or why a poll went unanswered (each
  // has 3 s).
  static absl::StatusOr<int> JobsWithin(const ReducerdProcess& daemon, int want,
                                        absl::Duration within) {
    const absl::Time give_up = absl::Now() + within;
    int jobs = -1;
    do {
      absl::StatusOr<v1::StatusResponse> status =
          AdminStatusOf(daemon.address());
      if (!status.ok()) return status.status();
      jobs = status->jobs_size();
      if (jobs == want) break;
      absl::SleepFor(absl::Milliseconds(100));
    } while (absl::Now() < give_up);
    return jobs;
  }

  std::vector<std::unique_ptr<ReducerdProcess>> shards_;
  std::unique_ptr<TcpProxy> proxy_;  // see Start's proxied_host
  std::vector<std::unique_ptr<ReducerdProcess>> relays_;
  std::vector<int> relay_of_rank_;
  std::vector<int> local_world_size_;
};

// Runs every kind on rank `rank`'s client and records what differs from
// the closed form.
void EveryKind(Client& client, int rank, RankFailures& failures) {
  auto fail = [&](const std::string& what) {
    failures.Add(absl::StrCat("rank ", rank, ": ", what));
  };
  // All-reduce of 3 MiB: several chunks, cut over the shards.
  constexpr int64_t kN = 3 * 262144;
  std::vector<float> x(kN);
  for (int64_t i = 0; i < kN; ++i) x[i] = Value(rank, i);
  absl::StatusOr<Tensor> sum =
      client.AllReduce(TensorView::Of<float>(x), ReduceOp::kSum);
  if (!sum.ok())
    return fail(absl::StrCat("allreduce: ", sum.status().ToString()));
  for (int64_t i = 0; i < kN; ++i) {
    const float want = 6000.0f + 4.0f * static_cast<float>(i % 997);
    if (sum->values<float>()[i] != want) {
      return fail(absl::StrCat("allreduce[", i, "] = ", sum->values<float>()[i],
                               ", want ", want));
    }
  }
  const std::vector<float> small = {Value(rank, 1), Value(rank, 2)};
  absl::StatusOr<Tensor> mean =
      client.AllReduce(TensorView::Of<float>(small), ReduceOp::kAvg);
  if (!mean.ok() || mean->values<float>()[0] != 1501.0f ||
      mean->values<float>()[1] != 1502.0f) {
    return fail(absl::StrCat("allreduce avg: ", mean.status().ToString()));
  }
  // All-gather: rank r sends r + 1 values of 10 r + j.
  std::vector<int32_t> mine;
  for (int j = 0; j <= rank; ++j) mine.push_back(10 * rank + j);
  std::vector<int32_t> gathered;
  for (int r = 0; r < kWorld; ++r) {
    for (int j = 0; j <= r; ++j) gathered.push_back(10 * r + j);
  }
  absl::StatusOr<Tensor> all = client.AllGather(TensorView::Of<int32_t>(mine));
  if (!all.ok() ||
      std::vector<int32_t>(all->values<int32_t>().begin(),
                           all->values<int32_t>().end()) != gathered) {
    return fail(absl::StrCat("allgather: ", all.status().ToString()));
  }
  // Gather to rank 3, which its relay carries with rank 2.
  absl::StatusOr<Tensor> to3 = client.Gather(TensorView::Of<int32_t>(mine), 3);
  if (!to3.ok()) return fail(absl::StrCat("gather: ", to3.status().ToString()));
  if (rank == 3 &&
      std::vector<int32_t>(to3->values<int32_t>().begin(),
                           to3->values<int32_t>().end()) != gathered) {
    return fail("gather: the root's result is not every rank's rows in order");
  }
  // Broadcast from rank 2, reduce to rank 1.
  const std::vector<double> root_values = {2.5, -1e300, 7};
  absl::StatusOr<Tensor> bcast =
      client.Broadcast(TensorView::Of<double>(root_values), 2);
  if (!bcast.ok() ||
      std::vector<double>(bcast->values<double>().begin(),
                          bcast->values<double>().end()) != root_values) {
    return fail(absl::StrCat("broadcast: ", bcast.status().ToString()));
  }
  const std::vector<int64_t> one = {rank + 1};
  absl::StatusOr<Tensor> reduced =
      client.Reduce(TensorView::Of<int64_t>(one), ReduceOp::kSum, 1);
  if (!reduced.ok())
    return fail(absl::StrCat("reduce: ", reduced.status().ToString()));
  if (rank == 1 && reduced->values<int64_t>()[0] != 10) {
    return fail("reduce: the root's sum is not 10");
  }
  absl::Status barrier = client.Barrier();
  if (!barrier.ok()) return fail(absl::StrCat("barrier: ", barrier.ToString()));
  // Reduce-scatter of 1 MiB, combined like the all-reduce (each rank then
  // gets its own slice of what its host got): rank r's slice is elements
  // [r * kSlice, (r + 1) * kSlice) of the sum.
  constexpr int64_t kRs = 262144;
  constexpr int64_t kSlice = kRs / kWorld;
  std::vector<float> rs(kRs);
  for (int64_t i = 0; i < kRs; ++i) rs[i] = Value(rank, i);
  absl::StatusOr<Tensor> slice =
      client.ReduceScatter(TensorView::Of<float>(rs), ReduceOp::kSum);
  if (!slice.ok()) {
    return fail(absl::StrCat("reducescatter: ", slice.status().ToString()));
  }
  if (static_cast<int64_t>(slice->values<float>().size()) != kSlice) {
    return fail(absl::StrCat("reducescatter: ", slice->values<float>().size(),
                             " elements, want ", kSlice));
  }
  for (int64_t k = 0; k < kSlice; ++k) {
    const int64_t i = rank * kSlice + k;
    const float want = 6000.0f + 4.0f * static_cast<float>(i % 997);
    if (slice->values<float>()[k] != want) {
      return fail(absl::StrCat("reducescatter[", k, "] = ",
                               slice->values<float>()[k], ", want ", want));
    }
  }
  // Scatter from rank 0, combined like the broadcast: each rank its part.
  std::vector<int32_t> parts = {100, 101, 102, 103};
  absl::StatusOr<Tensor> part = client.Scatter(
      rank == 0 ? TensorView::Of<int32_t>(parts) : TensorView(), 0);
  if (!part.ok() || part->values<int32_t>().size() != 1 ||
      part->values<int32_t>()[0] != 100 + rank) {
    return fail(absl::StrCat("scatter: ", part.status().ToString()));
  }
  // All-to-all of 1 MiB, combined (each rank then gets its own rows of
  // what its host got) and cut over the shards: rank r sends rank d the
  // kPart values 10000000 r + kPart d + k.
  constexpr int64_t kA2a = 262144;
  constexpr int64_t kPart = kA2a / kWorld;
  std::vector<int32_t> send(kA2a);
  for (int64_t i = 0; i < kA2a; ++i) {
    send[i] = static_cast<int32_t>(10000000 * rank + i);
  }
  absl::StatusOr<Tensor> got = client.AllToAll(TensorView::Of<int32_t>(send));
  if (!got.ok())
    return fail(absl::StrCat("alltoall: ", got.status().ToString()));
  if (static_cast<int64_t>(got->values<int32_t>().size()) != kA2a) {
    return fail(absl::StrCat("alltoall: ", got->values<int32_t>().size(),
                             " elements, want ", kA2a));
  }
  for (int q = 0; q < kWorld; ++q) {
    for (int64_t k = 0; k < kPart; ++k) {
      const int32_t want =
          static_cast<int32_t>(10000000 * q + kPart * rank + k);
      if (got->values<int32_t>()[q * kPart + k] != want) {
        return fail(absl::StrCat("alltoall: element ", k, " from rank ", q,
                                 " is ", got->values<int32_t>()[q * kPart + k],
                                 ", want ", want));
      }
    }
  }
  // Forwarded rank by rank: all-to-all-v (rank r sends rank d r + d + 1
  // rows of 100 r + d).
  std::vector<int64_t> send_rows(kWorld);
  std::vector<int32_t> rows;
  for (int d = 0; d < kWorld; ++d) {
    send_rows[d] = rank + d + 1;
    for (int k = 0; k <= rank + d; ++k) rows.push_back(100 * rank + d);
  }
  absl::StatusOr<Tensor> uneven =
      client.AllToAllV(TensorView::Of<int32_t>(rows), send_rows);
  if (!uneven.ok())
    return fail(absl::StrCat("alltoallv: ", uneven.status().ToString()));
  std::vector<int32_t> want_rows;
  for (int q = 0; q < kWorld; ++q) {
    for (int k = 0; k <= q + rank; ++k) want_rows.push_back(100 * q + rank);
  }
  if (std::vector<int32_t>(uneven->values<int32_t>().begin(),
                           uneven->values<int32_t>().end()) != want_rows) {
    return fail("alltoallv: the rows from the other ranks are wrong");
  }
}

TEST_F(RelayTest, TwoHostsOfTwoRanksOverTwoShardsRunEveryKind) {
  ASSERT_NO_FATAL_FAILURE(Start(/*shards=*/2, /*hosts=*/{2, 2}));
  RankFailures failures;
  v1::StatusResponse status;
  RunOnEveryRank(kWorld, [&](int rank) {
    std::unique_ptr<Client> client = ConnectOrFail(rank, "every", failures);
    if (client == nullptr) return;
    EveryKind(*client, rank, failures);
    // The relay's status while the job lives (between two barriers).
    client->Barrier().IgnoreError();
    if (rank == 0) {
      absl::StatusOr<v1::StatusResponse> asked =
          AdminStatusOf(relays_[0]->address());
      if (asked.ok()) {
        status = *std::move(asked);
      } else {
        failures.Add(asked.status().ToString());
      }
    }
    client->Barrier().IgnoreError();
  });
  failures.ExpectNone();
  // It names its upstream, and what combining saved: at least the 3 MiB
  // all-reduce one of its two ranks did neither send nor get, and the
  // 1 MiB reduce-scatter input it did not send (each slice is received
  // once either way).
  EXPECT_EQ(status.upstream(),
            absl::StrCat(shards_[0]->address(), ",", shards_[1]->address()));
  ASSERT_EQ(status.jobs_size(), 1);
  EXPECT_GE(status.jobs(0).relay_bytes_saved(),
            2u * 3 * 1024 * 1024 + 1024 * 1024);
}

TEST_F(RelayTest, HostsOfUnevenRanksOverTwoShardsRunEveryKind) {
  // One host of ranks 0-1 (combined calls) and two of one rank each (each
  // call its rank's own): contributions for different numbers of ranks
  // meet on each shard, every one cut over both shards alike.
  ASSERT_NO_FATAL_FAILURE(Start(/*shards=*/2, /*hosts=*/{2, 1, 1}));
  RankFailures failures;
  RunOnEveryRank(kWorld, [&](int rank) {
    std::unique_ptr<Client> client = ConnectOrFail(rank, "uneven", failures);
    if (client == nullptr) return;
    EveryKind(*client, rank, failures);
  });
  failures.ExpectNone();
}

TEST_F(RelayTest, AnAllToAllOfAHostsRanksIsOneCallUpstream) {
  // Three all-to-alls of two hosts of two ranks: each relay makes three
  // combined calls upstream, none for a rank alone (rank by rank, it
  // would make six).
  ASSERT_NO_FATAL_FAILURE(Start(/*shards=*/2, /*hosts=*/{2, 2}));
  RankFailures failures;
  RunOnEveryRank(kWorld, [&](int rank) {
    std::unique_ptr<Client> client = ConnectOrFail(rank, "exchange", failures);
    if (client == nullptr) return;
    for (int step = 0; step < 3; ++step) {
      std::vector<int32_t> send(kWorld);
      for (int d = 0; d < kWorld; ++d) send[d] = 100 * step + 10 * rank + d;
      absl::StatusOr<Tensor> got =
          client->AllToAll(TensorView::Of<int32_t>(send));
      if (!got.ok()) {
        failures.Add(absl::StrCat("rank ", rank, ": alltoall ", step, ": ",
                                  got.status().ToString()));
        return;
      }
      for (int q = 0; q < kWorld; ++q) {
        if (got->values<int32_t>()[q] != 100 * step + 10 * q + rank) {
          failures.Add(absl::StrCat("rank ", rank, ": alltoall ", step,
                                    ": the part from rank ", q, " is ",
                                    got->values<int32_t>()[q]));
        }
      }
    }
    if (rank % 2 != 0) return;
    // The first rank of each host reads its relay's calls (counted once
    // every member has its result: polled).
    const int port = relays_[relay_of_rank_[rank]]->MetricsPort();
    auto calls = [&](const std::string& combined) {
      return ScrapeSum(port, "reducer_relay_upstream_calls_total",
                       [&](const Sample& sample) {
                         auto it = sample.labels.find("combined");
                         return it != sample.labels.end() &&
                                it->second == combined;
                       });
    };
    absl::StatusOr<double> together = calls("true");
    const absl::Time give_up = absl::Now() + absl::Seconds(10);
    while (together.ok() && *together < 3 && absl::Now() < give_up) {
      absl::SleepFor(absl::Milliseconds(20));
      together = calls("true");
    }
    const absl::StatusOr<double> alone = calls("false");
    if (!together.ok() || *together != 3 || !alone.ok() || *alone != 0) {
      failures.Add(absl::StrCat(
          "rank ", rank, "'s relay: ",
          together.ok() ? absl::StrCat(*together)
                        : together.status().ToString(),
          " combined calls upstream (want 3), ",
          alone.ok() ? absl::StrCat(*alone) : alone.status().ToString(),
          " alone (want 0)"));
    }
  });
  failures.ExpectNone();
}

TEST_F(RelayTest, OneHostOfFourRanksOverOneShardRunsEveryKind) {
  // The whole job is on the relay's host: it answers every kind it
  // combines itself (ten calls); only the all-to-all-v's goes upstream,
  // per rank (four).
  ASSERT_NO_FATAL_FAILURE(Start(/*shards=*/1, /*hosts=*/{4}));
  RankFailures failures;
  RunOnEveryRank(kWorld, [&](int rank) {
    std::unique_ptr<Client> client = ConnectOrFail(rank, "alone", failures);
    if (client == nullptr) return;
    EveryKind(*client, rank, failures);
  });
  const int port = relays_[0]->MetricsPort();
  auto count = [&](const std::string& name, const std::string& combined) {
    return ScrapeSum(port, name, [&](const Sample& sample) {
      auto it = sample.labels.find("combined");
      return combined.empty() ||
             (it != sample.labels.end() && it->second == combined);
    });
  };
  // Counted once every member has its result: polled.
  absl::StatusOr<double> here =
      count("reducer_relay_calls_answered_here_total", "");
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (here.ok() && *here < 10 && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(20));
    here = count("reducer_relay_calls_answered_here_total", "");
  }
  const absl::StatusOr<double> combined =
      count("reducer_relay_upstream_calls_total", "true");
  const absl::StatusOr<double> alone =
      count("reducer_relay_upstream_calls_total", "false");
  ASSERT_THAT(here, IsOk());
  ASSERT_THAT(combined, IsOk());
  ASSERT_THAT(alone, IsOk());
  EXPECT_EQ(*here, 10) << *combined << " combined, " << *alone << " alone";
  EXPECT_EQ(*combined, 0);
  EXPECT_EQ(*alone, 4);
  failures.ExpectNone();
}

TEST_F(RelayTest, ARankDoneIsLeftOutOfItsHostsCombinedCalls) {
  // Rank 1 runs out of data after one all-reduce; its host's rank 0 and the
  // other host go on without it, then all call Done().
  ASSERT_NO_FATAL_FAILURE(Start(/*shards=*/1, /*hosts=*/{2, 2}));
  RankFailures failures;
  RunOnEveryRank(kWorld, [&](int rank) {
    std::unique_ptr<Client> client = ConnectOrFail(rank, "uneven", failures);
    if (client == nullptr) return;
    const int steps = rank == 1 ? 1 : 3;
    for (int step = 0; step < steps; ++step) {
      absl::StatusOr<int64_t> sum =
          client->AllReduce(int64_t{rank + 1}, ReduceOp::kSum);
      const int64_t want = step == 0 ? 10 : 8;  // 1+2+3+4, then without 2
      if (!sum.ok() || *sum != want) {
        failures.Add(absl::StrCat(
            "rank ", rank, " step ", step, ": ",
            sum.ok() ? absl::StrCat(*sum) : sum.status().ToString(), ", want ",
            want));
      }
    }
    absl::Status done = client->Done();
    if (!done.ok()) {
      failures.Add(absl::StrCat("rank ", rank, ": Done: ", done.ToString()));
    }
  });
  failures.ExpectNone();
}

TEST_F(RelayTest, ARelayKilledEndsTheEpochNamingItsRanks) {
  ASSERT_NO_FATAL_FAILURE(Start(/*shards=*/1, /*hosts=*/{2, 2}));
  RankFailures failures;
  std::atomic<int> warmed{0};
  RunOnEveryRank(kWorld, [&](int rank) {
    // Every rank has its barrier's result before the relay dies.
    std::unique_ptr<Client> client =
        ConnectAndWarm(rank, "killed", warmed, failures);
    if (client == nullptr) return;
    if (rank == 0) relays_[0]->Kill();
    std::vector<float> x(16, 1.0f);
    CallOptions call;
    call.timeout = absl::Seconds(20);
    absl::StatusOr<Tensor> sum =
        client->AllReduce(TensorView::Of<float>(x), ReduceOp::kSum, call);
    if (sum.ok()) {
      failures.Add(absl::StrCat("rank ", rank,
                                ": an all-reduce with a dead "
                                "relay's ranks succeeded"));
    } else if (rank >= 2 &&
               !absl::StrContains(sum.status().message(), "ranks [0,1]")) {
      failures.Add(absl::StrCat("rank ", rank, ": ", sum.status().ToString(),
                                " does not name the relay's ranks [0,1]"));
    }
  });
  failures.ExpectNone();
}

TEST_F(RelayTest, AResultDecidedUpstreamReachesTheRanksOfARelayCutOffFromIt) {
  // Relay 1 (ranks 2 and 3) reaches the shard through proxy_. Its ranks'
  // reduce-scatter (one combined call) is upstream when its link
  // goes down; then ranks 0 and 1 contribute, and the shard decides the
  // result, which ranks 0 and 1 get. Relay 1's keepalive watchdog ends its
  // upstream session while its link is down; once the link is back, its
  // calls replay their results from the shard, as a client connected
  // directly does, and its ranks get them: the epoch ends on the relay
  // only after that (and then their next call fails).
  ASSERT_NO_FATAL_FAILURE(Start(/*shards=*/1, /*hosts=*/{2, 2},
                                /*proxied_host=*/1));
  // Past the relay's keepalive watchdog (pings every second, two seconds
  // to answer): the link is down longer than that.
  constexpr absl::Duration kLinkDown = absl::Seconds(5);
  RankFailures failures;
  std::atomic<int> warmed{0};
  std::atomic<int> forwarding{0};
  std::atomic<bool> link_down{false};
  RunOnEveryRank(kWorld, [&](int rank) {
    std::unique_ptr<Client> client =
        ConnectAndWarm(rank, "cut", warmed, failures);
    if (client == nullptr) return;
    if (rank >= 2) {
      forwarding.fetch_add(1);
    } else if (rank == 0) {
      // Ranks 2 and 3's calls reach the shard (a few bytes each), then the
      // relay's link goes down.
      while (forwarding.load() < 2) absl::SleepFor(absl::Milliseconds(1));
      absl::SleepFor(absl::Seconds(1));
      proxy_->PauseAll();
      link_down.store(true);
    } else {
      while (!link_down.load()) absl::SleepFor(absl::Milliseconds(1));
    }
    std::vector<float> rs(8);
    for (int i = 0; i < 8; ++i) rs[i] = Value(rank, i);
    CallOptions call;
    call.timeout = absl::Seconds(30);
    absl::StatusOr<Tensor> slice =
        client->ReduceScatter(TensorView::Of<float>(rs), ReduceOp::kSum, call);
    if (rank == 0) {
      absl::SleepFor(kLinkDown);
      proxy_->ResumeAll();
    }
    if (!slice.ok()) {
      failures.Add(absl::StrCat("rank ", rank, ": the reduce-scatter failed: ",
                                slice.status().ToString()));
      return;
    }
    for (int i = 0; i < 2; ++i) {
      const float want = 6000.0f + 4.0f * static_cast<float>(2 * rank + i);
      if (slice->values<float>()[i] != want) {
        failures.Add(absl::StrCat("rank ", rank, ": reducescatter[", i, "] = ",
                                  slice->values<float>()[i], ", want ", want));
      }
    }
    if (rank < 2) return;
    // The relay lost its upstream session: once its calls made upstream
    // had their outcome, it ended the epoch here.
    call.timeout = absl::Seconds(20);
    absl::Status next = client->Barrier(call);
    if (next.ok()) {
      failures.Add(absl::StrCat("rank ", rank,
                                ": a barrier after the relay lost its "
                                "upstream session succeeded"));
    }
  });
  failures.ExpectNone();
}

TEST_F(RelayTest, AJobLetGoWhileItsRelayWaitsUpstreamLeavesTheRelayAnswering) {
  // Ranks 2 and 3 never come, so relay 0's upstream join waits for them (up
  // to its 5-minute timeout) when ranks 0 and 1 give up and it lets their
  // job go. Its other calls must not wait with that join: Admin.Status
  // answers, before and after the job is gone.
  ASSERT_NO_FATAL_FAILURE(Start(/*shards=*/1, /*hosts=*/{2, 2}));
  RunOnEveryRank(2, [&](int rank) {
    EXPECT_FALSE(Connect(rank, "never-ready", absl::Seconds(2)).ok())
        << "rank " << rank;
  });
  // The relay answers throughout, and lets the job go.
  EXPECT_EQ(Jobs(JobsWithin(*relays_[0], 0, absl::Seconds(15))), "0 jobs");
  // Its join upstream was given up with the job: the shard no longer holds
  // the job either, and the relay drains at once.
  EXPECT_EQ(Jobs(JobsWithin(*shards_[0], 0, absl::Seconds(10))), "0 jobs")
      << "the shard still holds the job the relay's ranks left";
  EXPECT_EQ(relays_[0]->StopDrained(), "");
}

TEST_F(RelayTest, ARelayStoppedWhileItsJoinWaitsUpstreamDrainsAtOnce) {
  // Ranks 0 and 1 wait in Connect (30 s) for ranks 2 and 3, which never
  // come, when their relay gets SIGTERM: it drains and exits 0 within the
  // harness's grace (15 s), not after its join's 5-minute timeout; the
  // ranks are told, and the shard lets the job go.
  ASSERT_NO_FATAL_FAILURE(Start(/*shards=*/1, /*hosts=*/{2, 2}));
  std::atomic<int> refused{0};
  std::thread stopper([&] {
    // Once the relay's join is at the shard.
    EXPECT_EQ(Jobs(JobsWithin(*shards_[0], 1, absl::Seconds(10))), "1 jobs");
    const absl::Time stopped = absl::Now();
    EXPECT_EQ(relays_[0]->StopDrained(), "");
    EXPECT_LT(absl::Now() - stopped, ReducerdProcess::kDrainGrace);
  });
  RunOnEveryRank(2, [&](int rank) {
    if (!Connect(rank, "never-ready", absl::Seconds(30)).ok()) ++refused;
  });
  stopper.join();
  EXPECT_EQ(refused.load(), 2);
  EXPECT_EQ(Jobs(JobsWithin(*shards_[0], 0, absl::Seconds(10))), "0 jobs")
      << "the shard still holds the job of the relay that stopped";
}

// A Connect that times out names who joined and who did not: on a
// reducerd, the ranks missing; through a relay, which sees only its host's
// ranks, how many of them it expects (here every rank of a job whose ranks
// are on two hosts: no local_world_size) and which it holds.
TEST_F(RelayTest, AConnectThatTimesOutNamesWhoJoinedAndWhatItWaitsFor) {
  ASSERT_NO_FATAL_FAILURE(Start(/*shards=*/1, /*hosts=*/{1, 1}));
  std::vector<absl::Status> direct(3), relayed(2);
  RunOnEveryRank(3, [&](int rank) {
    if (rank == 1) return;  // never starts
    ClientOptions options;
    options.target = shards_[0]->address();
    options.job = "direct";
    options.rank = rank;
    options.world_size = 3;
    options.timeout = absl::Seconds(2);
    direct[rank] = Client::Connect(options).status();
  });
  RunOnEveryRank(2, [&](int rank) {
    ClientOptions options;
    options.target = relays_[rank]->address();
    options.job = "relayed";
    options.rank = rank;
    options.world_size = 2;
    options.timeout = absl::Seconds(2);
    relayed[rank] = Client::Connect(options).status();
  });
  for (int rank : {0, 2}) {
    EXPECT_THAT(direct[rank],
                StatusIs(absl::StatusCode::kDeadlineExceeded,
                         HasSubstr("ranks joined: 0,2; not joined: 1")));
  }
  for (int rank : {0, 1}) {
    EXPECT_THAT(
        relayed[rank],
        StatusIs(absl::StatusCode::kDeadlineExceeded,
                 HasSubstr(absl::StrCat(
                     "ranks joined there: ", rank,
                     "; this relay waits for 2 of the job's 2 ranks on its "
                     "host (ClientOptions::local_world_size"))));
  }
}

}  // namespace
}  // namespace testing
}  // namespace reducer
