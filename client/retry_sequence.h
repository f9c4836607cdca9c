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
// connection that comes back is found again. A replay that found reducerd
// there but stalled (ReducerdStalled: stopped, starved, its link frozen; a
// reducerd that is gone refuses the connection at once) starts the budget
// again from its failure: a stalled reducerd is asked again until the
// collective's deadline, so the keepalive watchdog that cut the first
// attempt never alone fails a call whose result reducerd kept.
#ifndef REDUCER_CLIENT_RETRY_SEQUENCE_H_
#define REDUCER_CLIENT_RETRY_SEQUENCE_H_

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"

namespace reducer {

inline constexpr absl::Duration kRetryBudget = absl::Seconds(3);
inline constexpr absl::Duration kReplayBudget = absl::Seconds(10);
inline constexpr absl::Duration kFirstRetryPause = absl::Milliseconds(100);
inline constexpr absl::Duration kLastRetryPause = absl::Milliseconds(800);
inline constexpr absl::Duration kStalledTry = absl::Seconds(1);

// True when a try that ended with `outcome` after `in_flight` found reducerd
// there but not answering: the connection was taken but no answer came
// (gRPC's "... before receiving SETTINGS frame", a keepalive watchdog), or
// the try waited kStalledTry or longer before it failed. A reducerd that is
// gone fails a try at once (the connection refused).
inline bool ReducerdStalled(const absl::Status& outcome,
                            absl::Duration in_flight) {
  if (outcome.code() != absl::StatusCode::kUnavailable) return false;
  return in_flight >= kStalledTry ||
         absl::StrContains(outcome.message(), "SETTINGS frame") ||
         absl::StrContains(outcome.message(), "keepalive watchdog timeout");
}

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

// The tries after one attempt failed, as described above, for whoever sends
// them (a whole collective's call, a partition of a sharded one): fed the
// outcome of each attempt that failed, it says what to send next and when,
// and which failure stands once nothing is left to try. Not thread-safe.
//
//   RetrySequence retries(deadline);
//   while (!outcome.ok()) {
//     auto next = retries.AfterFailure(outcome.status(), received_any,
//                                       session_status, absl::Now());
//     if (next == RetrySequence::Next::kStop) return retries.failure();
//     ... at retries.next_at(): a replay or a resend, its outcome ...
//   }
class RetrySequence {
 public:
  enum class Next {
    kStop,    // nothing more to try: failure() stands
    kReplay,  // ask for the result of the attempt that failed (no payload)
    kResend,  // send the contribution again, the same header
  };

  // `deadline`: the collective's; the budget never runs past it.
  explicit RetrySequence(absl::Time deadline = absl::InfiniteFuture())
      : deadline_(deadline) {}

  // Files the failure `outcome` of the attempt that just ended (a replay
  // when replaying() said so, sent at next_at()), whether any of its answer
  // had arrived, and its session's state `session`, at `now`. A replay follows a failed
  // attempt or a replay that did not reach reducerd, after a pause; a
  // resend follows at once a replay answered NOT_FOUND when the attempt may
  // be retried (MayRetry). kStop when neither applies or the budget is
  // spent.
  Next AfterFailure(const absl::Status& outcome, bool received_any,
                    const absl::Status& session, absl::Time now) {
    Next next;
    if (!replaying_) {
      first_failure_ = outcome;
      first_received_any_ = received_any;
      if (!MayReplay(outcome)) return Stop(outcome);
      next = Next::kReplay;
    } else if (MayReplay(outcome)) {
      next = Next::kReplay;  // reducerd not reached: ask again
    } else if (outcome.code() == absl::StatusCode::kNotFound &&
               MayRetry(first_failure_, first_received_any_, session)) {
      next = Next::kResend;  // not used: send it again
    } else {
      return Stop(WithReplayAnswer(first_failure_, outcome));
    }
    if (give_up_ == absl::InfiniteFuture()) {
      budget_ = session.ok() ? kRetryBudget : kReplayBudget;
      give_up_ = std::min(now + budget_, deadline_);
    } else if (replaying_ && ReducerdStalled(outcome, now - next_at_)) {
      // The replay waited on a stalled reducerd: its budget starts again.
      give_up_ = std::max(give_up_, std::min(now + budget_, deadline_));
    }
    if (next == Next::kResend) {
      replaying_ = false;
      next_at_ = now;
      return next;
    }
    if (now + pause_ >= give_up_) {
      return Stop(replaying_ ? WithReplayAnswer(first_failure_, outcome)
                             : first_failure_);
    }
    replaying_ = true;
    next_at_ = now + pause_;
    pause_ = NextRetryPause(pause_);
    return next;
  }

  // Whether the attempt to send next (or running now) is a replay.
  bool replaying() const { return replaying_; }
  // When the try that AfterFailure asked for may be sent.
  absl::Time next_at() const { return next_at_; }
  // The failure that stands once AfterFailure said kStop.
  const absl::Status& failure() const { return failure_; }

 private:
  Next Stop(absl::Status failure) {
    failure_ = std::move(failure);
    return Next::kStop;
  }

  absl::Time deadline_;
  absl::Time give_up_ = absl::InfiniteFuture();  // set at the first failure
  absl::Duration budget_;                        // likewise
  absl::Duration pause_ = kFirstRetryPause;
  absl::Time next_at_ = absl::InfinitePast();
  // The failure of the last attempt that was not a replay, and whether any
  // of its answer had arrived.
  absl::Status first_failure_;
  bool first_received_any_ = false;
  bool replaying_ = false;
  absl::Status failure_;
};

}  // namespace reducer

#endif  // REDUCER_CLIENT_RETRY_SEQUENCE_H_
