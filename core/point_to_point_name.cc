#include "core/point_to_point_name.h"

#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace reducer {
namespace {

// The source of a match's name.
constexpr absl::string_view kAnySource = "*";

}  // namespace

std::string PointToPointName(int source, int destination, int64_t tag,
                             uint64_t n) {
  return absl::StrCat(kPointToPointNamePrefix, source, ">", destination,
                      " tag ", tag, " #", n);
}

std::string MatchName(int destination, int64_t tag, uint64_t m) {
  return absl::StrCat(kPointToPointNamePrefix, kAnySource, ">", destination,
                      " tag ", tag, " #", m);
}

// Exactly "p2p <int or *>><int> tag <int64> #<uint64>".
std::optional<PointToPointNameParts> ParsePointToPointName(
    absl::string_view name) {
  if (!absl::ConsumePrefix(&name, kPointToPointNamePrefix)) return std::nullopt;
  const std::vector<absl::string_view> words = absl::StrSplit(name, ' ');
  if (words.size() != 4 || words[1] != "tag" ||
      !absl::StartsWith(words[3], "#")) {
    return std::nullopt;
  }
  const std::vector<absl::string_view> ends = absl::StrSplit(words[0], '>');
  PointToPointNameParts out;
  if (ends.size() != 2 ||
      (ends[0] != kAnySource && !absl::SimpleAtoi(ends[0], &out.source)) ||
      !absl::SimpleAtoi(ends[1], &out.destination) ||
      !absl::SimpleAtoi(words[2], &out.tag) ||
      !absl::SimpleAtoi(words[3].substr(1), &out.n)) {
    return std::nullopt;
  }
  if (ends[0] != kAnySource && out.source < 0) return std::nullopt;
  return out;
}

bool IsPointToPointName(absl::string_view name) {
  return absl::StartsWith(name, kPointToPointNamePrefix);
}

std::string PointToPointRoute(absl::string_view name) {
  std::optional<PointToPointNameParts> p = ParsePointToPointName(name);
  if (!p.has_value()) return std::string(name);
  return absl::StrCat(kPointToPointNamePrefix, ">", p->destination, " tag ",
                      p->tag);
}

absl::Status CheckPointToPointName(absl::string_view name,
                                   const Fingerprint& fp) {
  const absl::string_view kind = CollectiveKindName(fp.kind);
  const bool match = fp.kind == CollectiveKind::kMatch;
  if (fp.kind != CollectiveKind::kSendReceive && !match) {
    if (!IsPointToPointName(name)) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(
        "collective name \"", name, "\" is reserved for point-to-point "
        "messages; ", kind, " must not use the prefix \"",
        kPointToPointNamePrefix, "\""));
  }
  const std::optional<PointToPointNameParts> p = ParsePointToPointName(name);
  if (!p.has_value() || match != (p->source == -1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        kind, " collective name \"", name, "\" is not of the form \"",
        kPointToPointNamePrefix, match ? "*" : "<source>",
        "><destination> tag <tag> #<n>\""));
  }
  if (p->tag < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        kind, " collective name \"", name, "\": tag ", p->tag,
        " is negative"));
  }
  if (match) {
    if (fp.group.size() != 1 || p->destination != fp.group[0] ||
        p->tag != fp.tag) {
      return absl::InvalidArgumentError(absl::StrCat(
          kind, " collective name \"", name, "\" names destination ",
          p->destination, " and tag ", p->tag, ", but the header's group is [",
          absl::StrJoin(fp.group, ","), "] and its tag ", fp.tag));
    }
    return absl::OkStatus();
  }
  const int other = fp.group.size() == 2
                        ? (fp.group[0] == fp.root ? fp.group[1] : fp.group[0])
                        : -1;
  if (p->source != fp.root || p->destination != other) {
    return absl::InvalidArgumentError(absl::StrCat(
        kind, " collective name \"", name, "\" names source ", p->source,
        " and destination ", p->destination, ", but the header's root is ",
        fp.root, " and its group [", absl::StrJoin(fp.group, ","), "]"));
  }
  return absl::OkStatus();
}

}  // namespace reducer
