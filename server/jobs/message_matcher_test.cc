// MessageMatcher on its own: which message each match gets, with answers
// recorded here. Matches from any source take the earliest held message
// that is the next of its source; matches from one source take its next
// message whether held or not; matches are answered in their order, each
// waiting one holding back those after it; plain receives and the counts a
// match brings move a source's next message on; a match that says no
// leaves the message to the next; retries change nothing; inboxes of jobs
// that never match are forgotten once their messages are received.
#include "server/jobs/message_matcher.h"

#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace reducer {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

constexpr int kDst = 1;
constexpr int64_t kTag = 7;

struct Answer {
  uint64_t token;
  int source;
  uint64_t n;
  bool operator==(const Answer& o) const {
    return token == o.token && source == o.source && n == o.n;
  }
};

class MessageMatcherTest : public ::testing::Test {
 protected:
  // Answers are taken, except by the tokens in `refusing_`.
  MessageMatcher::AnswerFn answer() { return answer_; }

  void Sent(int source, uint64_t n, int destination = kDst,
            int64_t tag = kTag) {
    matcher_.Sent(source, destination, tag, n, answer());
  }
  bool Add(uint64_t number, uint64_t token, int source = -1,
           std::vector<int> sources = {0, 2, 3},
           std::vector<std::pair<int, uint64_t>> received = {}) {
    MessageMatcher::Match m;
    m.destination = kDst;
    m.tag = kTag;
    m.number = number;
    m.source = source;
    m.sources = std::move(sources);
    m.received = std::move(received);
    m.token = token;
    return matcher_.Add(std::move(m), answer());
  }

  MessageMatcher matcher_;
  std::vector<Answer> answers_;
  std::vector<uint64_t> refusing_;

 private:
  std::function<bool(uint64_t, int, uint64_t)> answer_ =
      [this](uint64_t token, int source, uint64_t n) {
        for (uint64_t t : refusing_) {
          if (t == token) return false;
        }
        answers_.push_back({token, source, n});
        return true;
      };
};

TEST_F(MessageMatcherTest, AnyTakesTheEarliestHeldMessage) {
  Sent(3, 0);
  Sent(0, 0);
  Sent(3, 1);
  ASSERT_TRUE(Add(0, 100));
  ASSERT_TRUE(Add(1, 101));
  ASSERT_TRUE(Add(2, 102));
  EXPECT_THAT(answers_, ElementsAre(Answer{100, 3, 0}, Answer{101, 0, 0},
                                    Answer{102, 3, 1}));
}

TEST_F(MessageMatcherTest, AnyWaitsForTheFirstToArriveAndHoldsLaterMatches) {
  ASSERT_TRUE(Add(0, 100));
  // From one source, but behind the waiting match: it waits too.
  ASSERT_TRUE(Add(1, 101, /*source=*/0));
  EXPECT_THAT(answers_, IsEmpty());
  Sent(2, 0);
  EXPECT_THAT(answers_, ElementsAre(Answer{100, 2, 0}, Answer{101, 0, 0}));
}

TEST_F(MessageMatcherTest, ASourcesMessagesAreTakenInTheirOrder) {
  // Message 1 of rank 0 arrived before its message 0 (another stream): it
  // is not the next of its source until message 0 is taken.
  Sent(0, 1);
  ASSERT_TRUE(Add(0, 100));
  EXPECT_THAT(answers_, IsEmpty());
  Sent(0, 0);
  ASSERT_TRUE(Add(1, 101));
  EXPECT_THAT(answers_, ElementsAre(Answer{100, 0, 0}, Answer{101, 0, 1}));
}

TEST_F(MessageMatcherTest, OnlyItsSourcesCount) {
  Sent(3, 0);
  ASSERT_TRUE(Add(0, 100, -1, {0, 2}));
  EXPECT_THAT(answers_, IsEmpty());
  Sent(2, 0);
  EXPECT_THAT(answers_, ElementsAre(Answer{100, 2, 0}));
}

TEST_F(MessageMatcherTest, ReceivesAndCountsMoveASourcesNextMessageOn) {
  Sent(0, 0);
  Sent(0, 1);
  Sent(2, 0);
  // A plain receive took rank 0's message 0; the match's counts say the
  // destination numbered rank 2's first message itself.
  matcher_.Received(0, kDst, kTag, 0);
  ASSERT_TRUE(Add(0, 100, -1, {0, 2, 3}, {{2, 1}}));
  EXPECT_THAT(answers_, ElementsAre(Answer{100, 0, 1}));
  // From one source: its next message, held or not.
  ASSERT_TRUE(Add(1, 101, /*source=*/0));
  ASSERT_TRUE(Add(2, 102, /*source=*/3));
  EXPECT_THAT(answers_, ElementsAre(Answer{100, 0, 1}, Answer{101, 0, 2},
                                    Answer{102, 3, 0}));
  // What the matches took is taken: a later send of them changes nothing.
  Sent(0, 2);
  Sent(3, 0);
  ASSERT_TRUE(Add(3, 103));
  EXPECT_THAT(answers_.size(), 3u);
  Sent(3, 1);
  EXPECT_EQ(answers_.back(), (Answer{103, 3, 1}));
}

TEST_F(MessageMatcherTest, AMatchThatSaysNoLeavesTheMessageToTheNext) {
  Sent(2, 0);
  refusing_ = {100};
  ASSERT_TRUE(Add(0, 100));
  ASSERT_TRUE(Add(1, 101));
  EXPECT_THAT(answers_, ElementsAre(Answer{101, 2, 0}));
}

TEST_F(MessageMatcherTest, MatchesAreAnsweredInTheirOrderWhateverTheirArrival) {
  Sent(0, 0);
  Sent(2, 0);
  ASSERT_TRUE(Add(1, 101));  // match 0 has not arrived
  EXPECT_THAT(answers_, IsEmpty());
  ASSERT_TRUE(Add(0, 100));
  EXPECT_THAT(answers_, ElementsAre(Answer{100, 0, 0}, Answer{101, 2, 0}));
}

TEST_F(MessageMatcherTest, ARetriedMatchChangesNothing) {
  ASSERT_TRUE(Add(0, 100));
  EXPECT_FALSE(Add(0, 200));  // waiting
  Sent(0, 0);
  EXPECT_FALSE(Add(0, 300));  // answered
  EXPECT_THAT(answers_, ElementsAre(Answer{100, 0, 0}));
}

TEST_F(MessageMatcherTest, DestinationsAndTagsHaveInboxesOfTheirOwn) {
  Sent(0, 0, /*destination=*/2);
  Sent(0, 0, kDst, /*tag=*/8);
  ASSERT_TRUE(Add(0, 100));
  EXPECT_THAT(answers_, IsEmpty());
  Sent(0, 0);
  EXPECT_THAT(answers_, ElementsAre(Answer{100, 0, 0}));
}

TEST_F(MessageMatcherTest, InboxesWithoutMatchesAreForgottenOnceReceived) {
  Sent(0, 0);
  Sent(2, 0, /*destination=*/3);
  EXPECT_EQ(matcher_.inboxes(), 2u);
  matcher_.Received(0, kDst, kTag, 0);
  matcher_.Received(2, 3, kTag, 0);
  EXPECT_EQ(matcher_.inboxes(), 0u);
  // An inbox that had a match keeps what was taken for the epoch.
  Sent(0, 1);
  ASSERT_TRUE(Add(0, 100));
  EXPECT_EQ(matcher_.inboxes(), 1u);
  matcher_.Clear();
  EXPECT_EQ(matcher_.inboxes(), 0u);
}

}  // namespace
}  // namespace reducer
