#include "client/transport/grpc/per_call_backend.h"

#include "client/transport/grpc/collective_rpc.h"

namespace reducer {

std::unique_ptr<CollectiveAttempt> PerCallBackend::Start(
    const Contribution& contribution) {
  auto call = std::make_unique<CollectiveRpc>(
      stub_, driver_, &contribution,
      chunk_bytes_->load(std::memory_order_relaxed), buffers_);
  call->Start();
  return call;
}

}  // namespace reducer
