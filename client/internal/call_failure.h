// How a failed call is reported when its session failed too.
//
// The session's failure (a lost rank, an ended epoch, a lost shard) is the
// cause the user needs first, so it leads. When the call itself failed in
// another way (its own transport broke, its deadline passed), that is said
// as well, in brackets, because it tells this rank what happened to it:
//
//   job j1 epoch 1 aborted: rank 0's session was lost (...); Connect again
//   to go on [this call: UNAVAILABLE: recvmsg:Connection reset by peer]
//
// A call that failed with the session's own code carries nothing new (it
// was failed for the same reason) and is not repeated.
#ifndef REDUCER_CLIENT_INTERNAL_CALL_FAILURE_H_
#define REDUCER_CLIENT_INTERNAL_CALL_FAILURE_H_

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace reducer {

// `session`'s failure, with `call`'s appended when its code differs.
// `session` must not be OK.
inline absl::Status SessionFailureWithCall(const absl::Status& session,
                                           const absl::Status& call) {
  if (call.ok() || call.code() == session.code()) return session;
  return absl::Status(session.code(),
                      absl::StrCat(session.message(), " [this call: ",
                                   absl::StatusCodeToString(call.code()), ": ",
                                   call.message(), "]"));
}

}  // namespace reducer

#endif  // REDUCER_CLIENT_INTERNAL_CALL_FAILURE_H_
