// ShardEndpoint: one reducerd shard as a client's transports see it: where
// its collectives go, the job's epoch there, and its address. ShardLink is
// the real one; ShardedBackend sends each partition through one.
#ifndef REDUCER_CLIENT_SHARDS_SHARD_ENDPOINT_H_
#define REDUCER_CLIENT_SHARDS_SHARD_ENDPOINT_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "client/internal/collective_backend.h"

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

// `status` prefixed with where it came from: "reducerd shard I of N at
// TARGET" (the address left out when the message names it already), then
// `detail` (e.g. " (partition 2 of 3)"). How every shard failure reads.
inline absl::Status NameShard(const absl::Status& status, size_t index,
                              size_t shards, absl::string_view target,
                              absl::string_view detail = "") {
  std::string where = absl::StrCat("reducerd shard ", index, " of ", shards);
  if (!absl::StrContains(status.message(), target)) {
    absl::StrAppend(&where, " at ", target);
  }
  return absl::Status(status.code(),
                      absl::StrCat(where, detail, ": ", status.message()));
}

}  // namespace reducer

#endif  // REDUCER_CLIENT_SHARDS_SHARD_ENDPOINT_H_
