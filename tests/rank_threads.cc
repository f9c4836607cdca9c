#include "tests/rank_threads.h"

#include <thread>
#include <utility>

#include "gtest/gtest.h"

namespace reducer {
namespace testing {

void RunOnEveryRank(int world_size, const std::function<void(int)>& fn) {
  std::vector<std::thread> threads;
  for (int r = 0; r < world_size; ++r) threads.emplace_back(fn, r);
  for (std::thread& t : threads) t.join();
}

void RankFailures::Add(std::string what) {
  absl::MutexLock lock(&mu_);
  failures_.push_back(std::move(what));
}

void RankFailures::ExpectNone() {
  absl::MutexLock lock(&mu_);
  for (const std::string& f : failures_) ADD_FAILURE() << f;
  failures_.clear();
}

}  // namespace testing
}  // namespace reducer
