#include "server/timer_queue.h"

namespace reducer {

TimerQueue::TimerQueue() : thread_([this] { Run(); }) {}

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
  auto it = pending_.emplace(std::make_pair(when, id), std::move(callback)).first;
  time_of_.emplace(id, when);
  // The thread sleeps until the earliest timer; only a new earliest one
  // needs to wake it (most timers are cancelled long before they are due).
  if (it == pending_.begin()) wake_.Signal();
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
    if (pending_.empty()) {
      wake_.Wait(&mu_);
      continue;
    }
    auto first = pending_.begin();
    const absl::Time when = first->first.first;
    if (absl::Now() < when) {
      // Schedule() and the destructor signal, so a sooner timer or shutdown
      // is noticed before `when`.
      wake_.WaitWithDeadline(&mu_, when);
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
