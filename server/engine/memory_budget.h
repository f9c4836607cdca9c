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
#include <utility>

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

// Bytes reserved from a MemoryBudget for as long as this object lives (an
// empty one holds nothing). Move-only. Thread-compatible.
class MemoryReservation {
 public:
  MemoryReservation() = default;
  // `bytes` of `budget`, or an empty reservation with ok() false when they
  // do not fit.
  static MemoryReservation Try(MemoryBudget* budget, size_t bytes) {
    if (!budget->TryReserve(bytes)) return MemoryReservation(nullptr, bytes);
    return MemoryReservation(budget, bytes);
  }
  MemoryReservation(MemoryReservation&& other) noexcept
      : budget_(std::exchange(other.budget_, nullptr)), bytes_(other.bytes_) {}
  MemoryReservation& operator=(MemoryReservation&& other) noexcept {
    if (this != &other) {
      Reset();
      budget_ = std::exchange(other.budget_, nullptr);
      bytes_ = other.bytes_;
    }
    return *this;
  }
  ~MemoryReservation() { Reset(); }

  bool ok() const { return budget_ != nullptr; }
  size_t bytes() const { return bytes_; }

 private:
  MemoryReservation(MemoryBudget* budget, size_t bytes)
      : budget_(budget), bytes_(bytes) {}
  void Reset() {
    if (budget_ != nullptr) budget_->Release(bytes_);
    budget_ = nullptr;
  }

  MemoryBudget* budget_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace reducer

#endif  // REDUCER_SERVER_ENGINE_MEMORY_BUDGET_H_
