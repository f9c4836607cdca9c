// Replays: a call that lost its result on the way asks for it again
// (header.replay) and gets the result reducerd kept for its attempt
// (KeptResults), whole. Job::Attach answers replays of its own attempts;
// JobRegistry those of a job already freed.
#ifndef REDUCER_SERVER_JOBS_REPLAY_H_
#define REDUCER_SERVER_JOBS_REPLAY_H_

#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/reducer/v1/reducer.pb.h"
#include "server/engine/collective.h"
#include "server/engine/kept_results.h"
#include "server/engine/rank_channel.h"
#include "server/log.h"

namespace reducer {

// OK when replay `header` names an attempt of its own session (attempt id
// `<session id>/<n>`); else INVALID_ARGUMENT.
absl::Status CheckReplay(const v1::CollectiveHeader& header);

// Sends `header`'s result (a replay) from `kept` on `stream`, whole, and
// returns null; NOT_FOUND (naming the attempt) when none is kept,
// INVALID_ARGUMENT as CheckReplay.
absl::StatusOr<std::shared_ptr<Collective>> ReplayKept(
    KeptResults* kept, const v1::CollectiveHeader& header, RankChannel& stream,
    const Logger& log);

}  // namespace reducer

#endif  // REDUCER_SERVER_JOBS_REPLAY_H_
