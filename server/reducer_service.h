// ReducerService: the reducer.v1.Reducer gRPC service. Join is a typed
// callback method; Collective is a raw (ByteBuffer) callback method so that
// tensor bytes skip protobuf's string copies.
//
// Thread-safe; every pointer given to the constructor must outlive it.
#ifndef REDUCER_SERVER_REDUCER_SERVICE_H_
#define REDUCER_SERVER_REDUCER_SERVICE_H_

#include "proto/reducer/v1/reducer.grpc.pb.h"
#include "server/job_registry.h"

namespace reducer {

class ReducerService final
    : public v1::Reducer::WithRawCallbackMethod_Collective<
          v1::Reducer::WithCallbackMethod_Join<v1::Reducer::Service>> {
 public:
  explicit ReducerService(JobRegistry* registry) : registry_(registry) {}

  grpc::ServerWriteReactor<v1::JoinEvent>* Join(
      grpc::CallbackServerContext* context,
      const v1::JoinRequest* request) override;

  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* Collective(
      grpc::CallbackServerContext* context) override;

 private:
  JobRegistry* const registry_;  // not owned
};

}  // namespace reducer

#endif  // REDUCER_SERVER_REDUCER_SERVICE_H_
