// Job with ranks that called Done(), in process: the job's collectives go
// on without them, kAvg divides by the ranks with values, an all-gather
// gives them an empty part, and once every rank is done the ranks meet
// again in call order.
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/engine/memory_budget.h"
#include "server/jobs/job.h"
#include "server/jobs/joined_job_test.h"
#include "tests/matchers.h"

namespace reducer {
namespace {

class JobDoneTest : public JoinedJobTest {
 protected:
  // Rank `rank`'s call of the unnamed collective `sequence` of the whole
  // job: `kind` over `values` (float32 [values.size()], op `op`).
  std::shared_ptr<FakeRankChannel> Call(int rank, uint64_t sequence,
                                        v1::CollectiveKind kind,
                                        std::vector<float> values,
                                        v1::ReduceOp op = v1::REDUCE_OP_SUM) {
    v1::CollectiveHeader h = Header(rank, kind);
    h.set_sequence(sequence);
    if (kind != v1::COLLECTIVE_KIND_BARRIER) {
      v1::TensorSpec* tensor = h.add_tensors();
      tensor->set_dtype(v1::DATA_TYPE_FLOAT32);
      tensor->add_shape(static_cast<int64_t>(values.size()));
      if (kind != v1::COLLECTIVE_KIND_ALL_GATHER) tensor->set_op(op);
    }
    return Attach(h, std::string(reinterpret_cast<const char*>(values.data()),
                                 values.size() * sizeof(float)));
  }

  // Holds all of the memory budget the job has not used yet, until reset.
  MemoryReservation FillTheBudget() {
    MemoryBudget& budget = server_.memory();
    MemoryReservation fill =
        MemoryReservation::Try(&budget, budget.limit() - budget.used());
    EXPECT_TRUE(fill.ok());
    return fill;
  }

  std::shared_ptr<FakeRankChannel> Done(int rank, int call = 0) {
    v1::CollectiveHeader h = Header(rank, v1::COLLECTIVE_KIND_DONE);
    h.set_name(absl::StrCat("done #", call));
    auto channel = std::make_shared<FakeRankChannel>();
    absl::StatusOr<std::shared_ptr<Collective>> c = job_.Attach(h, channel);
    if (!c.ok()) channel->Fail(c.status());
    return channel;
  }
};

// Rank 2 runs out of data while ranks 0 and 1 wait for it: their
// all-reduce ends over the two of them, and so do the later ones, without
// rank 2 calling anything.
TEST_F(JobDoneTest, APendingAllReduceGoesOnWithoutTheDoneRank) {
  auto a0 = Call(0, 0, v1::COLLECTIVE_KIND_ALL_REDUCE, {1, 2});
  auto a1 = Call(1, 0, v1::COLLECTIVE_KIND_ALL_REDUCE, {10, 20});
  EXPECT_FALSE(a0->finished_ok());
  auto done2 = Done(2);
  ASSERT_TRUE(a0->finished_ok()) << a0->failure();
  ASSERT_TRUE(a1->finished_ok()) << a1->failure();
  EXPECT_THAT(Values<float>(*a0), ElementsAre(11, 22));
  EXPECT_THAT(Values<float>(*a1), ElementsAre(11, 22));
  EXPECT_FALSE(done2->finished_ok());  // until every rank is done
  EXPECT_THAT(job_.Snapshot().done_ranks, ElementsAre(2));

  // kAvg divides by the two ranks with values, not by three.
  auto b0 =
      Call(0, 1, v1::COLLECTIVE_KIND_ALL_REDUCE, {1, 3}, v1::REDUCE_OP_AVG);
  auto b1 =
      Call(1, 1, v1::COLLECTIVE_KIND_ALL_REDUCE, {3, 5}, v1::REDUCE_OP_AVG);
  ASSERT_TRUE(b1->finished_ok()) << b1->failure();
  EXPECT_THAT(Values<float>(*b0), ElementsAre(2, 4));

  // An all-gather gives it an empty part; a barrier counts it as arrived.
  auto g0 = Call(0, 2, v1::COLLECTIVE_KIND_ALL_GATHER, {1});
  auto g1 = Call(1, 2, v1::COLLECTIVE_KIND_ALL_GATHER, {2, 3});
  ASSERT_TRUE(g1->finished_ok()) << g1->failure();
  EXPECT_THAT(Values<float>(*g0), ElementsAre(1, 2, 3));
  auto w0 = Call(0, 3, v1::COLLECTIVE_KIND_BARRIER, {});
  auto w1 = Call(1, 3, v1::COLLECTIVE_KIND_BARRIER, {});
  EXPECT_TRUE(w1->finished_ok()) << w1->failure();
  EXPECT_TRUE(w0->finished_ok()) << w0->failure();
}

// Rank 2's Done() makes the job remember, for the pending all-reduce it
// is left out of, that it skipped it: with no room in the budget for that,
// its DONE call is refused and nothing changes; with room, it goes on.
TEST_F(JobDoneTest, ADoneIsRefusedWhenTheBudgetCannotHoldWhatItMakesKept) {
  auto a0 = Call(0, 0, v1::COLLECTIVE_KIND_ALL_REDUCE, {1, 2});
  auto a1 = Call(1, 0, v1::COLLECTIVE_KIND_ALL_REDUCE, {10, 20});
  MemoryReservation fill = FillTheBudget();
  auto refused = Done(2);
  EXPECT_THAT(refused->failure(),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       AllOf(HasSubstr("done #0"),
                             HasSubstr("the server's memory budget"),
                             HasSubstr("(--memory_budget_bytes) cannot hold "
                                       "the record of the ranks a collective "
                                       "of 3 ranks may leave out"))));
  EXPECT_THAT(job_.Snapshot().done_ranks, IsEmpty());
  EXPECT_FALSE(a0->finished_ok());
  fill = MemoryReservation();
  auto done2 = Done(2);
  ASSERT_TRUE(a0->finished_ok()) << a0->failure();
  EXPECT_THAT(Values<float>(*a0), ElementsAre(11, 22));
  EXPECT_THAT(job_.Snapshot().done_ranks, ElementsAre(2));
}

// A new unnamed collective that leaves done rank 2 out needs its group's
// record of Done's counts, held in the budget before it is made.
TEST_F(JobDoneTest,
       ACollectiveLeavingADoneRankOutIsRefusedWithoutRoomForItsCount) {
  auto done2 = Done(2);
  MemoryReservation fill = FillTheBudget();
  auto refused = Call(0, 0, v1::COLLECTIVE_KIND_ALL_REDUCE, {1});
  EXPECT_THAT(refused->failure(),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("cannot hold the counts of the collectives "
                                 "of a group of 3 ranks that ranks done with "
                                 "Done() are left out of")));
  fill = MemoryReservation();
  auto a0 = Call(0, 0, v1::COLLECTIVE_KIND_ALL_REDUCE, {1});
  auto a1 = Call(1, 0, v1::COLLECTIVE_KIND_ALL_REDUCE, {2});
  ASSERT_TRUE(a1->finished_ok()) << a1->failure();
  EXPECT_THAT(Values<float>(*a0), ElementsAre(3));
}

// What Done() makes the job keep (the counts, the records of whom its
// collectives left out) is held in the budget for the epoch only: all of it
// is given back when the epoch ends.
TEST_F(JobDoneTest, WhatDoneMakesKeptIsGivenBackWhenTheEpochEnds) {
  const size_t before = server_.memory().used();
  auto done2 = Done(2);
  for (uint64_t sequence = 0; sequence < 4; ++sequence) {
    auto a0 = Call(0, sequence, v1::COLLECTIVE_KIND_ALL_REDUCE, {1});
    auto a1 = Call(1, sequence, v1::COLLECTIVE_KIND_ALL_REDUCE, {2});
    ASSERT_TRUE(a1->finished_ok()) << a1->failure();
  }
  EXPECT_GT(server_.memory().used(), before);
  EXPECT_FALSE(Lose(0, "killed"));
  EXPECT_FALSE(Lose(1, "killed"));
  ASSERT_TRUE(
      job_.Join(0, kWorld, Session(0, 1), std::make_shared<FakeSession>())
          .ok());
  EXPECT_EQ(server_.memory().used(), before);
}

TEST_F(JobDoneTest, AKindThatNeedsEveryPartFailsSayingWhy) {
  auto done2 = Done(2);
  auto r0 = Call(0, 0, v1::COLLECTIVE_KIND_REDUCE_SCATTER, {1, 2, 3});
  EXPECT_THAT(
      r0->failure(),
      StatusIs(absl::StatusCode::kFailedPrecondition,
               HasSubstr("rank 2 called Done(), and a reducescatter cannot go "
                         "on without its part")));
}

TEST_F(JobDoneTest, ADoneRanksOwnCallIsRefused) {
  auto a0 = Call(0, 0, v1::COLLECTIVE_KIND_ALL_REDUCE, {1});
  auto done2 = Done(2);
  auto late = Call(2, 0, v1::COLLECTIVE_KIND_ALL_REDUCE, {1});
  EXPECT_THAT(
      late->failure(),
      StatusIs(
          absl::StatusCode::kFailedPrecondition,
          HasSubstr("rank 2 called Done(); it takes part in no collective")));
}

// Uneven data: rank 2 has one batch, rank 1 two, rank 0 three. Once every
// rank is done, all three meet again in call order, although rank 2 was
// left out of two unnamed collectives and rank 1 of one.
TEST_F(JobDoneTest, OnceEveryRankIsDoneTheyMeetAgainInCallOrder) {
  auto s0 = Call(0, 0, v1::COLLECTIVE_KIND_ALL_REDUCE, {1});
  auto s1 = Call(1, 0, v1::COLLECTIVE_KIND_ALL_REDUCE, {2});
  auto s2 = Call(2, 0, v1::COLLECTIVE_KIND_ALL_REDUCE, {4});
  ASSERT_TRUE(s0->finished_ok());
  EXPECT_THAT(Values<float>(*s0), ElementsAre(7));
  auto d2 = Done(2);
  auto t0 = Call(0, 1, v1::COLLECTIVE_KIND_ALL_REDUCE, {1});
  auto t1 = Call(1, 1, v1::COLLECTIVE_KIND_ALL_REDUCE, {2});
  ASSERT_TRUE(t1->finished_ok()) << t1->failure();
  EXPECT_THAT(Values<float>(*t0), ElementsAre(3));
  auto d1 = Done(1);
  auto u0 = Call(0, 2, v1::COLLECTIVE_KIND_ALL_REDUCE, {1});
  ASSERT_TRUE(u0->finished_ok()) << u0->failure();
  EXPECT_THAT(Values<float>(*u0), ElementsAre(1));
  EXPECT_FALSE(d1->finished_ok());
  auto d0 = Done(0);
  for (auto* d : {&d0, &d1, &d2}) {
    EXPECT_TRUE((*d)->finished_ok()) << (*d)->failure();
  }
  // Each rank's own next sequence number: 3 for rank 0, 2 for rank 1, 1
  // for rank 2.
  auto v2 = Call(2, 1, v1::COLLECTIVE_KIND_ALL_REDUCE, {4});
  auto v1r = Call(1, 2, v1::COLLECTIVE_KIND_ALL_REDUCE, {2});
  auto v0 = Call(0, 3, v1::COLLECTIVE_KIND_ALL_REDUCE, {1});
  for (auto* v : {&v0, &v1r, &v2}) {
    ASSERT_TRUE((*v)->finished_ok()) << (*v)->failure();
    EXPECT_THAT(Values<float>(**v), ElementsAre(7));
  }
}

}  // namespace
}  // namespace reducer
