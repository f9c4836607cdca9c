#include "server/engine/thread_pool.h"

#include <utility>

namespace reducer {

ThreadPool::ThreadPool(int num_threads) {
  for (int i = 0; i < num_threads; ++i) {
    threads_.emplace_back([this] { Work(); });
  }
}

ThreadPool::~ThreadPool() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& t : threads_) t.join();
}

void ThreadPool::Schedule(std::function<void()> closure) {
  absl::MutexLock lock(&mu_);
  queue_.push_back(std::move(closure));
}

void ThreadPool::Work() {
  while (true) {
    std::function<void()> closure;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](ThreadPool* p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(p->mu_) {
            return p->stopping_ || !p->queue_.empty();
          },
          this));
      if (queue_.empty()) return;  // stopping and drained
      closure = std::move(queue_.front());
      queue_.pop_front();
    }
    closure();
  }
}

}  // namespace reducer
