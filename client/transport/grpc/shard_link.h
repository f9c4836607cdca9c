// ShardLink: a client's connection to one reducerd shard: the channels (one
// for the session, one for collectives), the session on that shard (the Join
// stream, its epoch, how it ended), and the transports that carry the
// collectives sent there (the shared Collectives stream, a stream per large
// call, and the router between them). A client of S shards holds S links on
// one completion queue.
//
//   ShardLink link(options, "10.0.0.5:50051", &driver, buffers);
//   link.Open(security);
//   link.WaitForChannel(deadline);
//   link.StartJoin(request);
//   driver.DriveUntil([&] { return link.JoinSettled(); }, deadline);
//   absl::Status joined = link.JoinOutcome();   // OK once JobReady came
//   link.backend()->Start(contribution);        // header.epoch = link.epoch()
//
// Thread-safe. The driver must outlive the link; ~ShardLink cancels what is
// still running and waits until gRPC handed it back.
#ifndef REDUCER_CLIENT_TRANSPORT_GRPC_SHARD_LINK_H_
#define REDUCER_CLIENT_TRANSPORT_GRPC_SHARD_LINK_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/client_options.h"
#include "client/internal/collective_router.h"
#include "client/security/channel_security.h"
#include "client/shards/shard_endpoint.h"
#include "client/transport/grpc/async_stream.h"
#include "client/transport/grpc/collectives_rpc.h"
#include "client/transport/grpc/completion_driver.h"
#include "client/transport/grpc/per_call_backend.h"
#include "client/transport/shm/backend.h"
#include "core/buffer_cache.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "proto/reducer/v1/reducer.grpc.pb.h"

namespace reducer {

class ShardLink final : public ShardEndpoint, private AsyncStream::Observer {
 public:
  // `target` is this shard's address; `options` supplies the job and the
  // channels' security. Result tensors take their buffers from `buffers`.
  ShardLink(const ClientOptions& options, std::string target,
            CompletionDriver* driver, std::shared_ptr<BufferCache> buffers);
  ~ShardLink() override;
  ShardLink(const ShardLink&) = delete;
  ShardLink& operator=(const ShardLink&) = delete;

  // Creates the channels and transports (nothing is sent yet).
  void Open(const ChannelSecurity& security);

  // Calls `observer` each time this shard's session may have ended
  // (JobAborted came, the Join stream ended): on the completion thread,
  // with the link's lock held, so it must be quick and must not call into
  // the link (SessionStatus and the rest); it may be called more than once.
  // Set before StartJoin.
  void SetEndObserver(std::function<void()> observer);

  // Waits until the session channel is ready or `deadline`. OK when it is
  // ready; UNAVAILABLE naming the address when it is not by `deadline`;
  // FAILED_PRECONDITION (client/security/tls_diagnosis.h) at once when a failed
  // connection is diagnosed as a TLS mismatch; CANCELLED within a second of
  // `given_up` (when given) turning true. Once it has waited 10 s, or half
  // the time to `deadline` if less, it says so on stderr, once, naming the
  // address: a mistyped target otherwise looks like a hang until then.
  absl::Status WaitForChannel(absl::Time deadline,
                              const std::function<bool()>& given_up = nullptr);

  // Sends `request` on a new Join stream. Once.
  absl::Status StartJoin(const v1::JoinRequest& request);
  // True once JobReady came or the Join stream ended. Never polls: safe in
  // CompletionDriver::DriveUntil's condition.
  bool JoinSettled();
  // OK once JobReady came; else how the Join stream ended; else
  // DEADLINE_EXCEEDED (still joining).
  absl::Status JoinOutcome();
  // The latest JoinWaiting this shard sent while the job gathered its
  // ranks (empty when none came): who joined, and what it waits for.
  v1::JoinWaiting LastWaiting();

  // After JobReady: sets up the same-host path as ClientOptions::
  // shared_memory says (or REDUCER_SHARED_MEMORY). OK when it is in use,
  // or when it is not but need not be (kOff; kAuto when reducerd does not
  // offer it or the handshake failed); with kRequired, FAILED_PRECONDITION
  // naming the address and why the path cannot be used.
  absl::Status StartSharedMemory(absl::Time deadline);
  // Whether collectives to this shard go through shared memory.
  bool uses_shared_memory() const { return shared_memory_ != nullptr; }

  // OK while this shard's session is usable; else why not: JobAborted's
  // reason as reducerd gave it, or how the session ended (which names the
  // address).
  absl::Status SessionStatus();
  // ShardEndpoint: the epoch JobReady gave.
  uint64_t epoch() override;
  // The count of quorum steps started that JobReady gave (nonzero for a
  // rank admitted into a running epoch).
  uint64_t quorum_steps_started();

  // Ends the session on purpose, best effort within a second: the shard
  // sees this rank depart (Leave), then the Join stream is cancelled. Once.
  void Close();
  // The job failed on another shard (`cause`, that shard's error): ends the
  // job's epoch here too, naming the cause (Leave with a cause, within a
  // second), then cancels the Join stream, which alone would read as this
  // rank being lost. How a failure on one shard reaches the others with its
  // first cause intact. Returns at once; once; no-op once the stream is over.
  void Abandon(const std::string& cause);
  // A relay's session lost some of its ranks (their own sessions with the
  // relay were lost; `cause` empty: they departed on purpose): tells the
  // shard so (Leave with `ranks` and `cause`, within a second), and the
  // session goes on holding the others. OK when the shard took it, or
  // when its session there had ended already (the epoch ended there: it
  // waits for nobody); the Leave's error otherwise; FAILED_PRECONDITION
  // when the session is not ready yet, or was closed here.
  // Blocks for the Leave's answer: not for the completion thread.
  absl::Status LoseRanks(const std::vector<int>& ranks,
                         const std::string& cause);
  // After Abandon: drives the queue until its Leave completed or
  // `deadline`. OK when the shard took the Leave; the Leave's error
  // (DEADLINE_EXCEEDED when it did not complete by `deadline`); or
  // FAILED_PRECONDITION when Abandon sent none (the session was not
  // running, had ended, or was closed already).
  absl::Status AwaitAbandon(absl::Time deadline);

  // ShardEndpoint (backend() valid after Open).
  const std::string& target() const override { return target_; }
  CollectiveBackend* backend() override { return router_.get(); }

 private:
  // Abandon's Leave call; when it completes, the Join stream is cancelled.
  class AbandonCall final : public CompletionDriver::Handler {
   public:
    explicit AbandonCall(ShardLink* link) : link_(link) {}
    void OnComplete(bool ok) override;

    grpc::ClientContext context;
    v1::LeaveRequest request;
    v1::LeaveResponse response;
    grpc::Status status;
    std::unique_ptr<grpc::ClientAsyncResponseReader<v1::LeaveResponse>> reader;

   private:
    ShardLink* const link_;
  };

  // Cancels the Join stream unless it is over.
  void CancelJoinLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // AsyncStream::Observer of the Join stream, with mu_ held.
  void OnRead(grpc::ByteBuffer* message) override;
  void OnFinished(const grpc::Status& status) override;

  // Constant after construction (or Open).
  const ClientOptions& options_;  // the session's; outlives the link
  const std::string target_;
  CompletionDriver* const driver_;  // not owned
  const std::shared_ptr<BufferCache> buffers_;
  // Payload bytes per message: the shard's --chunk_bytes from JobReady,
  // then its paced chunk size from JobPace events;
  // atomic so that sending needs no lock for it.
  std::atomic<size_t> chunk_bytes_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Reducer::Stub> stub_;
  std::unique_ptr<grpc::GenericStub> session_stub_;  // the Join stream's
  std::shared_ptr<grpc::Channel> data_channel_;      // collectives
  std::unique_ptr<grpc::GenericStub> data_stub_;
  // The transports and their router; destroyed before the Join stream.
  std::unique_ptr<CollectivesRpc> small_calls_;
  std::unique_ptr<PerCallBackend> per_call_;
  std::unique_ptr<CollectiveRouter> router_;
  // The same-host path, once StartSharedMemory set it up; outlives router_.
  std::unique_ptr<SharedMemoryBackend> shared_memory_;
  // The Join stream (guarded by mu_, see AsyncStream).
  std::unique_ptr<AsyncStream> join_;

  absl::Mutex mu_;
  v1::JoinEvent join_event_ ABSL_GUARDED_BY(mu_);  // the last one read
  bool ready_ ABSL_GUARDED_BY(mu_) = false;
  v1::JoinWaiting waiting_ ABSL_GUARDED_BY(mu_);  // see LastWaiting
  uint64_t epoch_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t quorum_steps_started_ ABSL_GUARDED_BY(mu_) = 0;
  bool ended_ ABSL_GUARDED_BY(mu_) = false;  // the Join stream ended
  absl::Status end_status_ ABSL_GUARDED_BY(mu_);
  absl::Status aborted_ ABSL_GUARDED_BY(mu_);  // JobAborted received
  bool closed_ ABSL_GUARDED_BY(mu_) = false;  // Close or Abandon called
  // Abandon's Leave, from its start until it completed (and was handled).
  std::unique_ptr<AbandonCall> abandon_;
  bool abandoning_ ABSL_GUARDED_BY(mu_) = false;
  // Abandon's Leave as it completed (OK until then, or without one).
  absl::Status abandon_outcome_ ABSL_GUARDED_BY(mu_);
  // SetEndObserver's; empty: none.
  std::function<void()> end_observer_;
  std::string session_id_ ABSL_GUARDED_BY(mu_);  // from StartJoin
  // JobReady's shared_memory_socket: where reducerd offers the same-host
  // path (empty: not offered).
  std::string shared_memory_socket_ ABSL_GUARDED_BY(mu_);
};

}  // namespace reducer

#endif  // REDUCER_CLIENT_TRANSPORT_GRPC_SHARD_LINK_H_
