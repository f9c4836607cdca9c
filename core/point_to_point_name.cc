#include "core/point_to_point_name.h"

#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace reducer {
namespace {

// The parts of a well-formed name.
struct Parsed {
  int source = -1;
  int destination = -1;
  int64_t tag = 0;
  uint64_t n = 0;
};

// False unless `name` is exactly "p2p <int>><int> tag <int64> #<uint64>".
bool Parse(absl::string_view name, Parsed* out) {
  if (!absl::ConsumePrefix(&name, kPointToPointNamePrefix)) return false;
  const std::vector<absl::string_view> words = absl::StrSplit(name, ' ');
  if (words.size() != 4 || words[1] != "tag" ||
      !absl::StartsWith(words[3], "#")) {
    return false;
  }
  const std::vector<absl::string_view> ends = absl::StrSplit(words[0], '>');
  return ends.size() == 2 && absl::SimpleAtoi(ends[0], &out->source) &&
         absl::SimpleAtoi(ends[1], &out->destination) &&
         absl::SimpleAtoi(words[2], &out->tag) &&
         absl::SimpleAtoi(words[3].substr(1), &out->n);
}

}  // namespace

std::string PointToPointName(int source, int destination, int64_t tag,
                             uint64_t n) {
  return absl::StrCat(kPointToPointNamePrefix, source, ">", destination,
                      " tag ", tag, " #", n);
}

bool IsPointToPointName(absl::string_view name) {
  return absl::StartsWith(name, kPointToPointNamePrefix);
}

absl::Status CheckPointToPointName(absl::string_view name,
                                   const Fingerprint& fp) {
  const absl::string_view kind = CollectiveKindName(fp.kind);
  if (fp.kind != CollectiveKind::kSendReceive) {
    if (!IsPointToPointName(name)) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(
        "collective name \"", name, "\" is reserved for point-to-point "
        "messages; ", kind, " must not use the prefix \"",
        kPointToPointNamePrefix, "\""));
  }
  Parsed p;
  if (!Parse(name, &p)) {
    return absl::InvalidArgumentError(absl::StrCat(
        kind, " collective name \"", name, "\" is not of the form \"",
        kPointToPointNamePrefix, "<source>><destination> tag <tag> #<n>\""));
  }
  if (p.tag < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        kind, " collective name \"", name, "\": tag ", p.tag,
        " is negative"));
  }
  const int other = fp.group.size() == 2
                        ? (fp.group[0] == fp.root ? fp.group[1] : fp.group[0])
                        : -1;
  if (p.source != fp.root || p.destination != other) {
    return absl::InvalidArgumentError(absl::StrCat(
        kind, " collective name \"", name, "\" names source ", p.source,
        " and destination ", p.destination, ", but the header's root is ",
        fp.root, " and its group [", absl::StrJoin(fp.group, ","), "]"));
  }
  return absl::OkStatus();
}

}  // namespace reducer
