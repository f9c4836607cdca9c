#include "client/internal/collective_router.h"

#include <cstdlib>
#include <cstring>

namespace reducer {

CollectiveRouter::Transport CollectiveRouter::ParseTransport(const char* value) {
  return value != nullptr && std::strcmp(value, "per_call") == 0
             ? Transport::kPerCall
             : Transport::kAuto;
}

CollectiveRouter::Transport CollectiveRouter::TransportFromEnvironment() {
  static const Transport transport =
      ParseTransport(std::getenv("REDUCER_CLIENT_TRANSPORT"));
  return transport;
}

CollectiveBackend* CollectiveRouter::Route(
    const Contribution& contribution) const {
  if (transport_ == Transport::kPerCall) return per_call_;
  const size_t chunk_bytes = chunk_bytes_->load(std::memory_order_relaxed);
  return contribution.payload_bytes() <= chunk_bytes ? shared_stream_
                                                     : per_call_;
}

std::unique_ptr<CollectiveAttempt> CollectiveRouter::Start(
    const Contribution& contribution) {
  CollectiveBackend* shared_memory =
      shared_memory_.load(std::memory_order_acquire);
  if (shared_memory != nullptr && contribution.same_host_path) {
    std::unique_ptr<CollectiveAttempt> attempt =
        shared_memory->TryStart(contribution);
    if (attempt != nullptr) return attempt;
  }
  return Route(contribution)->Start(contribution);
}

}  // namespace reducer
