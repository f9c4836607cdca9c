#include "server/jobs/several_ranks.h"

#include <algorithm>
#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/engine/kind_strategy.h"

namespace reducer {
namespace {

absl::Status Refused(const std::string& description,
                     const std::vector<int>& ranks, const std::string& why) {
  return absl::InvalidArgumentError(
      absl::StrCat(description, ": a contribution for ranks [",
                   absl::StrJoin(ranks, ","), "] ", why));
}

}  // namespace

std::string RanksName(const std::vector<int>& ranks) {
  if (ranks.size() == 1) return absl::StrCat("rank ", ranks.front());
  return absl::StrCat("ranks [", absl::StrJoin(ranks, ","), "]");
}

absl::StatusOr<std::vector<int>> CoveredRanks(const Fingerprint& fp, int rank,
                                              const std::vector<int>& ranks,
                                              const std::string& description) {
  if (ranks.empty() || ranks == std::vector<int>{rank}) {
    return std::vector<int>();
  }
  if (!TraitsOf(fp.kind).takes_several_ranks) {
    return Refused(
        description, ranks,
        absl::StrCat("is not accepted: a ", CollectiveKindName(fp.kind),
                     " takes each rank's own contribution"));
  }
  if (!std::is_sorted(ranks.begin(), ranks.end()) ||
      std::adjacent_find(ranks.begin(), ranks.end()) != ranks.end()) {
    return Refused(description, ranks, "must list them sorted, each once");
  }
  if (!std::binary_search(ranks.begin(), ranks.end(), rank)) {
    return Refused(
        description, ranks,
        absl::StrCat("was sent as rank ", rank, ", which is not one of them"));
  }
  const auto first = std::find(fp.group.begin(), fp.group.end(), ranks[0]);
  if (first == fp.group.end() ||
      fp.group.end() - first < static_cast<std::ptrdiff_t>(ranks.size()) ||
      !std::equal(ranks.begin(), ranks.end(), first)) {
    return Refused(description, ranks,
                   absl::StrCat("must name consecutive ranks of the group ",
                                GroupToString(fp.group),
                                " (none of the group between them)"));
  }
  if (fp.kind == CollectiveKind::kAllToAll && !fp.tensors.empty()) {
    // Each of them sends the group its rows: an equal part for every rank.
    const int64_t parts = static_cast<int64_t>(ranks.size()) *
                          static_cast<int64_t>(fp.group.size());
    const std::vector<int64_t>& shape = fp.tensors[0].shape;
    if (shape.empty() || shape[0] % parts != 0) {
      return Refused(
          description, ranks,
          absl::StrCat("must hold each of its ", ranks.size(),
                       " ranks' rows for each of the ", fp.group.size(),
                       " ranks of the group: dimension 0 a multiple of ", parts,
                       ", not ", DescribeTensor(fp.tensors[0])));
    }
  }
  const bool has_root = std::binary_search(ranks.begin(), ranks.end(), fp.root);
  const int carrier = has_root ? fp.root : ranks[0];
  if (rank != carrier) {
    return Refused(
        description, ranks,
        absl::StrCat("was sent as rank ", rank, "; it must be sent as rank ",
                     carrier, has_root ? ", the root" : ", the first of them"));
  }
  std::vector<int> covered;
  for (int r : ranks) {
    if (r != rank) covered.push_back(r);
  }
  return covered;
}

}  // namespace reducer
