// The reserved collective names that match a point-to-point message
// (CollectiveKind::kSendReceive) between its two ranks without them talking
// to each other:
//
//   p2p 0>3 tag 7 #2
//
// is the third message (n counts from 0) that rank 0 sends to rank 3 with tag
// 7 in the current epoch: the source counts its Send calls and the
// destination its Receive calls with the same (source, destination, tag), so
// the k-th send matches the k-th receive. Names starting with the reserved
// prefix "p2p " belong to kSendReceive alone: reducerd refuses them for every
// other kind, and refuses a kSendReceive whose name is not of this form or
// does not agree with its header (source = root, destination = the other
// rank of its group).
//
// Pure functions; thread-safe.
#ifndef REDUCER_CORE_POINT_TO_POINT_NAME_H_
#define REDUCER_CORE_POINT_TO_POINT_NAME_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "core/fingerprint.h"

namespace reducer {

inline constexpr absl::string_view kPointToPointNamePrefix = "p2p ";

// "p2p <source>><destination> tag <tag> #<n>".
std::string PointToPointName(int source, int destination, int64_t tag,
                             uint64_t n);

// True when `name` starts with the reserved prefix.
bool IsPointToPointName(absl::string_view name);

// OK when `name` and `fp` agree: for kSendReceive, `name` is of the reserved
// form, its source is fp.root, its destination the other rank of fp.group,
// and its tag is not negative; for every other kind, `name` does not start
// with the reserved prefix. Otherwise INVALID_ARGUMENT naming the name and
// what is wrong with it ("collective name \"p2p 0>1 tag 0 #0\" is reserved
// for point-to-point messages; allreduce must not use the prefix \"p2p \"").
absl::Status CheckPointToPointName(absl::string_view name,
                                   const Fingerprint& fp);

}  // namespace reducer

#endif  // REDUCER_CORE_POINT_TO_POINT_NAME_H_
