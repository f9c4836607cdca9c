// ExpandTargets: ClientOptions::target as the list of reducerd shards it
// names. One address is one shard; several are comma-separated; a decimal
// range `{A..B}` in an address expands to B - A + 1 addresses, as a shell
// brace expansion does (leading zeros of A keep the width):
//
//   "127.0.0.1:50051"                 -> {"127.0.0.1:50051"}
//   "10.0.0.5:50051, 10.0.0.6:50051"  -> {"10.0.0.5:50051", "10.0.0.6:50051"}
//   "reducer-{0..3}.reducer:50051"    -> {"reducer-0.reducer:50051", ...,
//                                         "reducer-3.reducer:50051"}
//
// The order is the shards' order, which every rank must give alike.
// Pure functions; thread-safe.
#ifndef REDUCER_CLIENT_SHARDS_SHARD_TARGETS_H_
#define REDUCER_CLIENT_SHARDS_SHARD_TARGETS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace reducer {

// The most shards one target may name.
inline constexpr int kMaxShards = 1024;

// INVALID_ARGUMENT naming `target` and the problem: an empty entry, a
// malformed or reversed range, more than one range in an address, more than
// kMaxShards addresses, or an address named twice.
absl::StatusOr<std::vector<std::string>> ExpandTargets(absl::string_view target);

}  // namespace reducer

#endif  // REDUCER_CLIENT_SHARDS_SHARD_TARGETS_H_
