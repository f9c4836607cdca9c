// Doorbell: a counter in shared memory that one process rings and others wait
// on for a change, without any message passing (a shared futex).
//
// The counter is a std::atomic<uint32_t> the caller places in memory every
// party maps (a SharedSegment), 4-byte aligned and zero-initialised (a new
// segment is zeroed); each party constructs its own Doorbell over it. Doorbell
// owns nothing: the word must outlive it.
//
//   Doorbell bell(reinterpret_cast<std::atomic<uint32_t>*>(segment.data()));
//   uint32_t seen = bell.value();
//   ... peer writes its data, then calls bell.Ring() ...
//   absl::StatusOr<uint32_t> now = bell.WaitChange(seen, deadline);
//
// Ring() is a release and WaitChange() an acquire: what the ringer wrote
// before ringing is visible to a waiter once WaitChange returns. The counter
// wraps around (2^32 rings later it reads the same again).
//
// A waiter first spins for kSpinIterations pause instructions (tens to a few
// hundred microseconds, depending on the CPU's pause) so that a ring that
// follows quickly is seen without sleeping, then sleeps on the futex. Waits
// are bounded by a deadline, so a peer that died never hangs a waiter.
#ifndef REDUCER_CORE_DOORBELL_H_
#define REDUCER_CORE_DOORBELL_H_

#include <atomic>
#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace reducer {

class Doorbell {
 public:
  // Pause instructions a waiter spins through before sleeping on the futex.
  static constexpr int kSpinIterations = 1000;

  // `spin_iterations` other than kSpinIterations is for measuring what the
  // spin buys (0: straight to the futex).
  explicit Doorbell(std::atomic<uint32_t>* word,
                    int spin_iterations = kSpinIterations)
      : word_(word), spin_iterations_(spin_iterations) {}

  // Increments the counter and wakes every waiter, in any process (one
  // FUTEX_WAKE system call, whether or not anyone waits). Returns the new
  // value.
  uint32_t Ring();

  uint32_t value() const { return word_->load(std::memory_order_acquire); }

  // The counter's value once it differs from `seen` (at once if it already
  // does); DEADLINE_EXCEEDED if it still equals `seen` at `deadline`.
  absl::StatusOr<uint32_t> WaitChange(uint32_t seen, absl::Time deadline) const;

 private:
  static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t) &&
                    std::atomic<uint32_t>::is_always_lock_free,
                "a futex needs a plain lock-free 32-bit word");

  std::atomic<uint32_t>* word_;
  int spin_iterations_;
};

}  // namespace reducer

#endif  // REDUCER_CORE_DOORBELL_H_
