// RankReservation: the bytes go back to the budget and the job's share once
// the last owner (the Collective, or a message not yet written) lets go.
#include "server/engine/rank_reservation.h"

#include <memory>

#include "gtest/gtest.h"
#include "server/engine/memory_budget.h"

namespace reducer {
namespace {

TEST(RankReservationTest, BytesGoBackWhenTheLastOwnerLetsGo) {
  MemoryBudget memory(1000);
  auto share = std::make_shared<MemoryBudget>(500);
  auto tenant_share = std::make_shared<MemoryBudget>(500);
  ASSERT_TRUE(memory.TryReserve(300));
  ASSERT_TRUE(share->TryReserve(300));
  ASSERT_TRUE(tenant_share->TryReserve(300));
  auto held =
      std::make_shared<RankReservation>(&memory, share, tenant_share, 300);
  std::shared_ptr<const void> message_hold = held;  // a message not written

  held.reset();  // the Collective is done with the rank
  EXPECT_EQ(memory.used(), 300u);
  EXPECT_EQ(share->used(), 300u);
  EXPECT_EQ(tenant_share->used(), 300u);

  message_hold.reset();  // written
  EXPECT_EQ(memory.used(), 0u);
  EXPECT_EQ(share->used(), 0u);
  EXPECT_EQ(tenant_share->used(), 0u);
}

TEST(RankReservationTest, WithoutSharesOnlyTheBudgetIsReleased) {
  MemoryBudget memory(1000);
  ASSERT_TRUE(memory.TryReserve(200));
  {
    RankReservation held(&memory, nullptr, nullptr, 200);
    EXPECT_EQ(held.bytes(), 200u);
    EXPECT_EQ(memory.used(), 200u);
  }
  EXPECT_EQ(memory.used(), 0u);
}

}  // namespace
}  // namespace reducer
