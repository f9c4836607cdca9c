// ShardEndpoint: one reducerd shard as a client's transports see it: where
// its collectives go, the job's epoch there, and its address. ShardLink is
// the real one; ShardedBackend sends each partition through one.
#ifndef REDUCER_CLIENT_SHARD_ENDPOINT_H_
#define REDUCER_CLIENT_SHARD_ENDPOINT_H_

#include <cstdint>
#include <string>

#include "client/collective_backend.h"

namespace reducer {

class ShardEndpoint {
 public:
  virtual ~ShardEndpoint() = default;
  // Where this shard's collectives go.
  virtual CollectiveBackend* backend() = 0;
  // The job's epoch on this shard (from its JobReady).
  virtual uint64_t epoch() = 0;
  // The shard's address, as the client was given it.
  virtual const std::string& target() const = 0;
};

}  // namespace reducer

#endif  // REDUCER_CLIENT_SHARD_ENDPOINT_H_
