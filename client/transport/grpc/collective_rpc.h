// CollectiveRpc: one attempt on its own Collective stream (the way payloads
// of more than one message travel). Sends this rank's header and packed
// payload in chunks straight from caller memory (static slices, no copy),
// one write at a time, the last one half-closing the stream; assembles the
// result the server streams back into newly allocated tensors. Completions
// come through the client's CompletionDriver, so Wait() reads the answer
// on the waiting thread. A message is built only once the contribution's
// AwaitPayload covered its bytes (device staging may still be copying
// later ones); if that fails, the call fails with its error.
//
//   CollectiveRpc call(&stub, &driver, &contribution, chunk_bytes, buffers);
//   call.Start();
//   absl::StatusOr<std::vector<Tensor>> result = call.Wait();
//
// Contract: see CollectiveAttempt. Start() once, then Wait() once.
// Lock order: the CompletionDriver's lock, then ClientSession's,
// then mu_, which also guards its AsyncStream (as in CollectivesRpc).
#ifndef REDUCER_CLIENT_TRANSPORT_GRPC_COLLECTIVE_RPC_H_
#define REDUCER_CLIENT_TRANSPORT_GRPC_COLLECTIVE_RPC_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/internal/collective_attempt.h"
#include "client/internal/result_assembler.h"
#include "client/transport/grpc/async_stream.h"
#include "client/transport/grpc/completion_driver.h"
#include "client/transport/grpc/payload_slices.h"
#include "core/buffer_cache.h"
#include "core/payload_layout.h"
#include "core/tensor.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "proto/reducer/v1/reducer.pb.h"

namespace reducer {

class CollectiveRpc final : public CollectiveAttempt,
                             private AsyncStream::Observer {
 public:
  // `stub`, `driver` and `contribution` must outlive the call. Result
  // tensors take their buffers from `buffers` (may be null).
  CollectiveRpc(grpc::GenericStub* stub, CompletionDriver* driver,
                 const Contribution* contribution, size_t chunk_bytes,
                 std::shared_ptr<BufferCache> buffers);
  // Cancels a call still running and waits until gRPC handed it back.
  ~CollectiveRpc() override;

  // Sends the call.
  void Start();

  // CollectiveAttempt.
  absl::StatusOr<std::vector<Tensor>> Wait() override;
  bool Ready() override;
  bool Settled() override;
  void Cancel() override;
  bool received_any() const override;

 private:
  // AsyncStream::Observer: with mu_ held.
  void OnRead(grpc::ByteBuffer* message) override;
  void OnWritten(uint64_t index, bool ok) override;
  void OnFinished(const grpc::Status& /*status*/) override {}

  // Builds message `index` of the payload (the first carries the header).
  grpc::ByteBuffer BuildMessage(size_t index) const;
  size_t NumMessages() const;
  // The end of the payload bytes message `index` carries (0 for none).
  size_t PayloadEnd(size_t index) const;
  // Queues message `index` (the last one half-closes the stream).
  void WriteMessageLocked(size_t index) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SetErrorLocked(absl::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // True once the call is over and gRPC holds no operation of it.
  bool OverLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stream_.done();
  }

  // Constant after construction.
  grpc::GenericStub* const stub_;    // not owned
  CompletionDriver* const driver_;   // not owned
  const Contribution* const contribution_;  // not owned
  const size_t chunk_bytes_;

  mutable absl::Mutex mu_;
  // Guarded by mu_ (see AsyncStream). Its messages go one at a time: the
  // next is built when the one before was written.
  AsyncStream stream_{driver_, &mu_, this};
  ResultAssembler result_ ABSL_GUARDED_BY(mu_);
  absl::Status error_ ABSL_GUARDED_BY(mu_);  // first client-side error
};

}  // namespace reducer

#endif  // REDUCER_CLIENT_TRANSPORT_GRPC_COLLECTIVE_RPC_H_
