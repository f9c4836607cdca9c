// ThreadPool runs closures on a fixed set of threads, first in first out.
// Reducing large chunks here keeps gRPC's callback threads free for I/O.
//
//   ThreadPool pool(2);
//   pool.Schedule([] { ReduceChunk(); });
//
// Thread-safe. The destructor runs the closures already scheduled, then joins.
#ifndef REDUCER_SERVER_ENGINE_THREAD_POOL_H_
#define REDUCER_SERVER_ENGINE_THREAD_POOL_H_

#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace reducer {

class ThreadPool {
 public:
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  void Schedule(std::function<void()> closure);

 private:
  void Work();

  absl::Mutex mu_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;  // last: the threads read the above
};

}  // namespace reducer

#endif  // REDUCER_SERVER_ENGINE_THREAD_POOL_H_
