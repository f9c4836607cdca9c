#include "server/reducer_service.h"

#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"

#include "server/rank_stream.h"
#include "server/session_stream.h"

namespace reducer {

grpc::ServerWriteReactor<v1::JoinEvent>* ReducerService::Join(
    grpc::CallbackServerContext* /*context*/, const v1::JoinRequest* request) {
  return SessionStream::Create(registry_, *request);
}

grpc::ServerUnaryReactor* ReducerService::Leave(
    grpc::CallbackServerContext* context, const v1::LeaveRequest* request,
    v1::LeaveResponse* /*response*/) {
  registry_->Depart(request->job(), request->session_id());
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>*
ReducerService::Collective(grpc::CallbackServerContext* context) {
  JobRegistry* registry = registry_;
  std::atomic<int>* active = &active_calls_;
  const int in_flight = active->fetch_add(1) + 1;
  auto on_done = [active] { active->fetch_sub(1); };
  if (in_flight > max_concurrent_calls_) {
    return RankStream::CreateFailed(
        absl::ResourceExhaustedError(absl::StrCat(
            "reducerd already serves ", in_flight - 1,
            " collective calls (--max_concurrent_calls=", max_concurrent_calls_,
            "); retry later")),
        std::move(on_done));
  }
  return RankStream::Create(
      context, std::move(on_done),
      [registry](const v1::CollectiveHeader& header,
                 std::shared_ptr<RankChannel> stream)
          -> absl::StatusOr<std::shared_ptr<reducer::Collective>> {
        absl::StatusOr<std::shared_ptr<Job>> job = registry->Find(header.job());
        if (!job.ok()) return job.status();
        return (*job)->Attach(header, std::move(stream));
      });
}

}  // namespace reducer
