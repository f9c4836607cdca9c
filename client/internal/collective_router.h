// CollectiveRouter: the one place that decides how a collective travels. For
// each contribution it picks a CollectiveBackend and starts the attempt
// there; ClientSession only asks the router.
//
//   CollectiveRouter router(small_calls.get(), per_call.get(), &chunk_bytes,
//                           CollectiveRouter::TransportFromEnvironment());
//   std::unique_ptr<CollectiveAttempt> attempt = router.Start(contribution);
//
// Today's rule: a payload of at most one chunk (the chunk size agreed at
// Connect) goes on the shared stream, which costs no stream setup; a larger
// one gets a stream of its own, cut into chunks. With
// REDUCER_CLIENT_TRANSPORT=per_call every collective gets its own stream
// (for tests that hold both transports to one contract, and for diagnosis).
//
// Where the next parts plug in, each as files of its own:
// - Shards (built): ShardedBackend (client/shards/sharded_backend.h) sits above
//   one router per reducerd shard; its Start cuts the contribution into
//   the partitions every rank computes alike (or hashes a small one to one
//   shard), starts each on its shard's router, and its attempt succeeds
//   only when every partition did. One address is one router, as before.
// - Same host (built): SharedMemoryBackend (client/transport/shm/backend.h),
//   set with UseSharedMemory once Connect's handshake proved that reducerd
//   maps the same memory; then every collective goes there first, and over
//   gRPC only when it declines (its segment full, or its session over).
// - CUDA device staging (built): StagingBackend (client/staging/staging_backend.h)
//   wraps the router, copying device inputs to host memory before Start
//   and results back after Wait; the transports below never see device
//   memory.
//
// Thread-safe.
#ifndef REDUCER_CLIENT_INTERNAL_COLLECTIVE_ROUTER_H_
#define REDUCER_CLIENT_INTERNAL_COLLECTIVE_ROUTER_H_

#include <atomic>
#include <cstddef>
#include <memory>

#include "client/internal/collective_attempt.h"
#include "client/internal/collective_backend.h"

namespace reducer {

class CollectiveRouter final : public CollectiveBackend {
 public:
  // Which transports the router may pick.
  enum class Transport {
    kAuto,     // one chunk or less: the shared stream; more: per call
    kPerCall,  // every collective on a stream of its own
  };

  // REDUCER_CLIENT_TRANSPORT's value: "per_call" is kPerCall; anything
  // else, unset (null) included, is kAuto.
  static Transport ParseTransport(const char* value);
  // ParseTransport of the environment, read once per process.
  static Transport TransportFromEnvironment();

  // `shared_stream`, `per_call` and `chunk_bytes` (payload bytes per
  // message, agreed at Connect; read at each Route) must outlive the router.
  CollectiveRouter(CollectiveBackend* shared_stream, CollectiveBackend* per_call,
                   const std::atomic<size_t>* chunk_bytes, Transport transport)
      : shared_stream_(shared_stream), per_call_(per_call),
        chunk_bytes_(chunk_bytes), transport_(transport) {}

  // The backend `contribution` goes to.
  CollectiveBackend* Route(const Contribution& contribution) const;

  // From now on, offers every contribution to `shared_memory` first (it
  // must outlive the router; null: gRPC alone again). Call before
  // collectives start.
  void UseSharedMemory(CollectiveBackend* shared_memory) {
    shared_memory_.store(shared_memory, std::memory_order_release);
  }

  // The shared-memory backend's attempt if it takes `contribution`, else
  // Route(contribution)->Start(contribution); the contract of
  // CollectiveBackend::Start.
  std::unique_ptr<CollectiveAttempt> Start(
      const Contribution& contribution) override;

 private:
  CollectiveBackend* const shared_stream_;        // not owned
  CollectiveBackend* const per_call_;             // not owned
  const std::atomic<size_t>* const chunk_bytes_;  // not owned
  const Transport transport_;
  std::atomic<CollectiveBackend*> shared_memory_{nullptr};  // not owned
};

}  // namespace reducer

#endif  // REDUCER_CLIENT_INTERNAL_COLLECTIVE_ROUTER_H_
