// The one place where absl::Status converts to and from the wire: gRPC's
// status and the Collectives stream's per-call v1::CallStatus. Codes map one
// to one (all use the canonical codes); messages are kept.
// Thread-safe pure functions.
#ifndef REDUCER_PROTO_REDUCER_V1_STATUS_CONVERSION_H_
#define REDUCER_PROTO_REDUCER_V1_STATUS_CONVERSION_H_

#include <string>

#include "absl/status/status.h"
#include "grpcpp/support/status.h"
#include "proto/reducer/v1/reducer.pb.h"

namespace reducer {

inline grpc::Status ToGrpcStatus(const absl::Status& status) {
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      std::string(status.message()));
}

inline absl::Status FromGrpcStatus(const grpc::Status& status) {
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      status.error_message());
}

// How one call on the Collectives stream ended, as its last message says.
inline v1::CallStatus ToCallStatus(const absl::Status& status) {
  v1::CallStatus out;
  out.set_code(static_cast<int>(status.code()));
  out.set_message(std::string(status.message()));
  return out;
}

// An unknown code reads as UNKNOWN, as gRPC reads one.
inline absl::Status FromCallStatus(const v1::CallStatus& status) {
  const int code = status.code();
  if (code < 0 || code > static_cast<int>(absl::StatusCode::kUnauthenticated)) {
    return absl::UnknownError(status.message());
  }
  return absl::Status(static_cast<absl::StatusCode>(code), status.message());
}

}  // namespace reducer

#endif  // REDUCER_PROTO_REDUCER_V1_STATUS_CONVERSION_H_
