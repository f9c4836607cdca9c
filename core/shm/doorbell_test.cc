#include "core/shm/doorbell.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/shm/peer_process_testing.h"
#include "core/shm/shared_segment.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/matchers.h"

namespace reducer {
namespace {

// Waits that a ring must end get no deadline: were the wake lost, the test
// would hang and time out instead of passing once a deadline came.
constexpr absl::Time kNoDeadline = absl::InfiniteFuture();

// The scheduler state letter of /proc/<path>/stat: 'S' while asleep.
char StateOf(const std::string& stat_path) {
  std::ifstream in(stat_path);
  std::string text((std::istreambuf_iterator<char>(in)),
                   std::istreambuf_iterator<char>());
  size_t paren = text.rfind(')');
  return paren == std::string::npos || paren + 2 >= text.size()
             ? '?'
             : text[paren + 2];
}

// Waits until the task at `stat_path` sleeps (it then sleeps in the futex,
// its only blocking call), so that a ring after this wakes it, not its spin.
void AwaitSleep(const std::string& stat_path) {
  while (StateOf(stat_path) != 'S') absl::SleepFor(absl::Milliseconds(1));
}

TEST(DoorbellTest, WaitWithoutARingEndsAtTheDeadline) {
  std::atomic<uint32_t> word{Doorbell::WordFor(7)};
  Doorbell bell(&word);
  auto now = bell.WaitChange(7, absl::Now() + absl::Milliseconds(20));
  EXPECT_THAT(now.status(), StatusIs(absl::StatusCode::kDeadlineExceeded));
  EXPECT_EQ(bell.value(), 7u);
}

TEST(DoorbellTest, ValueAlreadyDifferentReturnsAtOnceEvenPastTheDeadline) {
  std::atomic<uint32_t> word{Doorbell::WordFor(5)};
  Doorbell bell(&word);
  auto now = bell.WaitChange(4, absl::InfinitePast());
  ASSERT_TRUE(now.ok()) << now.status();
  EXPECT_EQ(*now, 5u);
}

TEST(DoorbellTest, RingCountsUpAndWrapsAround) {
  constexpr uint32_t kLast = UINT32_MAX >> Doorbell::kCounterShift;
  std::atomic<uint32_t> word{Doorbell::WordFor(kLast - 1)};
  Doorbell bell(&word);
  EXPECT_EQ(bell.Ring(), kLast);
  EXPECT_EQ(bell.Ring(), 0u);
  EXPECT_EQ(bell.value(), 0u);
  auto now = bell.WaitChange(kLast, absl::InfinitePast());
  ASSERT_TRUE(now.ok());
  EXPECT_EQ(*now, 0u);
}

TEST(DoorbellTest, RingWakesEverySleepingWaiter) {
  constexpr int kWaiters = 4;
  std::atomic<uint32_t> word{0};
  Doorbell bell(&word);
  std::vector<std::atomic<pid_t>> tids(kWaiters);
  std::vector<absl::StatusOr<uint32_t>> seen(kWaiters, absl::UnknownError(""));
  std::vector<std::thread> waiters;
  for (int i = 0; i < kWaiters; ++i) {
    tids[i] = 0;
    waiters.emplace_back([&, i] {
      tids[i] = static_cast<pid_t>(syscall(SYS_gettid));
      seen[i] = Doorbell(&word).WaitChange(0, kNoDeadline);
    });
  }
  for (int i = 0; i < kWaiters; ++i) {
    while (tids[i] == 0) absl::SleepFor(absl::Milliseconds(1));
    AwaitSleep(absl::StrCat("/proc/self/task/", tids[i].load(), "/stat"));
  }
  EXPECT_EQ(word.load(), Doorbell::SleepingWordFor(0))
      << "a sleeping waiter must have said so";
  bell.Ring();
  for (std::thread& t : waiters) t.join();
  EXPECT_EQ(word.load(), Doorbell::WordFor(1)) << "the ring clears the bit";
  for (int i = 0; i < kWaiters; ++i) {
    ASSERT_TRUE(seen[i].ok()) << i << ": " << seen[i].status();
    EXPECT_EQ(*seen[i], 1u);
  }
}

// Two threads hand a turn back and forth, each ring racing the other's
// arming and sleep. A lost wake would leave a waiter asleep until its
// deadline (DEADLINE_EXCEEDED), far longer than a hand-off takes. Run with
// no watch (every wait arms and sleeps) and with a short one (waits that end
// in the watch and waits that sleep, mixed).
TEST(DoorbellTest, HandOffsNeverLoseAWake) {
  for (absl::Duration spin : {absl::ZeroDuration(), absl::Microseconds(2)}) {
    std::atomic<uint32_t> ping_word{0}, pong_word{0};
    constexpr uint32_t kRounds = 20000;
    absl::Status pinger = absl::OkStatus();
    std::thread ponger_thread([&] {
      Doorbell ping(&ping_word, spin), pong(&pong_word, spin);
      for (uint32_t i = 0; i < kRounds; ++i) {
        auto now = ping.WaitChange(i, absl::Now() + absl::Seconds(10));
        if (!now.ok()) return;
        pong.Ring();
      }
    });
    Doorbell ping(&ping_word, spin), pong(&pong_word, spin);
    for (uint32_t i = 0; i < kRounds && pinger.ok(); ++i) {
      ping.Ring();
      pinger = pong.WaitChange(i, absl::Now() + absl::Seconds(10)).status();
      if (!pinger.ok()) {
        pinger = absl::Status(pinger.code(), absl::StrCat("round ", i, " with a ",
            absl::FormatDuration(spin), " watch: ", pinger.message()));
      }
    }
    ponger_thread.join();
    EXPECT_TRUE(pinger.ok()) << pinger;
    EXPECT_EQ(pong_word.load() & Doorbell::kSleeperBit, 0u);
  }
}

TEST(DoorbellTest, WaitAnyEndsAtTheDeadlineAndReturnsAtOnceOnAChange) {
  std::atomic<uint32_t> words[3] = {
      {Doorbell::WordFor(1)}, {Doorbell::WordFor(2)}, {Doorbell::WordFor(3)}};
  Doorbell bells[3] = {Doorbell(&words[0]), Doorbell(&words[1]),
                       Doorbell(&words[2])};
  const Doorbell::Watch still[3] = {{&bells[0], 1}, {&bells[1], 2},
                                    {&bells[2], 3}};
  EXPECT_THAT(Doorbell::WaitAny(still, absl::Now() + absl::Milliseconds(20)),
              StatusIs(absl::StatusCode::kDeadlineExceeded));
  const Doorbell::Watch moved[3] = {{&bells[0], 1}, {&bells[1], 2},
                                    {&bells[2], 2}};
  EXPECT_TRUE(Doorbell::WaitAny(moved, absl::InfinitePast()).ok());
  EXPECT_THAT(Doorbell::WaitAny({}, absl::InfinitePast()),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

// A waiter asleep on three bells (no watch first) wakes for a ring of any
// one of them, the last one included: with futex_waitv, and with the
// fallback for kernels without it (a ring of a bell it does not sleep on
// is seen at its next slice).
class WaitAnyTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override { Doorbell::UseWaitvForTesting(GetParam()); }
  void TearDown() override { Doorbell::UseWaitvForTesting(true); }
};

INSTANTIATE_TEST_SUITE_P(Waits, WaitAnyTest, ::testing::Values(true, false),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "futex_waitv" : "fallback";
                         });

TEST_P(WaitAnyTest, WakesForARingOfAnyOfItsBells) {
  for (int rung = 0; rung < 3; ++rung) {
    std::atomic<uint32_t> words[3] = {{0}, {0}, {0}};
    Doorbell bells[3] = {Doorbell(&words[0]), Doorbell(&words[1]),
                         Doorbell(&words[2])};
    std::atomic<pid_t> tid{0};
    absl::Status woke = absl::UnknownError("not yet");
    std::thread waiter([&] {
      tid = static_cast<pid_t>(syscall(SYS_gettid));
      const Doorbell::Watch watches[3] = {{&bells[0], 0}, {&bells[1], 0},
                                          {&bells[2], 0}};
      woke = Doorbell::WaitAny(watches, kNoDeadline, absl::ZeroDuration());
    });
    while (tid == 0) absl::SleepFor(absl::Milliseconds(1));
    AwaitSleep(absl::StrCat("/proc/self/task/", tid.load(), "/stat"));
    bells[rung].Ring();
    waiter.join();
    EXPECT_TRUE(woke.ok()) << "bell " << rung << ": " << woke;
  }
}

// The child maps the segment anew (its own address), sleeps on the doorbell
// and checks what the parent wrote before ringing; the futex is shared, so
// the ring crosses processes and mappings.
TEST(DoorbellTest, RingWakesAWaiterInAnotherProcessThroughItsOwnMapping) {
  auto segment = SharedSegment::Create("doorbell", 4096);
  ASSERT_TRUE(segment.ok()) << segment.status();
  auto* word = static_cast<std::atomic<uint32_t>*>(segment->data());
  auto* payload = static_cast<uint32_t*>(segment->data()) + 16;
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // no orphan if the test is killed
    auto mine = SharedSegment::Adopt(dup(segment->fd()),
                                     SharedSegment::Access::kReadWrite);
    if (!mine.ok() || mine->data() == segment->data()) _exit(2);
    Doorbell bell(static_cast<std::atomic<uint32_t>*>(mine->data()));
    auto now = bell.WaitChange(0, kNoDeadline);
    if (!now.ok()) _exit(3);
    if (*now != 1) _exit(4);
    if (static_cast<uint32_t*>(mine->data())[16] != 0xfeedf00d) _exit(5);
    _exit(0);
  }
  AwaitSleep(absl::StrCat("/proc/", child, "/stat"));
  *payload = 0xfeedf00d;
  EXPECT_EQ(Doorbell(word).Ring(), 1u);
  EXPECT_EQ(ExitCodeOf(child), 0);
}

}  // namespace
}  // namespace reducer
