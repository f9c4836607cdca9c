// QuorumStep through a recording Host: absent ranks left out at the start,
// a look again asked for once at the grace's end, the step ended over the
// ranks that arrived (the others left out) or failed once too few can
// still arrive, and the refusal of a late rank.
#include "server/engine/quorum_step.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/engine/kind_strategy.h"
#include "tests/matchers.h"

namespace reducer {
namespace {

// Records what the step asks of its collective, and marks a rank left out
// in `ranks` as the Collective does.
class RecordingHost final : public QuorumStep::Host {
 public:
  explicit RecordingHost(std::vector<RankState>& ranks) : ranks_(ranks) {}

  void LookAgainAt(absl::Time when) override { looks.push_back(when); }
  void StepFailed(const absl::Status& why) override { failure = why; }
  void LeaveOut(int index) override {
    ranks_[index].left_out = true;
    left_out.push_back(index);
  }
  void StepEnded(const std::vector<int>& contributors,
                 const std::vector<int>& newly_left_out) override {
    ++ended;
    ended_over = contributors;
    ended_without = newly_left_out;
  }

  std::vector<absl::Time> looks;
  absl::Status failure;
  std::vector<int> left_out;  // every LeaveOut, in order
  int ended = 0;
  std::vector<int> ended_over;
  std::vector<int> ended_without;

 private:
  std::vector<RankState>& ranks_;
};

TEST(QuorumStepTest, AbsentRanksAreLeftOutAtTheStartAndTheRestEndIt) {
  std::vector<RankState> ranks(3);
  RecordingHost host(ranks);
  QuorumStep step(3, QuorumSettings{2, absl::Hours(1)});
  step.Start(/*absent=*/{1}, /*joining=*/{}, ranks, host);
  EXPECT_THAT(host.left_out, ElementsAre(1));
  step.Arrived(0, absl::Now(), ranks, host);
  EXPECT_EQ(host.ended, 0);
  step.Arrived(2, absl::Now(), ranks, host);
  EXPECT_EQ(host.ended, 1);
  EXPECT_THAT(host.ended_over, ElementsAre(0, 2));
  EXPECT_THAT(host.ended_without, IsEmpty());  // named when it was lost
  EXPECT_TRUE(host.failure.ok());
}

TEST(QuorumStepTest, GraceEndsTheStepWithoutTheRanksStillMissing) {
  std::vector<RankState> ranks(3);
  RecordingHost host(ranks);
  QuorumStep step(3, QuorumSettings{2, absl::Seconds(1)});
  step.Start({}, /*joining=*/{}, ranks, host);
  const absl::Time first = absl::Now();
  step.Arrived(0, first, ranks, host);
  step.Arrived(1, first, ranks, host);
  // One look at the grace's end, asked for once.
  ASSERT_EQ(host.looks.size(), 1u);
  EXPECT_EQ(host.looks[0], first + absl::Seconds(1));
  EXPECT_EQ(host.ended, 0);
  step.Decide(first + absl::Seconds(2), ranks, host);
  EXPECT_EQ(host.ended, 1);
  EXPECT_THAT(host.ended_over, ElementsAre(0, 1));
  EXPECT_THAT(host.ended_without, ElementsAre(2));
  EXPECT_TRUE(ranks[2].left_out);
}

TEST(QuorumStepTest, JoiningRanksAreMarkedAndDoNotContribute) {
  std::vector<RankState> ranks(2);
  RecordingHost host(ranks);
  QuorumStep step(2, QuorumSettings{0, absl::Hours(1)});
  step.Start({}, /*joining=*/{1}, ranks, host);
  EXPECT_TRUE(ranks[1].joining);
  step.Arrived(1, absl::Now(), ranks, host);
  step.Arrived(0, absl::Now(), ranks, host);
  EXPECT_EQ(host.ended, 1);
  EXPECT_THAT(host.ended_over, ElementsAre(0));
  EXPECT_THAT(host.left_out, IsEmpty());
}

TEST(QuorumStepTest, TooManyLostRanksFailTheStep) {
  std::vector<RankState> ranks(2);
  RecordingHost host(ranks);
  QuorumStep step(2, QuorumSettings{2, absl::Hours(1)});
  step.Start({}, {}, ranks, host);
  step.Arrived(0, absl::Now(), ranks, host);
  step.Lost(1, absl::Now(), ranks, host);
  EXPECT_THAT(host.failure, StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_EQ(host.ended, 0);
}

TEST(QuorumStepTest, ALateRankIsToldToConnectAgain) {
  EXPECT_THAT(
      QuorumStep::LateRefusal("quorum \"step3\" in job j1", 2),
      StatusIs(absl::StatusCode::kFailedPrecondition,
               AllOf(HasSubstr("quorum \"step3\" in job j1 finished without "
                               "rank 2"),
                     HasSubstr("Connect again"))));
}

}  // namespace
}  // namespace reducer
