// When a collective's attempt is sent again. An attempt that failed with
// UNAVAILABLE (the transport broke, reducerd was not reached) may have been
// used all the same, its result lost on the way, whole or in part: the
// client first asks for that result again (a replay: same header with
// `replay` set, no payload; reducerd keeps each result until a later call
// acknowledges it), whether or not its session is intact, and gets all of
// it (nothing of a partial answer reached the caller's memory), or
// NOT_FOUND when none is kept. Then, if nothing of an answer had arrived
// and the session is intact, it is retried with the same header, attempt
// id included, so reducerd never counts it twice. All for at most
// kRetryBudget after the first failure (kReplayBudget once the session is
// lost: a link that is down comes back within a few seconds), and never
// past the collective's deadline, pausing between tries from
// kFirstRetryPause doubling up to kLastRetryPause. The budget is longer
// than the channels' longest reconnect backoff, so that a dropped data
// connection that comes back is found again.
#ifndef REDUCER_CLIENT_RETRY_POLICY_H_
#define REDUCER_CLIENT_RETRY_POLICY_H_

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"

namespace reducer {

inline constexpr absl::Duration kRetryBudget = absl::Seconds(3);
inline constexpr absl::Duration kReplayBudget = absl::Seconds(10);
inline constexpr absl::Duration kFirstRetryPause = absl::Milliseconds(100);
inline constexpr absl::Duration kLastRetryPause = absl::Milliseconds(800);

// True when an attempt that ended with `outcome` may be sent again:
// UNAVAILABLE, nothing received, and `session` (its session's state) OK.
inline bool MayRetry(const absl::Status& outcome, bool received_any,
                     const absl::Status& session) {
  return outcome.code() == absl::StatusCode::kUnavailable && !received_any &&
         session.ok();
}

// True when the result of an attempt that ended with `outcome` may be asked
// for again: UNAVAILABLE, whatever was received and the session's state.
inline bool MayReplay(const absl::Status& outcome) {
  return outcome.code() == absl::StatusCode::kUnavailable;
}

// `failure`, the attempt's outcome that stands, with what reducerd answered
// when its result was asked for again (`replayed`): why it could not be
// sent again (none kept, too large to keep) is part of the story.
inline absl::Status WithReplayAnswer(const absl::Status& failure,
                                     const absl::Status& replayed) {
  return absl::Status(failure.code(),
                      absl::StrCat(failure.message(),
                                   "; asked for its result again, reducerd answered: ",
                                   replayed.ToString()));
}

// The pause after `pause`.
inline absl::Duration NextRetryPause(absl::Duration pause) {
  return std::min(pause * 2, kLastRetryPause);
}

}  // namespace reducer

#endif  // REDUCER_CLIENT_RETRY_POLICY_H_
