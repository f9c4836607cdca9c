// SharedMemoryJob: one job's same-host sessions on one reducerd
// (docs/same_host.md, "Waiting" and "Results"): the one thread that serves
// every SharedMemorySession of the job, and the job's result segment
// (SharedMemoryResults), which every session of the job hands its client.
//
//   absl::StatusOr<std::shared_ptr<SharedMemoryJob>> job =
//       SharedMemoryJob::Create("job-a", epoch_id, result_bytes, &log);
//   (*job)->Reserve();                   // a handshake is under way
//   ... send the welcome with (*job)->results_fd() ...
//   (*job)->Add(session_parts, ...);     // or Unreserve() if it failed
//   ...
//   (*job)->Stop(); (*job)->Join();      // every session ended, thread gone
//
// The thread watches the request ring of every session at once
// (Doorbell::WaitAny: one wake serves every rank, and the call that
// completes a collective runs on a thread already awake), and passes over
// every session each time one of them rings: each pass takes a session's
// records, feeds its calls, copies the results, pushes the responses that
// are due, and looks at its socket when kSocketCheck has passed (so a
// client that died is noticed within kSocketCheck). A session that must
// end is ended there (its calls cancelled, its references to results
// dropped) and forgotten.
//
// live() counts the sessions added or reserved and not yet ended: the
// listener forgets a job (Stop, Join) only when it is zero, and reserves
// before it hands a new client the job's result segment, both under its own
// lock, so a job is never forgotten under a handshake. Thread-safe.
#ifndef REDUCER_SERVER_SHM_JOB_H_
#define REDUCER_SERVER_SHM_JOB_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/shm/doorbell.h"
#include "server/jobs/job_door.h"
#include "server/log.h"
#include "server/shm/results.h"
#include "server/shm/session.h"

namespace reducer {

class SharedMemoryJob {
 public:
  // A job whose result segment has `result_bytes` (SharedMemoryResults::Create's
  // error when it does not fit), its thread started, for the sessions of
  // one epoch of the job (Job::Seat::epoch_id). `log` outlives it.
  static absl::StatusOr<std::shared_ptr<SharedMemoryJob>> Create(
      std::string job, uint64_t epoch_id, size_t result_bytes,
      const Logger* log);

  ~SharedMemoryJob();  // Stop(), Join()
  SharedMemoryJob(const SharedMemoryJob&) = delete;
  SharedMemoryJob& operator=(const SharedMemoryJob&) = delete;

  const std::string& job() const { return job_; }
  uint64_t epoch_id() const { return epoch_id_; }
  // True once a session ended because its peer lost its seat (a revoked
  // token, a replaced rank, an ended epoch): that peer may still map the
  // result segment, so no later session may be handed it.
  bool retired() const { return retired_.load(std::memory_order_acquire); }
  // The result segment's memfd and nonce, for each session's welcome.
  int results_fd() const { return results_->segment().fd(); }
  const std::string& results_nonce() const { return results_->nonce(); }
  size_t results_bytes() const { return results_->size(); }

  // Counts one session to come (live() + 1) until Add or Unreserve.
  void Reserve();
  void Unreserve();
  // Starts serving a session reserved before: `parts` as the handshake
  // accepted them, `attach`, `chunk_bytes` and `max_unread_answer_bytes` as
  // SharedMemorySession takes them. After Stop(), the session ends at once.
  void Add(SharedMemorySession::Parts parts, JobDoor::AttachFn attach,
           size_t chunk_bytes, size_t max_unread_answer_bytes);
  // Sessions reserved or added and not ended.
  int live() const { return live_.load(std::memory_order_acquire); }

  // Ends every session (calls not answered count as cancelled) once it has
  // pushed the answers already known; returns at once.
  void Stop();
  // Waits for the thread to return. Not from the thread.
  void Join();

  SharedMemoryJob(std::string job, uint64_t epoch_id,
                  std::unique_ptr<SharedMemoryResults> results,
                  const Logger* log);  // Create()

 private:
  void Run();

  const std::string job_;
  const uint64_t epoch_id_;
  const Logger* const log_;
  // Only the thread touches it (and its sessions).
  const std::unique_ptr<SharedMemoryResults> results_;

  std::atomic<uint32_t> wake_word_{0};
  Doorbell wake_{&wake_word_};  // rung by Add and Stop
  std::atomic<int> live_{0};
  std::atomic<bool> retired_{false};
  std::thread thread_;

  absl::Mutex mu_;
  std::vector<std::shared_ptr<SharedMemorySession>> added_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace reducer

#endif  // REDUCER_SERVER_SHM_JOB_H_
