// JobReaper: drops jobs' references on a thread of its own. A relay's job
// waits, as it goes, for its threads that join and leave upstream (up to a
// call's deadline while the link to the shards is down); the registry
// hands such a job here instead of dropping its last reference under its
// own lock, where every other job's calls, Admin.Status and /metrics would
// wait for it too.
//
//   JobReaper reaper;
//   reaper.Retire(std::move(job));  // never waits for the job
//
// Thread-safe.
#ifndef REDUCER_SERVER_JOBS_JOB_REAPER_H_
#define REDUCER_SERVER_JOBS_JOB_REAPER_H_

#include <deque>
#include <memory>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "server/jobs/job.h"

namespace reducer {

class JobReaper {
 public:
  JobReaper() = default;
  JobReaper(const JobReaper&) = delete;
  JobReaper& operator=(const JobReaper&) = delete;
  // Drops what is still queued, then joins the thread.
  ~JobReaper();

  // Drops `job` on the reaper's thread (started by the first call).
  void Retire(std::shared_ptr<Job> job);

 private:
  void Loop();

  absl::Mutex mu_;
  std::deque<std::shared_ptr<Job>> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_ ABSL_GUARDED_BY(mu_);
};

}  // namespace reducer

#endif  // REDUCER_SERVER_JOBS_JOB_REAPER_H_
