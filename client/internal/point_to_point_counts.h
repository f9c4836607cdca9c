// PointToPointCounts: a session's counts of its point-to-point calls, per
// epoch, for their reserved names (core/point_to_point_name.h):
//
//  - per (source, destination, tag), the next message count: the source
//    counts its sends, the destination its receives, so that the k-th send
//    meets the k-th receive;
//  - per (destination, tag) on the receiving side, its matches (receives
//    whose message reducerd picks, CollectiveKind::kMatch): their count m,
//    and how many are unanswered.
//
// A receive names its message by its own count only while no match of its
// tag is unanswered; otherwise reducerd must pick it too (MustMatch), since
// the unanswered match may take any source's next message. A match carries
// the counts of the messages its receiver numbered itself (NewMatch::
// received), and once answered with message n of source s, that source's
// count moves past n (Answered), so a later plain receive from s takes its
// next message. A new epoch starts every count at 0.
//
// Not thread-safe: the session calls it under its own lock.
#ifndef REDUCER_CLIENT_INTERNAL_POINT_TO_POINT_COUNTS_H_
#define REDUCER_CLIENT_INTERNAL_POINT_TO_POINT_COUNTS_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"

namespace reducer {

class PointToPointCounts {
 public:
  // The name of the next message from `source` to `destination` with `tag`
  // in `epoch`, counted.
  std::string NextMessage(uint64_t epoch, int source, int destination,
                          int64_t tag);

  // Whether `destination`'s receives of `tag` in `epoch` must be matched by
  // reducerd now: one of its matches of that tag is unanswered.
  bool MustMatch(uint64_t epoch, int destination, int64_t tag) const;

  struct NewMatch {
    std::string name;  // "p2p *><destination> tag <tag> #<m>"
    // Per source of `sources` with a count, the messages the destination
    // numbered itself.
    std::vector<std::pair<int, uint64_t>> received;
  };
  // Counts a match of `destination`'s receives of `tag` in `epoch`,
  // unanswered until Answered or Abandoned; `sources` are the ranks it may
  // take from.
  NewMatch StartMatch(uint64_t epoch, int destination, int64_t tag,
                      const std::vector<int>& sources);
  // A match was answered with message n of `source`: the destination's
  // count of that source's messages moves past n.
  void Answered(uint64_t epoch, int destination, int64_t tag, int source,
                uint64_t n);
  // A match ended without an answer (it failed).
  void Abandoned(uint64_t epoch, int destination, int64_t tag);

 private:
  struct Count {
    uint64_t epoch = 0;
    uint64_t next = 0;
  };
  struct Matches {
    uint64_t epoch = 0;
    uint64_t next = 0;  // the next match's m
    uint64_t unanswered = 0;
  };
  // `counts_[key]`, started again at 0 when it is of another epoch.
  Count& CountOf(const std::string& key, uint64_t epoch);
  Matches& MatchesOf(int destination, int64_t tag, uint64_t epoch);

  absl::flat_hash_map<std::string, Count> counts_;     // "s>d|tag"
  absl::flat_hash_map<std::string, Matches> matches_;  // "d|tag"
};

}  // namespace reducer

#endif  // REDUCER_CLIENT_INTERNAL_POINT_TO_POINT_COUNTS_H_
