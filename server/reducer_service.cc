#include "server/reducer_service.h"

#include <memory>

#include "server/rank_stream.h"
#include "server/session_stream.h"

namespace reducer {

grpc::ServerWriteReactor<v1::JoinEvent>* ReducerService::Join(
    grpc::CallbackServerContext* /*context*/, const v1::JoinRequest* request) {
  return SessionStream::Create(registry_, *request);
}

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>*
ReducerService::Collective(grpc::CallbackServerContext* /*context*/) {
  JobRegistry* registry = registry_;
  return RankStream::Create(
      [registry](const v1::CollectiveHeader& header,
                 std::shared_ptr<RankChannel> stream)
          -> absl::StatusOr<std::shared_ptr<reducer::Collective>> {
        absl::StatusOr<std::shared_ptr<Job>> job = registry->Find(header.job());
        if (!job.ok()) return job.status();
        return (*job)->Attach(header, std::move(stream));
      });
}

}  // namespace reducer
