#include "tests/watchdog.h"

#include <cstdio>
#include <cstdlib>
#include <utility>

namespace reducer::testing {

Watchdog::Watchdog(std::string what, absl::Duration limit)
    : thread_([this, what = std::move(what), limit] {
        if (!stopped_.WaitForNotificationWithTimeout(limit)) {
          std::fprintf(stderr,
                       "\n*** WATCHDOG: %s exceeded its hard limit of %s; "
                       "aborting the test process (and its children).\n",
                       what.c_str(), absl::FormatDuration(limit).c_str());
          std::fflush(stderr);
          std::abort();
        }
      }) {}

Watchdog::~Watchdog() {
  stopped_.Notify();
  thread_.join();
}

}  // namespace reducer::testing
