// A contribution that stands for several ranks (CollectiveHeader.ranks): a
// relay's, for the ranks of its host that it holds in one session. Their
// inputs come combined in one payload (see reducer.proto), and the result
// is sent once for all of them. An AllToAll's payload holds, per
// destination rank of the group in order, its ranks' parts for it in rank
// order, and its result their results (each the rows every rank of the
// group sent it, in group order) in rank order.
//
//   absl::StatusOr<std::vector<int>> covered =
//       CoveredRanks(fp, header.rank(), ranks_of(header), description);
//   // covered: the ranks other than header.rank(), for Collective::Attach
//
// Pure functions; thread-safe.
#ifndef REDUCER_SERVER_JOBS_SEVERAL_RANKS_H_
#define REDUCER_SERVER_JOBS_SEVERAL_RANKS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/fingerprint.h"

namespace reducer {

// How messages name the ranks a session or contribution stands for:
// "rank 3", or several's "ranks [0,1,2,3]".
std::string RanksName(const std::vector<int>& ranks);

// Checks that `ranks` (the header's, empty for `rank` alone) may stand
// together in one contribution of `fp`'s collective sent as `rank`, and
// returns the ranks other than `rank` (empty for a contribution of one
// rank). INVALID_ARGUMENT, prefixed with `description`, when:
// - the kind takes one rank per contribution (KindTraits::
//   takes_several_ranks);
// - `ranks` are not sorted and distinct, or do not include `rank`;
// - a rank is not in the group, or another rank of the group lies between
//   two of them (their parts could not be placed as one);
// - an AllToAll's tensor does not hold an equal number of rows from each
//   of them to each rank of the group (dimension 0 a multiple of their
//   number times the group's size);
// - `rank` is not the root while the root is among them, or not the first
//   of them otherwise.
absl::StatusOr<std::vector<int>> CoveredRanks(const Fingerprint& fp, int rank,
                                              const std::vector<int>& ranks,
                                              const std::string& description);

}  // namespace reducer

#endif  // REDUCER_SERVER_JOBS_SEVERAL_RANKS_H_
