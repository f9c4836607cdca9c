// JobStreamShares: how many collective streams each job holds, capped per
// job (--max_streams_per_job) so that one job, buggy or hostile, cannot take
// every slot of --max_concurrent_calls and shut the other jobs out.
//
// A stream's job is known only when its first call's header arrives, so a
// stream takes its job's share then (HeldStreamShares) and gives it back
// when the stream ends. Thread-safe; the table holds only jobs with streams.
#ifndef REDUCER_SERVER_JOBS_JOB_STREAM_SHARES_H_
#define REDUCER_SERVER_JOBS_JOB_STREAM_SHARES_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "server/metrics/metrics_sink.h"

namespace reducer {

class JobStreamShares {
 public:
  // One stream's share of one job; gives it back when destroyed. Move-only.
  class Share {
   public:
    Share() = default;
    Share(Share&& other) noexcept;
    Share& operator=(Share&& other) noexcept;
    Share(const Share&) = delete;
    Share& operator=(const Share&) = delete;
    ~Share();

   private:
    friend class JobStreamShares;
    Share(JobStreamShares* shares, std::string job)
        : shares_(shares), job_(std::move(job)) {}
    void GiveBack();

    JobStreamShares* shares_ = nullptr;  // null: holds nothing
    std::string job_;
  };

  // `metrics` (not owned) counts refusals. Must outlive every Share.
  JobStreamShares(int max_streams_per_job, MetricsSink* metrics);

  // A share of `job`, or RESOURCE_EXHAUSTED naming the job and
  // --max_streams_per_job when the job already holds that many streams.
  absl::StatusOr<Share> Take(absl::string_view job);

  // Streams `job` holds now.
  int StreamsOf(absl::string_view job) const;

 private:
  void GiveBack(const std::string& job);

  const int max_streams_per_job_;
  MetricsSink* const metrics_;  // not owned
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, int> streams_ ABSL_GUARDED_BY(mu_);
};

// The shares one stream holds, one per job it attached calls to; given back
// by GiveBack (when the stream ends) or when destroyed. Thread-safe.
class HeldStreamShares {
 public:
  explicit HeldStreamShares(JobStreamShares* shares) : shares_(shares) {}

  // OK when the stream already holds a share of `job` or has taken one now;
  // else JobStreamShares::Take's error.
  absl::Status Hold(absl::string_view job);

  // Gives every share back; a later Hold takes them anew.
  void GiveBack();

 private:
  JobStreamShares* const shares_;  // not owned
  absl::Mutex mu_;
  std::vector<std::string> jobs_ ABSL_GUARDED_BY(mu_);
  std::vector<JobStreamShares::Share> held_ ABSL_GUARDED_BY(mu_);
};

}  // namespace reducer

#endif  // REDUCER_SERVER_JOBS_JOB_STREAM_SHARES_H_
