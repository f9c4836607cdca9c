// Test doubles for a Job's sessions and calls: FakeSession records the
// events a Job sends to one session (server/engine/fake_rank_channel.h,
// included here, what a Collective does to one rank's call); JobTestEnv,
// what a Job needs of the server, on defaults.
#ifndef REDUCER_SERVER_JOBS_FAKE_JOB_CHANNELS_H_
#define REDUCER_SERVER_JOBS_FAKE_JOB_CHANNELS_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "proto/reducer/v1/reducer.pb.h"
#include "server/engine/chunk_pool.h"
#include "server/engine/fake_rank_channel.h"
#include "server/engine/memory_budget.h"
#include "server/engine/thread_pool.h"
#include "server/engine/timer_queue.h"
#include "server/jobs/job.h"
#include "server/log.h"
#include "server/metrics/metrics_sink.h"
#include "server/server_options.h"

namespace reducer {

// Records what the Job sends to one session. Thread-safe.
class FakeSession final : public SessionChannel {
 public:
  void SendEvent(const v1::JoinEvent& event) override {
    absl::MutexLock lock(&mu_);
    if (event.has_waiting()) {
      waiting_.push_back(event.waiting());
    } else {
      events_.push_back(event);
    }
  }
  void Fail(const absl::Status& status) override {
    absl::MutexLock lock(&mu_);
    failure_ = status;
  }
  // Every event but JoinWaiting, in order.
  std::vector<v1::JoinEvent> events() {
    absl::MutexLock lock(&mu_);
    return events_;
  }
  // The JoinWaiting events, in order.
  std::vector<v1::JoinWaiting> waiting() {
    absl::MutexLock lock(&mu_);
    return waiting_;
  }
  // How the Job ended it; OK while it did not.
  absl::Status failure() {
    absl::MutexLock lock(&mu_);
    return failure_;
  }
  int aborted_count() {
    int n = 0;
    for (const auto& e : events()) n += e.has_aborted() ? 1 : 0;
    return n;
  }
  int ready_count() {
    int n = 0;
    for (const auto& e : events()) n += e.has_ready() ? 1 : 0;
    return n;
  }

 private:
  absl::Mutex mu_;
  std::vector<v1::JoinEvent> events_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::JoinWaiting> waiting_ ABSL_GUARDED_BY(mu_);
  absl::Status failure_ ABSL_GUARDED_BY(mu_);
};

// The server's parts a Job uses, on EngineOptions' defaults (or `options`)
// and reducerd's default memory budget (or `memory_budget_bytes`), results
// not kept, metrics counting nothing, the log on `log_clock`. Must outlive
// the jobs made with env().
class JobTestEnv {
 public:
  explicit JobTestEnv(
      EngineOptions options = {},
      size_t memory_budget_bytes = ServerOptions().memory_budget_bytes,
      LogGate::Clock log_clock = &absl::Now)
      : options_(std::move(options)),
        memory_(memory_budget_bytes),
        chunks_(options_.chunk_bytes, 4),
        pool_(1),
        log_(LogFormat::kText, std::move(log_clock)) {}
  CollectiveEnv env() {
    return CollectiveEnv{&options_, &pool_,    &timers_, &memory_,
                         &chunks_,  &metrics_, &log_};
  }
  MemoryBudget& memory() { return memory_; }

 private:
  EngineOptions options_;
  MemoryBudget memory_;
  ChunkPool chunks_;
  TimerQueue timers_;
  ThreadPool pool_;
  MetricsSink metrics_;
  Logger log_;
};

// Rank `rank`'s JoinRequest for job `job` of `world` ranks, from session
// `session`.
inline v1::JoinRequest MakeJoinRequest(const std::string& job, int rank,
                                       int world, const std::string& session) {
  v1::JoinRequest r;
  r.set_job(job);
  r.set_rank(rank);
  r.set_world_size(world);
  r.set_session_id(session);
  return r;
}

}  // namespace reducer

#endif  // REDUCER_SERVER_JOBS_FAKE_JOB_CHANNELS_H_
