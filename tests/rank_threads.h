// Helpers for tests that run every rank of a job as a thread of the test
// process: RunOnEveryRank starts and joins the threads, and RankFailures
// collects what went wrong on them to report on the test's thread (gtest's
// assertions belong there).
//
//   RankFailures failures;
//   RunOnEveryRank(2, [&](int rank) {
//     if (!ok) failures.Add(absl::StrCat("rank ", rank, ": ..."));
//   });
//   failures.ExpectNone();
#ifndef REDUCER_TESTS_RANK_THREADS_H_
#define REDUCER_TESTS_RANK_THREADS_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace reducer {
namespace testing {

// Runs fn(rank) for ranks 0..world_size-1, each on a thread of its own, and
// returns once all of them returned.
void RunOnEveryRank(int world_size, const std::function<void(int)>& fn);

// Thread-safe.
class RankFailures {
 public:
  // Records `what` (from any thread).
  void Add(std::string what);
  // Reports every recorded failure as a gtest failure, then forgets them.
  // Call on the test's thread.
  void ExpectNone();

 private:
  absl::Mutex mu_;
  std::vector<std::string> failures_ ABSL_GUARDED_BY(mu_);
};

}  // namespace testing
}  // namespace reducer

#endif  // REDUCER_TESTS_RANK_THREADS_H_
