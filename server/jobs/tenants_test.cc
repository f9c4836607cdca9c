#include "server/jobs/tenants.h"

#include <memory>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace reducer {
namespace {

TEST(TenantsTest, WithoutTokensEachJobNameIsItsOwnTenant) {
  EngineOptions options;
  MemoryBudget memory(1000);
  Tenants tenants(&options, &memory, nullptr);
  EXPECT_EQ(tenants.NameOf("A/x"), "A/x");
  EXPECT_EQ(tenants.NameOf("B"), "B");
}

TEST(TenantsTest, AGivenNameGetsTheLiveTenantWhileItIsHeld) {
  EngineOptions options;
  MemoryBudget memory(1000);
  Tenants tenants(&options, &memory, nullptr);
  std::shared_ptr<Tenant> a = tenants.Get("A");
  a->AddJob();
  EXPECT_EQ(tenants.Get("A"), a);
  EXPECT_EQ(tenants.Get("A")->jobs(), 1);
  EXPECT_NE(tenants.Get("B"), a);
}

TEST(TenantsTest, TheShareIsTheFractionOfTheBudgetAndHoldsTheTenant) {
  EngineOptions options;
  options.max_tenant_memory_fraction = 0.25;
  MemoryBudget memory(1000);
  Tenants tenants(&options, &memory, nullptr);
  std::shared_ptr<MemoryBudget> share = tenants.Get("A")->memory();
  ASSERT_NE(share, nullptr);
  EXPECT_EQ(share->limit(), 250u);
  ASSERT_TRUE(share->TryReserve(200));
  // A collective holding the share holds the tenant: the same share comes
  // back for the tenant's next job, its bytes still counted.
  EXPECT_EQ(tenants.Get("A")->memory()->used(), 200u);
  EXPECT_FALSE(tenants.Get("A")->memory()->TryReserve(100));
  share->Release(200);
}

TEST(TenantsTest, AFractionOfOneMeansNoShare) {
  EngineOptions options;
  options.max_tenant_memory_fraction = 1;
  MemoryBudget memory(1000);
  Tenants tenants(&options, &memory, nullptr);
  EXPECT_EQ(tenants.Get("A")->memory(), nullptr);
}

TEST(TenantsTest, PendingCollectivesAreBoundedPerTenant) {
  EngineOptions options;
  options.max_pending_collectives_per_tenant = 3;
  MemoryBudget memory(1000);
  Tenants tenants(&options, &memory, nullptr);
  std::shared_ptr<Tenant> a = tenants.Get("A");
  EXPECT_TRUE(a->TryAddPending(2));
  EXPECT_FALSE(a->TryAddPending(2));
  EXPECT_TRUE(a->TryAddPending(1));
  EXPECT_FALSE(a->TryAddPending(1));
  EXPECT_EQ(a->pending(), 3u);
  // Another tenant's count is its own.
  EXPECT_TRUE(tenants.Get("B")->TryAddPending(3));
  a->RemovePending(1);
  EXPECT_TRUE(a->TryAddPending(1));
}

TEST(TenantsTest, ForgetsTenantsNobodyHolds) {
  EngineOptions options;
  MemoryBudget memory(1000);
  Tenants tenants(&options, &memory, nullptr);
  std::shared_ptr<Tenant> kept = tenants.Get("kept");
  for (int i = 0; i < 10000; ++i) tenants.Get(std::to_string(i));
  EXPECT_EQ(tenants.live(), 1u);
  EXPECT_EQ(tenants.Get("kept"), kept);
}

}  // namespace
}  // namespace reducer
