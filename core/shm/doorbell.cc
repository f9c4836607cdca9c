#include "core/shm/doorbell.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace reducer {
namespace {

// Shared (not FUTEX_PRIVATE_FLAG) operations: the word may be mapped by
// several processes at different addresses.
long Futex(std::atomic<uint32_t>* word, int op, uint32_t value,
           const timespec* timeout) {
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, value,
                 timeout, nullptr, 0);
}

// Set once the kernel answered ENOSYS to futex_waitv (or a test asked for
// the fallback): WaitAny sleeps in slices from then on.
std::atomic<bool> no_waitv{false};

// Whether a bell of `watches` differs from what its waiter saw.
bool AnyChanged(absl::Span<const Doorbell::Watch> watches) {
  for (const Doorbell::Watch& w : watches) {
    if (w.bell->value() != w.seen) return true;
  }
  return false;
}

// One futex_waitv sleep on every word (each armed: counter `seen`, sleeper
// bit set) until one changes or `deadline`
// (CLOCK_MONOTONIC, as futex_waitv takes it); errno ENOSYS when the kernel
// has no futex_waitv.
long FutexWaitv(absl::Span<const Doorbell::Watch> watches,
                std::atomic<uint32_t>* const* words, absl::Time deadline) {
#ifdef SYS_futex_waitv
  futex_waitv waiters[Doorbell::kMaxWatches];
  std::memset(waiters, 0, sizeof(waiters));
  for (size_t i = 0; i < watches.size(); ++i) {
    waiters[i].val = Doorbell::SleepingWordFor(watches[i].seen);
    waiters[i].uaddr = reinterpret_cast<uintptr_t>(words[i]);
    waiters[i].flags = FUTEX_32;  // shared: no private flag
  }
  timespec timeout;
  timespec* at = nullptr;
  if (deadline != absl::InfiniteFuture()) {
    timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    const absl::Duration left =
        std::max(absl::ZeroDuration(), deadline - absl::Now());
    timeout = absl::ToTimespec(absl::DurationFromTimespec(now) + left);
    at = &timeout;
  }
  return syscall(SYS_futex_waitv, waiters,
                 static_cast<unsigned int>(watches.size()), 0, at,
                 CLOCK_MONOTONIC);
#else
  (void)watches;
  (void)words;
  (void)deadline;
  errno = ENOSYS;
  return -1;
#endif
}

}  // namespace

void Doorbell::UseWaitvForTesting(bool use) {
  no_waitv.store(!use, std::memory_order_relaxed);
}

absl::Status Doorbell::WaitAny(absl::Span<const Watch> watches,
                               absl::Time deadline, absl::Duration spin) {
  if (watches.empty() || watches.size() > kMaxWatches) {
    return absl::InvalidArgumentError(absl::StrCat(
        "WaitAny watches 1 to ", kMaxWatches, " bells, not ", watches.size()));
  }
  bool changed = AnyChanged(watches);
  if (!changed && spin > absl::ZeroDuration()) {
    const absl::Time watch_until = std::min(deadline, absl::Now() + spin);
    do {
      sched_yield();
      changed = AnyChanged(watches);
    } while (!changed && absl::Now() < watch_until);
  }
  std::atomic<uint32_t>* words[kMaxWatches];
  for (size_t i = 0; i < watches.size(); ++i) words[i] = watches[i].bell->word_;
  while (!changed) {
    const absl::Time now = absl::Now();
    if (now >= deadline) {
      return absl::DeadlineExceededError("no bell rang before the deadline");
    }
    // A ring between the look and the sleep makes either call return at
    // once (EAGAIN): the kernel compares each word with what was seen, and
    // a ring after the arming finds the sleeper bit and wakes.
    if (!no_waitv.load(std::memory_order_relaxed)) {
      for (const Watch& w : watches) {
        if (!w.bell->ArmSleep(w.seen)) return absl::OkStatus();
      }
      if (FutexWaitv(watches, words, deadline) < 0) {
        if (errno == ENOSYS) {
          no_waitv.store(true, std::memory_order_relaxed);
        } else if (errno != EAGAIN && errno != EINTR && errno != ETIMEDOUT) {
          return absl::ErrnoToStatus(errno, "futex_waitv on doorbells");
        }
      }
    } else {
      if (!watches[0].bell->ArmSleep(watches[0].seen)) return absl::OkStatus();
      const timespec slice =
          absl::ToTimespec(std::min(deadline - now, kFallbackSlice));
      if (Futex(words[0], FUTEX_WAIT, SleepingWordFor(watches[0].seen),
                &slice) != 0 &&
          errno != EAGAIN && errno != EINTR && errno != ETIMEDOUT) {
        return absl::ErrnoToStatus(errno, "futex wait on a doorbell");
      }
    }
    changed = AnyChanged(watches);
  }
  return absl::OkStatus();
}

uint32_t Doorbell::Ring() {
  uint32_t word = word_->load(std::memory_order_relaxed);
  uint32_t rung;
  do {
    rung = (word & ~kSleeperBit) + WordFor(1);
  } while (!word_->compare_exchange_weak(word, rung, std::memory_order_acq_rel,
                                         std::memory_order_relaxed));
  if (word & kSleeperBit) Futex(word_, FUTEX_WAKE, INT_MAX, nullptr);
  return rung >> kCounterShift;
}

bool Doorbell::ArmSleep(uint32_t seen) const {
  const uint32_t armed = SleepingWordFor(seen);
  uint32_t word = word_->load(std::memory_order_acquire);
  while (word != armed) {
    if ((word >> kCounterShift) != seen) return false;
    if (word_->compare_exchange_weak(word, armed, std::memory_order_acq_rel,
                                     std::memory_order_acquire)) {
      return true;
    }
  }
  return true;
}

absl::StatusOr<uint32_t> Doorbell::WaitChange(uint32_t seen,
                                              absl::Time deadline) const {
  uint32_t now = value();
  if (now == seen && spin_ > absl::ZeroDuration()) {
    const absl::Time watch_until = std::min(deadline, absl::Now() + spin_);
    do {
      sched_yield();
      now = value();
    } while (now == seen && absl::Now() < watch_until);
  }
  while (now == seen) {
    absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      return absl::DeadlineExceededError(
          absl::StrCat("doorbell still at ", seen, " at the deadline"));
    }
    timespec timeout = absl::ToTimespec(left);
    if (!ArmSleep(seen)) {
      now = value();
      continue;
    }
    // Sleeps only while the word still holds `seen`, armed; a ring in
    // between makes the call return EAGAIN at once.
    if (Futex(word_, FUTEX_WAIT, SleepingWordFor(seen),
              deadline == absl::InfiniteFuture() ? nullptr : &timeout) != 0 &&
        errno != EAGAIN && errno != EINTR && errno != ETIMEDOUT) {
      return absl::ErrnoToStatus(errno, "futex wait on a doorbell");
    }
    now = value();
  }
  return now;
}

}  // namespace reducer
