// JoinableThreads: JoinAll returns only once every thread started has
// returned, those started by a thread being joined too.
#include "server/relay/joinable_threads.h"

#include <atomic>
#include <memory>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace reducer {
namespace {

TEST(JoinableThreadsTest, JoinAllWaitsForEveryThreadStartedThoseItStarts) {
  JoinableThreads threads;
  std::atomic<int> returned{0};
  absl::Notification go;
  auto owned = std::make_unique<int>(7);  // move-only work is accepted
  threads.Start([&, owned = std::move(owned)] {
    go.WaitForNotification();
    absl::SleepFor(absl::Milliseconds(50));
    // Started while JoinAll already waits for this one.
    threads.Start([&] {
      absl::SleepFor(absl::Milliseconds(50));
      returned.fetch_add(1);
    });
    returned.fetch_add(*owned);
  });
  go.Notify();
  threads.JoinAll();
  EXPECT_EQ(returned.load(), 8);
}

TEST(JoinableThreadsTest, ThreadsThatReturnedAreJoinedAsNewOnesStart) {
  JoinableThreads threads;
  std::atomic<int> returned{0};
  for (int i = 0; i < 200; ++i) {
    threads.Start([&] { returned.fetch_add(1); });
    // Let it return: the next Start joins it.
    while (returned.load() <= i) absl::SleepFor(absl::Microseconds(100));
    absl::SleepFor(absl::Microseconds(100));
  }
  EXPECT_LE(threads.held(), 2u) << "threads that returned were kept";
  threads.JoinAll();
  EXPECT_EQ(threads.held(), 0u);
  EXPECT_EQ(returned.load(), 200);
}

}  // namespace
}  // namespace reducer
