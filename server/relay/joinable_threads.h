// JoinableThreads: threads started for work that ends on its own, kept so
// that their owner can join them: those that returned are joined as new
// ones start (a long job does not keep one per call it ever made), the
// rest by JoinAll.
//
//   JoinableThreads threads;
//   threads.Start([] { ... });
//   threads.JoinAll();  // before what the threads use goes away
//
// Thread-safe. JoinAll must not run on one of its own threads.
#ifndef REDUCER_SERVER_RELAY_JOINABLE_THREADS_H_
#define REDUCER_SERVER_RELAY_JOINABLE_THREADS_H_

#include <atomic>
#include <cstddef>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace reducer {

class JoinableThreads {
 public:
  JoinableThreads() = default;
  JoinableThreads(const JoinableThreads&) = delete;
  JoinableThreads& operator=(const JoinableThreads&) = delete;
  ~JoinableThreads() { JoinAll(); }

  // Runs `work` (a callable taking nothing, which may be move-only) on a
  // thread of its own.
  template <typename Work>
  void Start(Work work) {
    auto finished = std::make_shared<std::atomic<bool>>(false);
    absl::MutexLock lock(&mu_);
    JoinFinishedLocked();
    threads_.push_back(
        {std::thread([work = std::move(work), finished]() mutable {
           work();
           finished->store(true);
         }),
         finished});
  }

  // Threads started and not joined yet.
  size_t held() {
    absl::MutexLock lock(&mu_);
    return threads_.size();
  }

  // Joins every thread started so far (those started meanwhile too).
  void JoinAll() {
    for (;;) {
      std::vector<Started> all;
      {
        absl::MutexLock lock(&mu_);
        if (threads_.empty()) return;
        all.swap(threads_);
      }
      for (Started& s : all) s.thread.join();
    }
  }

 private:
  struct Started {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> finished;  // it returned
  };
  void JoinFinishedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (auto it = threads_.begin(); it != threads_.end();) {
      if (!it->finished->load()) {
        ++it;
        continue;
      }
      it->thread.join();
      it = threads_.erase(it);
    }
  }

  absl::Mutex mu_;
  std::vector<Started> threads_ ABSL_GUARDED_BY(mu_);
};

}  // namespace reducer

#endif  // REDUCER_SERVER_RELAY_JOINABLE_THREADS_H_
