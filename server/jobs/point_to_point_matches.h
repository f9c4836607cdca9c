// PointToPointMatches: a job's point-to-point messages and matches in one
// epoch. It tells the MessageMatcher of every message a rank attached to
// (held by its send, or taken by its plain receive), hands it each match
// (ReceiveAny), and answers a match's Collective with the message the
// matcher picks for it (Collective::SetResultValues: source, number).
//
// Not thread-safe: the Job calls it under its own lock.
#ifndef REDUCER_SERVER_JOBS_POINT_TO_POINT_MATCHES_H_
#define REDUCER_SERVER_JOBS_POINT_TO_POINT_MATCHES_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "proto/reducer/v1/reducer.pb.h"
#include "server/engine/collective.h"
#include "server/jobs/message_matcher.h"

namespace reducer {

class PointToPointMatches {
 public:
  // A message's rank (`header`'s; `source` is the message's source)
  // attached to `message`: the matcher learns that the message is held
  // (its send, unless its receive came first) or taken (a plain receive).
  void NoteMessage(const v1::CollectiveHeader& header, int source,
                   const Collective& message);

  // A match (`header`, from `source`, or -1 for any of `sources`) attached
  // to `match`: answered now if the matcher can, else when a message for
  // it arrives. A retried match (its first attach is the match) is not
  // added again.
  void AddMatch(const v1::CollectiveHeader& header, int source,
                std::vector<int> sources,
                const std::shared_ptr<Collective>& match);

  // Forgets every message and match (a new epoch).
  void Clear();

 private:
  // The matcher's answer to match `token`: message n of `source`. False
  // when the match is gone or can take no answer (failed, timed out).
  bool Answer(uint64_t token, int source, uint64_t n);

  MessageMatcher matcher_;
  // The matches waiting for their answer, by the matcher's token.
  absl::flat_hash_map<uint64_t, std::weak_ptr<Collective>> waiting_;
  uint64_t last_token_ = 0;
};

}  // namespace reducer

#endif  // REDUCER_SERVER_JOBS_POINT_TO_POINT_MATCHES_H_
