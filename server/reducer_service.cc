#include "server/reducer_service.h"

#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"

#include "server/multiplexed_stream.h"
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

absl::Status ReducerService::Admit() {
  const int in_flight = active_calls_.fetch_add(1) + 1;
  if (in_flight <= max_concurrent_calls_) return absl::OkStatus();
  metrics_->RequestRefused(absl::StatusCode::kResourceExhausted,
                           RefusedLimit::kMaxConcurrentCalls);
  return absl::ResourceExhaustedError(absl::StrCat(
      "reducerd already serves ", in_flight - 1,
      " collective calls (--max_concurrent_calls=", max_concurrent_calls_,
      "); retry later"));
}

absl::StatusOr<std::shared_ptr<reducer::Collective>> ReducerService::Attach(
    const v1::CollectiveHeader& header, std::shared_ptr<RankChannel> stream) {
  absl::StatusOr<std::shared_ptr<Job>> job = registry_->Find(header.job());
  absl::StatusOr<std::shared_ptr<reducer::Collective>> attached =
      job.ok() ? (*job)->Attach(header, std::move(stream)) : job.status();
  // Refusals over a limit are counted where the limit is known.
  if (!attached.ok() &&
      attached.status().code() != absl::StatusCode::kResourceExhausted) {
    metrics_->RequestRefused(attached.status().code(), RefusedLimit::kNone);
  }
  return attached;
}

template <typename Stream>
grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>*
ReducerService::StartStream(grpc::CallbackServerContext* context) {
  std::atomic<int>* active = &active_calls_;
  auto on_done = [active] { active->fetch_sub(1); };
  absl::Status admitted = Admit();
  if (!admitted.ok()) {
    return RankStream::CreateFailed(admitted, std::move(on_done));
  }
  return Stream::Create(context, std::move(on_done),
                        [this](const v1::CollectiveHeader& header,
                               std::shared_ptr<RankChannel> stream) {
                          return Attach(header, std::move(stream));
                        });
}

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>*
ReducerService::Collective(grpc::CallbackServerContext* context) {
  return StartStream<RankStream>(context);
}

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>*
ReducerService::Collectives(grpc::CallbackServerContext* context) {
  return StartStream<MultiplexedStream>(context);
}

}  // namespace reducer
