#include "server/engine/clock.h"

#include <chrono>

namespace reducer {
namespace {

class SteadyClock : public Clock {
 public:
  absl::Time Now() const override {
    return absl::UnixEpoch() +
           absl::FromChrono(
               std::chrono::steady_clock::now().time_since_epoch());
  }
};

}  // namespace

const Clock& Clock::Steady() {
  static const SteadyClock* const clock = new SteadyClock();
  return *clock;
}

absl::Time FakeClock::Now() const {
  absl::MutexLock lock(&mu_);
  return now_;
}

void FakeClock::Advance(absl::Duration d) {
  absl::MutexLock lock(&mu_);
  if (d > absl::ZeroDuration()) now_ += d;
}

}  // namespace reducer
