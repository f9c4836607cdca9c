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
// A reader thread takes the responses, builds each result and wakes its
// caller; it also watches the socket, so a reducerd that closed or died
// fails every call in flight with UNAVAILABLE (and received_any() false, so
// that the session may retry them over gRPC when it is still intact). A
// call's input range stays allocated until its response came, since
// reducerd reads it straight from the segment until then.
//
// Thread-safe; attempts must not outlive the backend.
#ifndef REDUCER_CLIENT_SHARED_MEMORY_BACKEND_H_
#define REDUCER_CLIENT_SHARED_MEMORY_BACKEND_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "client/collective_attempt.h"
#include "client/collective_backend.h"
#include "client/shared_memory_handshake.h"
#include "core/buffer_cache.h"
#include "core/range_allocator.h"

namespace reducer {

class SharedMemoryBackend final : public CollectiveBackend {
 public:
  // Payloads and results up to this size travel inside the ring records.
  static constexpr size_t kInlineBytes = 64 << 10;

  // `target` names reducerd in errors; results take buffers from `buffers`.
  SharedMemoryBackend(SharedMemoryChannel channel, std::string target,
                      std::shared_ptr<BufferCache> buffers);
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
  std::unique_ptr<CollectiveAttempt> TryStart(const Contribution& contribution);
  // CollectiveBackend: TryStart, or an attempt failed with why not.
  std::unique_ptr<CollectiveAttempt> Start(
      const Contribution& contribution) override;

  // Bytes of the input segment (ClientOptions::shared_memory_bytes).
  size_t input_bytes() const { return input_ranges_.size(); }

 private:
  class Attempt;
  struct Call;

  void ReadResponses();
  // Takes one response record; false when it ends the session.
  bool HandleResponse(const std::string& record);
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

  const SharedMemoryChannel channel_;
  const std::string target_;
  const std::shared_ptr<BufferCache> buffers_;
  RangeAllocator input_ranges_;
  std::atomic<uint64_t> next_call_id_{1};
  std::atomic<bool> stop_{false};

  absl::Mutex push_mu_;  // one producer of the request ring at a time
  mutable absl::Mutex mu_;
  absl::flat_hash_map<uint64_t, std::shared_ptr<Call>> calls_ ABSL_GUARDED_BY(mu_);
  absl::Status broken_ ABSL_GUARDED_BY(mu_);
  // Result ranges read but not yet handed back (the ring was full). Only
  // the reader thread touches it.
  std::vector<std::pair<uint64_t, uint64_t>> releases_;

  std::thread reader_;  // last: starts once everything above exists
};

}  // namespace reducer

#endif  // REDUCER_CLIENT_SHARED_MEMORY_BACKEND_H_
