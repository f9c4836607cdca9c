// SharedMemoryBackend: collectives over the same-host path
// (docs/same_host.md), once ShakeHands has set up its channel. Each call is
// one request record (the payload copied into the input segment, or inline
// when small) and one response record (the result read from the result
// segment, or inline), signalled through the control segment's doorbells:
// no gRPC on the way.
//
//   auto backend = std::make_unique<SharedMemoryBackend>(
//       *std::move(channel), "127.0.0.1:50051", buffers);
//   std::unique_ptr<CollectiveAttempt> attempt = backend->TryStart(c);
//   if (attempt == nullptr) ... // does not fit now: send it over gRPC
//
// Whoever waits reads the responses: a thread in Wait() takes the response
// ring (one at a time; the others wait for their call or their turn) and
// handles every response it finds, so the answer is read by the thread
// that wants it, with no hand-off between threads (on this kind of machine
// each hand-off costs more than the rest of a small collective). When no
// caller waits, a reader thread takes the ring instead, so that results of
// calls not yet waited for are taken and their ranges released. The
// poller also watches the socket, so a reducerd that closed or died fails
// every call in flight with UNAVAILABLE (and received_any() false, so that
// the session may retry them over gRPC when it is still intact). A call's
// input range stays allocated until its response came, since reducerd
// reads it straight from the segment until then.
//
// A result is copied out of the result segment into tensors of `buffers`,
// and its range handed back to reducerd, as soon as its response is read;
// except for a call whose contribution allows a lent result
// (Contribution::result_may_be_lent: an in-place all-reduce, whose caller
// copies the result into its own buffer at once) and whose caller is in
// Wait() when the response comes: it gets tensors lent from the segment
// (Tensor::Lent), and the range goes back when they are dropped. Its one
// copy out of the segment is then the caller's, into its buffer.
//
// Thread-safe; attempts must not outlive the backend.
#ifndef REDUCER_CLIENT_TRANSPORT_SHM_BACKEND_H_
#define REDUCER_CLIENT_TRANSPORT_SHM_BACKEND_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/internal/collective_attempt.h"
#include "client/internal/collective_backend.h"
#include "client/transport/shm/handshake.h"
#include "core/buffer_cache.h"
#include "core/shm/range_allocator.h"
#include "core/tensor.h"
#include "proto/reducer/v1/reducer.pb.h"

namespace reducer {

class SharedMemoryBackend final : public CollectiveBackend {
 public:
  // Payloads and results up to this size travel inside the ring records.
  static constexpr size_t kInlineBytes = 64 << 10;

  // `target` names reducerd in errors; results take buffers from `buffers`.
  // `on_watched_settle` (may be null) runs, on any thread and with no lock
  // held, when a call settles whose attempt was asked Settled() before:
  // whoever waits for several attempts that way (ShardedBackend, in
  // ProgressEngine::DriveUntil) must hear of it, since the outcome does
  // not come through the gRPC completion queue.
  SharedMemoryBackend(SharedMemoryChannel channel, std::string target,
                      std::shared_ptr<BufferCache> buffers,
                      std::function<void()> on_watched_settle = nullptr);
  // Closes the socket (reducerd ends the session and cancels what it still
  // holds of it) and stops the reader; calls still waiting fail CANCELLED.
  ~SharedMemoryBackend() override;
  SharedMemoryBackend(const SharedMemoryBackend&) = delete;
  SharedMemoryBackend& operator=(const SharedMemoryBackend&) = delete;

  // OK while the shared-memory session is up; else how it ended.
  absl::Status status() const;

  // Sends one attempt, or returns null when it cannot go this way now: the
  // session is over, the payload does not fit in the input segment's free
  // space, or its header does not fit in a ring record.
  std::unique_ptr<CollectiveAttempt> TryStart(
      const Contribution& contribution) override;
  // CollectiveBackend: TryStart, or an attempt failed with why not.
  std::unique_ptr<CollectiveAttempt> Start(
      const Contribution& contribution) override;

  // Bytes of the input segment (ClientOptions::shared_memory_bytes).
  size_t input_bytes() const { return input_ranges_.size(); }

 private:
  class Attempt;
  struct Call;
  struct Lending;
  class LentRange;

  // The reader thread: polls while no caller does, until stop_.
  void ReadResponses();
  // Takes the ring (polling_ must be ours) until `done()` (called with mu_
  // held) or `deadline`: handles every response, and waits on the ring's
  // bell in between, checking the socket at least every kSocketCheckEvery.
  void PollUntil(const std::function<bool()>& done, absl::Time deadline)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Handles what the response ring holds now; false once the session broke.
  bool DrainResponses() ABSL_LOCKS_EXCLUDED(mu_);
  // Takes one response record; false when it ends the session.
  bool HandleResponse(const std::string& record);
  // The result tensors of `response`, lent from `data` (its range `range`
  // of the result segment), or nullopt when its specs do not describe
  // exactly those bytes (ResultAssembler then says what is wrong).
  std::optional<std::vector<Tensor>> LendResult(
      const v1::CollectiveResponse& response,
      std::pair<uint64_t, uint64_t> range, absl::string_view data);
  // Gives `call` its outcome, unless it has one.
  void Settle(Call& call, absl::StatusOr<std::vector<Tensor>> outcome,
              bool from_reducerd) ABSL_LOCKS_EXCLUDED(mu_);
  // Fails every call in flight with `status` and refuses new ones.
  void Break(const absl::Status& status);
  // True when the socket says reducerd closed its end (or died).
  bool SocketClosed() const;
  // Pushes `record` without waiting; false when the ring is full.
  bool TryPushRequest(const std::string& record);
  // Sends the cancel record of `call_id`, best effort.
  void SendCancel(uint64_t call_id);
  // Pushes the result ranges released so far, as far as the ring takes.
  void FlushReleases();

  // The result segment (moved out of the channel) and the ranges of lent
  // results dropped but not yet handed back; shared with every lent range,
  // so that the segment stays mapped while a lent tensor lives.
  const std::shared_ptr<Lending> lending_;
  const SharedMemoryChannel channel_;  // its `result` is lending_'s
  const std::string target_;
  const std::shared_ptr<BufferCache> buffers_;
  const std::function<void()> on_watched_settle_;
  RangeAllocator input_ranges_;
  std::atomic<uint64_t> next_call_id_{1};

  absl::Mutex push_mu_;  // one producer of the request ring at a time
  // Guards the calls, their outcomes and who polls.
  mutable absl::Mutex mu_;
  absl::flat_hash_map<uint64_t, std::shared_ptr<Call>> calls_
      ABSL_GUARDED_BY(mu_);
  absl::Status broken_ ABSL_GUARDED_BY(mu_);
  bool polling_ ABSL_GUARDED_BY(mu_) = false;      // someone holds the ring
  int waiting_ ABSL_GUARDED_BY(mu_) = 0;           // callers inside Wait()
  absl::Time last_wait_end_ ABSL_GUARDED_BY(mu_);  // a caller left Wait()
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  // Result ranges read but not yet handed back (the ring was full). Only
  // the poller touches it.
  std::vector<std::pair<uint64_t, uint64_t>> releases_;

  std::thread reader_;  // last: starts once everything above exists
};

}  // namespace reducer

#endif  // REDUCER_CLIENT_TRANSPORT_SHM_BACKEND_H_
