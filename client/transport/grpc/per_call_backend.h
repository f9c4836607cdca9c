// PerCallBackend: the CollectiveBackend that gives every attempt a Collective
// stream of its own (CollectiveRpc), its payload cut into messages of the
// chunk size agreed at Connect. The way payloads of more than one message
// travel.
//
//   PerCallBackend backend(&stub, &driver, &chunk_bytes, buffers);
//   std::unique_ptr<CollectiveAttempt> attempt = backend.Start(contribution);
//
// Thread-safe.
#ifndef REDUCER_CLIENT_TRANSPORT_GRPC_PER_CALL_BACKEND_H_
#define REDUCER_CLIENT_TRANSPORT_GRPC_PER_CALL_BACKEND_H_

#include <atomic>
#include <cstddef>
#include <memory>
#include <utility>

#include "client/internal/collective_attempt.h"
#include "client/internal/collective_backend.h"
#include "client/transport/grpc/completion_driver.h"
#include "core/buffer_cache.h"
#include "grpcpp/generic/generic_stub.h"

namespace reducer {

class PerCallBackend final : public CollectiveBackend {
 public:
  // `stub`, `driver` and `chunk_bytes` (payload bytes per message, read at
  // each Start) must outlive the backend and its attempts. Result tensors
  // take their buffers from `buffers` (may be null).
  PerCallBackend(grpc::GenericStub* stub, CompletionDriver* driver,
                 const std::atomic<size_t>* chunk_bytes,
                 std::shared_ptr<BufferCache> buffers)
      : stub_(stub), driver_(driver), chunk_bytes_(chunk_bytes),
        buffers_(std::move(buffers)) {}

  std::unique_ptr<CollectiveAttempt> Start(
      const Contribution& contribution) override;

 private:
  grpc::GenericStub* const stub_;    // not owned
  CompletionDriver* const driver_;   // not owned
  const std::atomic<size_t>* const chunk_bytes_;  // not owned
  const std::shared_ptr<BufferCache> buffers_;
};

}  // namespace reducer

#endif  // REDUCER_CLIENT_TRANSPORT_GRPC_PER_CALL_BACKEND_H_
