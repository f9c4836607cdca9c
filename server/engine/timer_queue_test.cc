#include "server/engine/timer_queue.h"

#include <vector>

#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace reducer {
namespace {

TEST(TimerQueueTest, RunsCallbacksInTimeOrder) {
  TimerQueue timers;
  absl::Mutex mu;
  std::vector<int> order;
  absl::Notification done;
  const absl::Time now = timers.clock().Now();
  timers.Schedule(now + absl::Milliseconds(60), [&] {
    absl::MutexLock lock(&mu);
    order.push_back(3);
    done.Notify();
  });
  timers.Schedule(now + absl::Milliseconds(20), [&] {
    absl::MutexLock lock(&mu);
    order.push_back(1);
  });
  timers.Schedule(now + absl::Milliseconds(40), [&] {
    absl::MutexLock lock(&mu);
    order.push_back(2);
  });
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  absl::MutexLock lock(&mu);
  EXPECT_THAT(order, testing::ElementsAre(1, 2, 3));
}

TEST(TimerQueueTest, CancelledCallbackNeverRuns) {
  TimerQueue timers;
  bool ran = false;
  absl::Notification later;
  TimerQueue::Id id = timers.Schedule(
      timers.clock().Now() + absl::Milliseconds(20), [&] { ran = true; });
  timers.Cancel(id);
  timers.Schedule(timers.clock().Now() + absl::Milliseconds(80),
                  [&] { later.Notify(); });
  ASSERT_TRUE(later.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_FALSE(ran);
}

TEST(TimerQueueTest, FakeClockTimerRunsOnlyOnceAdvancedPastItsTime) {
  FakeClock clock;
  TimerQueue timers(&clock);
  absl::Notification fired, before;
  timers.Schedule(clock.Now() + absl::Seconds(1), [&] { fired.Notify(); });
  timers.Schedule(clock.Now() + absl::Milliseconds(999),
                  [&] { before.Notify(); });
  // Real time passing does not make it due.
  EXPECT_FALSE(fired.WaitForNotificationWithTimeout(absl::Milliseconds(50)));
  clock.Advance(absl::Milliseconds(999));
  ASSERT_TRUE(before.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_FALSE(fired.WaitForNotificationWithTimeout(absl::Milliseconds(50)));
  clock.Advance(absl::Milliseconds(1));
  EXPECT_TRUE(fired.WaitForNotificationWithTimeout(absl::Seconds(10)));
}

TEST(TimerQueueTest, TimesAreTheClocksNotTheWallClocks) {
  // A fake clock far behind the wall clock: its times are all in the wall
  // clock's past, yet none is due until the fake clock reaches it.
  FakeClock clock(absl::UnixEpoch() + absl::Hours(1));
  ASSERT_LT(clock.Now() + absl::Hours(1), absl::Now());
  TimerQueue timers(&clock);
  absl::Notification fired;
  timers.Schedule(clock.Now() + absl::Hours(1), [&] { fired.Notify(); });
  EXPECT_FALSE(fired.WaitForNotificationWithTimeout(absl::Milliseconds(100)));
  clock.Advance(absl::Hours(1));
  EXPECT_TRUE(fired.WaitForNotificationWithTimeout(absl::Seconds(10)));
}

TEST(TimerQueueTest, DefaultClockIsTheSteadyOne) {
  TimerQueue timers;
  EXPECT_EQ(&timers.clock(), &Clock::Steady());
  // An hour ahead on the steady clock is in the wall clock's past: it must
  // not be due yet.
  absl::Notification late, fired;
  timers.Schedule(Clock::Steady().Now() + absl::Hours(1),
                  [&] { late.Notify(); });
  timers.Schedule(Clock::Steady().Now() + absl::Milliseconds(20),
                  [&] { fired.Notify(); });
  EXPECT_TRUE(fired.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_FALSE(late.WaitForNotificationWithTimeout(absl::Milliseconds(50)));
}

TEST(TimerQueueTest, DestructorDropsPendingCallbacks) {
  bool ran = false;
  {
    TimerQueue timers;
    timers.Schedule(timers.clock().Now() + absl::Hours(1), [&] { ran = true; });
  }
  EXPECT_FALSE(ran);
}

}  // namespace
}  // namespace reducer
