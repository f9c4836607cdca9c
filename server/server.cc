#include "server/server.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "grpcpp/health_check_service_interface.h"
#include "server/log.h"

namespace reducer {
namespace {

// Room above a chunk for the message's header fields (an AllReduceMany
// header lists every tensor's dtype and shape).
constexpr int kMessageHeadroomBytes = 1 << 20;

}  // namespace

Server::Server(ServerOptions options)
    : options_(std::move(options)),
      memory_(options_.memory_budget_bytes),
      blocks_(options_.chunk_bytes, options_.idle_blocks),
      reduction_pool_(options_.reduction_threads),
      registry_(CollectiveEnv{&options_, &reduction_pool_, &timers_, &memory_,
                              &blocks_}),
      service_(&registry_, options_.max_concurrent_calls) {}

absl::StatusOr<std::unique_ptr<Server>> Server::Start(ServerOptions options) {
  if (options.chunk_bytes == 0 || options.chunk_bytes % 8 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--chunk_bytes must be a positive multiple of 8, got ",
        options.chunk_bytes));
  }
  std::unique_ptr<Server> server(new Server(std::move(options)));
  const ServerOptions& o = server->options_;
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(o.listen, grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&server->service_);
  builder.SetMaxReceiveMessageSize(
      static_cast<int>(o.chunk_bytes) + kMessageHeadroomBytes);
  builder.SetMaxSendMessageSize(
      static_cast<int>(o.chunk_bytes) + kMessageHeadroomBytes);
  // BDP probing cost 12 % time and 30 % CPU at 64 MiB, measured with bench/run.sh.
  builder.AddChannelArgument(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  // Keepalive finds a peer that vanished without closing its connection.
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS,
                             absl::ToInt64Milliseconds(o.keepalive_time));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
                             absl::ToInt64Milliseconds(o.keepalive_timeout));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  // Clients ping as often as every second; don't treat that as abuse.
  builder.AddChannelArgument(
      GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 500);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  server->grpc_server_ = builder.BuildAndStart();
  if (server->grpc_server_ == nullptr || port == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", o.listen,
                     " (address in use, or not a host:port this machine has)"));
  }
  const std::string& listen = o.listen;
  server->address_ =
      absl::StrCat(listen.substr(0, listen.rfind(':')), ":", port);
  return server;
}

Server::~Server() { Shutdown(); }

void Server::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    if (shut_down_) return;
    shut_down_ = true;
  }
  grpc::HealthCheckServiceInterface* health =
      grpc_server_->GetHealthCheckService();
  if (health != nullptr) health->SetServingStatus(false);
  registry_.StopAccepting();
  const absl::Time deadline = absl::Now() + options_.drain_budget;
  while (registry_.HasActiveCollectives() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  if (registry_.HasActiveCollectives()) {
    Log(LogSeverity::kWarning,
        "drain budget spent; failing the collectives still in flight");
  }
  registry_.ShutdownAll(absl::UnavailableError(
      "reducerd is shutting down; Connect again once it is back"));
  grpc_server_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
}

void Server::Wait() { grpc_server_->Wait(); }

}  // namespace reducer
