#include "server/reducer_service.h"

#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"

#include "proto/reducer/v1/status_conversion.h"
#include "server/call_token.h"
#include "server/multiplexed_stream.h"
#include "server/rank_stream.h"
#include "server/session_stream.h"

namespace reducer {
namespace {

// How much of LeaveRequest.cause a job's abort message repeats.
constexpr size_t kMaxLeaveCauseBytes = 2048;

// `text`'s first `max_bytes` bytes or fewer, never ending inside a UTF-8
// sequence (the result goes into string fields, which must be UTF-8).
std::string Utf8Prefix(const std::string& text, size_t max_bytes) {
  if (text.size() <= max_bytes) return text;
  size_t end = max_bytes;
  while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) {
    --end;
  }
  return text.substr(0, end);
}

const GrpcServerMetrics::MethodMetrics* MethodOf(
    const GrpcServerMetrics* metrics, absl::string_view method) {
  if (metrics == nullptr) return nullptr;
  return metrics->Find(absl::StrCat("/", v1::Reducer::service_full_name(), "/",
                                    method));
}

// A Join refused before it joined anything: finishes at once with the
// error. Deletes itself in OnDone().
class RefusedJoin final : public grpc::ServerWriteReactor<v1::JoinEvent> {
 public:
  RefusedJoin(const absl::Status& status, const CallMetrics& metrics) {
    metrics.Received();
    const grpc::Status refused = ToGrpcStatus(status);
    metrics.Handled(refused.error_code());
    Finish(refused);
  }
  void OnDone() override { delete this; }
};

}  // namespace

ReducerService::ReducerService(JobRegistry* registry, int max_concurrent_calls,
                               MetricsSink* metrics,
                               const GrpcServerMetrics* grpc_metrics,
                               JobTokens* tokens)
    : registry_(registry),
      max_concurrent_calls_(max_concurrent_calls),
      metrics_(metrics),
      join_metrics_(MethodOf(grpc_metrics, "Join")),
      leave_metrics_(MethodOf(grpc_metrics, "Leave")),
      collective_metrics_(MethodOf(grpc_metrics, "Collective")),
      collectives_metrics_(MethodOf(grpc_metrics, "Collectives")),
      tokens_(tokens) {}

absl::Status ReducerService::Authorize(absl::string_view job,
                                       const PresentedToken& token) {
  if (tokens_ == nullptr) return absl::OkStatus();
  absl::Status allowed = tokens_->Check(job, token);
  if (!allowed.ok()) metrics_->RequestRefused(allowed.code(), RefusedLimit::kNone);
  return allowed;
}

grpc::ServerWriteReactor<v1::JoinEvent>* ReducerService::Join(
    grpc::CallbackServerContext* context, const v1::JoinRequest* request) {
  const CallMetrics metrics(join_metrics_);
  absl::Status allowed = Authorize(request->job(), TokenOf(context));
  if (!allowed.ok()) return new RefusedJoin(allowed, metrics);
  return SessionStream::Create(registry_, *request, metrics);
}

grpc::ServerUnaryReactor* ReducerService::Leave(
    grpc::CallbackServerContext* context, const v1::LeaveRequest* request,
    v1::LeaveResponse* /*response*/) {
  const CallMetrics metrics(leave_metrics_);
  metrics.Received();
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::Status allowed = Authorize(request->job(), TokenOf(context));
  if (!allowed.ok()) {
    const grpc::Status refused = ToGrpcStatus(allowed);
    metrics.Handled(refused.error_code());
    reactor->Finish(refused);
    return reactor;
  }
  if (request->cause().empty()) {
    registry_->Depart(request->job(), request->session_id());
  } else {
    registry_->EndForOtherShard(
        request->job(), request->session_id(),
        Utf8Prefix(request->cause(), kMaxLeaveCauseBytes));
  }
  metrics.Sent();
  metrics.Handled(grpc::StatusCode::OK);
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
    const v1::CollectiveHeader& header, const PresentedToken& token,
    std::shared_ptr<RankChannel> stream) {
  absl::Status allowed = Authorize(header.job(), token);
  if (!allowed.ok()) return allowed;
  absl::StatusOr<std::shared_ptr<Job>> job = registry_->Find(header.job());
  if (!job.ok() && header.replay() &&
      job.status().code() == absl::StatusCode::kFailedPrecondition) {
    return registry_->ReplayForFreedJob(header, std::move(stream));
  }
  absl::StatusOr<std::shared_ptr<reducer::Collective>> attached =
      job.ok() ? (*job)->Attach(header, stream) : job.status();
  // The job may have been freed and joined again since the attempt: the
  // freed one has its result.
  if (header.replay() && attached.status().code() == absl::StatusCode::kNotFound) {
    absl::StatusOr<std::shared_ptr<reducer::Collective>> freed =
        registry_->ReplayForFreedJob(header, std::move(stream));
    if (freed.status().code() != absl::StatusCode::kNotFound) return freed;
  }
  // Refusals over a limit are counted where the limit is known.
  if (!attached.ok() &&
      attached.status().code() != absl::StatusCode::kResourceExhausted) {
    metrics_->RequestRefused(attached.status().code(), RefusedLimit::kNone);
  }
  return attached;
}

template <typename Stream>
grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>*
ReducerService::StartStream(
    grpc::CallbackServerContext* context,
    const GrpcServerMetrics::MethodMetrics* method_metrics) {
  const CallMetrics metrics(method_metrics);
  std::atomic<int>* active = &active_calls_;
  auto on_done = [active] { active->fetch_sub(1); };
  absl::Status admitted = Admit();
  if (!admitted.ok()) {
    return RankStream::CreateFailed(admitted, std::move(on_done), metrics);
  }
  // A stream without any token is refused at once; a token is checked
  // against each collective's job as it attaches (a Collectives stream
  // carries many).
  const PresentedToken token =
      tokens_ == nullptr ? PresentedToken{} : TokenOf(context);
  if (tokens_ != nullptr && !token.present) {
    metrics_->RequestRefused(absl::StatusCode::kUnauthenticated,
                             RefusedLimit::kNone);
    return RankStream::CreateFailed(
        absl::UnauthenticatedError(absl::StrCat(
            "the collective stream carries no `authorization: Bearer TOKEN` "
            "metadata, and reducerd requires each job's token (set ",
            kTokenSettings, ")")),
        std::move(on_done), metrics);
  }
  return Stream::Create(context, std::move(on_done), AttachWithToken(token),
                        metrics);
}

RankStream::AttachFn ReducerService::AttachWithToken(
    const PresentedToken& token) {
  return [this, token](const v1::CollectiveHeader& header,
                       std::shared_ptr<RankChannel> stream) {
    return Attach(header, token, std::move(stream));
  };
}

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>*
ReducerService::Collective(grpc::CallbackServerContext* context) {
  return StartStream<RankStream>(context, collective_metrics_);
}

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>*
ReducerService::Collectives(grpc::CallbackServerContext* context) {
  return StartStream<MultiplexedStream>(context, collectives_metrics_);
}

}  // namespace reducer
