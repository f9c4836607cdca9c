// Watchdog: a hard time limit for one test of real processes.
//
//   Watchdog watchdog("E2eTest.AllOps", absl::Seconds(100));
//   ... start reducerd and the workers, wait for them ...
//   // destroyed at the end of the test: the limit no longer applies
//
// If the watchdog is still alive `limit` after it was made, it prints which
// test ran past its limit and aborts the whole test process, so that a hung
// collective fails the test instead of waiting for Bazel's timeout. Children
// started with PR_SET_PDEATHSIG (tests/process_harness.h) die with it.
//
// Thread-safe: made and destroyed on one thread; its own thread only waits.
#ifndef REDUCER_TESTS_WATCHDOG_H_
#define REDUCER_TESTS_WATCHDOG_H_

#include <string>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

namespace reducer::testing {

class Watchdog {
 public:
  Watchdog(std::string what, absl::Duration limit);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

 private:
  absl::Notification stopped_;
  std::thread thread_;  // last: starts after stopped_ exists
};

}  // namespace reducer::testing

#endif  // REDUCER_TESTS_WATCHDOG_H_
