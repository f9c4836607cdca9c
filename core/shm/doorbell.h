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
// wraps around (2^31 rings later it reads the same again).
//
// The word holds the counter in its upper 31 bits and, in bit 0, whether a
// waiter may be asleep on it: a waiter sets the bit before it sleeps, and
// Ring() clears it with the same atomic step that counts, making the
// FUTEX_WAKE system call only when it found the bit set. A ring that a
// watching waiter sees thus costs no system call on either side. Both sides
// must read the word this way (the control segment's layout version says
// so); WordFor() gives the word that holds a given count.
//
// A waiter first watches the word for kSpin, yielding the CPU between looks
// (sched_yield), then sleeps on the futex. The watch is what makes a quick
// answer cheap: a thread that sleeps lets its (virtual) CPU halt, and waking
// a halted CPU costs tens of microseconds, more than a small collective's
// whole work. Yielding rather than spinning on pause keeps that watch cheap
// when threads outnumber cores: an idle CPU returns to the waiter at once, a
// busy one runs the threads that have work first. Waits are bounded by a
// deadline, so a peer that died never hangs a waiter.
//
// WaitAny() waits for the first of several bells (one thread serving many
// rings): the same watch over every word, then one sleep on all of them
// (futex_waitv, Linux 5.16 and later). Where the kernel lacks futex_waitv
// (ENOSYS), it sleeps on the first word in slices of at most kFallbackSlice
// and looks at every word between slices, so a ring on another word is seen
// within a slice: slower, never lost.
#ifndef REDUCER_CORE_SHM_DOORBELL_H_
#define REDUCER_CORE_SHM_DOORBELL_H_

#include <atomic>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace reducer {

class Doorbell {
 public:
  // How long a waiter watches the word before sleeping on the futex.
  static constexpr absl::Duration kSpin = absl::Microseconds(300);

  // `spin` other than kSpin is for measuring what the watch buys (zero:
  // straight to the futex).
  explicit Doorbell(std::atomic<uint32_t>* word, absl::Duration spin = kSpin)
      : word_(word), spin_(spin) {}

  // Increments the counter and wakes every waiter, in any process (one
  // FUTEX_WAKE system call when a waiter said it sleeps, none otherwise).
  // Returns the new value.
  uint32_t Ring();

  // The counter (the word without its sleeper bit).
  uint32_t value() const {
    return word_->load(std::memory_order_acquire) >> kCounterShift;
  }

  // The word's layout: the counter above kCounterShift, the sleeper bit.
  static constexpr uint32_t kCounterShift = 1;
  static constexpr uint32_t kSleeperBit = 1;

  // The word that holds `count` with no sleeper, for placing a counter that
  // does not start at zero (tests).
  static constexpr uint32_t WordFor(uint32_t count) {
    return count << kCounterShift;
  }
  // The word a waiter that saw `count` sleeps on: that count, sleeper bit
  // set.
  static constexpr uint32_t SleepingWordFor(uint32_t count) {
    return WordFor(count) | kSleeperBit;
  }

  // One bell of WaitAny(), with the value its waiter saw last.
  struct Watch {
    const Doorbell* bell;
    uint32_t seen;
  };
  // The most bells one WaitAny() watches (futex_waitv's limit).
  static constexpr size_t kMaxWatches = 128;
  // The longest sleep between looks without futex_waitv.
  static constexpr absl::Duration kFallbackSlice = absl::Milliseconds(1);

  // OK once any bell's value differs from its `seen` (at once if one already
  // does); DEADLINE_EXCEEDED if none does at `deadline`. Watches for `spin`
  // first, as WaitChange does. INVALID_ARGUMENT for no bells or more than
  // kMaxWatches; PERMISSION_DENIED, after the watch, when the kernel
  // refuses the sleep (a seccomp profile answering futex with EPERM): the
  // caller then polls, it must not call again at once. An acquire of the
  // bell that changed.
  static absl::Status WaitAny(absl::Span<const Watch> watches,
                              absl::Time deadline,
                              absl::Duration spin = kSpin);
  // For tests: false makes WaitAny take the fallback it takes where the
  // kernel lacks futex_waitv; true lets it use futex_waitv again (unless
  // the kernel refused it). Process-wide.
  static void UseWaitvForTesting(bool use);

  // The counter's value once it differs from `seen` (at once if it already
  // does); DEADLINE_EXCEEDED if it still equals `seen` at `deadline`;
  // PERMISSION_DENIED as WaitAny's.
  absl::StatusOr<uint32_t> WaitChange(uint32_t seen, absl::Time deadline) const;

 private:
  static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t) &&
                    std::atomic<uint32_t>::is_always_lock_free,
                "a futex needs a plain lock-free 32-bit word");

  // Sets the sleeper bit unless the counter moved from `seen`; true when the
  // word now reads SleepingWordFor(seen) (what to sleep on), false when it
  // moved.
  bool ArmSleep(uint32_t seen) const;

  std::atomic<uint32_t>* word_;
  absl::Duration spin_;
};

}  // namespace reducer

#endif  // REDUCER_CORE_SHM_DOORBELL_H_
