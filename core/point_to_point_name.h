// The reserved collective names that match a point-to-point message
// (CollectiveKind::kSendReceive) between its two ranks without them talking
// to each other:
//
//   p2p 0>3 tag 7 #2
//
// is the third message (n counts from 0) that rank 0 sends to rank 3 with tag
// 7 in the current epoch: the source counts its Send calls and the
// destination its Receive calls with the same (source, destination, tag), so
// the k-th send matches the k-th receive. A receive whose message reducerd
// picks (CollectiveKind::kMatch: ReceiveAny) is named by the receiver's count
// of its matches of that tag instead, its source a star:
//
//   p2p *>3 tag 7 #0
//
// Names starting with the reserved prefix "p2p " belong to kSendReceive and
// kMatch alone: reducerd refuses them for every other kind, and refuses a
// kSendReceive or kMatch whose name is not of its form or does not agree
// with its header (source = root, destination = the other rank of its group;
// a match's destination is its group's one rank, its tag the header's).
//
// Pure functions; thread-safe.
#ifndef REDUCER_CORE_POINT_TO_POINT_NAME_H_
#define REDUCER_CORE_POINT_TO_POINT_NAME_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "core/fingerprint.h"

namespace reducer {

inline constexpr absl::string_view kPointToPointNamePrefix = "p2p ";

// "p2p <source>><destination> tag <tag> #<n>".
std::string PointToPointName(int source, int destination, int64_t tag,
                             uint64_t n);
// "p2p *><destination> tag <tag> #<m>": the m-th match of `destination`'s
// receives of `tag`.
std::string MatchName(int destination, int64_t tag, uint64_t m);

// The parts of a well-formed reserved name; `source` is -1 for a match's
// star.
struct PointToPointNameParts {
  int source = -1;
  int destination = -1;
  int64_t tag = 0;
  uint64_t n = 0;
};
// The parts of `name`, or nullopt when it is not of either reserved form.
std::optional<PointToPointNameParts> ParsePointToPointName(
    absl::string_view name);

// True when `name` starts with the reserved prefix.
bool IsPointToPointName(absl::string_view name);

// What a collective name routes by across several shards (its key's hash
// picks the shard, client/shards/partition_plan.h): for a reserved name,
// "p2p ><destination> tag <tag>", so that every message to one rank with
// one tag and the matches that pick among them go to the same shard;
// any other name as it is.
std::string PointToPointRoute(absl::string_view name);

// OK when `name` and `fp` agree: for kSendReceive, `name` is of the reserved
// form, its source is fp.root, its destination the other rank of fp.group,
// and its tag is not negative; for kMatch, `name` is of the match's form,
// its destination fp.group's one rank and its tag fp.tag; for every other
// kind, `name` does not start with the reserved prefix. Otherwise
// INVALID_ARGUMENT naming the name and what is wrong with it ("collective
// name \"p2p 0>1 tag 0 #0\" is reserved for point-to-point messages;
// allreduce must not use the prefix \"p2p \"").
absl::Status CheckPointToPointName(absl::string_view name,
                                   const Fingerprint& fp);

}  // namespace reducer

#endif  // REDUCER_CORE_POINT_TO_POINT_NAME_H_
