#include "core/doorbell.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <climits>

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

}  // namespace

uint32_t Doorbell::Ring() {
  uint32_t now = word_->fetch_add(1, std::memory_order_acq_rel) + 1;
  Futex(word_, FUTEX_WAKE, INT_MAX, nullptr);
  return now;
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
    // Sleeps only while the word still holds `seen`; a ring in between makes
    // the call return EAGAIN at once.
    if (Futex(word_, FUTEX_WAIT, seen,
              deadline == absl::InfiniteFuture() ? nullptr : &timeout) != 0 &&
        errno != EAGAIN && errno != EINTR && errno != ETIMEDOUT) {
      return absl::ErrnoToStatus(errno, "futex wait on a doorbell");
    }
    now = value();
  }
  return now;
}

}  // namespace reducer
