// absl::Status <-> v1::CallStatus, the status a result or a session event
// carries inside a message. Free of gRPC, so the transport-free packages can
// use it; status_conversion.h adds the grpc::Status conversions.
#ifndef REDUCER_PROTO_REDUCER_V1_CALL_STATUS_H_
#define REDUCER_PROTO_REDUCER_V1_CALL_STATUS_H_

#include <string>

#include "absl/status/status.h"
#include "proto/reducer/v1/reducer.pb.h"

namespace reducer {

// How one call on the Collectives stream ended, as its last message says.
inline v1::CallStatus ToCallStatus(const absl::Status& status) {
  v1::CallStatus out;
  out.set_code(static_cast<int>(status.code()));
  out.set_message(std::string(status.message()));
  return out;
}

// A code outside absl's range (a newer or broken peer) becomes UNKNOWN.
inline absl::Status FromCallStatus(const v1::CallStatus& status) {
  const int code = status.code();
  if (code < 0 || code > static_cast<int>(absl::StatusCode::kUnauthenticated)) {
    return absl::UnknownError(status.message());
  }
  return absl::Status(static_cast<absl::StatusCode>(code), status.message());
}

}  // namespace reducer

#endif  // REDUCER_PROTO_REDUCER_V1_CALL_STATUS_H_
