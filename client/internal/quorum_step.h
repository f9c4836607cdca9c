// The client's half of a quorum step (Client::AllReduceQuorum), apart from
// sending: reading the quorum barrier's marks, the input a joining rank
// contributes in its place, and kAvg's division when joining ranks took
// part.
//
// A quorum step runs as two collectives. The quorum barrier (its name
// `QuorumBarrierName`) decides who takes part and answers each of them
// with one int32 mark per rank of the job (0 left out, 1 contributor, 2
// joining). The data is then an ordinary all-reduce (`QuorumDataName`)
// over the ranks taking part, in group order, so that every one gets the
// same bits whatever the order of arrival; a joining rank sends the op's
// identity (core/reduce_identity.h) and its result is the contributors'.
// A contributor lost between the two fails the all-reduce with ABORTED, and
// the survivors run both again under the attempt's next name.
//
// Pure functions; thread-safe.
#ifndef REDUCER_CLIENT_INTERNAL_QUORUM_STEP_H_
#define REDUCER_CLIENT_INTERNAL_QUORUM_STEP_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/data_type.h"
#include "core/tensor.h"

namespace reducer {

// The ranks a quorum barrier's marks name, each list ascending.
struct QuorumMarks {
  std::vector<int> contributors;
  std::vector<int> joined;
  std::vector<int> taking_part;  // contributors and joined, merged
};

// INTERNAL when `marks` is not an int32 vector of `world_size` marks of 0,
// 1 or 2 with at least one contributor, or `rank` is not taking part.
absl::StatusOr<QuorumMarks> ReadQuorumMarks(const Tensor& marks, int world_size,
                                            int rank);

// `base` (CallOptions.name, or "quorum step <step>"), for attempt 0, 1, ...
std::string QuorumBarrierName(const std::string& base, int attempt);
std::string QuorumDataName(const std::string& base, int attempt);

// A CPU tensor of `dtype` and `shape` holding `op`'s identity (kAvg: kSum's).
absl::StatusOr<Tensor> IdentityTensor(ReduceOp op, DataType dtype,
                                      const std::vector<int64_t>& shape);

// Divides every element of the CPU floating-point tensor `sum` by `count`
// (float16 and bfloat16 in float32, rounded once). FAILED_PRECONDITION for
// a tensor on a device, INVALID_ARGUMENT for another dtype.
absl::Status DivideInPlace(Tensor& sum, int count);

}  // namespace reducer

#endif  // REDUCER_CLIENT_INTERNAL_QUORUM_STEP_H_
