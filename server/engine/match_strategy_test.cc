// Matches (CollectiveKind::kMatch) through a Collective and its
// MatchStrategy, with recording rank channels: the answer the job hands
// over reaches the rank as one int64 tensor [2]; an unanswered match stays
// undecided (the end of an epoch fails it, a cancelled call is detached and
// its retry gets the answer, even one given while it was detached); its
// deadline names what it waited for; an answer to a finished or failed
// match is refused.
#include "server/engine/match_strategy.h"

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/data_type.h"
#include "core/fingerprint.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/engine/collective.h"
#include "server/engine/collective_test_base.h"
#include "server/engine/fake_rank_channel.h"
#include "tests/matchers.h"

namespace reducer {
namespace {

Fingerprint Match(int receiver, int64_t tag, int source = -1) {
  Fingerprint fp;
  fp.kind = CollectiveKind::kMatch;
  fp.group = {receiver};
  fp.tag = tag;
  fp.root = source;
  fp.sources = {0, 2, 3};
  return fp;
}

// The answer as its bytes: two int64s.
std::string Answer(int64_t source, int64_t n) {
  const int64_t v[2] = {source, n};
  return std::string(reinterpret_cast<const char*>(v), sizeof(v));
}

class MatchTest : public CollectiveTestBase {
 protected:
  std::shared_ptr<Collective> Make(absl::Duration timeout = absl::Seconds(60)) {
    return MakeCollective(CollectiveKind::kMatch, {1},
                          "match \"p2p *>1 tag 7 #0\"", timeout);
  }

  void ExpectAnswer(FakeRankChannel& channel, int64_t source, int64_t n) {
    ASSERT_TRUE(channel.WaitEnded());
    EXPECT_TRUE(channel.finished_ok()) << channel.failure();
    ASSERT_THAT(channel.specs(), SizeIs(1));
    TensorSpec two;
    two.dtype = DataType::kInt64;
    two.shape = {2};
    EXPECT_EQ(channel.specs()[0], two);
    EXPECT_EQ(channel.result(), Answer(source, n));
  }
};

TEST_F(MatchTest, TheJobsAnswerReachesTheRank) {
  std::shared_ptr<Collective> c = Make();
  auto channel = std::make_shared<FakeRankChannel>();
  ASSERT_TRUE(c->Attach(channel, 1, Match(1, 7), "s1/0"));
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_EQ(channel->message_count(), 0);  // attached, nothing to say yet
  EXPECT_FALSE(c->done());
  EXPECT_TRUE(c->SetResultValues({3, 5}));
  ExpectAnswer(*channel, 3, 5);
  EXPECT_TRUE(c->done());
  EXPECT_FALSE(c->SetResultValues({2, 0}));  // finished: takes no other
}

TEST_F(MatchTest, AnUnansweredMatchFailsWithItsEpoch) {
  std::shared_ptr<Collective> c = Make();
  auto channel = std::make_shared<FakeRankChannel>();
  ASSERT_TRUE(c->Attach(channel, 1, Match(1, 7), ""));
  c->FailUnlessDecided(absl::AbortedError("job j1 epoch 1 aborted: rank 0's "
                                          "session was lost"));
  ASSERT_TRUE(channel->WaitEnded());
  EXPECT_THAT(channel->failure(), StatusIs(absl::StatusCode::kAborted));
  EXPECT_FALSE(c->SetResultValues({0, 0}));
}

TEST_F(MatchTest, AnAnsweredMatchIsDecided) {
  std::shared_ptr<Collective> c = Make();
  auto channel = std::make_shared<FakeRankChannel>();
  ASSERT_TRUE(c->Attach(channel, 1, Match(1, 7, 2), ""));
  EXPECT_TRUE(c->SetResultValues({2, 0}));
  c->FailUnlessDecided(absl::AbortedError("too late"));
  ExpectAnswer(*channel, 2, 0);
}

TEST_F(MatchTest, ACancelledCallIsDetachedAndItsRetryGetsTheAnswer) {
  std::shared_ptr<Collective> c = Make();
  auto first = std::make_shared<FakeRankChannel>();
  ASSERT_TRUE(c->Attach(first, 1, Match(1, 7), "s1/4"));
  c->OnRankCancelled(1, first.get());
  EXPECT_FALSE(c->done());
  EXPECT_FALSE(c->HasAttached(1));
  // Answered while nobody waits: kept for the retry.
  EXPECT_TRUE(c->SetResultValues({0, 9}));
  auto retry = std::make_shared<FakeRankChannel>();
  ASSERT_TRUE(c->Attach(retry, 1, Match(1, 7), "s1/4"));
  ExpectAnswer(*retry, 0, 9);
  EXPECT_EQ(first->message_count(), 0);
  EXPECT_TRUE(first->failure().ok());
}

TEST_F(MatchTest, ItsDeadlineSaysWhatItWaitedFor) {
  std::shared_ptr<Collective> c = Make(absl::Milliseconds(200));
  auto channel = std::make_shared<FakeRankChannel>();
  ASSERT_TRUE(c->Attach(channel, 1, Match(1, 7), ""));
  ASSERT_TRUE(channel->WaitEnded());
  EXPECT_THAT(channel->failure(),
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       "match \"p2p *>1 tag 7 #0\" in job j1: no rank sent to "
                       "rank 1 with tag 7 within 200ms"));
  EXPECT_FALSE(c->SetResultValues({0, 0}));
}

TEST_F(MatchTest, AReceiveFromOneSourceSaysWhichEarlierMatchHeldIt) {
  std::shared_ptr<Collective> c = Make(absl::Milliseconds(200));
  auto channel = std::make_shared<FakeRankChannel>();
  ASSERT_TRUE(c->Attach(channel, 1, Match(1, 7, 3), ""));
  ASSERT_TRUE(channel->WaitEnded());
  EXPECT_THAT(channel->failure(),
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       "match \"p2p *>1 tag 7 #0\" in job j1: rank 1's "
                       "receive from rank 3 with tag 7 waited for its earlier "
                       "receive from any rank with that tag, which no send "
                       "matched within 200ms"));
}

}  // namespace
}  // namespace reducer
