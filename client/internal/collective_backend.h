// CollectiveBackend: one way a collective's attempts travel to reducerd:
// the shared Collectives stream or a Collective stream per call
// (client/transport/grpc), shared memory (client/transport/shm); backends
// that wrap others: a shard set (client/shards), device staging
// (client/staging). CollectiveRouter picks one per contribution; nothing
// above the router knows which.
//
//   std::unique_ptr<CollectiveAttempt> attempt = backend->Start(contribution);
//   absl::StatusOr<std::vector<Tensor>> result = attempt->Wait();
//
// Implementations are thread-safe: Start is called from any thread.
#ifndef REDUCER_CLIENT_INTERNAL_COLLECTIVE_BACKEND_H_
#define REDUCER_CLIENT_INTERNAL_COLLECTIVE_BACKEND_H_

#include <memory>

#include "client/internal/collective_attempt.h"

namespace reducer {

class CollectiveBackend {
 public:
  virtual ~CollectiveBackend() = default;

  // Sends one attempt of `contribution` and returns it (its outcome comes
  // through CollectiveAttempt::Wait; see there for errors). `contribution`
  // must outlive the attempt, and the attempt must not outlive the backend.
  virtual std::unique_ptr<CollectiveAttempt> Start(
      const Contribution& contribution) = 0;

  // Start, or null when this backend cannot take `contribution` now (the
  // caller then sends it another way). The default takes everything.
  virtual std::unique_ptr<CollectiveAttempt> TryStart(
      const Contribution& contribution) {
    return Start(contribution);
  }
};

}  // namespace reducer

#endif  // REDUCER_CLIENT_INTERNAL_COLLECTIVE_BACKEND_H_
