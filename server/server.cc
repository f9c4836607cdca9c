#include "server/server.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "grpcpp/health_check_service_interface.h"
#include "server/log.h"
#include "server/server_credentials.h"

namespace reducer {
namespace {

// Room above a chunk for the message's header fields (an AllReduceMany
// header lists every tensor's dtype and shape).
constexpr int kMessageHeadroomBytes = 1 << 20;

// "HOST:PORT" of `listen` with the port actually bound.
std::string BoundAddress(const std::string& listen, int port) {
  return absl::StrCat(listen.substr(0, listen.rfind(':')), ":", port);
}

}  // namespace

Server::Server(ServerOptions options, std::unique_ptr<JobTokens> tokens)
    : options_(std::move(options)),
      memory_(options_.memory_budget_bytes),
      blocks_(options_.chunk_bytes, options_.idle_blocks),
      reduction_pool_(options_.reduction_threads),
      registry_(CollectiveEnv{&options_, &reduction_pool_, &timers_, &memory_,
                              &blocks_}),
      tokens_(std::move(tokens)),
      service_(&registry_, options_.max_concurrent_calls, tokens_.get()) {}

absl::StatusOr<std::unique_ptr<Server>> Server::Start(ServerOptions options) {
  if (options.chunk_bytes == 0 || options.chunk_bytes % 8 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--chunk_bytes must be a positive multiple of 8, got ",
        options.chunk_bytes));
  }
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials =
      MakeServerCredentials(options);
  if (!credentials.ok()) return credentials.status();
  std::unique_ptr<JobTokens> tokens;
  if (!options.job_tokens_file.empty()) {
    absl::StatusOr<std::unique_ptr<JobTokens>> loaded = JobTokens::Load(
        options.job_tokens_file, options.job_tokens_refresh_interval);
    if (!loaded.ok()) return loaded.status();
    tokens = std::move(*loaded);
  }
  std::unique_ptr<Server> server(
      new Server(std::move(options), std::move(tokens)));
  const ServerOptions& o = server->options_;
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(o.listen, *credentials, &port);
  builder.RegisterService(&server->service_);
  builder.SetMaxReceiveMessageSize(
      static_cast<int>(o.chunk_bytes) + kMessageHeadroomBytes);
  builder.SetMaxSendMessageSize(
      static_cast<int>(o.chunk_bytes) + kMessageHeadroomBytes);
  // BDP probing cost 12 % time and 30 % CPU at 64 MiB (PERF_NOTES.md).
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
  server->address_ = BoundAddress(o.listen, port);
  if (!o.health_listen.empty()) {
    // The default health service is the only service of this server; the
    // main server's serving state is mirrored onto it in Shutdown().
    grpc::ServerBuilder health_builder;
    // Any other method is answered UNIMPLEMENTED by this generic service,
    // which also gives the server the callback queue the health service
    // runs on.
    health_builder.RegisterCallbackGenericService(&server->health_fallback_);
    int health_port = 0;
    health_builder.AddListeningPort(
        o.health_listen, grpc::InsecureServerCredentials(), &health_port);
    server->health_server_ = health_builder.BuildAndStart();
    if (server->health_server_ == nullptr || health_port == 0) {
      return absl::UnavailableError(absl::StrCat(
          "--health_listen: cannot listen on ", o.health_listen,
          " (address in use, or not a host:port this machine has)"));
    }
    server->health_address_ = BoundAddress(o.health_listen, health_port);
  }
  return server;
}

Server::~Server() { Shutdown(); }

void Server::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    if (shut_down_) return;
    shut_down_ = true;
  }
  for (grpc::Server* serving : {grpc_server_.get(), health_server_.get()}) {
    if (serving == nullptr) continue;
    grpc::HealthCheckServiceInterface* health = serving->GetHealthCheckService();
    if (health != nullptr) health->SetServingStatus(false);
  }
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
  if (grpc_server_ != nullptr) {
    grpc_server_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
  }
  // Probes keep seeing NOT_SERVING until the main port is gone.
  if (health_server_ != nullptr) {
    health_server_->Shutdown(absl::ToChronoTime(absl::Now()));
  }
}

void Server::Wait() { grpc_server_->Wait(); }

}  // namespace reducer
