// The partition plan: how one collective is spread over S reducerd shards.
// Every rank computes it from what all ranks of the collective know alike
// (the declared tensors, the group, the collective's key), so every rank
// sends the same partitions to the same shards.
//
// Rules:
// - AllReduce, one tensor or many: the tensors' elements, taken in order as
//   one sequence of bytes, are cut into min(S, total / kMinPartitionBytes)
//   contiguous partitions of nearly equal size, each cut on an element
//   boundary. Partition i goes to shard (first + i) mod S, where first comes
//   from the key's hash, so that many small collectives spread too. A
//   partition is declared to its shard as one 1-D tensor per piece of a
//   source tensor it covers (same dtype and op).
// - ReduceScatter: each rank's slice of the result is cut the same way; the
//   partition for shard s reduce-scatters, from every rank's slice, the
//   piece [begin, begin + count) of elements, declared as one 1-D tensor of
//   group_size x count elements.
// - Reduce is cut as an AllReduce of its one tensor (every partition a
//   Reduce with the same root).
// - AllToAll is cut as a ReduceScatter (PlanReduceScatter): its parts are
//   the rank-slices, and the partition for shard s exchanges piece [begin,
//   begin + count) of every part.
// - AllGather, Broadcast, Gather, Scatter, AllToAllV and Barrier go whole
//   to one shard chosen by the key's hash: a rank does not know the others'
//   AllGather, Gather or AllToAllV sizes, nor a non-root the Broadcast or
//   Scatter size, before the server has them all. Point-to-point messages
//   and matches go whole to the shard of their destination and tag.
//
// Why one partition per shard (at most), not BytePS's 4 MB pieces: each
// partition is a collective of its own, with its fixed cost (a stream, a
// rendezvous, ~0.3 ms here); within a partition reducerd already pipelines
// in chunks of 1 MiB with a window of 4, which is the overlap small
// partitions buy BytePS. S near-equal partitions give every shard 1/S of the
// bytes with the fewest collectives. kMinPartitionBytes keeps a partition
// from costing more in overhead than it saves in bandwidth: across hosts
// (the reason for shards), 64 KiB from each of W = 4 ranks is ~2 ms of a
// shard's 1 Gbit/s link against ~0.3 ms of fixed cost, so S = 4 already
// spreads a 256 KiB collective.
//
// Ranks whose declared tensors disagree compute different plans; a shard
// then sees the disagreement and fails its partition, and the collective
// fails as a whole.
//
// Pure functions; thread-safe.
#ifndef REDUCER_CLIENT_SHARDS_PARTITION_PLAN_H_
#define REDUCER_CLIENT_SHARDS_PARTITION_PLAN_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/fingerprint.h"

namespace reducer {

// No partition is cut smaller than this, so a collective below it goes
// whole to one shard.
inline constexpr size_t kMinPartitionBytes = size_t{64} << 10;

// Elements [begin, begin + count) of source tensor `tensor`.
struct TensorPiece {
  int tensor = 0;
  int64_t begin = 0;
  int64_t count = 0;
  bool operator==(const TensorPiece& o) const {
    return tensor == o.tensor && begin == o.begin && count == o.count;
  }
};

// What one shard reduces of an AllReduce.
struct ReducePartition {
  int shard = 0;
  std::vector<TensorPiece> pieces;  // in order; each declared as a 1-D tensor
};

// What one shard reduce-scatters: elements [begin, begin + count) of every
// rank's slice.
struct ScatterPartition {
  int shard = 0;
  int64_t begin = 0;
  int64_t count = 0;
};

// A stable 64-bit hash (FNV-1a) of a collective's matching key: its name,
// or, unnamed, its group and sequence number. The same on every rank,
// machine and build.
uint64_t CollectiveKeyHash(absl::string_view name, absl::Span<const int> group,
                           uint64_t sequence);

// The shard a whole collective goes to.
int ShardForKey(uint64_t key_hash, int shards);

// AllReduce of `tensors` (already validated) over `shards` >= 1 shards.
// Empty tensors belong to the first partition. Always one partition at
// least, with every element in exactly one piece.
std::vector<ReducePartition> PlanAllReduce(absl::Span<const TensorSpec> tensors,
                                           int shards, uint64_t key_hash,
                                           size_t min_partition_bytes =
                                               kMinPartitionBytes);

// ReduceScatter of `input` (dim 0 divisible by group_size) among
// `group_size` ranks over `shards` shards. Always one partition at least.
std::vector<ScatterPartition> PlanReduceScatter(const TensorSpec& input,
                                                int group_size, int shards,
                                                uint64_t key_hash,
                                                size_t min_partition_bytes =
                                                    kMinPartitionBytes);

}  // namespace reducer

#endif  // REDUCER_CLIENT_SHARDS_PARTITION_PLAN_H_
