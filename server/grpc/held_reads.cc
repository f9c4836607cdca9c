#include "server/grpc/held_reads.h"

#include <algorithm>
#include <vector>

#include "server/engine/clock.h"

namespace reducer {

HeldReads::HeldReads(absl::Duration deadline)
    : deadline_(deadline), thread_([this] { Run(); }) {}

HeldReads::~HeldReads() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

void HeldReads::Hold(std::weak_ptr<Holder> holder) {
  absl::MutexLock lock(&mu_);
  held_.emplace_back(Clock::Steady().Now() + deadline_, std::move(holder));
}

void HeldReads::Run() {
  absl::MutexLock lock(&mu_);
  absl::Time last_wake = absl::InfinitePast();
  while (true) {
    mu_.Await(absl::Condition(
        +[](HeldReads* self) ABSL_EXCLUSIVE_LOCKS_REQUIRED(self->mu_) {
          return self->stop_ || !self->held_.empty();
        },
        this));
    if (stop_) return;
    // Until the oldest hold is due, and at least half a deadline after the
    // last wake-up, so that one wake-up releases a batch.
    const absl::Time wake =
        std::max(held_.front().first, last_wake + deadline_ / 2);
    if (mu_.AwaitWithTimeout(absl::Condition(&stop_),
                             wake - Clock::Steady().Now())) {
      return;
    }
    last_wake = Clock::Steady().Now();
    std::vector<std::weak_ptr<Holder>> due;
    while (!held_.empty() && held_.front().first <= last_wake) {
      due.push_back(std::move(held_.front().second));
      held_.pop_front();
    }
    mu_.Unlock();
    for (const std::weak_ptr<Holder>& weak : due) {
      if (std::shared_ptr<Holder> holder = weak.lock()) {
        holder->ReleaseHeldRead();
      }
    }
    mu_.Lock();
  }
}

}  // namespace reducer
