// SessionChannel: how a Job talks to one session stream (SessionStream over
// gRPC, a same-host session): the JoinEvents of its epochs, and its end.
#ifndef REDUCER_SERVER_JOBS_SESSION_CHANNEL_H_
#define REDUCER_SERVER_JOBS_SESSION_CHANNEL_H_

#include "absl/status/status.h"
#include "proto/reducer/v1/reducer.pb.h"

namespace reducer {

class SessionChannel {
 public:
  virtual ~SessionChannel() = default;
  virtual void SendEvent(const v1::JoinEvent& event) = 0;
  virtual void Fail(const absl::Status& status) = 0;
};

}  // namespace reducer

#endif  // REDUCER_SERVER_JOBS_SESSION_CHANNEL_H_
