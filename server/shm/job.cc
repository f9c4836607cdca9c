#include "server/shm/job.h"

#include <algorithm>
#include <system_error>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace reducer {

absl::StatusOr<std::shared_ptr<SharedMemoryJob>> SharedMemoryJob::Create(
    std::string job, uint64_t epoch_id, size_t result_bytes,
    const Logger* log) {
  absl::StatusOr<std::unique_ptr<SharedMemoryResults>> results =
      SharedMemoryResults::Create(result_bytes);
  if (!results.ok()) return results.status();
  auto created = std::make_shared<SharedMemoryJob>(std::move(job), epoch_id,
                                                   *std::move(results), log);
  SharedMemoryJob* raw = created.get();
  try {
    created->thread_ = std::thread([raw] { raw->Run(); });
  } catch (const std::system_error& e) {
    // Out of threads: this session's refusal, not reducerd's end.
    return absl::ResourceExhaustedError(
        absl::StrCat("reducerd cannot start the same-host thread of job ",
                     raw->job(), ": ", e.what()));
  }
  return created;
}

SharedMemoryJob::SharedMemoryJob(std::string job, uint64_t epoch_id,
                                 std::unique_ptr<SharedMemoryResults> results,
                                 const Logger* log)
    : job_(std::move(job)),
      epoch_id_(epoch_id),
      log_(log),
      results_(std::move(results)) {}

SharedMemoryJob::~SharedMemoryJob() {
  Stop();
  Join();
}

void SharedMemoryJob::Reserve() {
  live_.fetch_add(1, std::memory_order_acq_rel);
}

void SharedMemoryJob::Unreserve() {
  live_.fetch_sub(1, std::memory_order_acq_rel);
}

void SharedMemoryJob::Add(SharedMemorySession::Parts parts,
                          JobDoor::AttachFn attach, size_t chunk_bytes,
                          size_t max_unread_answer_bytes) {
  std::shared_ptr<SharedMemorySession> session = SharedMemorySession::Create(
      std::move(parts), results_.get(), std::move(attach), chunk_bytes,
      max_unread_answer_bytes, log_);
  {
    absl::MutexLock lock(&mu_);
    added_.push_back(std::move(session));
  }
  wake_.Ring();
}

void SharedMemoryJob::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  wake_.Ring();
}

void SharedMemoryJob::Join() {
  if (thread_.joinable()) thread_.join();
}

void SharedMemoryJob::Run() {
  std::vector<std::shared_ptr<SharedMemorySession>> sessions;
  std::vector<Doorbell::Watch> watches;
  bool stopping = false;
  bool futex_refused = false;
  while (true) {
    const uint32_t woke = wake_.value();
    {
      absl::MutexLock lock(&mu_);
      for (auto& s : added_) {
        if (stopping_) s->Stop();
        sessions.push_back(std::move(s));
      }
      added_.clear();
      if (stopping_ && !stopping) {
        stopping = true;
        for (auto& s : sessions) s->Stop();
      }
    }
    if (stopping && sessions.empty()) return;
    watches.clear();
    watches.push_back({&wake_, woke});
    // Wall-clock times, as Doorbell::WaitAny takes its deadline: it waits
    // for the time left, so a step of the wall clock shifts one wait (a
    // periodic check, a millisecond's look) at most.
    const absl::Time now = absl::Now();
    absl::Time wake_by = now + SharedMemorySession::kSocketCheck;
    for (size_t i = 0; i < sessions.size();) {
      SharedMemorySession& s = *sessions[i];
      const uint32_t seen = s.bell().value();
      bool soon = false;
      const absl::Status why = s.Step(now, &soon);
      if (!why.ok()) {
        if (s.lost_seat()) retired_.store(true, std::memory_order_release);
        s.End(why);
        sessions.erase(sessions.begin() + i);
        live_.fetch_sub(1, std::memory_order_acq_rel);
        continue;
      }
      watches.push_back({&s.bell(), seen});
      wake_by = std::min(wake_by, s.next_socket_check());
      // A full response ring frees up without ringing a bell: look again
      // soon.
      if (soon) wake_by = std::min(wake_by, now + absl::Milliseconds(1));
      ++i;
    }
    if (stopping && sessions.empty()) return;
    if (watches.size() > Doorbell::kMaxWatches) {
      // More sessions than one sleep watches: the rest are looked at
      // within a slice.
      watches.resize(Doorbell::kMaxWatches);
      wake_by = std::min(wake_by, now + Doorbell::kFallbackSlice);
    }
    // Once the kernel refused to sleep, watching the words first only burns
    // the CPU: the millisecond's sleep below does the waiting.
    const absl::Status waited = Doorbell::WaitAny(
        watches, wake_by,
        futex_refused ? absl::ZeroDuration() : Doorbell::kSpin);
    // DEADLINE_EXCEEDED is the wake-up for the sessions' periodic checks
    // (every kSocketCheck), not a refusal: taking it for one would stop the
    // watch for good and put a futex wake on every later call's path.
    if (!waited.ok() && !absl::IsDeadlineExceeded(waited)) {
      // The kernel refuses to sleep on the bells (a seccomp profile that
      // answers futex with EPERM): look again every millisecond rather than
      // spin, and say so once.
      if (!futex_refused) {
        futex_refused = true;
        log_->Log(
            {LogSeverity::kWarning, "shm_wait_refused",
             absl::StrCat("same-host path of job ", job_,
                          ": cannot sleep on doorbells (", waited.message(),
                          "); polling every millisecond instead"),
             job_});
      }
      absl::SleepFor(
          std::max(absl::ZeroDuration(),
                   std::min(wake_by - absl::Now(), absl::Milliseconds(1))));
    }
  }
}

}  // namespace reducer
