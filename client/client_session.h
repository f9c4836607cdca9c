// ClientSession: what a Client holds: the channel to reducerd, this
// process's session (the Join stream, read on a background thread), the
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
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "client/reducer_client.h"
#include "core/buffer_cache.h"
#include "core/fingerprint.h"
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
};

class ClientSession {
 public:
  // Opens the channel and the Join stream; returns once the job is ready.
  static absl::StatusOr<std::unique_ptr<ClientSession>> Open(
      const ClientOptions& options);
  // Closes the session: the server sees this rank leave.
  ~ClientSession();

  // Runs one collective and returns its result tensors. Checks the call
  // options (group, timeout) first: INVALID_ARGUMENT naming what is wrong.
  absl::StatusOr<std::vector<Tensor>> Run(const CollectiveRequestSpec& spec,
                                          const CallOptions& call);

  const ClientOptions& options() const { return options_; }

 private:
  explicit ClientSession(ClientOptions options);
  void ReadEvents();
  // OK while the session is usable; else why not.
  absl::Status SessionStatus();

  // Constant after construction.
  const ClientOptions options_;
  const std::string session_id_;
  const std::shared_ptr<BufferCache> buffers_;  // shared with result tensors
  // Numbers the collectives this session starts (their attempt ids); atomic
  // so that concurrent calls need no lock for it.
  std::atomic<uint64_t> next_attempt_{0};
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Reducer::Stub> stub_;
  std::shared_ptr<grpc::Channel> data_channel_;  // collectives
  std::unique_ptr<grpc::GenericStub> data_stub_;
  grpc::ClientContext join_context_;
  std::unique_ptr<grpc::ClientReader<v1::JoinEvent>> join_reader_;
  std::thread event_thread_;

  absl::Mutex mu_;
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
