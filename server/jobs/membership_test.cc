// Membership as a state machine: the epoch, departure, Done and quorum
// rules, driven transition by transition on a clock the test moves.
#include "server/jobs/membership.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/matchers.h"

namespace reducer {
namespace {

using Effect = Membership::Unseated::Effect;
using ::testing::Contains;

// Membership never calls its sessions; a distinct object per seat is all
// a test needs to tell them apart.
class NoSession final : public SessionChannel {
 public:
  void SendEvent(const v1::JoinEvent&) override {}
  void Fail(const absl::Status&) override {}
};

constexpr int kWorld = 3;

class MembershipTest : public ::testing::Test {
 protected:
  MembershipTest() : membership_("j1", kWorld, /*epoch_id=*/7) {}

  static std::string Session(int rank, int incarnation = 0) {
    return "s" + std::to_string(rank) + "-" + std::to_string(incarnation);
  }

  absl::StatusOr<Membership::Seated> SeatRank(int rank, int incarnation = 0) {
    sessions_.push_back(std::make_shared<NoSession>());
    absl::StatusOr<Membership::Seated> seated = membership_.Seat(
        Session(rank, incarnation), {rank}, sessions_.back(), &superseded_);
    if (seated.ok()) owners_[Session(rank, incarnation)] = sessions_.back();
    return seated;
  }

  // The stream of `session_id`, as it was seated, ended.
  Membership::Unseated Lose(const std::string& session_id) {
    return membership_.Unseat(session_id, owners_[session_id].get(), now_);
  }

  void SeatAll() {
    for (int r = 0; r < kWorld; ++r) ASSERT_TRUE(SeatRank(r).ok());
    ASSERT_TRUE(membership_.running());
  }

  // The ranks of `group` a quorum step started now goes on without.
  std::vector<int> GoneAmong(const std::vector<int>& group) const {
    std::vector<int> gone;
    for (int r : group) {
      if (membership_.Gone(r)) gone.push_back(r);
    }
    return gone;
  }

  absl::Time now_ = absl::FromUnixSeconds(1000);
  Membership membership_;
  std::vector<std::shared_ptr<SessionChannel>> sessions_;
  // The channel each session id was seated with.
  std::map<std::string, std::shared_ptr<SessionChannel>> owners_;
  // The sessions Seat closed (superseded by a newer one of their rank).
  std::vector<std::shared_ptr<SessionChannel>> superseded_;
};

TEST_F(MembershipTest, EpochRunsOnceEveryRankIsSeated) {
  EXPECT_EQ(membership_.state(), "joining");
  EXPECT_EQ(*SeatRank(0), Membership::Seated::kWaiting);
  EXPECT_EQ(*SeatRank(2), Membership::Seated::kWaiting);
  EXPECT_FALSE(membership_.running());
  EXPECT_EQ(*SeatRank(1), Membership::Seated::kAllJoined);
  EXPECT_TRUE(membership_.running());
  EXPECT_EQ(membership_.state(), "running");
  EXPECT_EQ(membership_.epoch(), 1u);
  EXPECT_EQ(membership_.epoch_id(), 7u);
  EXPECT_THAT(membership_.SeatedRanks(), ElementsAre(0, 1, 2));
  EXPECT_EQ(membership_.Sessions().size(), 3u);
}

TEST_F(MembershipTest, ASeatMayHoldSeveralRanks) {
  auto relay = std::make_shared<NoSession>();
  owners_["relay"] = relay;
  EXPECT_EQ(*membership_.Seat("relay", {0, 2}, relay),
            Membership::Seated::kWaiting);
  EXPECT_EQ(*SeatRank(1), Membership::Seated::kAllJoined);
  EXPECT_THAT(membership_.RunningRanks("relay"), ElementsAre(0, 2));
  EXPECT_TRUE(membership_.Holds(2, "relay"));
  EXPECT_FALSE(membership_.Holds(1, "relay"));
  // One session, told once.
  EXPECT_EQ(membership_.Sessions().size(), 2u);
  // Its loss ends the epoch naming both of its ranks.
  const Membership::Unseated lost = Lose("relay");
  EXPECT_EQ(lost.effect, Effect::kEndsEpoch);
  EXPECT_THAT(lost.ranks, ElementsAre(0, 2));
}

TEST_F(MembershipTest, AHeldRankCannotBeSeatedTwice) {
  ASSERT_TRUE(SeatRank(0).ok());
  EXPECT_THAT(SeatRank(0, /*incarnation=*/1),
              StatusIs(absl::StatusCode::kAlreadyExists,
                       HasSubstr("rank 0 of job j1 is already held")));
  EXPECT_TRUE(membership_.HasSession(Session(0)));
  EXPECT_FALSE(membership_.HasSession(Session(0, 1)));
}

TEST_F(MembershipTest, ALostRankEndsTheEpochAndTheNextStartsEmpty) {
  SeatAll();
  const Membership::Unseated lost = Lose(Session(1));
  EXPECT_EQ(lost.effect, Effect::kEndsEpoch);
  EXPECT_THAT(lost.ranks, ElementsAre(1));
  EXPECT_FALSE(lost.last_session);
  membership_.EndEpoch("rank 1's session was lost");
  EXPECT_EQ(membership_.state(), "aborted");
  EXPECT_THAT(membership_.CheckCaller(0, 1, Session(0), "allreduce #0"),
              StatusIs(absl::StatusCode::kAborted,
                       HasSubstr("epoch 1 of job j1 has ended (rank 1's "
                                 "session was lost)")));
  membership_.StartNextEpoch(/*epoch_id=*/8);
  EXPECT_EQ(membership_.epoch(), 2u);
  EXPECT_EQ(membership_.epoch_id(), 8u);
  EXPECT_EQ(membership_.state(), "joining");
  EXPECT_THAT(membership_.SeatedRanks(), IsEmpty());
  // A call of the old epoch is told it ended; one of a later epoch, that it
  // has not started.
  EXPECT_THAT(membership_.CheckCaller(0, 1, Session(0), "allreduce #0"),
              StatusIs(absl::StatusCode::kAborted));
  EXPECT_THAT(membership_.CheckCaller(0, 3, Session(0), "allreduce #0"),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("has not started (current epoch 2)")));
}

TEST_F(MembershipTest, TheLastSessionToGoSaysSo) {
  ASSERT_TRUE(SeatRank(0).ok());
  ASSERT_TRUE(SeatRank(1).ok());
  EXPECT_FALSE(Lose(Session(0)).last_session);
  const Membership::Unseated last = Lose(Session(1));
  EXPECT_TRUE(last.last_session);
  // Not running: losing a joining rank ends nothing.
  EXPECT_EQ(last.effect, Effect::kNone);
  EXPECT_TRUE(Lose("never-joined").last_session);
}

TEST_F(MembershipTest, OnlyTheSeatedChannelEndsASession) {
  SeatAll();
  // Another stream naming rank 0's session (a refused Join's) ends nothing.
  NoSession stranger;
  const Membership::Unseated ignored =
      membership_.Unseat(Session(0), &stranger, now_);
  EXPECT_EQ(ignored.effect, Effect::kNone);
  EXPECT_FALSE(ignored.last_session);
  EXPECT_EQ(membership_.Unseat(Session(0), nullptr, now_).effect,
            Effect::kNone);
  EXPECT_TRUE(membership_.running());
  EXPECT_TRUE(membership_.Holds(0, Session(0)));
  EXPECT_TRUE(membership_.HasSession(Session(0)));
  // Its own stream does.
  const Membership::Unseated lost = Lose(Session(0));
  EXPECT_EQ(lost.effect, Effect::kEndsEpoch);
  EXPECT_THAT(lost.ranks, ElementsAre(0));
}

TEST_F(MembershipTest, AReseatedSessionIsEndedByItsNewChannelOnly) {
  SeatAll();
  auto retry = std::make_shared<NoSession>();
  const std::shared_ptr<SessionChannel> first = owners_[Session(1)];
  EXPECT_EQ(membership_.Reseat(Session(1), retry), first);
  EXPECT_TRUE(membership_.running());
  EXPECT_TRUE(membership_.Holds(1, Session(1)));
  // Events go to the new stream, not the replaced one.
  const std::vector<std::shared_ptr<SessionChannel>> told =
      membership_.Sessions();
  EXPECT_THAT(told, Contains(retry));
  EXPECT_THAT(told, Not(Contains(first)));
  // The replaced stream's end changes nothing; the new one's ends the epoch.
  EXPECT_EQ(membership_.Unseat(Session(1), first.get(), now_).effect,
            Effect::kNone);
  EXPECT_TRUE(membership_.running());
  EXPECT_EQ(membership_.Unseat(Session(1), retry.get(), now_).effect,
            Effect::kEndsEpoch);
}

TEST_F(MembershipTest, ARefusedSeatChangesNothing) {
  SeatAll();
  membership_.EndEpoch("lost");
  membership_.StartNextEpoch(8);
  ASSERT_TRUE(SeatRank(0, /*incarnation=*/1).ok());
  superseded_.clear();
  EXPECT_THAT(SeatRank(0, /*incarnation=*/2),
              StatusIs(absl::StatusCode::kAlreadyExists));
  // The sessions of epoch 1 that claim ranks 1 and 2 are still open.
  EXPECT_THAT(superseded_, IsEmpty());
  EXPECT_TRUE(membership_.HasSession(Session(1)));
  EXPECT_TRUE(membership_.HasSession(Session(0, 1)));
  EXPECT_FALSE(membership_.HasSession(Session(0, 2)));
}

// However often ranks connect again with new sessions while the old
// streams stay open, each rank has one open session: the newest.
TEST_F(MembershipTest, ANewSessionOfARankClosesTheOneThatClaimedItBefore) {
  SeatAll();
  for (int incarnation = 1; incarnation <= 5; ++incarnation) {
    membership_.EndEpoch("lost");
    membership_.StartNextEpoch(8 + incarnation);
    superseded_.clear();
    for (int r = 0; r < kWorld; ++r) {
      ASSERT_TRUE(SeatRank(r, incarnation).ok());
      EXPECT_FALSE(membership_.HasSession(Session(r, incarnation - 1)));
    }
    ASSERT_TRUE(membership_.running());
    // Each superseded session handed back once, to be ended.
    ASSERT_THAT(superseded_, SizeIs(kWorld));
    for (int r = 0; r < kWorld; ++r) {
      EXPECT_EQ(superseded_[r], owners_[Session(r, incarnation - 1)]);
    }
  }
  // The closed sessions' streams ending later change nothing.
  EXPECT_EQ(Lose(Session(1, 4)).effect, Effect::kNone);
  EXPECT_TRUE(membership_.running());
}

TEST_F(MembershipTest,
       InQuorumModeTheAbsentRanksOldSessionIsClosedOnItsReturn) {
  SeatAll();
  membership_.EnterQuorumMode();
  // Left out of a step: absent, its stream still open.
  membership_.MarkAbsent(2, now_);
  EXPECT_TRUE(membership_.HasSession(Session(2)));
  EXPECT_THAT(membership_.SessionRanks(Session(2)), ElementsAre(2));
  EXPECT_EQ(*SeatRank(2, /*incarnation=*/1), Membership::Seated::kRejoined);
  EXPECT_THAT(superseded_, ElementsAre(owners_[Session(2)]));
  EXPECT_FALSE(membership_.HasSession(Session(2)));
  EXPECT_EQ(Lose(Session(2)).effect, Effect::kNone);
  EXPECT_TRUE(membership_.Holds(2, Session(2, 1)));
}

TEST_F(MembershipTest, ARelayStillHoldingARankStaysOpen) {
  auto relay = std::make_shared<NoSession>();
  owners_["relay"] = relay;
  ASSERT_TRUE(membership_.Seat("relay", {0, 2}, relay).ok());
  ASSERT_TRUE(SeatRank(1).ok());
  membership_.EnterQuorumMode();
  membership_.MarkAbsent(0, now_);
  ASSERT_EQ(*SeatRank(0, /*incarnation=*/1), Membership::Seated::kRejoined);
  // It still holds rank 2: open, claiming rank 2 alone.
  EXPECT_THAT(superseded_, IsEmpty());
  EXPECT_THAT(membership_.SessionRanks("relay"), ElementsAre(2));
  EXPECT_TRUE(membership_.Holds(2, "relay"));
}

TEST_F(MembershipTest, CallersMustHoldTheirRank) {
  SeatAll();
  EXPECT_THAT(membership_.CheckCaller(1, 1, Session(1), "allreduce #0"),
              IsOk());
  EXPECT_THAT(membership_.CheckCaller(1, 1, Session(2), "allreduce #0"),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("session s2-0 does not hold rank 1 of job "
                                 "j1 in epoch 1")));
}

TEST_F(MembershipTest, ADepartedRankIsRefusedAndItsReturnMustEndTheEpoch) {
  SeatAll();
  const Membership::Unseated departed = membership_.Depart(Session(2), now_);
  EXPECT_EQ(departed.effect, Effect::kDeparted);
  EXPECT_THAT(departed.ranks, ElementsAre(2));
  EXPECT_TRUE(membership_.running());
  EXPECT_THAT(membership_.CheckGroupPresent({0, 2}, "allreduce #4"),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("rank 2 has left the job")));
  EXPECT_THAT(membership_.CheckGroupPresent({0, 1}, "allreduce #4"), IsOk());
  // Its stream ending later changes nothing more.
  EXPECT_EQ(Lose(Session(2)).effect, Effect::kNone);
  EXPECT_EQ(membership_.DepartedAmong({2}), 2);
  EXPECT_EQ(membership_.DepartedAmong({0, 1}), std::nullopt);
}

TEST_F(MembershipTest, DoneLeavesRanksOutUntilTheLastLetsAllGo) {
  SeatAll();
  EXPECT_EQ(membership_.MarkDone(0), Membership::DoneMark::kLeftOut);
  EXPECT_EQ(membership_.MarkDone(0), Membership::DoneMark::kAlready);
  EXPECT_EQ(membership_.MarkDone(2), Membership::DoneMark::kLeftOut);
  EXPECT_THAT(membership_.DoneRanks(), ElementsAre(0, 2));
  EXPECT_EQ(membership_.done_count(), 2);
  membership_.NoteSkipped(0, "0,1,2");
  membership_.NoteSkipped(0, "0,1,2");
  EXPECT_EQ(membership_.Skipped(0, "0,1,2"), 2u);
  EXPECT_EQ(membership_.Skipped(0, "0,1"), 0u);
  EXPECT_EQ(membership_.MarkDone(1), Membership::DoneMark::kAllDone);
  EXPECT_THAT(membership_.DoneRanks(), IsEmpty());
  EXPECT_FALSE(membership_.CalledDone(0));
  // The skipped counts stay for the epoch: later sequence numbers need them.
  EXPECT_EQ(membership_.Skipped(0, "0,1,2"), 2u);
  membership_.NoteWholeSequence(4);
  membership_.NoteWholeSequence(2);
  EXPECT_EQ(membership_.next_whole_sequence(), 5u);
}

TEST_F(MembershipTest, InQuorumModeALostRankIsAbsentAndRejoinsAtTheNextStep) {
  SeatAll();
  EXPECT_THAT(GoneAmong({0, 1, 2}), IsEmpty());
  EXPECT_THAT(membership_.StartQuorumStep({0, 1, 2}, 0), IsEmpty());
  EXPECT_TRUE(membership_.quorum_mode());

  const Membership::Unseated lost = Lose(Session(1));
  EXPECT_EQ(lost.effect, Effect::kAbsent);
  EXPECT_THAT(lost.ranks, ElementsAre(1));
  EXPECT_TRUE(membership_.running());
  EXPECT_THAT(membership_.AbsentRanks(), ElementsAre(1));
  EXPECT_THAT(membership_.CheckCaller(1, 1, Session(1), "allreduce #2"),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("rank 1 of job j1 is absent from epoch 1")));
  EXPECT_THAT(membership_.CheckGroupPresent({0, 1}, "allreduce #2"),
              StatusIs(absl::StatusCode::kAborted, HasSubstr("is absent")));
  // A step started while it is away goes on without it.
  EXPECT_THAT(GoneAmong({0, 1, 2}), ElementsAre(1));
  EXPECT_THAT(membership_.StartQuorumStep({0, 1, 2}, 1), IsEmpty());

  now_ += absl::Seconds(12);
  EXPECT_EQ(membership_.AbsentFor(1, now_), absl::Seconds(12));
  EXPECT_EQ(*SeatRank(1, /*incarnation=*/1), Membership::Seated::kRejoined);
  EXPECT_EQ(membership_.AbsentFor(1, now_), absl::ZeroDuration());
  EXPECT_EQ(membership_.quorum_steps_started(), 2u);
  // The next step counts it as joining, the one after as a contributor.
  EXPECT_THAT(GoneAmong({0, 1, 2}), IsEmpty());
  EXPECT_THAT(membership_.StartQuorumStep({0, 1, 2}, 2), ElementsAre(1));
  EXPECT_THAT(membership_.StartQuorumStep({0, 1, 2}, 3), IsEmpty());
}

TEST_F(MembershipTest, InQuorumModeADepartureMakesTheRankAbsent) {
  SeatAll();
  membership_.EnterQuorumMode();
  const Membership::Unseated departed = membership_.Depart(Session(0), now_);
  EXPECT_EQ(departed.effect, Effect::kAbsent);
  EXPECT_TRUE(membership_.IsAbsent(0));
  EXPECT_EQ(membership_.DepartedAmong({0}), std::nullopt);
}

TEST_F(MembershipTest, AbsenceIsTimedFromTheFirstLoss) {
  SeatAll();
  membership_.EnterQuorumMode();
  membership_.MarkAbsent(2, now_);
  membership_.MarkAbsent(2, now_ + absl::Seconds(5));  // late again
  EXPECT_EQ(membership_.AbsentFor(2, now_ + absl::Seconds(9)),
            absl::Seconds(9));
  EXPECT_EQ(membership_.AbsentFor(0, now_ + absl::Seconds(9)),
            absl::ZeroDuration());
}

TEST_F(MembershipTest, RemembersTheNewestStepsAndWhomTheyLeftOut) {
  for (size_t i = 0; i <= Membership::kRememberedQuorumSteps; ++i) {
    membership_.RememberStep("step " + std::to_string(i),
                             "quorum step #" + std::to_string(i),
                             {{2, true}, {1, false}});
  }
  // The oldest was forgotten; the newest is kept, for its ranks only.
  EXPECT_FALSE(membership_.RememberedLeftOut("step 0", 1).has_value());
  std::optional<Membership::LeftOutOfStep> late =
      membership_.RememberedLeftOut("step 16", 1);
  ASSERT_TRUE(late.has_value());
  EXPECT_EQ(late->description, "quorum step #16");
  EXPECT_FALSE(late->done);
  std::optional<Membership::LeftOutOfStep> done =
      membership_.RememberedLeftOut("step 16", 2);
  ASSERT_TRUE(done.has_value());
  EXPECT_TRUE(done->done);
  EXPECT_FALSE(membership_.RememberedLeftOut("step 16", 0).has_value());
}

// A remembered step holds its reservation of the budget until it is
// forgotten: pushed out by newer ones, or by a new epoch.
TEST_F(MembershipTest, ARememberedStepHoldsItsBudgetUntilForgotten) {
  MemoryBudget budget(1 << 20);
  const size_t bytes = Membership::StepBytes("step 0", "quorum step #0", 3);
  for (size_t i = 0; i < Membership::kRememberedQuorumSteps; ++i) {
    std::vector<MemoryReservation> held;
    held.push_back(MemoryReservation::Try(&budget, bytes));
    membership_.RememberStep("step " + std::to_string(i), "quorum step",
                             {{1, false}}, std::move(held));
  }
  EXPECT_EQ(budget.used(), Membership::kRememberedQuorumSteps * bytes);
  std::vector<MemoryReservation> held;
  held.push_back(MemoryReservation::Try(&budget, bytes));
  membership_.RememberStep("newest", "quorum step", {{1, false}},
                           std::move(held));
  EXPECT_EQ(budget.used(), Membership::kRememberedQuorumSteps * bytes);
  membership_.EndEpoch("lost");
  membership_.StartNextEpoch(9);
  EXPECT_EQ(budget.used(), 0u);
}

TEST_F(MembershipTest, DonesCountsAreKeptPerGroupWithTheirBudget) {
  SeatAll();
  MemoryBudget budget(1 << 20);
  const size_t bytes = Membership::SkipRecordBytes("0,1,2", 3);
  // At least the group's name and a count for each of its ranks.
  EXPECT_GE(bytes, 5 + 3 * sizeof(uint64_t));
  std::vector<MemoryReservation> held;
  held.push_back(MemoryReservation::Try(&budget, bytes));
  EXPECT_FALSE(membership_.HasSkipRecord("0,1,2"));
  membership_.AddSkipRecord("0,1,2", std::move(held));
  EXPECT_TRUE(membership_.HasSkipRecord("0,1,2"));
  membership_.NoteSkipped(2, "0,1,2");
  membership_.NoteSkipped(0, "0,1,2");
  membership_.NoteSkipped(2, "0,1,2");
  EXPECT_EQ(membership_.Skipped(2, "0,1,2"), 2u);
  EXPECT_EQ(membership_.Skipped(0, "0,1,2"), 1u);
  EXPECT_EQ(membership_.Skipped(1, "0,1,2"), 0u);
  EXPECT_EQ(budget.used(), bytes);
  membership_.EndEpoch("lost");
  membership_.StartNextEpoch(9);
  EXPECT_FALSE(membership_.HasSkipRecord("0,1,2"));
  EXPECT_EQ(budget.used(), 0u);
}

TEST_F(MembershipTest, ANewEpochForgetsDoneAbsentAndQuorumMode) {
  SeatAll();
  membership_.StartQuorumStep({0, 1, 2}, 5);
  ASSERT_EQ(membership_.MarkDone(0), Membership::DoneMark::kLeftOut);
  membership_.MarkAbsent(1, now_);
  membership_.RememberStep("step", "quorum step #5", {{1, false}});
  membership_.EndEpoch("lost");
  membership_.StartNextEpoch(9);
  EXPECT_FALSE(membership_.quorum_mode());
  EXPECT_EQ(membership_.quorum_steps_started(), 0u);
  EXPECT_THAT(membership_.DoneRanks(), IsEmpty());
  EXPECT_THAT(membership_.AbsentRanks(), IsEmpty());
  EXPECT_FALSE(membership_.RememberedLeftOut("step", 1).has_value());
  // Sessions of the old epoch stay open until their streams end.
  EXPECT_TRUE(membership_.HasSession(Session(2)));
  EXPECT_THAT(membership_.RunningRanks(Session(2)), IsEmpty());
}

}  // namespace
}  // namespace reducer
