#include "client/per_call_backend.h"

#include "client/collective_call.h"

namespace reducer {

std::unique_ptr<CollectiveAttempt> PerCallBackend::Start(
    const Contribution& contribution) {
  auto call = std::make_unique<CollectiveCall>(
      stub_, driver_, &contribution,
      chunk_bytes_->load(std::memory_order_relaxed), buffers_);
  call->Start();
  return call;
}

}  // namespace reducer
