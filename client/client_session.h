// ClientSession: what a Client holds: the channels to reducerd, the one
// completion queue every call of this client completes on (and who polls
// it, see CompletionDriver), this process's session (the Join stream), the
// job's epoch, and the per-group sequence numbers that match collectives
// across ranks by call order.
//
// Thread-safe. Internal to the client library.
#ifndef REDUCER_CLIENT_CLIENT_SESSION_H_
#define REDUCER_CLIENT_CLIENT_SESSION_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "client/async_stream.h"
#include "client/client_options.h"
#include "client/collective_attempt.h"
#include "client/collective_router.h"
#include "client/completion_driver.h"
#include "client/device_staging.h"
#include "client/per_call_backend.h"
#include "client/small_call_stream.h"
#include "client/staging_backend.h"
#include "core/buffer_cache.h"
#include "core/device.h"
#include "core/fingerprint.h"
#include "core/tensor.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "proto/reducer/v1/reducer.grpc.pb.h"

namespace reducer {

// One collective as the Client API asks for it.
struct CollectiveRequestSpec {
  CollectiveKind kind = CollectiveKind::kAllReduce;
  std::vector<TensorSpec> tensors;  // declared to the server
  std::vector<const void*> inputs;  // bytes of each tensor (caller memory)
  bool send_payload = true;         // false: declare shapes, send no bytes
  int root = -1;                    // Broadcast
  Device device;                    // of every input, and of the results
};

class ClientSession;

// A collective that was started (its place in the group's call order taken,
// its first attempt sent) and not yet waited for.
//
// Contract: caller memory behind the request's inputs must stay valid and
// unchanged until Wait() returns; the session must outlive this. Wait() once,
// from one thread.
class PendingCollective {
 public:
  // Blocks for the result. Retries the attempt where that is safe: the
  // transport failed before any answer came and the session is intact (the
  // retry carries the same attempt_id, so the server never counts it twice).
  absl::StatusOr<std::vector<Tensor>> Wait();

  // True once the current attempt's outcome is known (Wait() may still
  // retry a transport failure). Never blocks.
  bool Ready();

 private:
  friend class ClientSession;
  explicit PendingCollective(ClientSession* session) : session_(session) {}

  ClientSession* const session_;
  absl::Status invalid_;  // the call was refused before anything was sent
  Contribution contribution_;
  std::unique_ptr<CollectiveAttempt> attempt_;  // the latest
};

class ClientSession final : private AsyncStream::Observer {
 public:
  // Opens the channel and the Join stream; returns once the job is ready.
  static absl::StatusOr<std::unique_ptr<ClientSession>> Open(
      const ClientOptions& options);
  // Closes the session: the server sees this rank leave.
  ~ClientSession() override;

  // Starts one collective: checks the call options (group, timeout; an
  // error is INVALID_ARGUMENT naming what is wrong, returned by Wait()),
  // takes the next sequence number of its group, and sends it.
  std::unique_ptr<PendingCollective> Start(const CollectiveRequestSpec& spec,
                                           const CallOptions& call);

  // Start(spec, call)->Wait().
  absl::StatusOr<std::vector<Tensor>> Run(const CollectiveRequestSpec& spec,
                                          const CallOptions& call);

  const ClientOptions& options() const { return options_; }
  // Moves tensors between GPUs and the host; lives as long as the session.
  DeviceStaging* staging() const { return device_staging_.get(); }

 private:
  friend class PendingCollective;
  explicit ClientSession(ClientOptions options);
  // Waits until the session channel is ready or `deadline`; OK either way,
  // unless a failed connection is diagnosed as a TLS mismatch (DiagnoseTls's
  // FAILED_PRECONDITION, returned at once).
  absl::Status WaitForChannel(absl::Time deadline);
  // AsyncStream::Observer of the Join stream, with mu_ held: session
  // events, and how the session ended.
  void OnRead(grpc::ByteBuffer* message) override;
  void OnFinished(const grpc::Status& status) override;
  // Sends one attempt of `pending`'s collective where router_ says.
  std::unique_ptr<CollectiveAttempt> SendAttempt(const PendingCollective& pending);
  // OK while the session is usable; else why not.
  absl::Status SessionStatus();

  // Constant after construction.
  const ClientOptions options_;
  const std::string session_id_;
  const std::shared_ptr<BufferCache> buffers_;  // shared with result tensors
  // Numbers the collectives this session starts (their attempt ids); atomic
  // so that concurrent calls need no lock for it.
  std::atomic<uint64_t> next_attempt_{0};
  // Payload bytes per message, reducerd's --chunk_bytes from JobReady; set
  // before Open returns and read by every attempt after. Atomic so that
  // sending needs no lock for it.
  std::atomic<size_t> chunk_bytes_;
  // Destroyed in reverse: the calls first, the driver last.
  std::unique_ptr<CompletionDriver> driver_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Reducer::Stub> stub_;
  std::shared_ptr<grpc::Channel> data_channel_;  // collectives
  std::unique_ptr<grpc::GenericStub> data_stub_;
  // The transports (both use data_stub_) and the router that picks one per
  // collective; ~ClientSession destroys them first, the Join stream next,
  // the driver last.
  std::unique_ptr<SmallCallStream> small_calls_;
  std::unique_ptr<PerCallBackend> per_call_;
  std::unique_ptr<CollectiveRouter> router_;
  // Device contributions staged around the router (every attempt is
  // started here); destroyed before the router, and device_staging_ last
  // of the calls' parts.
  std::unique_ptr<DeviceStaging> device_staging_;
  std::unique_ptr<StagingBackend> staging_backend_;
  std::unique_ptr<grpc::GenericStub> session_stub_;  // the Join stream's
  // The Join stream (guarded by mu_, see AsyncStream); set in Open.
  std::unique_ptr<AsyncStream> join_;

  absl::Mutex mu_;
  v1::JoinEvent join_event_ ABSL_GUARDED_BY(mu_);   // the last one read
  bool ready_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t epoch_ ABSL_GUARDED_BY(mu_) = 0;
  bool ended_ ABSL_GUARDED_BY(mu_) = false;   // the Join stream ended
  absl::Status end_status_ ABSL_GUARDED_BY(mu_);
  absl::Status aborted_ ABSL_GUARDED_BY(mu_);  // JobAborted received
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  // Next sequence number per group (key: the group's ranks).
  absl::flat_hash_map<std::string, uint64_t> sequence_ ABSL_GUARDED_BY(mu_);
};

}  // namespace reducer

#endif  // REDUCER_CLIENT_CLIENT_SESSION_H_
