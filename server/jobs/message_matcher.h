// MessageMatcher: which point-to-point message each match of a job's epoch
// gets (CollectiveKind::kMatch: Client::ReceiveAny, or a Receive started
// while an earlier match of the same tag was unanswered). Point-to-point
// messages are numbered by their source (its sends to one destination with
// one tag, "p2p <source>><destination> tag <tag> #<n>"), and a plain
// Receive names the message it takes by the receiver's own count; a match
// leaves the pick to reducerd, which keeps, per destination and tag, an
// inbox:
//
//  - taken[s]: the count of source s's first message the destination has
//    not been given yet. It moves past every message a plain Receive took
//    (Received), every message a match was answered with, and the counts
//    a match brings of the destination's own receives (Match::received:
//    those numbered by the client before it started the match).
//  - held: messages whose send arrived (Sent) and that nobody took yet, in
//    order of arrival.
//  - the matches, answered strictly in the destination's order (their
//    number m), each once its turn comes: a match from one source gets
//    that source's next message, taken[s], whether its send arrived or not;
//    a match from any of its sources gets, of the held messages that are
//    the next of their source, the one that arrived first, or waits for
//    the first such to arrive. Later matches wait behind it.
//
// So the messages of one source are taken in their order, by matches and
// plain receives alike, and each exactly once. The job answers a match
// through `answer`; a match that can no longer take it (failed, timed out)
// says no, and the message stays for the next.
//
// Memory: an inbox lives while it holds messages or has ever had a match
// in the epoch; a job that never matches keeps an entry only per message
// whose send arrived before its receive. Clear() at each new epoch.
//
// Not thread-safe: the Job calls it under its own lock.
#ifndef REDUCER_SERVER_JOBS_MESSAGE_MATCHER_H_
#define REDUCER_SERVER_JOBS_MESSAGE_MATCHER_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"

namespace reducer {

class MessageMatcher {
 public:
  // One match as the job hands it over.
  struct Match {
    int destination = -1;
    int64_t tag = 0;
    uint64_t number = 0;  // m: its place among the destination's matches
    int source = -1;      // -1: any of `sources`
    std::vector<int> sources;  // sorted global ranks
    // Per source, how many of its messages the destination had numbered
    // itself when it started the match.
    std::vector<std::pair<int, uint64_t>> received;
    uint64_t token = 0;   // the job's handle for answering it
  };

  // Answers the match `token` with message n of `source`: true when the
  // match took it, false when it can no longer (the message stays).
  using AnswerFn =
      absl::FunctionRef<bool(uint64_t token, int source, uint64_t n)>;

  // Message n of `source` to `destination` with `tag` is held (its send
  // arrived); answers the matches that were waiting for it.
  void Sent(int source, int destination, int64_t tag, uint64_t n,
            AnswerFn answer);
  // The destination's plain Receive took message n of `source`.
  void Received(int source, int destination, int64_t tag, uint64_t n);
  // A match arrived; answers it, and the ones after it, as far as they
  // can be. False when it is known already (a retry of its call): nothing
  // changes.
  bool Add(Match match, AnswerFn answer);

  // Forgets everything (a new epoch).
  void Clear() { inboxes_.clear(); }
  // Inboxes kept now, for tests of its memory.
  size_t inboxes() const { return inboxes_.size(); }

 private:
  struct Inbox {
    uint64_t next_match = 0;  // the number of the next match to answer
    std::map<uint64_t, Match> matches;  // arrived, not yet answered
    absl::flat_hash_map<int, uint64_t> taken;
    // Held messages, (source, n) -> their order of arrival.
    std::map<std::pair<int, uint64_t>, uint64_t> held;
    bool matched = false;  // a match came this epoch: keep `taken`
  };
  using Key = std::pair<int, int64_t>;  // destination, tag

  // Answers the inbox's matches in order, as far as they can be.
  void Resolve(Inbox& inbox, AnswerFn answer);
  // Moves taken[source] to at least `count`, dropping held messages below.
  static void Take(Inbox& inbox, int source, uint64_t count);
  // Drops `key`'s inbox if it keeps nothing worth keeping.
  void MaybeForget(const Key& key);

  absl::flat_hash_map<Key, Inbox> inboxes_;
  uint64_t arrivals_ = 0;  // counts Sent calls: the order of arrival
};

}  // namespace reducer

#endif  // REDUCER_SERVER_JOBS_MESSAGE_MATCHER_H_
