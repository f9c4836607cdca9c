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
  const absl::Time now = absl::Now();
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
  TimerQueue::Id id =
      timers.Schedule(absl::Now() + absl::Milliseconds(20), [&] { ran = true; });
  timers.Cancel(id);
  timers.Schedule(absl::Now() + absl::Milliseconds(80), [&] { later.Notify(); });
  ASSERT_TRUE(later.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_FALSE(ran);
}

TEST(TimerQueueTest, DestructorDropsPendingCallbacks) {
  bool ran = false;
  {
    TimerQueue timers;
    timers.Schedule(absl::Now() + absl::Hours(1), [&] { ran = true; });
  }
  EXPECT_FALSE(ran);
}

}  // namespace
}  // namespace reducer
