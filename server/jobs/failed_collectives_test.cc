#include "server/jobs/failed_collectives.h"

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/matchers.h"

namespace reducer {
namespace {

using ::testing::Eq;
using ::testing::Optional;

std::vector<MemoryReservation> Hold(MemoryBudget* budget, size_t bytes) {
  std::vector<MemoryReservation> held;
  held.push_back(MemoryReservation::Try(budget, bytes));
  return held;
}

TEST(FailedCollectivesTest, EachRankToTellGetsTheErrorOnceThenItIsForgotten) {
  MemoryBudget budget(1 << 20);
  FailedCollectives failed;
  const absl::Status bad =
      absl::InvalidArgumentError("rank 0 sent a bad dtype");
  failed.Add("0,1,2|#5", bad, {2, 0, 1}, Hold(&budget, 100));
  EXPECT_EQ(budget.used(), 100u);
  EXPECT_THAT(failed.Take("0,1,2|#5", 1), Optional(Eq(bad)));
  EXPECT_EQ(failed.Take("0,1,2|#5", 1), std::nullopt);  // told already
  EXPECT_EQ(failed.Take("0,1,2|#6", 0), std::nullopt);  // another key
  EXPECT_THAT(failed.Take("0,1,2|#5", 0), Optional(Eq(bad)));
  EXPECT_EQ(failed.size(), 1u);
  EXPECT_THAT(failed.Take("0,1,2|#5", 2), Optional(Eq(bad)));
  EXPECT_EQ(failed.size(), 0u);
  EXPECT_EQ(budget.used(), 0u);  // its memory went with it
}

TEST(FailedCollectivesTest, ForgetsTheOldestFirstAndReleasesItsMemory) {
  MemoryBudget budget(1 << 20);
  FailedCollectives failed;
  for (int i = 0; i < 3; ++i) {
    failed.Add(std::to_string(i), absl::InternalError(std::to_string(i)), {0},
               Hold(&budget, 10));
  }
  EXPECT_EQ(budget.used(), 30u);
  ASSERT_TRUE(failed.ForgetOldest());
  EXPECT_EQ(budget.used(), 20u);
  EXPECT_EQ(failed.Take("0", 0), std::nullopt);
  EXPECT_THAT(failed.Take("1", 0), Optional(Eq(absl::InternalError("1"))));
  ASSERT_TRUE(failed.ForgetOldest());
  EXPECT_EQ(failed.Take("2", 0), std::nullopt);
  EXPECT_FALSE(failed.ForgetOldest());
  EXPECT_EQ(budget.used(), 0u);
}

TEST(FailedCollectivesTest, AKeyFailedAgainReplacesItsEntry) {
  MemoryBudget budget(1 << 20);
  FailedCollectives failed;
  failed.Add("k", absl::InternalError("first"), {0, 1}, Hold(&budget, 10));
  failed.Add("k", absl::InternalError("second"), {0, 1}, Hold(&budget, 10));
  EXPECT_EQ(failed.size(), 1u);
  EXPECT_EQ(budget.used(), 10u);
  EXPECT_THAT(failed.Take("k", 0), Optional(Eq(absl::InternalError("second"))));
  // The replaced entry's age is gone too: forgetting the oldest forgets k.
  ASSERT_TRUE(failed.ForgetOldest());
  EXPECT_EQ(failed.size(), 0u);
}

TEST(FailedCollectivesTest, EntryBytesGrowWithKeyMessageAndGroup) {
  const absl::Status s = absl::InvalidArgumentError("x");
  const size_t small = FailedCollectives::EntryBytes("k", s, 2);
  EXPECT_GT(FailedCollectives::EntryBytes(std::string(1000, 'k'), s, 2),
            small + 1000);
  EXPECT_GE(FailedCollectives::EntryBytes("k", s, 1002), small + 4000);
  EXPECT_GT(FailedCollectives::EntryBytes(
                "k", absl::InvalidArgumentError(std::string(500, 'x')), 2),
            small + 400);
}

TEST(FailedCollectivesTest, ClearForgetsEverything) {
  MemoryBudget budget(1 << 20);
  FailedCollectives failed;
  failed.Add("a", absl::InternalError("a"), {0}, Hold(&budget, 10));
  failed.Add("b", absl::InternalError("b"), {0}, Hold(&budget, 10));
  failed.Clear();
  EXPECT_EQ(failed.size(), 0u);
  EXPECT_EQ(budget.used(), 0u);
  EXPECT_FALSE(failed.ForgetOldest());
}

}  // namespace
}  // namespace reducer
