#include "core/quorum_rule.h"

#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/matchers.h"

namespace reducer {
namespace {

using State = QuorumDecision::State;

const absl::Time kT0 = absl::FromUnixSeconds(1000);
const absl::Duration kGrace = absl::Seconds(2);
const absl::Duration kMs = absl::Milliseconds(1);

// Matches a kDecided decision whose contributors match `contributors`.
template <typename ContributorsMatcher>
::testing::Matcher<QuorumDecision> DecidedOver(
    ContributorsMatcher contributors) {
  return ::testing::AllOf(
      ::testing::Field("state", &QuorumDecision::state, State::kDecided),
      ::testing::Field("contributors", &QuorumDecision::contributors,
                       contributors));
}

QuorumSettings Settings(int min_ranks, absl::Duration grace) {
  QuorumSettings settings;
  settings.min_ranks = min_ranks;
  settings.grace = grace;
  return settings;
}

TEST(QuorumRuleTest, EveryRankInEndsAtOnceBeforeTheGrace) {
  QuorumRule rule(4, Settings(0, kGrace));
  for (int i : {2, 0, 3}) rule.Arrived(i, kT0 + i * kMs);
  QuorumDecision waiting = rule.Decide(kT0 + 5 * kMs);
  EXPECT_EQ(waiting.state, State::kWaiting);
  EXPECT_EQ(waiting.wake_at, kT0 + 2 * kMs + kGrace);  // from the first (2)
  rule.Arrived(1, kT0 + 6 * kMs);
  EXPECT_THAT(rule.Decide(kT0 + 6 * kMs), DecidedOver(ElementsAre(0, 1, 2, 3)));
}

TEST(QuorumRuleTest, NothingArrivedWaitsForAnArrival) {
  QuorumRule rule(3, Settings(1, kGrace));
  QuorumDecision decision = rule.Decide(kT0 + absl::Hours(1));
  EXPECT_EQ(decision.state, State::kWaiting);
  EXPECT_EQ(decision.wake_at, absl::InfiniteFuture());
}

TEST(QuorumRuleTest, ALateRankIsLeftOutAtTheGracesEnd) {
  QuorumRule rule(4, Settings(3, kGrace));
  for (int i : {1, 0, 2}) rule.Arrived(i, kT0 + i * kMs);
  EXPECT_EQ(rule.Decide(kT0 + kGrace - kMs).state, State::kWaiting);
  EXPECT_THAT(rule.Decide(kT0 + kMs + kGrace),
              DecidedOver(ElementsAre(0, 1, 2)));
}

TEST(QuorumRuleTest, TooFewAtTheGracesEndWaitForTheArrivalThatMakesEnough) {
  QuorumRule rule(4, Settings(3, kGrace));
  rule.Arrived(3, kT0);
  rule.Arrived(1, kT0 + kMs);
  QuorumDecision short_one = rule.Decide(kT0 + 2 * kGrace);
  EXPECT_EQ(short_one.state, State::kWaiting);
  EXPECT_EQ(short_one.wake_at, absl::InfiniteFuture());
  rule.Arrived(0, kT0 + 3 * kGrace);
  EXPECT_THAT(rule.Decide(kT0 + 3 * kGrace), DecidedOver(ElementsAre(0, 1, 3)));
}

TEST(QuorumRuleTest, ADeadRankIsNotWaitedFor) {
  QuorumRule rule(4, Settings(2, kGrace));
  rule.Arrived(0, kT0);
  rule.Arrived(1, kT0);
  rule.Arrived(2, kT0);
  EXPECT_EQ(rule.Decide(kT0 + kMs).state, State::kWaiting);
  rule.Died(3);
  // Long before the grace's end.
  EXPECT_THAT(rule.Decide(kT0 + kMs), DecidedOver(ElementsAre(0, 1, 2)));
}

TEST(QuorumRuleTest, ARankThatDiedAfterArrivingDoesNotContribute) {
  QuorumRule rule(3, Settings(1, kGrace));
  rule.Arrived(0, kT0);
  rule.Arrived(2, kT0 + kMs);
  rule.Died(0);
  rule.Arrived(0, kT0 + 2 * kMs);  // a dead rank's arrival is ignored
  QuorumDecision waiting = rule.Decide(kT0 + 2 * kMs);
  EXPECT_EQ(waiting.state, State::kWaiting);
  EXPECT_EQ(waiting.wake_at, kT0 + kGrace);  // still from the first arrival
  rule.Arrived(1, kT0 + 3 * kMs);
  EXPECT_THAT(rule.Decide(kT0 + 3 * kMs), DecidedOver(ElementsAre(1, 2)));
}

TEST(QuorumRuleTest, TooManyDeadMakeItImpossible) {
  QuorumRule whole(3, Settings(0, kGrace));
  whole.Arrived(0, kT0);
  whole.Died(2);
  QuorumDecision decision = whole.Decide(kT0);
  EXPECT_EQ(decision.state, State::kImpossible);
  EXPECT_THAT(decision.why, StatusIs(absl::StatusCode::kFailedPrecondition,
                                     HasSubstr("needs 3 contributing")));
  EXPECT_THAT(decision.why.message(), HasSubstr("[2]"));

  QuorumRule two(4, Settings(3, kGrace));
  two.Died(1);
  EXPECT_EQ(two.Decide(kT0).state, State::kWaiting);
  two.Died(3);
  QuorumDecision impossible = two.Decide(kT0);
  EXPECT_EQ(impossible.state, State::kImpossible);
  EXPECT_THAT(impossible.why.message(), HasSubstr("[1, 3]"));
  EXPECT_THAT(impossible.why.message(), HasSubstr("at most 2"));
}

TEST(QuorumRuleTest, ZeroGraceEndsAtTheFirstArrivalThatMeetsMinRanks) {
  QuorumRule rule(3, Settings(1, absl::ZeroDuration()));
  rule.Arrived(1, kT0);
  EXPECT_THAT(rule.Decide(kT0), DecidedOver(ElementsAre(1)));
}

TEST(QuorumRuleTest, ValidateNamesTheBadSetting) {
  EXPECT_TRUE(QuorumRule::Validate(4, Settings(4, kGrace)).ok());
  absl::Status too_many = QuorumRule::Validate(4, Settings(5, kGrace));
  EXPECT_THAT(too_many, StatusIs(absl::StatusCode::kInvalidArgument,
                                 HasSubstr("min_ranks is 5")));
  EXPECT_THAT(QuorumRule::Validate(4, Settings(-1, kGrace)).message(),
              HasSubstr("min_ranks is -1"));
  EXPECT_THAT(QuorumRule::Validate(4, Settings(1, -absl::Seconds(1))).message(),
              HasSubstr("grace is -1s"));
  EXPECT_THAT(
      QuorumRule::Validate(4, Settings(1, absl::InfiniteDuration())).message(),
      HasSubstr("finite"));
}

TEST(QuorumRuleTest, AJoiningRankIsWaitedForButNeitherStartsTheGraceNorCounts) {
  QuorumRule rule(4, Settings(3, kGrace));
  rule.Joining(3);
  rule.Arrived(3, kT0);
  QuorumDecision alone = rule.Decide(kT0 + 10 * kGrace);
  EXPECT_EQ(alone.state, State::kWaiting);  // no grace runs from a joiner
  EXPECT_EQ(alone.wake_at, absl::InfiniteFuture());
  for (int i : {0, 1}) rule.Arrived(i, kT0 + 11 * kGrace);
  // 0, 1 and 3 arrived, but 3 does not count toward min_ranks 3.
  EXPECT_EQ(rule.Decide(kT0 + 13 * kGrace).state, State::kWaiting);
  rule.Arrived(2, kT0 + 13 * kGrace);
  QuorumDecision decided = rule.Decide(kT0 + 13 * kGrace);
  EXPECT_THAT(decided, DecidedOver(ElementsAre(0, 1, 2)));
  EXPECT_THAT(decided.joined, ElementsAre(3));
}

TEST(QuorumRuleTest, AJoiningRankNotArrivedAtTheGracesEndIsLeftOut) {
  QuorumRule rule(4, Settings(2, kGrace));
  rule.Joining(1);
  for (int i : {0, 2, 3}) rule.Arrived(i, kT0);
  EXPECT_EQ(rule.Decide(kT0 + kMs).state, State::kWaiting);  // waits for 1
  QuorumDecision decided = rule.Decide(kT0 + kGrace);
  EXPECT_THAT(decided, DecidedOver(ElementsAre(0, 2, 3)));
  EXPECT_TRUE(decided.joined.empty());
}

TEST(QuorumRuleTest, MinRanksZeroMeansEveryRankNotJoining) {
  QuorumRule rule(3, Settings(0, kGrace));
  rule.Joining(2);
  rule.Arrived(0, kT0);
  rule.Arrived(2, kT0);
  EXPECT_EQ(rule.Decide(kT0 + kGrace).state, State::kWaiting);
  rule.Arrived(1, kT0 + kGrace);
  QuorumDecision decided = rule.Decide(kT0 + kGrace);
  EXPECT_THAT(decided, DecidedOver(ElementsAre(0, 1)));
  EXPECT_THAT(decided.joined, ElementsAre(2));
}

TEST(QuorumRuleTest, AWithdrawnArrivalIsWaitedForAgain) {
  QuorumRule rule(2, Settings(0, kGrace));
  rule.Arrived(0, kT0);
  rule.Arrived(1, kT0);
  rule.Withdrew(1);
  EXPECT_EQ(rule.Decide(kT0 + kMs).state, State::kWaiting);
  EXPECT_EQ(rule.Decide(kT0 + kGrace).state, State::kWaiting);  // needs both
  rule.Arrived(1, kT0 + kGrace);
  EXPECT_EQ(rule.Decide(kT0 + kGrace).state, State::kDecided);
}

}  // namespace
}  // namespace reducer
