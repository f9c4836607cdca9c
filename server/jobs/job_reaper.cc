#include "server/jobs/job_reaper.h"

#include <utility>

namespace reducer {

JobReaper::~JobReaper() {
  std::thread thread;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    thread = std::move(thread_);
  }
  if (thread.joinable()) thread.join();
}

void JobReaper::Retire(std::shared_ptr<Job> job) {
  absl::MutexLock lock(&mu_);
  queue_.push_back(std::move(job));
  if (!thread_.joinable()) thread_ = std::thread([this] { Loop(); });
}

void JobReaper::Loop() {
  absl::MutexLock lock(&mu_);
  while (true) {
    mu_.Await(absl::Condition(
        +[](JobReaper* self) ABSL_EXCLUSIVE_LOCKS_REQUIRED(self->mu_) {
          return self->stopping_ || !self->queue_.empty();
        },
        this));
    if (queue_.empty()) return;  // stopping, and nothing left
    std::shared_ptr<Job> job = std::move(queue_.front());
    queue_.pop_front();
    mu_.Unlock();
    job.reset();  // the last reference, most often: the job goes here
    mu_.Lock();
  }
}

}  // namespace reducer
