#include "server/grpc/reducer_service.h"

#include <memory>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

#include "proto/reducer/v1/status_conversion.h"
#include "server/grpc/call_token.h"
#include "server/grpc/collective_reactor.h"
#include "server/grpc/collectives_reactor.h"
#include "server/grpc/session_stream.h"

namespace reducer {
namespace {

const GrpcServerMetrics::MethodMetrics* MethodOf(
    const GrpcServerMetrics* metrics, absl::string_view method) {
  if (metrics == nullptr) return nullptr;
  return metrics->Find(absl::StrCat("/", v1::Reducer::service_full_name(), "/",
                                    method));
}

// The peer's address without its port ("ipv4:10.0.0.7" of
// "ipv4:10.0.0.7:41234", "ipv6:[::1]" of "ipv6:[::1]:5"); a Unix socket's
// peer as it is. Streams of one client host count together.
std::string PeerHost(const std::string& peer) {
  if (!absl::StartsWith(peer, "ipv4:") && !absl::StartsWith(peer, "ipv6:")) {
    return peer;
  }
  const size_t colon = peer.rfind(':');
  return colon <= 4 ? peer : peer.substr(0, colon);
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

ReducerService::ReducerService(JobDoor* door, int max_concurrent_calls,
                               int max_streams_per_tenant,
                               absl::Duration header_timeout,
                               absl::Duration stream_idle_timeout,
                               TimerQueue* timers, MetricsSink* metrics,
                               const GrpcServerMetrics* grpc_metrics,
                               size_t max_unread_answer_bytes)
    : door_(door),
      max_concurrent_calls_(max_concurrent_calls),
      tenant_shares_(StreamShares::Holder::kTenant, max_streams_per_tenant,
                     metrics),
      silent_peer_shares_(StreamShares::Holder::kSilentPeer,
                          max_streams_per_tenant, metrics),
      header_timeout_(header_timeout),
      timers_(timers),
      metrics_(metrics),
      join_metrics_(MethodOf(grpc_metrics, "Join")),
      leave_metrics_(MethodOf(grpc_metrics, "Leave")),
      collective_metrics_(MethodOf(grpc_metrics, "Collective")),
      collectives_metrics_(MethodOf(grpc_metrics, "Collectives")),
      max_unread_answer_bytes_(max_unread_answer_bytes),
      idle_streams_(stream_idle_timeout) {}

grpc::ServerWriteReactor<v1::JoinEvent>* ReducerService::Join(
    grpc::CallbackServerContext* context, const v1::JoinRequest* request) {
  const CallMetrics metrics(join_metrics_);
  // The request is whole and parsed here, within the server-wide receive
  // limit (gRPC has none per method, and a raw handler would receive the
  // same bytes); its size is checked on arrival, before it is kept
  // (JobDoor::CheckJoin), and the stream keeps only its job and session id.
  const PresentedToken token = TokenOf(context);
  absl::Status allowed = door_->Authorize(request->job(), token);
  if (!allowed.ok()) return new RefusedJoin(allowed, metrics);
  return SessionStream::Create(door_, *request, token, metrics);
}

grpc::ServerUnaryReactor* ReducerService::Leave(
    grpc::CallbackServerContext* context, const v1::LeaveRequest* request,
    v1::LeaveResponse* /*response*/) {
  const CallMetrics metrics(leave_metrics_);
  metrics.Received();
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::Status left = door_->Leave(*request, TokenOf(context));
  if (!left.ok()) {
    const grpc::Status refused = ToGrpcStatus(left);
    metrics.Handled(refused.error_code());
    reactor->Finish(refused);
    return reactor;
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

template <typename Stream, typename... Extra>
grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>*
ReducerService::StartStream(
    grpc::CallbackServerContext* context,
    const GrpcServerMetrics::MethodMetrics* method_metrics, Extra... extra) {
  const CallMetrics metrics(method_metrics);
  // The token is checked before the stream takes a slot, so that streams
  // without a valid token cannot crowd out the jobs': a stream without any
  // token, or with one no job has, is refused at once. It is checked again
  // against each collective's job as it attaches (a Collectives stream
  // carries many).
  const PresentedToken token =
      door_->tokens_required() ? TokenOf(context) : PresentedToken{};
  if (door_->tokens_required() && !token.present) {
    metrics_->RequestRefused(absl::StatusCode::kUnauthenticated,
                             RefusedLimit::kNone);
    return CollectiveReactor::CreateFailed(
        absl::UnauthenticatedError(absl::StrCat(
            "the collective stream carries no `authorization: Bearer TOKEN` "
            "metadata, and reducerd requires each job's token (set ",
            kTokenSettings, ")")),
        [] {}, metrics);
  }
  if (absl::Status known = door_->AuthorizeAnyJob(token); !known.ok()) {
    return CollectiveReactor::CreateFailed(known, [] {}, metrics);
  }
  // A stream is its token's tenant's from the moment it opens; without
  // tokens it names no tenant until a call attaches, and counts for its
  // peer until then (stream_shares.h says why).
  const std::string tenant = door_->TenantOfToken(token);
  absl::StatusOr<StreamShares::Share> opening =
      tenant.empty() ? silent_peer_shares_.Take(PeerHost(context->peer()))
                     : tenant_shares_.Take(tenant);
  if (!opening.ok()) {
    return CollectiveReactor::CreateFailed(
        opening.status(), [] {}, metrics);
  }
  std::atomic<int>* active = &active_calls_;
  auto shares =
      std::make_shared<HeldStreamShares>(&tenant_shares_, *std::move(opening));
  // The stream's shares are its own: they name it among the idle ones.
  IdleStreams* idle = &idle_streams_;
  auto on_done = [active, shares, idle] {
    idle->Forget(shares.get());
    shares->GiveBack();
    active->fetch_sub(1);
  };
  absl::Status admitted = Admit();
  if (!admitted.ok()) {
    return CollectiveReactor::CreateFailed(admitted, std::move(on_done), metrics);
  }
  Stream* stream = Stream::Create(context, std::move(on_done),
                                  door_->AttachForStream(token, shares),
                                  metrics, extra...);
  idle_streams_.Watch(shares.get(), stream->weak_from_this());
  if (header_timeout_ <= absl::ZeroDuration()) return stream;
  std::weak_ptr<Stream> weak = stream->weak_from_this();
  timers_->Schedule(
      timers_->clock().Now() + header_timeout_,
      [weak, timeout = header_timeout_] {
        if (std::shared_ptr<Stream> silent = weak.lock()) {
          silent->EndUnlessMessageArrived(absl::DeadlineExceededError(
              absl::StrCat("the stream sent no message within "
                           "--header_timeout=",
                           absl::FormatDuration(timeout),
                           " of opening; reducerd closes silent streams")));
        }
      });
  return stream;
}

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>*
ReducerService::Collective(grpc::CallbackServerContext* context) {
  return StartStream<CollectiveReactor>(context, collective_metrics_);
}

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>*
ReducerService::Collectives(grpc::CallbackServerContext* context) {
  return StartStream<CollectivesReactor>(
      context, collectives_metrics_, &held_reads_, max_unread_answer_bytes_);
}

}  // namespace reducer
