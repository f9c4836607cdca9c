#include "client/retry_sequence.h"

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/matchers.h"

namespace reducer {
namespace {

using Next = RetrySequence::Next;

const absl::Time kStart = absl::FromUnixSeconds(1000);
const absl::Status kReset = absl::UnavailableError("connection reset");
const absl::Status kNoneKept =
    absl::NotFoundError("no result kept for attempt 7");
const absl::Status kIntact = absl::OkStatus();
const absl::Status kLost = absl::UnavailableError("rank 2 is gone");

TEST(RetrySequenceTest, AFailureThatIsNotUnavailableStandsAsItIs) {
  RetrySequence retries;
  const absl::Status wrong = absl::InvalidArgumentError("shapes differ");
  EXPECT_EQ(retries.AfterFailure(wrong, false, kIntact, kStart), Next::kStop);
  EXPECT_EQ(retries.failure(), wrong);
}

TEST(RetrySequenceTest, UnavailableIsReplayedAfterPausesThatDouble) {
  RetrySequence retries;
  ASSERT_EQ(retries.AfterFailure(kReset, true, kIntact, kStart), Next::kReplay);
  EXPECT_TRUE(retries.replaying());
  EXPECT_EQ(retries.next_at(), kStart + absl::Milliseconds(100));
  // The replay did not reach reducerd either: ask again, after twice as long.
  const absl::Time second = kStart + absl::Milliseconds(150);
  ASSERT_EQ(retries.AfterFailure(kReset, false, kIntact, second), Next::kReplay);
  EXPECT_EQ(retries.next_at(), second + absl::Milliseconds(200));
}

TEST(RetrySequenceTest, ANotFoundReplayOfAnAttemptThatGotNothingIsResentAtOnce) {
  RetrySequence retries;
  ASSERT_EQ(retries.AfterFailure(kReset, false, kIntact, kStart), Next::kReplay);
  const absl::Time answered = kStart + absl::Milliseconds(120);
  ASSERT_EQ(retries.AfterFailure(kNoneKept, false, kIntact, answered),
            Next::kResend);
  EXPECT_FALSE(retries.replaying());
  EXPECT_EQ(retries.next_at(), answered);
  // The resend fails too: its result is asked for next.
  EXPECT_EQ(retries.AfterFailure(kReset, false, kIntact, answered),
            Next::kReplay);
  EXPECT_TRUE(retries.replaying());
}

// Each case: the first attempt failed UNAVAILABLE and its replay was
// answered `replayed`; what stands is the first failure with that answer.
struct StandsCase {
  const char* name;
  bool received_any;
  absl::Status session;
  absl::Status replayed;
};

class FirstFailureStandsTest : public ::testing::TestWithParam<StandsCase> {};

TEST_P(FirstFailureStandsTest, WithWhatTheReplayWasAnswered) {
  const StandsCase& c = GetParam();
  RetrySequence retries;
  ASSERT_EQ(retries.AfterFailure(kReset, c.received_any, c.session, kStart),
            Next::kReplay);
  ASSERT_EQ(retries.AfterFailure(c.replayed, false, c.session,
                                 kStart + absl::Milliseconds(100)),
            Next::kStop);
  EXPECT_THAT(retries.failure(),
              StatusIs(absl::StatusCode::kUnavailable,
                       AllOf(HasSubstr("connection reset"),
                             HasSubstr("reducerd answered"),
                             HasSubstr(c.replayed.message()))));
}

INSTANTIATE_TEST_SUITE_P(
    Cases, FirstFailureStandsTest,
    ::testing::Values(
        // Part of the answer had arrived: sending it again could count twice.
        StandsCase{"PartOfTheAnswerArrived", true, kIntact, kNoneKept},
        // The session is lost: the other ranks have moved on.
        StandsCase{"SessionLost", false, kLost, kNoneKept},
        // reducerd refused the replay itself.
        StandsCase{"ReplayRefused", false, kIntact,
                   absl::InvalidArgumentError("replayed declaring other tensors")}),
    [](const ::testing::TestParamInfo<StandsCase>& info) {
      return info.param.name;
    });

// Replays every time one is due, each answered UNAVAILABLE; returns how many
// were sent before the sequence stopped, and when it stopped.
int ReplaysUntilStop(RetrySequence* retries, const absl::Status& session,
                     absl::Time* stopped_at) {
  absl::Time now = kStart;
  int replays = 0;
  while (retries->AfterFailure(kReset, false, session, now) == Next::kReplay) {
    ++replays;
    now = retries->next_at();
  }
  *stopped_at = now;
  return replays;
}

TEST(RetrySequenceTest, ReplaysStopWhenTheBudgetIsSpent) {
  // Pauses 100, 200, 400, 800, 800 ms...: the last replay that starts
  // before 3 s is at 100+200+400+800+800 = 2300 ms; the next would be at
  // 3100 ms.
  RetrySequence intact;
  absl::Time stopped_at;
  EXPECT_EQ(ReplaysUntilStop(&intact, kIntact, &stopped_at), 5);
  EXPECT_EQ(stopped_at, kStart + absl::Milliseconds(2300));
  EXPECT_THAT(intact.failure().message(), HasSubstr("connection reset"));
  // A lost session gets 10 s: 2300 ms, then 800 ms each up to 9500 ms.
  RetrySequence lost;
  EXPECT_EQ(ReplaysUntilStop(&lost, kLost, &stopped_at), 14);
  EXPECT_EQ(stopped_at, kStart + absl::Milliseconds(9500));
}

TEST(RetrySequenceTest, TheCollectivesDeadlineCutsTheBudgetShort) {
  // Deadline at 250 ms: the replay at 100 ms, none at 300 ms.
  RetrySequence retries(kStart + absl::Milliseconds(250));
  absl::Time stopped_at;
  EXPECT_EQ(ReplaysUntilStop(&retries, kIntact, &stopped_at), 1);
  EXPECT_EQ(stopped_at, kStart + absl::Milliseconds(100));
}

TEST(RetrySequenceTest,
     AReplayThatWaitedOnAStalledReducerdStartsTheBudgetAgain) {
  // A lost session's first failure at 0 s: replays until 10 s, unless one
  // waits. The replay sent at 100 ms hangs (reducerd stopped) until 14 s,
  // past the budget; reducerd was there all along, so replays go on.
  RetrySequence retries(kStart + absl::Seconds(60));
  ASSERT_EQ(retries.AfterFailure(kReset, true, kLost, kStart), Next::kReplay);
  const absl::Time resumed = kStart + absl::Seconds(14);
  ASSERT_EQ(retries.AfterFailure(kReset, false, kLost, resumed), Next::kReplay);
  EXPECT_EQ(retries.next_at(), resumed + absl::Milliseconds(200));
  // Replays refused at once from then on stop 10 s after the stalled one.
  absl::Time now = retries.next_at();
  int replays = 0;
  while (retries.AfterFailure(kReset, false, kLost, now) == Next::kReplay) {
    ++replays;
    now = retries.next_at();
  }
  EXPECT_GT(now, resumed + absl::Seconds(9));
  EXPECT_LE(now, resumed + absl::Seconds(10));
  EXPECT_THAT(retries.failure().message(), HasSubstr("connection reset"));
}

TEST(RetrySequenceTest, ReplaysThatFindReducerdStalledGoOnUntilTheDeadline) {
  // Each replay fails at once, but reducerd took the connection and never
  // answered: the budget starts again at each, up to the deadline (30 s).
  const absl::Status stalled = absl::UnavailableError(
      "failed to connect to all addresses; last error: UNKNOWN: "
      "connection attempt timed out before receiving SETTINGS frame");
  RetrySequence retries(kStart + absl::Seconds(30));
  ASSERT_EQ(retries.AfterFailure(kReset, true, kLost, kStart), Next::kReplay);
  absl::Time now = retries.next_at();
  while (retries.AfterFailure(stalled, false, kLost, now) == Next::kReplay) {
    now = retries.next_at();
  }
  EXPECT_GT(now, kStart + absl::Seconds(29));
  EXPECT_LE(now, kStart + absl::Seconds(30));
  EXPECT_THAT(retries.failure().message(), HasSubstr("SETTINGS frame"));
  // Refused at once (reducerd gone): the budget is not renewed.
  RetrySequence gone(kStart + absl::Seconds(30));
  ASSERT_EQ(gone.AfterFailure(kReset, true, kLost, kStart), Next::kReplay);
  now = gone.next_at();
  const absl::Status refused =
      absl::UnavailableError("failed to connect: Connection refused");
  while (gone.AfterFailure(refused, false, kLost, now) == Next::kReplay) {
    now = gone.next_at();
  }
  EXPECT_LE(now, kStart + kReplayBudget);
}

TEST(RetrySequenceTest, AStalledReplayNeverRunsPastTheDeadline) {
  RetrySequence retries(kStart + absl::Seconds(15));
  ASSERT_EQ(retries.AfterFailure(kReset, true, kLost, kStart), Next::kReplay);
  // Hung until 14.9 s: the budget starts again but stops at the deadline.
  EXPECT_EQ(retries.AfterFailure(kReset, false, kLost,
                                 kStart + absl::Milliseconds(14900)),
            Next::kStop);
}

}  // namespace
}  // namespace reducer
