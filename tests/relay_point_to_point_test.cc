// Point to point through relays (reducerd --upstream), end to end: one
// shard and two relays of two ranks each (ranks 0, 1 on the first host, 2,
// 3 on the second), real processes, the ranks as threads of this test using
// the public client. A message between two ranks of one host stays on it
// (the shard never holds it, its relay does, and the relay counts the
// bytes it saved); one across hosts goes through the shard; ReceiveAny
// takes a message held on its own host as well as one from the other host;
// every value as sent.
#include <atomic>
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/reducer_client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/admin_status.h"
#include "tests/http_get.h"
#include "tests/process_harness.h"
#include "tests/rank_threads.h"
#include "tests/status_matchers.h"

namespace reducer {
namespace testing {
namespace {

constexpr int kWorld = 4;
constexpr int64_t kBig = 262144;  // floats: 1 MiB

// Element i of the message `which` that rank `source` sends.
float Value(int source, int which, int64_t i) {
  return static_cast<float>(source * 100000 + which * 1000 + i % 997);
}
std::vector<float> Payload(int source, int which, int64_t n) {
  std::vector<float> values(n);
  for (int64_t i = 0; i < n; ++i) values[i] = Value(source, which, i);
  return values;
}
// Empty when `got` is message `which` of `source`, else what differs.
std::string Differs(const absl::StatusOr<Tensor>& got, int source, int which,
                    int64_t n) {
  if (!got.ok()) return got.status().ToString();
  if (static_cast<int64_t>(got->values<float>().size()) != n) {
    return absl::StrCat(got->values<float>().size(), " floats, want ", n);
  }
  for (int64_t i = 0; i < n; ++i) {
    if (got->values<float>()[i] != Value(source, which, i)) {
      return absl::StrCat("[", i, "] = ", got->values<float>()[i], ", want ",
                          Value(source, which, i));
    }
  }
  return "";
}

// The names of the collectives pending on `daemon`, over its jobs.
std::set<std::string> Pending(const ReducerdProcess& daemon) {
  std::set<std::string> names;
  absl::StatusOr<v1::StatusResponse> status = AdminStatusOf(daemon.address());
  if (!status.ok()) return {status.status().ToString()};
  for (const v1::JobStatus& job : status->jobs()) {
    for (const v1::PendingCollective& c : job.pending()) names.insert(c.name());
  }
  return names;
}

// Waits for another rank's step, bounded: a rank that failed before it
// must not hang the test.
void Wait(absl::Notification& step) {
  step.WaitForNotificationWithTimeout(absl::Seconds(60));
}

class RelayPointToPointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<ReducerdProcess>> shard =
        ReducerdProcess::Start();
    ASSERT_THAT(shard, IsOk());
    shard_ = *std::move(shard);
    for (int host = 0; host < 2; ++host) {
      absl::StatusOr<std::unique_ptr<ReducerdProcess>> relay =
          ReducerdProcess::Start(
              {absl::StrCat("--upstream=", shard_->address()),
               "--metrics_listen=127.0.0.1:0"});
      ASSERT_THAT(relay, IsOk());
      relays_.push_back(*std::move(relay));
    }
  }

  absl::StatusOr<std::unique_ptr<Client>> Connect(int rank) {
    ClientOptions options;
    options.target = relays_[rank / 2]->address();
    options.job = "p2p";
    options.rank = rank;
    options.world_size = kWorld;
    options.local_world_size = 2;
    options.timeout = absl::Seconds(30);
    return Client::Connect(options);
  }

  std::unique_ptr<ReducerdProcess> shard_;
  std::vector<std::unique_ptr<ReducerdProcess>> relays_;
};

TEST_F(RelayPointToPointTest,
       MessagesWithinAHostStayOnItAndReceiveAnyTakesBoth) {
  RankFailures failures;
  // Rank 2's first message to rank 3 is held on their host's relay: what
  // the shard and that relay hold then.
  absl::Notification held;
  absl::Notification looked;
  std::set<std::string> shard_pending, relay_pending;
  // Rank 2's message with tag 4 is held before rank 3's ReceiveAny starts.
  absl::Notification sent_for_any;
  // Rank 2's next message with tag 4 comes after both ReceiveAnys.
  absl::Notification any_done;
  RunOnEveryRank(kWorld, [&](int rank) {
    auto fail = [&](const std::string& what) {
      failures.Add(absl::StrCat("rank ", rank, ": ", what));
    };
    absl::StatusOr<std::unique_ptr<Client>> connected = Connect(rank);
    if (!connected.ok()) return fail(connected.status().ToString());
    Client& client = **connected;
    switch (rank) {
      case 0: {
        // Across hosts: to rank 3, and from rank 3.
        const std::vector<float> x = Payload(0, 1, 1000);
        absl::Status sent = client.Send(TensorView::Of<float>(x), 3, 1);
        if (!sent.ok()) return fail(sent.ToString());
        const std::string got = Differs(client.Receive(3, 2), 3, 2, 10);
        if (!got.empty()) return fail(absl::StrCat("from 3: ", got));
        // Within its host: to rank 1, whose receive comes first.
        absl::SleepFor(absl::Milliseconds(200));
        const std::vector<float> y = Payload(0, 3, 4096);
        sent = client.Send(TensorView::Of<float>(y), 1, 0);
        if (!sent.ok()) return fail(sent.ToString());
        break;
      }
      case 1: {
        const std::string got = Differs(client.Receive(0, 0), 0, 3, 4096);
        if (!got.empty()) return fail(absl::StrCat("from 0: ", got));
        // Across hosts, to rank 3's ReceiveAny.
        const std::vector<float> x = Payload(1, 5, 300);
        absl::Status sent = client.Send(TensorView::Of<float>(x), 3, 4);
        if (!sent.ok()) return fail(sent.ToString());
        break;
      }
      case 2: {
        // Within its host: 1 MiB to rank 3, held until it receives.
        const std::vector<float> big = Payload(2, 0, kBig);
        absl::Status sent = client.Send(TensorView::Of<float>(big), 3, 0);
        if (!sent.ok()) return fail(sent.ToString());
        shard_pending = Pending(*shard_);
        relay_pending = Pending(*relays_[1]);
        held.Notify();
        Wait(looked);
        // Held here too, then taken by rank 3's ReceiveAny (it goes
        // upstream before it); then one more, after the ReceiveAnys, taken
        // by a Receive naming rank 2.
        const std::vector<float> x = Payload(2, 4, 500);
        sent = client.Send(TensorView::Of<float>(x), 3, 4);
        if (!sent.ok()) return fail(sent.ToString());
        sent_for_any.Notify();
        Wait(any_done);
        const std::vector<float> y = Payload(2, 6, 700);
        sent = client.Send(TensorView::Of<float>(y), 3, 4);
        if (!sent.ok()) return fail(sent.ToString());
        break;
      }
      case 3: {
        Wait(held);
        looked.Notify();
        std::string got = Differs(client.Receive(2, 0), 2, 0, kBig);
        if (!got.empty()) return fail(absl::StrCat("from 2: ", got));
        got = Differs(client.Receive(0, 1), 0, 1, 1000);
        if (!got.empty()) return fail(absl::StrCat("from 0: ", got));
        const std::vector<float> x = Payload(3, 2, 10);
        absl::Status sent = client.Send(TensorView::Of<float>(x), 0, 2);
        if (!sent.ok()) return fail(sent.ToString());
        // From any source with tag 4: rank 2's (held on this host) and
        // rank 1's (from the other host), in either order.
        Wait(sent_for_any);
        std::set<int> sources;
        for (int k = 0; k < 2; ++k) {
          int source = -1;
          absl::StatusOr<Tensor> any = client.ReceiveAny(4, &source);
          sources.insert(source);
          got = source == 2   ? Differs(any, 2, 4, 500)
                : source == 1 ? Differs(any, 1, 5, 300)
                              : absl::StrCat("source ", source);
          if (!got.empty()) return fail(absl::StrCat("any: ", got));
        }
        any_done.Notify();
        if (sources != std::set<int>{1, 2})
          return fail("any: not from 1 and 2");
        got = Differs(client.Receive(2, 4), 2, 6, 700);
        if (!got.empty()) return fail(absl::StrCat("from 2 after any: ", got));
        break;
      }
    }
    absl::Status barrier = client.Barrier();
    if (!barrier.ok()) fail(absl::StrCat("barrier: ", barrier.ToString()));
    if (rank == 0) {
      // The second host's relay counts what its messages did not move over
      // its link: at least the 1 MiB one, up and back down.
      absl::StatusOr<v1::StatusResponse> status =
          AdminStatusOf(relays_[1]->address());
      if (!status.ok() || status->jobs_size() != 1 ||
          status->jobs(0).relay_bytes_saved() < 2u * 4 * kBig) {
        fail(absl::StrCat("second relay: ", status.ok()
                                                ? status->DebugString()
                                                : status.status().ToString()));
      }
      // And its metrics: the messages it kept, and their bytes saved.
      const int port = relays_[1]->MetricsPort();
      absl::StatusOr<double> kept =
          ScrapeSum(port, "reducer_relay_messages_kept_total");
      absl::StatusOr<double> saved =
          ScrapeSum(port, "reducer_relay_bytes_saved_total");
      if (!kept.ok() || *kept < 1 || !saved.ok() || *saved < 2.0 * 4 * kBig) {
        fail(absl::StrCat(
            "second relay's metrics: kept ",
            kept.ok() ? absl::StrCat(*kept) : kept.status().ToString(),
            ", saved ",
            saved.ok() ? absl::StrCat(*saved) : saved.status().ToString()));
      }
    }
    client.Barrier().IgnoreError();
  });
  failures.ExpectNone();
  // While rank 2's message was held, the shard knew nothing of it, and
  // its relay held it.
  EXPECT_THAT(shard_pending, ::testing::Not(::testing::Contains(
                                 ::testing::HasSubstr("p2p 2>3 tag 0 #0"))));
  EXPECT_THAT(relay_pending,
              ::testing::Contains(::testing::HasSubstr("p2p 2>3 tag 0 #0")));
}

}  // namespace
}  // namespace testing
}  // namespace reducer
