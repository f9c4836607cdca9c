// AttemptCache: ids map to the collective they joined until capacity pushes
// the oldest out; Clear forgets all. The cache only holds weak pointers, so
// stand-in objects of an incomplete type are enough here.
#include "server/jobs/attempt_cache.h"

#include <memory>
#include <string>

#include "gtest/gtest.h"

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

TEST_F(AttemptCacheTest, ClearForgetsEverything) {
  AttemptCache cache(4);
  cache.Remember("s/1", a_);
  cache.Clear();
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_FALSE(cache.Find("s/1").has_value());
}

}  // namespace
}  // namespace reducer
