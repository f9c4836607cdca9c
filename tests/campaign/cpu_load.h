// CpuLoad: busy threads that keep cores busy for as long as it lives, the
// load a training step puts beside reducerd and its clients. A campaign run
// under it meets the timing that a loaded machine gives: threads woken
// late, keepalive pings answered late, a process descheduled mid-answer.
//
//   {
//     CpuLoad load(std::thread::hardware_concurrency());  // one per core
//     ... the campaign ...
//   }  // the threads end here
//
// Each thread spins without sleeping or yielding until the CpuLoad is
// destroyed. Zero threads: no load. Not copyable.
#ifndef REDUCER_TESTS_CAMPAIGN_CPU_LOAD_H_
#define REDUCER_TESTS_CAMPAIGN_CPU_LOAD_H_

#include <atomic>
#include <thread>
#include <vector>

namespace reducer {
namespace testing {

class CpuLoad {
 public:
  explicit CpuLoad(int threads);
  ~CpuLoad();
  CpuLoad(const CpuLoad&) = delete;
  CpuLoad& operator=(const CpuLoad&) = delete;

  // How many threads spin.
  int threads() const { return static_cast<int>(threads_.size()); }

 private:
  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;
};

}  // namespace testing
}  // namespace reducer

#endif  // REDUCER_TESTS_CAMPAIGN_CPU_LOAD_H_
