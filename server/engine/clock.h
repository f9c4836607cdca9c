// Clock: where the server reads the time for durations, deadlines and
// timers. Clock::Steady() follows std::chrono::steady_clock, so stepping
// the machine's wall clock (an operator, NTP, a VM resume) moves no
// deadline; FakeClock moves only when a test says so.
//
//   const Clock& clock = Clock::Steady();
//   const absl::Time deadline = clock.Now() + absl::Seconds(5);
//   ...
//   if (clock.Now() >= deadline) { ... }
//
// Its times are absl::Time values only so that the usual arithmetic works:
// they are meaningful only against other times of the same clock, never as
// dates (not for logs, reports or absl::FormatTime), and never as absl
// deadlines (absl's WaitWithDeadline reads the wall clock): wait for
// `deadline - clock.Now()` with a relative timeout instead.
//
// Thread-safe.
#ifndef REDUCER_SERVER_ENGINE_CLOCK_H_
#define REDUCER_SERVER_ENGINE_CLOCK_H_

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace reducer {

class Clock {
 public:
  virtual ~Clock() = default;

  // The current time of this clock; never decreases.
  virtual absl::Time Now() const = 0;

  // The longest a thread waiting for a time of this clock may sleep before
  // it reads Now() again: unbounded for a clock that moves with real time,
  // short for one that moves by itself in steps (FakeClock), so that a
  // waiter notices a step without being told.
  virtual absl::Duration MaxSleep() const { return absl::InfiniteDuration(); }

  // The process's steady clock: absl::UnixEpoch() plus the time
  // std::chrono::steady_clock has counted since its own epoch.
  static const Clock& Steady();
};

// A clock for tests: it starts at a fixed time and moves only by Advance.
class FakeClock : public Clock {
 public:
  FakeClock() = default;
  explicit FakeClock(absl::Time start) : now_(start) {}

  absl::Time Now() const override;
  absl::Duration MaxSleep() const override { return absl::Milliseconds(1); }

  // Moves the clock forward by `d` (>= 0).
  void Advance(absl::Duration d);

 private:
  mutable absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_) = absl::UnixEpoch() + absl::Hours(1);
};

}  // namespace reducer

#endif  // REDUCER_SERVER_ENGINE_CLOCK_H_
