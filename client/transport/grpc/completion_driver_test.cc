#include "client/transport/grpc/completion_driver.h"

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "grpcpp/alarm.h"
#include "gtest/gtest.h"

namespace reducer {
namespace {

// Counts its completions and remembers which thread ran the last one.
class CountingHandler final : public CompletionDriver::Handler {
 public:
  void OnComplete(bool ok) override {
    last_ok = ok;
    thread = std::this_thread::get_id();
    count.fetch_add(1);
  }
  std::atomic<int> count{0};
  std::atomic<bool> last_ok{false};
  std::atomic<std::thread::id> thread{};
};

std::chrono::system_clock::time_point In(absl::Duration d) {
  return absl::ToChronoTime(absl::Now() + d);
}

// An alarm on `driver`'s queue, firing `after` from now, and its handler.
struct CountedAlarm {
  CountedAlarm(CompletionDriver& driver, absl::Duration after) {
    alarm.Set(driver.cq(), In(after), &handler);
  }
  CountingHandler handler;
  grpc::Alarm alarm;
};

// Drives `driver` until `handler` ran once; false if that took 10 seconds.
bool DriveUntilRun(CompletionDriver& driver, const CountingHandler& handler) {
  return driver.DriveUntil([&] { return handler.count.load() == 1; },
                           absl::Now() + absl::Seconds(10));
}

TEST(CompletionDriverTest, BackgroundThreadRunsCompletionsWhenNobodyWaits) {
  CompletionDriver driver;
  CountedAlarm alarm(driver, absl::Milliseconds(10));
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (alarm.handler.count.load() == 0 && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_EQ(alarm.handler.count.load(), 1);
  EXPECT_TRUE(alarm.handler.last_ok.load());
  EXPECT_NE(alarm.handler.thread.load(), std::this_thread::get_id());
}

TEST(CompletionDriverTest, TheWaitingCallerRunsItsOwnCompletion) {
  CompletionDriver driver;
  CountedAlarm alarm(driver, absl::Milliseconds(50));
  // The caller arrives first, so the background thread (which needs the
  // queue left alone for a while) never polls before the alarm fires.
  EXPECT_TRUE(DriveUntilRun(driver, alarm.handler));
  EXPECT_EQ(alarm.handler.thread.load(), std::this_thread::get_id());
}

TEST(CompletionDriverTest, DriveUntilGivesUpAtItsDeadline) {
  CompletionDriver driver;
  const absl::Time start = absl::Now();
  EXPECT_FALSE(driver.DriveUntil([] { return false; },
                                 start + absl::Milliseconds(100)));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(100));
}

TEST(CompletionDriverTest, ConcurrentCallersEachSeeTheirCompletion) {
  CompletionDriver driver;
  constexpr int kCallers = 4;
  std::vector<CountingHandler> handlers(kCallers);
  std::vector<grpc::Alarm> alarms(kCallers);
  std::vector<std::thread> callers;
  std::atomic<int> satisfied{0};
  for (int i = 0; i < kCallers; ++i) {
    alarms[i].Set(driver.cq(), In(absl::Milliseconds(20 * (kCallers - i))),
                  &handlers[i]);
    callers.emplace_back([&, i] {
      if (DriveUntilRun(driver, handlers[i])) satisfied.fetch_add(1);
    });
  }
  for (std::thread& t : callers) t.join();
  EXPECT_EQ(satisfied.load(), kCallers);
}

TEST(CompletionDriverTest, ACallerTakesOverFromThePollingBackgroundThread) {
  CompletionDriver driver;
  // Let the background thread start polling (the queue has been idle).
  absl::SleepFor(absl::Milliseconds(100));
  CountedAlarm alarm(driver, absl::Milliseconds(200));
  EXPECT_TRUE(DriveUntilRun(driver, alarm.handler));
  // The caller kicked the background thread aside and polled itself.
  EXPECT_EQ(alarm.handler.thread.load(), std::this_thread::get_id());
}

}  // namespace
}  // namespace reducer
