// ShardedBackend: the CollectiveBackend of a client with several reducerd
// shards. Each contribution is cut by the partition plan
// (client/shards/partition_split.h) that every rank computes alike; the
// partitions start on their shards' backends at once, so one tensor's
// partitions travel to the shards concurrently, and the attempt succeeds
// only when every partition did: all or nothing.
//
//   ShardedBackend sharded(shards, &driver, session_status, buffers);
//   std::unique_ptr<CollectiveAttempt> attempt = sharded.Start(contribution);
//   absl::StatusOr<std::vector<Tensor>> result = attempt->Wait();
//
// Every partition carries the whole collective's header (job, group,
// sequence or name, attempt id), its own tensors, and its shard's epoch.
// Waiting takes the partitions' outcomes in the order they come: the first
// partition that fails for good fails the collective, naming its shard
// (index and address) and its partition, once the other partitions have
// ended (they are waited for, not cancelled; see GiveUpRestLocked). A
// partition whose transport failed before any answer first asks its shard
// for its result again (a replay), then is resent on its own while
// `session_status` says the session is intact (client/retry_sequence.h);
// partitions that succeeded are never sent again, so the attempt itself is
// not to be retried by its caller (received_any() is always true).
//
// Thread-safe; its attempts follow CollectiveAttempt's contract, except
// that Ready() or Cancel() called while another thread is in Wait() waits
// for Wait() to return.
#ifndef REDUCER_CLIENT_SHARDS_SHARDED_BACKEND_H_
#define REDUCER_CLIENT_SHARDS_SHARDED_BACKEND_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "client/internal/collective_attempt.h"
#include "client/internal/collective_backend.h"
#include "client/internal/progress_engine.h"
#include "client/shards/partition_plan.h"
#include "client/shards/shard_endpoint.h"
#include "core/buffer_cache.h"

namespace reducer {

class ShardedBackend final : public CollectiveBackend {
 public:
  // `shards` (in the order every rank gives them) and `driver` (what makes
  // every shard's attempts progress while one waits) must outlive the backend and
  // its attempts. `session_status` says whether the session, across all
  // shards, is intact (a retry is sent only then). Result tensors take
  // their buffers from `buffers` (may be null).
  ShardedBackend(std::vector<ShardEndpoint*> shards, ProgressEngine* driver,
                 std::function<absl::Status()> session_status,
                 std::shared_ptr<BufferCache> buffers,
                 size_t min_partition_bytes = kMinPartitionBytes)
      : shards_(std::move(shards)), driver_(driver),
        session_status_(std::move(session_status)),
        buffers_(std::move(buffers)),
        min_partition_bytes_(min_partition_bytes) {}

  std::unique_ptr<CollectiveAttempt> Start(
      const Contribution& contribution) override;

 private:
  friend class ShardedAttempt;

  const std::vector<ShardEndpoint*> shards_;  // not owned
  ProgressEngine* const driver_;              // not owned
  const std::function<absl::Status()> session_status_;
  const std::shared_ptr<BufferCache> buffers_;
  const size_t min_partition_bytes_;
};

}  // namespace reducer

#endif  // REDUCER_CLIENT_SHARDS_SHARDED_BACKEND_H_
