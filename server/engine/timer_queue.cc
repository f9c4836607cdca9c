#include "server/engine/timer_queue.h"

#include <algorithm>

namespace reducer {

TimerQueue::TimerQueue(const Clock* clock)
    : clock_(clock), thread_([this] { Run(); }) {}

TimerQueue::~TimerQueue() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    wake_.Signal();
  }
  thread_.join();
}

TimerQueue::Id TimerQueue::Schedule(absl::Time when,
                                    std::function<void()> callback) {
  absl::MutexLock lock(&mu_);
  Id id = next_id_++;
  pending_.emplace(std::make_pair(when, id), std::move(callback));
  time_of_.emplace(id, when);
  // Only a timer due before the thread wakes by itself needs to wake it.
  if (when < wake_at_) {
    wake_at_ = when;
    wake_.Signal();
  }
  return id;
}

void TimerQueue::Cancel(Id id) {
  absl::MutexLock lock(&mu_);
  auto it = time_of_.find(id);
  if (it == time_of_.end()) return;
  pending_.erase(std::make_pair(it->second, id));
  time_of_.erase(it);
}

void TimerQueue::Run() {
  absl::MutexLock lock(&mu_);
  while (!stopping_) {
    auto first = pending_.begin();
    const absl::Time when =
        first == pending_.end() ? absl::InfiniteFuture() : first->first.first;
    const absl::Time now = clock_->Now();
    if (now < when) {
      // Schedule() signals for a timer due sooner, and the destructor
      // signals, so either is noticed before `when`. The wait is relative:
      // an absl deadline would be read against the wall clock.
      wake_at_ = when;
      wake_.WaitWithTimeout(&mu_, std::min(when - now, clock_->MaxSleep()));
      wake_at_ = absl::InfinitePast();  // awake: Schedule() need not signal
      continue;
    }
    std::function<void()> callback = std::move(first->second);
    time_of_.erase(first->first.second);
    pending_.erase(first);
    mu_.Unlock();
    callback();
    mu_.Lock();
  }
}

}  // namespace reducer
