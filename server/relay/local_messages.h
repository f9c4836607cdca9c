// LocalMessages: which of a relay's point-to-point messages stay on its
// host. A message (core/point_to_point_name.h: "p2p a>b tag t #n") between
// two ranks of this relay's host is matched here, by the job's own engine,
// exactly as a reducerd matches it (a buffered send held in the budget, its
// deadline, a mismatch or a lost rank named): nothing goes upstream for it.
// Every other message, and every match (kMatch: a ReceiveAny, or a Receive
// started while a match of its tag was unanswered), goes upstream.
//
// The rule, per message of two ranks of this host (a message not yet
// decided whose rank is lost, or joined again alone, goes upstream):
//
//  1. A message's route is decided by the first of its two calls to come,
//     and both calls take it: its send, or the destination's plain Receive
//     (which names it: source, tag and n).
//  2. A send that comes first stays here (held, until its receive comes),
//     unless a match of its (destination, tag) is on its way upstream
//     (BeforeMatch, until MatchDone): then it goes upstream.
//  3. A plain receive that comes first stays here.
//  4. A match of (b, t) is preceded upstream by every message to b with tag
//     t held here (send come, receive not) that b has not numbered itself
//     (n at or past the match's count of b's receives from that source,
//     MessageMatcher::Match::received): they go upstream first, in the order
//     their sends came (BeforeMatch gives them; the Job hands their bytes
//     on), and their receives follow them there.
//  5. A rank lost (or left) while messages it sent are held here: they go
//     upstream before its loss is reported there (HeldFrom; RelayJob
//     reports it once upstream holds them), as they would be held there
//     had it been connected directly; those it was to receive stay, and
//     fail with its loss as on a reducerd.
//
// Why it keeps every contract as if the ranks were connected directly:
//  - A plain receive takes its message by name, and both calls of a
//    message go the same way (1), so each is matched once, in place.
//  - A match upstream can take only a message upstream knows of. Every
//    message to (b, t) that it could take is there before the match: those
//    held here are sent first (4), and those sent meanwhile go there (2).
//    The messages a match must skip (b took them here by name) are skipped
//    upstream by the counts the match carries (Match::received), since b
//    numbered them before it started the match; that is why (4) leaves them
//    here, where b's receive takes them.
//  - A lost rank's held sends are upstream before its loss is (5), so that
//    a match there can still take them; a message whose route was decided
//    keeps it when a rank is lost (1).
//  - Per source, messages are taken in the order of their numbers, on both
//    paths: upstream's matcher gives a match only the next message of its
//    source, and a plain receive names its number. A message held here and
//    sent upstream later counts there as arriving then, as one delayed on
//    its way would (a match's pick among sources is by arrival, which no
//    contract fixes across hosts). Its deadline stays where it was: the
//    send goes up with what is left of its timeout (at least 1 ms), as the
//    time it was held here counts against it (a send with no timeout of
//    its own, 0, gets upstream's maximum from then).
//
// Memory: one entry per message whose route is decided and which has not
// seen both of its calls (held sends, receives waiting, messages sent
// upstream whose receive has not come), with the source's header while it
// is held; the payload itself is held by the job's engine, in the relay's
// budget. An entry whose other call never comes (its deadline passed)
// stays until Clear() at the next epoch.
//
// Not thread-safe: RelayJob calls it under its own lock.
#ifndef REDUCER_SERVER_RELAY_LOCAL_MESSAGES_H_
#define REDUCER_SERVER_RELAY_LOCAL_MESSAGES_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"
#include "core/point_to_point_name.h"
#include "proto/reducer/v1/reducer.pb.h"

namespace reducer {

class LocalMessages {
 public:
  // The call `header` (its rank's) of message `message`; `bytes`: its
  // payload (the source's; 0 on a receive). `may_stay`: both of its ranks
  // are this host's and taking part (not lost, not joined again alone).
  // True when it stays here (rules 1-3), false when it goes upstream. A
  // message whose route is decided keeps it (rule 1), even once a rank is
  // lost; one not decided goes upstream unless `may_stay`. `now`: when the
  // call came (a send held here counts its timeout from then).
  bool KeepsHere(const PointToPointNameParts& message,
                 const v1::CollectiveHeader& header, uint64_t bytes,
                 bool may_stay, absl::Time now);

  // A match of `destination` with `tag` goes upstream; `received`: its
  // counts of the destination's own receives per source. Returns the
  // source headers of the messages to send upstream before it (rule 4), in
  // the order their sends came, each with what is left at `now` of its
  // timeout; from now on they, and every send to (destination, tag) until
  // MatchDone, go upstream.
  std::vector<v1::CollectiveHeader> BeforeMatch(
      int destination, int64_t tag,
      const std::vector<std::pair<int, uint64_t>>& received, absl::Time now);
  // A match BeforeMatch took has its outcome upstream.
  void MatchDone(int destination, int64_t tag);

  // `sources` are lost (or left): the messages they sent that are held
  // here go upstream now, while upstream still takes their sends, in the
  // order they came (as their sends would be held there had the ranks been
  // connected directly, for a match to take), with what is left at `now`
  // of their timeouts; their receives follow them.
  std::vector<v1::CollectiveHeader> HeldFrom(const std::vector<int>& sources,
                                             absl::Time now);

  // Forgets every message and match (a new epoch); the counts stay.
  void Clear();

  // Messages whose two calls both met here, and the bytes they did not
  // move over the host's link (each payload twice: up, and back down).
  uint64_t kept() const { return kept_; }
  uint64_t bytes_saved() const { return bytes_saved_; }
  // Entries kept now, for tests of its memory.
  size_t entries() const { return messages_.size(); }

 private:
  struct Entry {
    bool here = false;
    bool sent = false;      // the source's call came
    bool received = false;  // the destination's call came
    uint64_t arrival = 0;   // of the send, while held here
    absl::Time held_since;  // when the send came, while held here
    uint64_t bytes = 0;
    v1::CollectiveHeader send;  // while held here
  };
  // destination, tag, source, n: one (destination, tag)'s messages are
  // adjacent.
  using Key = std::tuple<int, int64_t, int, uint64_t>;

  // The `held` entries (by their arrival) go upstream: their source
  // headers, in the order they came, their timeouts less their time held
  // until `now`.
  static std::vector<v1::CollectiveHeader> Upstream(
      std::vector<std::pair<uint64_t, Entry*>>& held, absl::Time now);

  std::map<Key, Entry> messages_;
  // Matches on their way upstream, by (destination, tag).
  absl::flat_hash_map<std::pair<int, int64_t>, int> matching_;
  uint64_t arrivals_ = 0;
  uint64_t kept_ = 0;
  uint64_t bytes_saved_ = 0;
};

}  // namespace reducer

#endif  // REDUCER_SERVER_RELAY_LOCAL_MESSAGES_H_
