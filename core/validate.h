// Validation of one rank's contribution before the server accepts it. The
// payload layout lives in core/payload_layout.h, its reduction by byte range
// in core/packed_reduce.h.
//
//   absl::Status s = ValidateContribution(fp, /*rank=*/2, /*world_size=*/4,
//                                         /*max_payload_bytes=*/1 << 30);
//
// Pure functions; thread-safe.
#ifndef REDUCER_CORE_VALIDATE_H_
#define REDUCER_CORE_VALIDATE_H_

#include <cstddef>

#include "absl/status/status.h"
#include "core/fingerprint.h"

namespace reducer {

// Checks a contribution from `rank` of a job of `world_size` ranks:
// - world_size >= 1 and rank in [0, world_size);
// - group sorted, without duplicates, within [0, world_size), containing
//   `rank` (an empty group is invalid here: callers expand "all ranks");
// - tensor counts as Fingerprint documents for the kind;
// - every op defined on its dtype (CheckOpSupported), no negative dimension,
//   no overflow of elements x element size;
// - kBroadcast, kReduce, kGather, kScatter: root inside the group
//   ("gather root 5 is not in group [0,1]");
// - kAllGather, kReduceScatter, kGather, kScatter, kAllToAll, kAllToAllV:
//   at least one dimension; kReduceScatter, kScatter (its root's tensor) and
//   kAllToAll: dimension 0 divisible by the group size ("tensor 0: alltoall
//   dimension 0 of shape [5,2] is not divisible by the group size 2");
// - kAllToAllV: send_rows one entry per rank of the group, none negative,
//   summing to dimension 0; recv_rows empty or one entry per rank, none
//   negative ("alltoallv send_rows[2] is -1, negative");
// - kMatch: the receiving rank alone in its group, a tag not negative, at
//   least one source, every source another rank of the world (sorted, each
//   once), and its root -1 or one of them;
// - total payload bytes at most `max_payload_bytes`.
// Returns INVALID_ARGUMENT naming the field and value ("rank 5 outside world
// of 4", "tensor 1: negative dimension -3 in shape [2,-3]"), except
// RESOURCE_EXHAUSTED when the payload exceeds `max_payload_bytes` (the limit
// is named in the message).
absl::Status ValidateContribution(const Fingerprint& fp, int rank,
                                  int world_size, size_t max_payload_bytes);

}  // namespace reducer

#endif  // REDUCER_CORE_VALIDATE_H_
