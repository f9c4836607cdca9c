// Conversions between the reducer.v1 messages and core's types, with the
// checks that only the wire needs (enum values in range). Pure functions.
#ifndef REDUCER_PROTO_REDUCER_V1_WIRE_CONVERSION_H_
#define REDUCER_PROTO_REDUCER_V1_WIRE_CONVERSION_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "core/fingerprint.h"
#include "proto/reducer/v1/reducer.pb.h"

namespace reducer {

// The fingerprint `header` declares, with an empty group expanded to every
// rank of a job of `world_size` (and a match's empty sources to every rank
// but its own). INVALID_ARGUMENT naming the field for an unknown or
// unspecified enum value.
absl::StatusOr<Fingerprint> FingerprintFromHeader(
    const v1::CollectiveHeader& header, int world_size);

v1::TensorSpec TensorSpecToWire(const TensorSpec& spec);

// INVALID_ARGUMENT naming the field for an unknown or unspecified dtype, or
// (when `with_op`) op: `field`, or `field[index]` when index >= 0 (the name
// is built only on error; fused calls convert many specs). Shapes are copied
// unchecked (see validate.h).
absl::StatusOr<TensorSpec> TensorSpecFromWire(const v1::TensorSpec& wire,
                                              bool with_op,
                                              absl::string_view field,
                                              int index = -1);

// How every message names a collective, reducerd's and the client's alike:
// `allreduce "step7" in job j1`, `broadcast #12 of group [0,2] in job j1`.
// The group is named when it is not the whole job of `world_size` ranks.
std::string DescribeCollective(const v1::CollectiveHeader& header,
                               const Fingerprint& fp, int world_size);

// The same for a header not (or not yet) checked: an unknown kind reads
// `collective`, and the group is left out.
std::string DescribeCollective(const v1::CollectiveHeader& header,
                               std::optional<CollectiveKind> kind);

}  // namespace reducer

#endif  // REDUCER_PROTO_REDUCER_V1_WIRE_CONVERSION_H_
