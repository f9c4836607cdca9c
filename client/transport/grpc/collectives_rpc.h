// CollectivesRpc: the CollectiveBackend of the Collectives stream, one long-lived
// stream to reducerd that carries every collective whose payload fits in one
// message, so that each costs one message each way and no stream setup
// (per-call stream setup is most of a small collective's latency; see
// docs/performance.md).
//
// A call is sent when it starts, from any thread. Its answer is read by the
// thread that waits for it: waiting polls the client's completion queue on
// the waiting thread (see CompletionDriver), so no thread hand-off lies
// between the answer and the caller. The stream reads only while an answer
// is due (AsyncStream's reads on demand): a read left posted between calls
// would make gRPC announce the freed flow-control window in a message of
// its own after every answer.
//
// The stream opens on first use, and again after it broke. A break fails the
// calls in flight on it with the stream's status (UNAVAILABLE when reducerd
// went away: nothing was answered, so a retry is safe).
//
// Thread-safe. Destroy it only once no thread waits on one of its calls.
// Lock order: the CompletionDriver's lock, then ClientSession's, then mu_
// (DriveUntil evaluates a waiter's condition under the driver's lock, and
// the session starts calls under its own); mu_ also guards the AsyncStreams
// it owns, and nothing holding mu_ calls into the driver.
#ifndef REDUCER_CLIENT_TRANSPORT_GRPC_COLLECTIVES_RPC_H_
#define REDUCER_CLIENT_TRANSPORT_GRPC_COLLECTIVES_RPC_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/internal/collective_attempt.h"
#include "client/internal/collective_backend.h"
#include "client/transport/grpc/async_stream.h"
#include "client/transport/grpc/completion_driver.h"
#include "core/buffer_cache.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "proto/reducer/v1/reducer.pb.h"

namespace reducer {

class CollectivesRpc final : public CollectiveBackend {
 public:
  // `stub` and `driver` must outlive this. Result tensors take their
  // buffers from `buffers` (may be null).
  CollectivesRpc(grpc::GenericStub* stub, CompletionDriver* driver,
                  std::shared_ptr<BufferCache> buffers);
  // Cancels the stream and waits until gRPC handed back what it holds.
  ~CollectivesRpc() override;
  CollectivesRpc(const CollectivesRpc&) = delete;
  CollectivesRpc& operator=(const CollectivesRpc&) = delete;

  // Sends one call: the header and whole payload of `contribution` (caller
  // memory, read in place). The attempt's Wait() gives up at the
  // contribution's deadline with DEADLINE_EXCEEDED, and returns only once
  // gRPC no longer reads the caller's memory (a message still queued is
  // dropped; one being written ends with its stream, cancelled). The attempt
  // must outlive neither this stream nor `contribution`.
  std::unique_ptr<CollectiveAttempt> Start(
      const Contribution& contribution) override;

 private:
  struct Call;
  struct Opening;
  class Attempt;

  bool Ready(const std::shared_ptr<Call>& call);
  absl::StatusOr<std::vector<Tensor>> Wait(uint64_t call_id,
                                           const std::shared_ptr<Call>& call,
                                           const Contribution& contribution);
  // Ends `call` with `why` unless its outcome came first, and forgets its
  // message (its Wait then returns once no write reads caller memory).
  void GiveUpLocked(uint64_t call_id, const std::shared_ptr<Call>& call,
                    absl::Status why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops `call`'s message from its stream's queue, or, if it is being
  // written, cancels that stream (the write then ends promptly).
  void ForgetMessageLocked(const std::shared_ptr<Call>& call)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Opens a new stream as current_.
  void OpenLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Files a received message with its call.
  void DispatchLocked(Opening* opening, grpc::ByteBuffer* message)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // No new call goes to `opening` any more.
  void RetireLocked(Opening* opening) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends every call still waiting on `opening` with `status`.
  void FailCallsLocked(Opening* opening, const absl::Status& status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // gRPC holds nothing of `opening` any more: it goes.
  void ForgetOpeningLocked(Opening* opening) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Constant after construction.
  grpc::GenericStub* const stub_;    // not owned
  CompletionDriver* const driver_;   // not owned
  const std::shared_ptr<BufferCache> buffers_;

  absl::Mutex mu_;
  std::unique_ptr<Opening> current_ ABSL_GUARDED_BY(mu_);  // takes new calls
  // Broken openings whose operations gRPC still holds.
  std::vector<std::unique_ptr<Opening>> retired_ ABSL_GUARDED_BY(mu_);
  // Calls sent and not yet answered, by call id.
  absl::flat_hash_map<uint64_t, std::shared_ptr<Call>> calls_
      ABSL_GUARDED_BY(mu_);
  // The last answer's fields, parsed again in place for each message: a
  // cleared message keeps its result specs allocated for the next parse.
  v1::CollectiveResponse response_ ABSL_GUARDED_BY(mu_);
  // Numbers the calls; atomic so that a message is encoded outside mu_.
  std::atomic<uint64_t> last_call_id_{0};
};

}  // namespace reducer

#endif  // REDUCER_CLIENT_TRANSPORT_GRPC_COLLECTIVES_RPC_H_
