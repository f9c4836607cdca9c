#include "server/engine/clock.h"

#include "gtest/gtest.h"

namespace reducer {
namespace {

TEST(ClockTest, SteadyClockNeverGoesBack) {
  const Clock& clock = Clock::Steady();
  absl::Time last = clock.Now();
  for (int i = 0; i < 1000; ++i) {
    const absl::Time now = clock.Now();
    EXPECT_GE(now, last);
    last = now;
  }
}

TEST(ClockTest, FakeClockMovesOnlyWhenAdvanced) {
  FakeClock clock(absl::UnixEpoch() + absl::Hours(5));
  EXPECT_EQ(clock.Now(), absl::UnixEpoch() + absl::Hours(5));
  clock.Advance(absl::Seconds(1));
  EXPECT_EQ(clock.Now(), absl::UnixEpoch() + absl::Hours(5) + absl::Seconds(1));
  clock.Advance(-absl::Seconds(10));  // ignored: a clock never goes back
  EXPECT_EQ(clock.Now(), absl::UnixEpoch() + absl::Hours(5) + absl::Seconds(1));
}

}  // namespace
}  // namespace reducer
