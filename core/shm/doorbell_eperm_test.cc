// Doorbell where the kernel refuses its futex (a seccomp profile that
// answers futex with EPERM): a wait ends with PERMISSION_DENIED once its
// watch (Doorbell::kSpin) is over, not spun out to its deadline; a ring
// still counts; and a waiter that polls each millisecond on refusal, as
// reducerd's job thread does (server/shm/job.cc), sees the
// ring while using little CPU; and a MessageRing push into a full ring
// polls until there is room rather than give up at once.
//
// Each test forks a child that installs a seccomp filter refusing futex on
// the doorbell's word alone (glibc's own locks keep theirs) and futex_waitv
// (which nothing else here uses, and whose words a filter cannot read), runs
// its checks there and reports through its exit status, so this process
// stays unfiltered. Skipped where filters cannot be installed (some
// containers) and off x86-64.
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/futex.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <iterator>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/shm/doorbell.h"
#include "core/shm/message_ring.h"
#include "core/shm/shared_segment.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/matchers.h"

namespace reducer {
namespace {

// The child's exit status when no filter could be installed here.
constexpr int kCannotFilter = 77;

#if defined(__x86_64__)
constexpr bool kX86_64 = true;
#else
constexpr bool kX86_64 = false;
#endif

// x86-64's futex_waitv (Linux 5.16), named here for headers that predate it.
constexpr uint32_t kFutexWaitvNr = 449;

// Makes futex(`word`, ...) and every futex_waitv fail with EPERM in this
// process from now on; other futex calls and other ABIs pass. 0, or the
// errno of the prctl that failed.
int RefuseFutexOn(const void* word) {
  const uint64_t addr = reinterpret_cast<uintptr_t>(word);
  const uint32_t low = static_cast<uint32_t>(addr);
  const uint32_t high = static_cast<uint32_t>(addr >> 32);
  // seccomp_data's 64-bit args are little-endian here: low half first.
  const uint32_t arg0 = offsetof(seccomp_data, args[0]);
  sock_filter filter[] = {
      // 0-2: calls of other ABIs pass.
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, arch)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      // 3-5: futex_waitv is refused, futex looked at, the rest pass.
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, kFutexWaitvNr, 5, 0),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_futex, 0, 5),
      // 6-9: futex whose uaddr is `word`, both halves, is refused.
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, arg0),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, low, 0, 3),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, arg0 + 4),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, high, 0, 1),
      // 10: refused; 11: passes.
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  sock_fprog program = {static_cast<unsigned short>(std::size(filter)), filter};
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return errno;
  if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &program) != 0) return errno;
  return 0;
}

long RawFutexWake(void* word) {
  return syscall(SYS_futex, word, FUTEX_WAKE, 1, nullptr, nullptr, 0);
}

// A check in the child: says what failed on stderr (the test's log).
bool Check(bool ok, const std::string& what) {
  if (!ok) std::fprintf(stderr, "child: %s\n", what.c_str());
  return ok;
}

// Runs `body` in a forked child with futex on `word` refused; its exit
// status: 0 when every check held, kCannotFilter when no filter could be
// installed, 1 when a check failed (or 128 + the signal that ended it).
int RunRefused(std::atomic<uint32_t>* word, const std::function<bool()>& body) {
  const pid_t pid = fork();
  if (pid == 0) {
    if (const int error = RefuseFutexOn(word); error != 0) {
      std::fprintf(stderr, "child: cannot install a seccomp filter: %s\n",
                   std::strerror(error));
      _exit(error == EINVAL || error == EACCES || error == EPERM ||
                    error == ENOSYS
                ? kCannotFilter
                : 1);
    }
    // The filter refuses the doorbell's word and nothing else.
    int other = 0;
    const bool filtered =
        Check(RawFutexWake(word) == -1 && errno == EPERM,
              "futex on the doorbell's word is not refused") &&
        Check(RawFutexWake(&other) == 0, "futex on another word is refused");
    _exit(filtered && body() ? 0 : 1);
  }
  if (pid < 0) return 1;
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return 1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// CPU time of every thread of this process so far.
absl::Duration ProcessCpu() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return absl::DurationFromTimespec(ts);
}

// A doorbell word in shared memory, as the same-host path places it.
class DoorbellEpermTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!kX86_64) GTEST_SKIP() << "the seccomp filter is written for x86-64";
    auto segment = SharedSegment::Create("doorbell-eperm", 4096);
    ASSERT_TRUE(segment.ok()) << segment.status();
    segment_ = std::make_unique<SharedSegment>(*std::move(segment));
    word_ = static_cast<std::atomic<uint32_t>*>(segment_->data());
    word_->store(Doorbell::WordFor(7));
  }

  // Runs `body` in a child with futex on word_ refused; skips where
  // filters cannot be installed.
  void ExpectChildPasses(const std::function<bool()>& body) {
    const int status = RunRefused(word_, body);
    if (status == kCannotFilter) {
      GTEST_SKIP() << "seccomp filters cannot be installed here";
    }
    EXPECT_EQ(status, 0) << "the child's checks failed: see its stderr above";
  }

  std::unique_ptr<SharedSegment> segment_;
  std::atomic<uint32_t>* word_ = nullptr;
};

TEST_F(DoorbellEpermTest, RefusedWaitChangeEndsAtOnceNotAtTheDeadline) {
  ExpectChildPasses([this] {
    Doorbell bell(word_);
    const absl::Time start = absl::Now();
    const auto waited = bell.WaitChange(7, start + absl::Seconds(5));
    const absl::Duration took = absl::Now() - start;
    return Check(::testing::Value(
                     waited, StatusIs(absl::StatusCode::kPermissionDenied)),
                 absl::StrCat("WaitChange: ", waited.status().ToString())) &&
           Check(
               took < absl::Seconds(1),
               absl::StrCat("WaitChange took ", absl::FormatDuration(took))) &&
           Check(bell.value() == 7, "the counter moved");
  });
}

TEST_F(DoorbellEpermTest, RefusedWaitAnyEndsAtOnceWithOrWithoutFutexWaitv) {
  ExpectChildPasses([this] {
    Doorbell bell(word_);
    const Doorbell::Watch watches[] = {{&bell, 7}};
    bool ok = true;
    for (const bool use_waitv : {true, false}) {
      Doorbell::UseWaitvForTesting(use_waitv);
      const absl::Time start = absl::Now();
      const absl::Status waited =
          Doorbell::WaitAny(watches, start + absl::Seconds(5));
      const absl::Duration took = absl::Now() - start;
      ok = Check(::testing::Value(
                     waited, StatusIs(absl::StatusCode::kPermissionDenied)),
                 absl::StrCat("WaitAny (futex_waitv ", use_waitv,
                              "): ", waited.ToString())) &&
           Check(took < absl::Seconds(1),
                 absl::StrCat("WaitAny (futex_waitv ", use_waitv, ") took ",
                              absl::FormatDuration(took))) &&
           ok;
    }
    return ok;
  });
}

// What reducerd's job thread does when WaitAny is refused: sleeps a
// millisecond (at most until `deadline`) and looks again. OK once the bell
// moved from `seen`; DEADLINE_EXCEEDED at `deadline`; any other error as is.
absl::Status PollOnRefusal(const Doorbell& bell, uint32_t seen,
                           absl::Time deadline) {
  const Doorbell::Watch watches[] = {{&bell, seen}};
  while (true) {
    const absl::Status waited = Doorbell::WaitAny(watches, deadline);
    if (waited.code() != absl::StatusCode::kPermissionDenied) return waited;
    absl::SleepFor(
        std::max(absl::ZeroDuration(),
                 std::min(deadline - absl::Now(), absl::Milliseconds(1))));
  }
}

TEST_F(DoorbellEpermTest, PollingWaiterSeesARingAndDoesNotSpin) {
  ExpectChildPasses([this] {
    Doorbell bell(word_);
    // No ring: 300 ms of refused waits cost well under the wall time.
    const absl::Duration cpu_before = ProcessCpu();
    const absl::Time start = absl::Now();
    const absl::Status idle =
        PollOnRefusal(bell, 7, start + absl::Milliseconds(300));
    const absl::Duration wall = absl::Now() - start;
    const absl::Duration cpu = ProcessCpu() - cpu_before;
    std::fprintf(
        stderr, "child: 300 ms of refused waits took %s of CPU in %s\n",
        absl::FormatDuration(cpu).c_str(), absl::FormatDuration(wall).c_str());
    if (!Check(::testing::Value(idle,
                                StatusIs(absl::StatusCode::kDeadlineExceeded)),
               absl::StrCat("idle wait: ", idle.ToString())) ||
        !Check(cpu < wall * 0.3,
               absl::StrCat("refused waits spin: ", absl::FormatDuration(cpu),
                            " of CPU in ", absl::FormatDuration(wall)))) {
      return false;
    }
    // A ring 50 ms into the wait: its FUTEX_WAKE is refused too, yet it
    // counts, and the waiter sees it.
    std::atomic<uint32_t> rung{0};
    std::thread ringer([&bell, &rung] {
      absl::SleepFor(absl::Milliseconds(50));
      rung.store(bell.Ring());
    });
    const absl::Time wait_start = absl::Now();
    const absl::Status woke =
        PollOnRefusal(bell, 7, wait_start + absl::Seconds(5));
    const absl::Duration waited = absl::Now() - wait_start;
    ringer.join();
    return Check(woke.ok(),
                 absl::StrCat("wait for the ring: ", woke.ToString())) &&
           Check(waited < absl::Seconds(5),
                 absl::StrCat("the ring was seen after ",
                              absl::FormatDuration(waited))) &&
           Check(rung.load() == 8 && bell.value() == 8,
                 absl::StrCat("Ring() gave ", rung.load(), ", the bell reads ",
                              bell.value()));
  });
}

// The word a ring's space bell counts in, found as the one word of the
// ring's header that its Ring() changes.
std::atomic<uint32_t>* SpaceBellWord(MessageRing& ring, char* base) {
  char before[MessageRing::kHeaderBytes];
  std::memcpy(before, base, sizeof(before));
  ring.space_bell().Ring();
  for (size_t at = 0; at < sizeof(before); at += 4) {
    if (std::memcmp(before + at, base + at, 4) != 0) {
      return reinterpret_cast<std::atomic<uint32_t>*>(base + at);
    }
  }
  return nullptr;
}

TEST(MessageRingEpermTest, APushIntoAFullRingPollsUntilThereIsRoom) {
  if (!kX86_64) GTEST_SKIP() << "the seccomp filter is written for x86-64";
  constexpr size_t kCapacity = 4096;
  auto segment = SharedSegment::Create(
      "ring-eperm", MessageRing::FootprintBytes(kCapacity));
  ASSERT_TRUE(segment.ok()) << segment.status();
  char* base = static_cast<char*>(segment->data());
  MessageRing ring(base, kCapacity);
  std::atomic<uint32_t>* space_word = SpaceBellWord(ring, base);
  ASSERT_NE(space_word, nullptr);
  const std::string record(ring.max_record_bytes() / 2, 'r');
  while (true) {
    absl::StatusOr<bool> pushed = ring.TryPush(record);
    ASSERT_TRUE(pushed.ok()) << pushed.status();
    if (!*pushed) break;  // full
  }
  const int status = RunRefused(space_word, [&] {
    // The reader frees room 50 ms from now; the push must wait for it.
    std::thread reader([&] {
      absl::SleepFor(absl::Milliseconds(50));
      std::string popped;
      ring.TryPop(&popped).IgnoreError();
    });
    const absl::Time start = absl::Now();
    const absl::Status pushed = ring.Push(record, start + absl::Seconds(5));
    const absl::Duration took = absl::Now() - start;
    reader.join();
    return Check(pushed.ok(), absl::StrCat("Push: ", pushed.ToString())) &&
           Check(took >= absl::Milliseconds(40),
                 absl::StrCat("Push returned after ",
                              absl::FormatDuration(took),
                              ", before there was room"));
  });
  if (status == kCannotFilter) {
    GTEST_SKIP() << "seccomp filters cannot be installed here";
  }
  EXPECT_EQ(status, 0) << "the child's checks failed: see its stderr above";
}

}  // namespace
}  // namespace reducer
