// absl::Status to and from gRPC's status, and (through call_status.h) the
// per-call v1::CallStatus: the one place where a status converts to and from
// the wire. Codes map one to one (all use the canonical codes); messages are
// kept.
// Thread-safe pure functions.
#ifndef REDUCER_PROTO_REDUCER_V1_STATUS_CONVERSION_H_
#define REDUCER_PROTO_REDUCER_V1_STATUS_CONVERSION_H_

#include <string>

#include "absl/status/status.h"
#include "grpcpp/support/status.h"
#include "proto/reducer/v1/call_status.h"

namespace reducer {

inline grpc::Status ToGrpcStatus(const absl::Status& status) {
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      std::string(status.message()));
}

inline absl::Status FromGrpcStatus(const grpc::Status& status) {
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      status.error_message());
}

}  // namespace reducer

#endif  // REDUCER_PROTO_REDUCER_V1_STATUS_CONVERSION_H_
