// KeptResults: what is found again, by whom, and when it is forgotten, and
// that every byte it reserved goes back to its budget.
#include "server/engine/kept_results.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "server/engine/clock.h"
#include "server/engine/string_bytes.h"

namespace reducer {
namespace {

// One message holding `bytes` at `offset`.
ResultMessage Message(uint64_t offset, const std::string& bytes) {
  ResultMessage m;
  m.offset = offset;
  m.data.push_back(StringBytes(bytes));
  return m;
}

std::string Joined(const std::vector<ResultMessage>& messages) {
  std::string out;
  for (const ResultMessage& m : messages) {
    for (const SharedBytes& s : m.data) out.append(s.data(), s.size());
  }
  return out;
}

// Reserves `bytes` for each of the results of attempts s/0 .. s/(count-1)
// in turn and keeps it: `messages`, said to hold `bytes`.
void ReserveAndKeep(KeptResults& kept, int count, size_t bytes,
                    const std::vector<ResultMessage>& messages) {
  for (int i = 0; i < count; ++i) {
    ASSERT_TRUE(kept.Reserve(bytes)) << i;
    kept.Keep(absl::StrCat("s/", i), 0, {}, messages, bytes);
  }
}

TEST(KeptResultsTest, AKeptResultIsFoundByItsAttemptAndRankOnly) {
  MemoryBudget budget(1 << 20);
  KeptResults kept(&budget, absl::Seconds(30), /*entry_bytes=*/0);
  ASSERT_TRUE(kept.Reserve(8));
  kept.Keep("s1/7", 2, {}, {Message(0, "abcd"), Message(4, "efgh")}, 8);
  std::optional<KeptResults::Kept> found = kept.Find("s1/7", 2);
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(Joined(found->messages), "abcdefgh");
  EXPECT_EQ(found->messages[1].offset, 4u);
  EXPECT_FALSE(kept.Find("s1/7", 3).has_value());  // another rank
  EXPECT_FALSE(kept.Find("s1/8", 2).has_value());  // never kept
  // Found again as often as asked: a second replay may follow a lost first.
  EXPECT_TRUE(kept.Find("s1/7", 2).has_value());
  EXPECT_EQ(budget.used(), 8u);
}

TEST(KeptResultsTest, AnAcknowledgementForgetsTheSessionsAttemptsBelowIt) {
  MemoryBudget budget(1 << 20);
  KeptResults kept(&budget, absl::Seconds(30), /*entry_bytes=*/0);
  for (const char* id : {"s1/3", "s1/4", "s1/5", "s2/3"}) {
    ASSERT_TRUE(kept.Reserve(4));
    kept.Keep(id, 0, {}, {Message(0, "wxyz")}, 4);
  }
  kept.Acknowledge("s1", 5);
  EXPECT_FALSE(kept.Find("s1/3", 0).has_value());
  EXPECT_FALSE(kept.Find("s1/4", 0).has_value());
  EXPECT_TRUE(kept.Find("s1/5", 0).has_value());
  EXPECT_TRUE(kept.Find("s2/3", 0).has_value());  // another session's
  EXPECT_EQ(kept.size(), 2u);
  EXPECT_EQ(budget.used(), 8u);
  // A session id that is a prefix of another is not that session.
  kept.Acknowledge("s", 100);
  EXPECT_EQ(kept.size(), 2u);
}

TEST(KeptResultsTest, AResultIsForgottenOnceItsTimeIsUp) {
  MemoryBudget budget(1 << 20);
  KeptResults kept(&budget, absl::ZeroDuration(), /*entry_bytes=*/0);
  ASSERT_TRUE(kept.Reserve(4));
  kept.Keep("s1/1", 0, {}, {Message(0, "wxyz")}, 4);
  EXPECT_FALSE(kept.Find("s1/1", 0).has_value());
  EXPECT_EQ(budget.used(), 0u);
}

TEST(KeptResultsTest, AResultIsKeptForItsTimeOnTheGivenClock) {
  MemoryBudget budget(1 << 20);
  FakeClock clock;
  KeptResults kept(&budget, absl::Seconds(30), /*entry_bytes=*/0, &clock);
  ASSERT_TRUE(kept.Reserve(4));
  kept.Keep("s1/1", 0, {}, {Message(0, "wxyz")}, 4);
  clock.Advance(absl::Seconds(29));
  EXPECT_TRUE(kept.Find("s1/1", 0).has_value());
  clock.Advance(absl::Seconds(2));
  EXPECT_FALSE(kept.Find("s1/1", 0).has_value());
  EXPECT_EQ(budget.used(), 0u);
}

TEST(KeptResultsTest, KeepingTheSameAttemptAgainReplacesIt) {
  MemoryBudget budget(1 << 20);
  KeptResults kept(&budget, absl::Seconds(30), /*entry_bytes=*/0);
  ASSERT_TRUE(kept.Reserve(4));
  kept.Keep("s1/1", 0, {}, {Message(0, "old!")}, 4);
  ASSERT_TRUE(kept.Reserve(8));
  kept.Keep("s1/1", 0, {}, {Message(0, "new one!")}, 8);
  EXPECT_EQ(Joined(kept.Find("s1/1", 0)->messages), "new one!");
  EXPECT_EQ(budget.used(), 8u);
  EXPECT_EQ(kept.bytes(), 8u);
}

TEST(KeptResultsTest, RoomIsLimitedAndEveryByteGoesBack) {
  MemoryBudget budget(800);
  KeptResults kept(&budget, absl::Seconds(30), /*entry_bytes=*/0);
  EXPECT_FALSE(kept.Reserve(101));  // over an eighth of the budget
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(kept.Reserve(100)) << i;
  EXPECT_FALSE(kept.Reserve(1));  // no room left
  for (int i = 0; i < 7; ++i) {
    kept.Keep(absl::StrCat("s/", i), 0, {}, {Message(0, "x")}, 100);
  }
  kept.Unreserve(100);  // the eighth's collective failed
  EXPECT_EQ(budget.used(), 700u);
  kept.Clear();
  EXPECT_EQ(budget.used(), 0u);
  EXPECT_EQ(kept.size(), 0u);
}

TEST(KeptResultsTest, NoRoomForgetsTheOldestKeptFirst) {
  MemoryBudget budget(800);
  KeptResults kept(&budget, absl::Seconds(30), /*entry_bytes=*/0);
  ASSERT_NO_FATAL_FAILURE(ReserveAndKeep(kept, 8, 100, {Message(0, "x")}));
  ASSERT_TRUE(kept.Reserve(100));  // s/0 makes room
  EXPECT_FALSE(kept.Find("s/0", 0).has_value());
  EXPECT_TRUE(kept.Find("s/1", 0).has_value());
  EXPECT_EQ(budget.used(), 800u);
}

TEST(KeptResultsTest, NumbersReceivedAboveTheMarkAreForgottenToo) {
  MemoryBudget budget(1 << 20);
  KeptResults kept(&budget, absl::Seconds(30), /*entry_bytes=*/0);
  for (const char* id : {"s1/3", "s1/4", "s1/5"}) {
    ASSERT_TRUE(kept.Reserve(4));
    kept.Keep(id, 0, {}, {Message(0, "wxyz")}, 4);
  }
  const uint64_t received[] = {5};
  kept.Acknowledge("s1", 4, received);  // s1/4 is still out
  EXPECT_FALSE(kept.Find("s1/3", 0).has_value());
  EXPECT_TRUE(kept.Find("s1/4", 0).has_value());
  EXPECT_FALSE(kept.Find("s1/5", 0).has_value());
}

TEST(KeptResultsTest, DestructionGivesBackWhatItHeld) {
  MemoryBudget budget(1 << 20);
  {
    KeptResults kept(&budget, absl::Seconds(30), /*entry_bytes=*/0);
    ASSERT_TRUE(kept.Reserve(4));
    kept.Keep("s1/1", 0, {}, {Message(0, "wxyz")}, 4);
  }
  EXPECT_EQ(budget.used(), 0u);
}

// Results of no bytes (a barrier's) hold their entry's room, so that even
// they are bounded: past the room, the oldest are forgotten.
TEST(KeptResultsTest, EntriesOfNoBytesAreBoundedByTheirEntryRoom) {
  MemoryBudget budget(800);
  KeptResults kept(&budget, absl::Seconds(30), /*entry_bytes=*/100);
  ASSERT_NO_FATAL_FAILURE(ReserveAndKeep(kept, 20, 0, {}));
  EXPECT_EQ(kept.size(), 8u);
  EXPECT_EQ(budget.used(), 800u);
  EXPECT_FALSE(kept.Find("s/11", 0).has_value());
  EXPECT_TRUE(kept.Find("s/12", 0).has_value());
  kept.Clear();
  EXPECT_EQ(budget.used(), 0u);
}

}  // namespace
}  // namespace reducer
