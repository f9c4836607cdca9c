#include "tests/campaign/cpu_load.h"

#include "gtest/gtest.h"

namespace reducer {
namespace testing {
namespace {

TEST(CpuLoadTest, SpinsTheThreadsAskedForAndEndsThemOnDestruction) {
  {
    CpuLoad load(2);
    EXPECT_EQ(load.threads(), 2);
  }  // joins: the test would hang here if the threads never ended
  CpuLoad none(0);
  EXPECT_EQ(none.threads(), 0);
}

}  // namespace
}  // namespace testing
}  // namespace reducer
