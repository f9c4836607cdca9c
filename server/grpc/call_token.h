// TokenOf: the bearer token a gRPC call presents, read from its
// `authorization` metadata; the one reader of that metadata for every
// service of reducerd (Reducer and Admin).
//
//   const PresentedToken token = TokenOf(context);
//   absl::Status s = tokens->Check(job, token);
//
// Thread-safe (no state).
#ifndef REDUCER_SERVER_GRPC_CALL_TOKEN_H_
#define REDUCER_SERVER_GRPC_CALL_TOKEN_H_

#include "grpcpp/grpcpp.h"
#include "server/security/job_tokens.h"

namespace reducer {

// The call's `authorization` metadata, hashed (the token itself is not
// kept); `present` is false when the call carries none.
PresentedToken TokenOf(const grpc::CallbackServerContext* context);

}  // namespace reducer

#endif  // REDUCER_SERVER_GRPC_CALL_TOKEN_H_
