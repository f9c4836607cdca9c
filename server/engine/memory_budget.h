// MemoryBudget: a global count of the bytes the server may hold for payload
// (staged contributions and results). A collective reserves its worst case
// before it accepts a rank's payload and releases it when the rank is done.
//
//   if (!budget.TryReserve(n)) return ResourceExhausted(...);
//   ...
//   budget.Release(n);
//
// Thread-safe (one atomic; no lock needed since reservations are independent).
#ifndef REDUCER_SERVER_ENGINE_MEMORY_BUDGET_H_
#define REDUCER_SERVER_ENGINE_MEMORY_BUDGET_H_

#include <atomic>
#include <cstddef>

namespace reducer {

class MemoryBudget {
 public:
  explicit MemoryBudget(size_t limit_bytes) : limit_(limit_bytes) {}

  // Reserves `bytes` if that keeps the total within the limit.
  bool TryReserve(size_t bytes) {
    size_t used = used_.load(std::memory_order_relaxed);
    do {
      if (bytes > limit_ || used > limit_ - bytes) return false;
    } while (!used_.compare_exchange_weak(used, used + bytes,
                                          std::memory_order_relaxed));
    return true;
  }
  void Release(size_t bytes) { used_.fetch_sub(bytes, std::memory_order_relaxed); }

  size_t limit() const { return limit_; }
  size_t used() const { return used_.load(std::memory_order_relaxed); }

 private:
  const size_t limit_;
  std::atomic<size_t> used_{0};
};

}  // namespace reducer

#endif  // REDUCER_SERVER_ENGINE_MEMORY_BUDGET_H_
