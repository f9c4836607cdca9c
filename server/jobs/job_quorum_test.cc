// Job in quorum mode, in process: a quorum step ends without a lost or
// late rank, the epoch goes on, and the rank rejoins at a later step.
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/jobs/job.h"
#include "server/jobs/joined_job_test.h"
#include "tests/matchers.h"

namespace reducer {
namespace {

class JobQuorumTest : public JoinedJobTest {
 protected:
  // Rank `rank`'s call of quorum step `step`, from session `session`.
  static v1::CollectiveHeader Step(int rank, uint64_t step,
                                   const std::string& session,
                                   absl::Duration grace) {
    v1::CollectiveHeader h = Header(rank, v1::COLLECTIVE_KIND_QUORUM_BARRIER);
    h.set_session_id(session);
    h.set_name(absl::StrCat("quorum step ", step));
    h.set_sequence(step);
    h.set_quorum_min_ranks(2);
    h.set_quorum_grace_ms(absl::ToInt64Milliseconds(grace));
    return h;
  }

  // A float32 [1] sum all-reduce of `group`, named `name`.
  static v1::CollectiveHeader Plain(int rank, const std::string& session,
                                    std::vector<int> group,
                                    const std::string& name) {
    v1::CollectiveHeader h = Header(rank, v1::COLLECTIVE_KIND_ALL_REDUCE);
    h.set_session_id(session);
    h.set_name(name);
    for (int r : group) h.add_group(r);
    v1::TensorSpec* tensor = h.add_tensors();
    tensor->set_dtype(v1::DATA_TYPE_FLOAT32);
    tensor->add_shape(1);
    tensor->set_op(v1::REDUCE_OP_SUM);
    return h;
  }

  // Quorum step `step` of every rank, all in time.
  void StepOfAll(uint64_t step) {
    std::vector<std::shared_ptr<FakeRankChannel>> calls;
    for (int r = 0; r < kWorld; ++r) {
      calls.push_back(Attach(Step(r, step, Session(r), absl::Seconds(60))));
    }
    for (auto& call : calls)
      EXPECT_TRUE(call->finished_ok()) << call->failure();
  }

  // `late` is rank 2's call of quorum step 0, which ended without it.
  static void ExpectLateForStep0(FakeRankChannel& late) {
    EXPECT_THAT(late.failure(),
                StatusIs(absl::StatusCode::kFailedPrecondition,
                         HasSubstr("quorum \"quorum step 0\" in job j1 "
                                   "finished without rank 2")));
  }

  static bool WaitFinished(FakeRankChannel& channel) {
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (!channel.finished_ok() && channel.failure().ok() &&
           absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(5));
    }
    return channel.finished_ok();
  }

  bool AnyAborted() {
    for (auto& s : sessions_) {
      for (const auto& e : s->events()) {
        if (e.has_aborted()) return true;
      }
    }
    return false;
  }
};

TEST_F(JobQuorumTest, EveryRankInEndsTheStepOverAll) {
  std::vector<std::shared_ptr<FakeRankChannel>> calls;
  for (int r = 0; r < kWorld; ++r) {
    calls.push_back(Attach(Step(r, 0, Session(r), absl::Seconds(60))));
    EXPECT_EQ(calls.back()->finished_ok(), r == kWorld - 1);
  }
  for (auto& call : calls) {
    ASSERT_TRUE(call->finished_ok()) << call->failure();
    EXPECT_THAT(Values<int32_t>(*call), ElementsAre(1, 1, 1));
  }
  EXPECT_TRUE(job_.InQuorumMode());
}

// A lost rank is not waited for, even with a grace of a minute, and the
// epoch goes on: nobody is told the job aborted.
TEST_F(JobQuorumTest, ALostRankIsLeftOutAtOnceAndTheEpochGoesOn) {
  auto c0 = Attach(Step(0, 0, Session(0), absl::Seconds(60)));
  auto c1 = Attach(Step(1, 0, Session(1), absl::Seconds(60)));
  EXPECT_FALSE(c0->finished_ok());
  Lose(2, "killed");
  ASSERT_TRUE(c0->finished_ok()) << c0->failure();
  ASSERT_TRUE(c1->finished_ok()) << c1->failure();
  EXPECT_THAT(Values<int32_t>(*c0), ElementsAre(1, 1, 0));
  EXPECT_THAT(Values<int32_t>(*c1), ElementsAre(1, 1, 0));
  EXPECT_FALSE(AnyAborted());
  EXPECT_TRUE(job_.InQuorumMode());
  const JobSnapshot snapshot = job_.Snapshot();
  EXPECT_TRUE(snapshot.quorum_mode);
  EXPECT_EQ(snapshot.state, "running");
  EXPECT_THAT(snapshot.absent_ranks, ElementsAre(2));
  EXPECT_THAT(snapshot.joined_ranks, ElementsAre(0, 1));

  // The survivors' data goes on over the two of them; a plain collective
  // that includes the absent rank is refused, naming it.
  auto d0 = Attach(Plain(0, Session(0), {0, 1}, "step 0 data"));
  EXPECT_TRUE(d0->failure().ok()) << d0->failure();
  auto all = Attach(Plain(0, Session(0), {0, 1, 2}, "everyone"));
  EXPECT_THAT(all->failure(), StatusIs(absl::StatusCode::kAborted,
                                       HasSubstr("rank 2 was lost")));
}

// A plain collective waiting for a rank when it is lost fails ABORTED
// naming it; a quorum step then goes on without it.
TEST_F(JobQuorumTest, APendingPlainCollectiveOfALostRankFailsNamingIt) {
  StepOfAll(0);
  auto waiting = Attach(Plain(0, Session(0), {0, 1, 2}, "step 0 data"));
  Lose(2, "killed");
  EXPECT_THAT(waiting->failure(), StatusIs(absl::StatusCode::kAborted,
                                           HasSubstr("rank 2 was lost")));
  auto c0 = Attach(Step(0, 1, Session(0), absl::Seconds(60)));
  auto c1 = Attach(Step(1, 1, Session(1), absl::Seconds(60)));
  ASSERT_TRUE(c1->finished_ok()) << c1->failure();
  EXPECT_THAT(Values<int32_t>(*c0), ElementsAre(1, 1, 0));
}

// A late rank is left out at the grace's end; its late call is refused
// naming the step, its session no longer holds the rank, and the rank
// rejoins with a new session: admitted into the running epoch at once,
// told which step to take part from, and counted as joining there.
TEST_F(JobQuorumTest, ALateRankIsLeftOutAndRejoinsAtALaterStep) {
  const absl::Duration grace = absl::Milliseconds(100);
  const absl::Time start = absl::Now();
  auto c0 = Attach(Step(0, 0, Session(0), grace));
  auto c1 = Attach(Step(1, 0, Session(1), grace));
  ASSERT_TRUE(WaitFinished(*c0)) << c0->failure();
  EXPECT_GE(absl::Now() - start, grace);
  ASSERT_TRUE(WaitFinished(*c1)) << c1->failure();
  EXPECT_THAT(Values<int32_t>(*c0), ElementsAre(1, 1, 0));

  auto late = Attach(Step(2, 0, Session(2), grace));
  ExpectLateForStep0(*late);
  EXPECT_THAT(late->failure().message(), HasSubstr("Connect again"));
  auto again = Attach(Step(2, 1, Session(2), grace));
  EXPECT_THAT(again->failure(),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("rank 2 of job j1 is absent")));
  EXPECT_FALSE(AnyAborted());

  // Step 1 is under way (rank 0 in) when rank 2 connects again: it counts
  // as dead there, and joins at step 2, as its JobReady says.
  auto s1r0 = Attach(Step(0, 1, Session(0), grace));
  auto back = std::make_shared<FakeSession>();
  ASSERT_TRUE(job_.Join(2, kWorld, Session(2, 1), back).ok());
  ASSERT_EQ(back->ready_count(), 1);
  EXPECT_EQ(back->events()[0].ready().quorum_steps_started(), 2u);
  EXPECT_EQ(back->events()[0].ready().epoch(), 1u);
  for (auto& s : sessions_) EXPECT_EQ(s->ready_count(), 1);  // not again
  auto s1r1 = Attach(Step(1, 1, Session(1), grace));
  ASSERT_TRUE(s1r1->finished_ok()) << s1r1->failure();
  EXPECT_THAT(Values<int32_t>(*s1r1), ElementsAre(1, 1, 0));

  // Step 2: the joining rank arrives first; its arrival starts no grace,
  // so the step waits for the others and lists it as joined.
  auto j = Attach(Step(2, 2, Session(2, 1), grace));
  absl::SleepFor(2 * grace);
  EXPECT_FALSE(j->finished_ok()) << j->failure();
  auto s2r0 = Attach(Step(0, 2, Session(0), grace));
  auto s2r1 = Attach(Step(1, 2, Session(1), grace));
  for (auto* call : {&j, &s2r0, &s2r1}) {
    ASSERT_TRUE((*call)->finished_ok()) << (*call)->failure();
    EXPECT_THAT(Values<int32_t>(**call), ElementsAre(1, 1, 2));
  }
  // From then on it is a member like the others.
  auto everyone = Attach(Plain(2, Session(2, 1), {0, 1, 2}, "everyone"));
  EXPECT_TRUE(everyone->failure().ok()) << everyone->failure();
}

// A finished step that left a rank out is remembered by name, so that the
// rank's late call is refused naming it, but without its Collective: the
// memory its bookkeeping reserved goes back, and the step holds only its
// record of whom it left out.
TEST_F(JobQuorumTest, RememberedStepsRefuseLateCallsAndHoldNoMemory) {
  const absl::Duration grace = absl::Milliseconds(50);
  // Step 0, then steps 1 to 10, without rank 2 (each waits out the grace
  // for it): they push step 0 out of the job's matching into its
  // remembered steps.
  for (uint64_t step = 0; step <= 10; ++step) {
    auto s0 = Attach(Step(0, step, Session(0), grace));
    auto s1 = Attach(Step(1, step, Session(1), grace));
    ASSERT_TRUE(WaitFinished(*s0)) << s0->failure();
    ASSERT_TRUE(WaitFinished(*s1)) << s1->failure();
    if (step > 0) EXPECT_THAT(Values<int32_t>(*s0), ElementsAre(1, 1, 0));
  }
  auto late = Attach(Step(2, 0, Session(2), grace));
  ExpectLateForStep0(*late);
  // At most the last step (done, not yet pruned) holds its bookkeeping;
  // ten remembered steps would hold ten times as much. Each remembered
  // step holds its record of whom it left out (its key and name, and a
  // rank): under half a KiB.
  EXPECT_LT(server_.memory().used(),
            2 * Collective::StateBytes(kWorld) + 10 * 512);
}

// A quorum step keeps, once finished, whom it left out (to refuse their
// late calls): that record is held in the budget from the step's creation,
// which is refused when the budget cannot hold it.
TEST_F(JobQuorumTest, AStepIsRefusedWhenTheBudgetCannotHoldWhomItMayLeaveOut) {
  MemoryBudget& budget = server_.memory();
  MemoryReservation fill =
      MemoryReservation::Try(&budget, budget.limit() - budget.used());
  ASSERT_TRUE(fill.ok());
  auto refused = Attach(Step(0, 0, Session(0), absl::Seconds(60)));
  EXPECT_THAT(refused->failure(),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       AllOf(HasSubstr("quorum \"quorum step 0\""),
                             HasSubstr("cannot hold the record of the ranks "
                                       "a collective of 3 ranks may leave "
                                       "out"))));
  fill = MemoryReservation();
  StepOfAll(0);
}

TEST_F(JobQuorumTest, ARankLostBeforeAnyQuorumStepEndsTheEpochAsBefore) {
  Lose(1, "killed");
  Lose(2, "killed");
  // Not in quorum mode yet when they were lost: the epoch ended.
  EXPECT_TRUE(AnyAborted());
  EXPECT_FALSE(job_.InQuorumMode());
}

TEST_F(JobQuorumTest, AStepThatCannotReachMinRanksFails) {
  StepOfAll(0);
  auto c0 = Attach(Step(0, 1, Session(0), absl::Seconds(60)));
  Lose(1, "killed");
  EXPECT_TRUE(c0->failure().ok());  // 0 and 2 can still make min_ranks 2
  Lose(2, "killed");
  EXPECT_THAT(c0->failure(),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("the step needs 2 contributing ranks")));
}

TEST_F(JobQuorumTest, RanksThatDisagreeOnTheSettingsAreTold) {
  auto c0 = Attach(Step(0, 0, Session(0), absl::Seconds(2)));
  auto c1 = Attach(Step(1, 0, Session(1), absl::Seconds(3)));
  EXPECT_THAT(
      c1->failure(),
      StatusIs(absl::StatusCode::kFailedPrecondition,
               HasSubstr("mismatched quorum settings: rank 0 sent min_ranks 2, "
                         "grace 2s, rank 1 sent min_ranks 2, grace 3s")));
  EXPECT_THAT(c0->failure(), StatusIs(absl::StatusCode::kFailedPrecondition));
}

}  // namespace
}  // namespace reducer
