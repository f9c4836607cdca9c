#include "tests/campaign/cpu_load.h"

#include <cstdint>

namespace reducer {
namespace testing {

CpuLoad::CpuLoad(int threads) {
  for (int i = 0; i < threads; ++i) {
    threads_.emplace_back([this] {
      volatile uint64_t spins = 0;
      while (!stop_.load(std::memory_order_relaxed)) spins = spins + 1;
    });
  }
}

CpuLoad::~CpuLoad() {
  stop_.store(true, std::memory_order_relaxed);
  for (std::thread& thread : threads_) thread.join();
}

}  // namespace testing
}  // namespace reducer
