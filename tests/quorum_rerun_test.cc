// Quorum steps against a real reducerd, ranks as threads of the test: a
// contributor lost between a step's decision and its data makes the
// survivors decide again without it, and they never see ABORTED; a rank
// that closes its client in quorum mode is left out of the next step like
// a lost one, and connects again.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "client/reducer_client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/reducer/v1/reducer.pb.h"
#include "tests/process_harness.h"
#include "tests/rank_threads.h"
#include "tests/raw_client.h"
#include "tests/watchdog.h"

namespace reducer {
namespace testing {
namespace {

using ::testing::ElementsAre;

class QuorumRerunTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<ReducerdProcess>> server =
        ReducerdProcess::Start();
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
  }

  ClientOptions Options(const std::string& job, int rank, int world) const {
    ClientOptions options;
    options.target = server_->address();
    options.job = job;
    options.rank = rank;
    options.world_size = world;
    options.timeout = absl::Seconds(30);
    options.shared_memory = SharedMemory::kOff;
    return options;
  }

  std::unique_ptr<ReducerdProcess> server_;
};

// Rank 2 (a raw session) takes part in step 0's decision, then is lost
// before the data: ranks 0 and 1 decide again without it.
TEST_F(QuorumRerunTest, AContributorLostBetweenDecisionAndDataIsDecidedAway) {
  Watchdog watchdog("AContributorLostBetweenDecisionAndDataIsDecidedAway",
                    absl::Seconds(60));
  const std::string job = "rerun";
  std::vector<std::unique_ptr<Client>> clients(2);
  std::unique_ptr<RawSession> raw;
  RankFailures failures;
  // Connect returns once all three have joined.
  RunOnEveryRank(3, [&](int rank) {
    if (rank == 2) {
      absl::StatusOr<std::unique_ptr<RawSession>> r =
          RawSession::Join(server_->address(), job, 2, 3, absl::Seconds(30));
      if (!r.ok()) return failures.Add(r.status().ToString());
      raw = *std::move(r);
      return;
    }
    absl::StatusOr<std::unique_ptr<Client>> c =
        Client::Connect(Options(job, rank, 3));
    if (!c.ok()) return failures.Add(c.status().ToString());
    clients[rank] = *std::move(c);
  });
  failures.ExpectNone();
  ASSERT_NE(raw, nullptr);

  std::vector<std::optional<absl::StatusOr<QuorumResult>>> results(3);
  QuorumOptions quorum;
  quorum.min_ranks = 2;
  quorum.grace = absl::Seconds(20);  // the step must not end by the grace
  RunOnEveryRank(3, [&](int rank) {
    if (rank == 2) {
      v1::CollectiveRequest step;
      *step.mutable_header() = raw->Header(v1::COLLECTIVE_KIND_QUORUM_BARRIER);
      step.mutable_header()->set_name("quorum step 0");
      step.mutable_header()->set_quorum_min_ranks(quorum.min_ranks);
      step.mutable_header()->set_quorum_grace_ms(
          absl::ToInt64Milliseconds(quorum.grace));
      RawCallResult decided = raw->Call({step}, absl::Seconds(20));
      if (!decided.status.ok()) failures.Add(decided.status.ToString());
      raw.reset();  // lost before it sends its data
      return;
    }
    const double x[2] = {1.0 + rank, 10.0 * (rank + 1)};
    results[rank] = clients[rank]->AllReduceQuorum(TensorView::Of<double>(x),
                                                   ReduceOp::kSum, quorum);
  });
  failures.ExpectNone();
  for (int rank = 0; rank < 2; ++rank) {
    ASSERT_TRUE(results[rank].has_value());
    ASSERT_TRUE(results[rank]->ok()) << results[rank]->status();
    const QuorumResult& r = **results[rank];
    EXPECT_THAT(r.contributors, ElementsAre(0, 1)) << rank;
    EXPECT_EQ(r.step, 0u);
    EXPECT_THAT(r.tensor.values<double>(), ElementsAre(3.0, 30.0)) << rank;
  }
  EXPECT_THAT(server_->Stderr(), ::testing::HasSubstr("rank 2 is absent"));
}

// In quorum mode a rank that closes its client is left out at once, and
// may connect again.
TEST_F(QuorumRerunTest, ARankThatClosesItsClientIsLeftOutAndMayComeBack) {
  Watchdog watchdog("ARankThatClosesItsClientIsLeftOutAndMayComeBack",
                    absl::Seconds(60));
  const std::string job = "closing";
  std::vector<std::unique_ptr<Client>> clients(3);
  RankFailures failures;
  QuorumOptions quorum;
  quorum.min_ranks = 2;
  quorum.grace = absl::Seconds(20);
  auto step_of = [&](int rank, std::vector<int> expected) {
    const double x[1] = {1.0 + rank};
    absl::StatusOr<QuorumResult> r = clients[rank]->AllReduceQuorum(
        TensorView::Of<double>(x), ReduceOp::kSum, quorum);
    if (!r.ok()) return failures.Add(r.status().ToString());
    if (r->contributors != expected) {
      failures.Add(absl::StrCat("rank ", rank, ": contributors ",
                                absl::StrJoin(r->contributors, ",")));
    }
  };
  RunOnEveryRank(3, [&](int rank) {
    absl::StatusOr<std::unique_ptr<Client>> c =
        Client::Connect(Options(job, rank, 3));
    if (!c.ok()) return failures.Add(c.status().ToString());
    clients[rank] = *std::move(c);
    step_of(rank, {0, 1, 2});
    if (rank == 2) clients[2].reset();  // leaves on purpose
  });
  failures.ExpectNone();
  RunOnEveryRank(2, [&](int rank) { step_of(rank, {0, 1}); });
  failures.ExpectNone();
  absl::StatusOr<std::unique_ptr<Client>> back =
      Client::Connect(Options(job, 2, 3));
  ASSERT_TRUE(back.ok()) << back.status();
  clients[2] = *std::move(back);
  RunOnEveryRank(3, [&](int rank) {
    const double x[1] = {1.0 + rank};
    absl::StatusOr<QuorumResult> r = clients[rank]->AllReduceQuorum(
        TensorView::Of<double>(x), ReduceOp::kSum, quorum);
    if (!r.ok()) return failures.Add(r.status().ToString());
    if (r->contributors != std::vector<int>{0, 1} ||
        r->joined != std::vector<int>{2} || r->step != 2) {
      failures.Add(absl::StrCat("rank ", rank, ": step ", r->step,
                                " contributors ",
                                absl::StrJoin(r->contributors, ","), " joined ",
                                absl::StrJoin(r->joined, ",")));
    }
    if (r->tensor.values<double>()[0] != 3.0) failures.Add("wrong sum");
  });
  failures.ExpectNone();
}

}  // namespace
}  // namespace testing
}  // namespace reducer
