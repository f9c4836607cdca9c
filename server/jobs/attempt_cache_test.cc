// AttemptCache: ids map to the collective they joined until capacity pushes
// the oldest out; Clear forgets all. The cache only holds weak pointers, so
// stand-in objects of an incomplete type are enough here.
#include "server/jobs/attempt_cache.h"

#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "server/engine/memory_budget.h"

namespace reducer {

// The cache never touches a Collective; the test gives the type a body.
class Collective {};

namespace {

// Two collectives the tests' ids join.
class AttemptCacheTest : public ::testing::Test {
 protected:
  const std::shared_ptr<Collective> a_ = std::make_shared<Collective>();
  const std::shared_ptr<Collective> b_ = std::make_shared<Collective>();
};

TEST_F(AttemptCacheTest, FindsTheCollectiveAnIdJoined) {
  AttemptCache cache(4);
  cache.Remember("s/1", a_);
  cache.Remember("s/2", b_);
  ASSERT_TRUE(cache.Find("s/1").has_value());
  EXPECT_EQ(cache.Find("s/1")->lock(), a_);
  EXPECT_EQ(cache.Find("s/2")->lock(), b_);
  EXPECT_FALSE(cache.Find("s/3").has_value());
}

TEST_F(AttemptCacheTest, AnExpiredCollectiveIsStillRememberedAsSeen) {
  AttemptCache cache(4);
  {
    auto gone = std::make_shared<Collective>();
    cache.Remember("s/1", gone);
  }
  ASSERT_TRUE(cache.Find("s/1").has_value());  // seen: a retry is refused
  EXPECT_EQ(cache.Find("s/1")->lock(), nullptr);
}

TEST_F(AttemptCacheTest, ForgetsTheOldestPastCapacity) {
  AttemptCache cache(3);
  for (int i = 0; i < 5; ++i) cache.Remember("s/" + std::to_string(i), a_);
  EXPECT_EQ(cache.size(), 3u);
  EXPECT_FALSE(cache.Find("s/0").has_value());
  EXPECT_FALSE(cache.Find("s/1").has_value());
  EXPECT_TRUE(cache.Find("s/2").has_value());
  EXPECT_TRUE(cache.Find("s/4").has_value());
}

TEST_F(AttemptCacheTest, RememberingAnIdAgainMovesItWithoutGrowing) {
  AttemptCache cache(2);
  cache.Remember("s/1", a_);
  cache.Remember("s/1", b_);
  EXPECT_EQ(cache.size(), 1u);
  EXPECT_EQ(cache.Find("s/1")->lock(), b_);
  cache.Remember("s/2", a_);
  EXPECT_TRUE(cache.Find("s/1").has_value());  // not pushed out by its twin
}

// `bytes` of `budget`, as the Job reserves them for an id.
std::vector<MemoryReservation> Held(MemoryBudget& budget, size_t bytes) {
  std::vector<MemoryReservation> held;
  held.push_back(MemoryReservation::Try(&budget, bytes));
  return held;
}

TEST_F(AttemptCacheTest, AnIdHoldsItsBudgetUntilItIsForgotten) {
  MemoryBudget budget(1 << 20);
  AttemptCache cache(2);
  cache.Remember("s/1", a_, Held(budget, 100));
  cache.Remember("s/2", a_, Held(budget, 200));
  EXPECT_EQ(budget.used(), 300u);
  // Seen again: it keeps what it held, and the new reservation goes back.
  cache.Remember("s/2", b_, Held(budget, 200));
  EXPECT_EQ(budget.used(), 300u);
  // s/1 is pushed out, and gives its 100 back.
  cache.Remember("s/3", a_, Held(budget, 400));
  EXPECT_EQ(budget.used(), 600u);
  cache.Clear();
  EXPECT_EQ(budget.used(), 0u);
}

TEST_F(AttemptCacheTest, KeptForReplaysItHoldsNoBudgetAndOnlyLiveIds) {
  MemoryBudget budget(1 << 20);
  AttemptCache cache(4);
  {
    auto gone = std::make_shared<Collective>();
    cache.Remember("s/1", gone, Held(budget, 100));
  }
  cache.Remember("s/2", a_, Held(budget, 200));
  cache.KeepForReplays();
  EXPECT_EQ(budget.used(), 0u);
  EXPECT_FALSE(cache.Find("s/1").has_value());
  EXPECT_EQ(cache.Find("s/2")->lock(), a_);
  EXPECT_EQ(cache.size(), 1u);
  // Its age order still works.
  for (int i = 3; i < 8; ++i) cache.Remember("s/" + std::to_string(i), b_);
  EXPECT_EQ(cache.size(), 4u);
  EXPECT_FALSE(cache.Find("s/2").has_value());
}

TEST_F(AttemptCacheTest, AnEntryCountsAtLeastItsIdTwice) {
  const std::string id(500, 'x');
  EXPECT_GE(AttemptCache::EntryBytes(id), 2 * id.size());
  EXPECT_GT(AttemptCache::EntryBytes(id), AttemptCache::EntryBytes("s/1"));
}

TEST_F(AttemptCacheTest, ClearForgetsEverything) {
  AttemptCache cache(4);
  cache.Remember("s/1", a_);
  cache.Clear();
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_FALSE(cache.Find("s/1").has_value());
}

}  // namespace
}  // namespace reducer
