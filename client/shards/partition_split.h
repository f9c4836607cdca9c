// The partition plan (client/shards/partition_plan.h) applied to one contribution:
// the contributions this rank sends to its shards, and the whole result put
// back together from theirs.
//
//   SplitCollective split = SplitContribution(contribution, shards);
//   for (PartitionContribution& part : split.parts) {
//     part.contribution.header.set_epoch(epoch of shard part.shard);
//     ... send part.contribution to part.shard, collect its result ...
//   }
//   absl::StatusOr<std::vector<Tensor>> whole =
//       JoinPartitionResults(contribution, split, &results, buffers);
//
// An AllReduce partition declares one 1-D tensor per piece of a source
// tensor it covers and reads those bytes from caller memory in place (with
// Contribution::result_into, its result goes to those pieces of the
// caller's result memory, and the whole result lends them back); a
// Reduce is cut the same way, each partition a Reduce with the same root
// (a non-root's whole result is then no tensor, as each partition's is);
// either's partitions read their bytes through the contribution's gate. A
// ReduceScatter partition declares one 1-D tensor of group x count elements
// gathered (copied) from every rank-slice of the input (a contribution for
// several ranks, CollectiveHeader.ranks, gets each partition's piece of
// every one of their slices, and the slices back to back); an AllToAll is cut
// the same way (its parts are the rank-slices), each partition an AllToAll
// whose result holds the same piece of every part sent to this rank (a
// contribution for several ranks is cut as one of them would be, each
// partition taking that piece of every one of their parts, and of every
// part sent to each of them). A
// quorum step's barrier goes whole to the first shard, which decides it,
// and as a follower note to every other shard; its result is the first
// shard's. A Done goes to every shard; its result is the largest of their
// int64s. A collective the plan keeps whole is sent as it is, to one
// shard: every AllToAllV (no rank knows what the others send each other),
// and every point-to-point message and match (ReceiveAny) by the hash of
// its destination and tag alone (core/point_to_point_name.h,
// PointToPointRoute), so that a match and the messages it picks among meet
// on one shard.
//
// Pure functions; thread-safe.
#ifndef REDUCER_CLIENT_SHARDS_PARTITION_SPLIT_H_
#define REDUCER_CLIENT_SHARDS_PARTITION_SPLIT_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "client/internal/collective_attempt.h"
#include "client/internal/input_gate.h"
#include "client/shards/partition_plan.h"
#include "core/buffer_cache.h"
#include "core/tensor.h"

namespace reducer {

// One partition: what goes to one shard, and where its result belongs.
struct PartitionContribution {
  int shard = 0;
  // Its header is the whole collective's (job, group, sequence or name,
  // attempt id) with the partition's tensors; its inputs point into the
  // caller's memory or into `gathered`.
  Contribution contribution;
  std::vector<TensorPiece> pieces;  // AllReduce: the source pieces, in order
  int64_t begin = 0;                // ReduceScatter, AllToAll: elements of the slice
  int64_t count = 0;
  std::unique_ptr<unsigned char[]> gathered;  // ReduceScatter's, AllToAll's input
  // AllReduce, Reduce: the contribution's inputs_gate when the whole has one
  // (its bytes read as the whole's gate lets the bytes they come from).
  std::unique_ptr<InputGate> gate;
};

struct SplitCollective {
  bool whole = true;  // parts[0] is the contribution unchanged
  std::vector<PartitionContribution> parts;  // one at least
};

// The plan of `whole` over `shards` >= 1 shards, its key hashed from the
// header's name, or group and sequence. A header the plan cannot read (an
// unknown kind or dtype, a ReduceScatter or AllToAll input that does not divide among
// the group) is kept whole, for its shard to refuse with reducerd's message.
SplitCollective SplitContribution(const Contribution& whole, int shards,
                                  size_t min_partition_bytes = kMinPartitionBytes);

// True when SplitContribution's partitions of `whole` read its inputs in
// place, each through a gate of its own over whole's (an all-reduce's, a
// reduce's): a caller need not await the whole payload before splitting it,
// as it must for the other kinds (a reduce-scatter's partitions gather
// theirs as they are made).
bool PartitionsReadInPlace(const Contribution& whole);

// The whole collective's result from `results` (results[k]: part k's),
// moved out of them. INTERNAL when a part's result is not the shape its
// partition declares.
absl::StatusOr<std::vector<Tensor>> JoinPartitionResults(
    const Contribution& whole, const SplitCollective& split,
    std::vector<std::vector<Tensor>>* results,
    const std::shared_ptr<BufferCache>& buffers);

}  // namespace reducer

#endif  // REDUCER_CLIENT_SHARDS_PARTITION_SPLIT_H_
