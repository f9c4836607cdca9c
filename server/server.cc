#include "server/server.h"

#include <unistd.h>

#include <algorithm>
#include <exception>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/impl/server_builder_option.h"
#include "grpcpp/impl/server_builder_plugin.h"
#include "server/engine/clock.h"
#include "server/listen_exposure.h"
#include "server/log.h"
#include "server/relay/relay_job.h"
#include "server/security/server_credentials.h"
#include "server/version.h"

namespace reducer {
namespace {

// Room above a chunk for the message's header fields (an AllReduceMany
// header lists every tensor's dtype and shape).
constexpr int kMessageHeadroomBytes = 1 << 20;

// Every method reducerd serves, for the gRPC server metrics. gRPC's own
// health service has no protobuf descriptor linked in, so it is listed by
// hand.
std::vector<GrpcMethod> ServedMethods() {
  std::vector<GrpcMethod> methods = MethodsOfServices(
      {"reducer.v1.Reducer", "reducer.v1.Admin",
       "grpc.reflection.v1alpha.ServerReflection"});
  methods.push_back({"grpc.health.v1.Health", "Check", false, false});
  methods.push_back({"grpc.health.v1.Health", "Watch", false, true});
  return methods;
}

// Drops server reflection from a builder: its plugin, once initialised,
// joins every ServerBuilder of the process, and the plaintext health port
// must serve health alone.
class WithoutReflection final : public grpc::ServerBuilderOption {
 public:
  void UpdateArguments(grpc::ChannelArguments* /*args*/) override {}
  void UpdatePlugins(
      std::vector<std::unique_ptr<grpc::ServerBuilderPlugin>>* plugins) override {
    plugins->erase(
        std::remove_if(plugins->begin(), plugins->end(),
                       [](const std::unique_ptr<grpc::ServerBuilderPlugin>& p) {
                         return dynamic_cast<grpc::reflection::
                                                 ProtoServerReflectionPlugin*>(
                                    p.get()) != nullptr;
                       }),
        plugins->end());
  }
};

// "HOST:PORT" of `listen` with the port actually bound.
std::string BoundAddress(const std::string& listen, int port) {
  return absl::StrCat(listen.substr(0, listen.rfind(':')), ":", port);
}

// What the engine and the jobs read of reducerd's options. The messages
// name the settings by their EngineOptions defaults, reducerd's flags.
EngineOptions EngineOptionsOf(const ServerOptions& options) {
  EngineOptions engine;
  engine.chunk_bytes = options.chunk_bytes;
  engine.chunk_time = options.chunk_time;
  engine.window = options.window;
  engine.offload_bytes = options.offload_bytes;
  engine.max_job_memory_fraction = options.max_job_memory_fraction;
  engine.max_tenant_memory_fraction = options.max_tenant_memory_fraction;
  engine.max_collective_timeout = options.max_collective_timeout;
  engine.max_tensor_bytes = options.max_tensor_bytes;
  engine.max_jobs = options.max_jobs;
  engine.max_jobs_per_tenant = options.max_jobs_per_tenant;
  engine.max_world_size = options.max_world_size;
  engine.max_pending_collectives_per_job =
      options.max_pending_collectives_per_job;
  engine.max_pending_collectives_per_tenant =
      options.max_pending_collectives_per_tenant;
  return engine;
}

// What one Collectives stream, or one same-host session, may hold of
// answers its client has not taken before reducerd stops reading from that
// client: a window of chunks, what a collective lets queue for one rank
// (--window x --chunk_bytes, 4 MiB by default). A client that reads only
// pauses there; one that does not read holds no more.
size_t MaxUnreadAnswerBytes(const ServerOptions& options) {
  return static_cast<size_t>(options.window) * options.chunk_bytes;
}

}  // namespace

Server::Server(ServerOptions options, std::unique_ptr<JobTokens> tokens)
    : options_(std::move(options)),
      engine_options_(EngineOptionsOf(options_)),
      log_(options_.log_format),
      prometheus_(options_.metrics_listen.empty()
                      ? nullptr
                      : std::make_unique<PrometheusMetrics>(kReducerVersion)),
      metrics_(prometheus_ != nullptr ? prometheus_.get() : &null_metrics_),
      memory_(options_.memory_budget_bytes),
      kept_memory_(options_.kept_results_bytes),
      chunks_(options_.chunk_bytes, options_.idle_chunks),
      reduction_pool_(options_.reduction_threads),
      relay_buffers_(std::make_shared<BufferCache>(kRelayIdleBufferBytes)),
      // `tokens` is moved into tokens_ below; what it points to stays.
      registry_(CollectiveEnv{&engine_options_, &reduction_pool_, &timers_,
                              &memory_, &chunks_, metrics_, &log_,
                              options_.kept_results_bytes > 0 ? &kept_memory_
                                                              : nullptr},
                tokens.get()),
      grpc_metrics_(prometheus_ == nullptr
                        ? nullptr
                        : std::make_unique<GrpcServerMetrics>(
                              &prometheus_->registry(), ServedMethods())),
      tokens_(std::move(tokens)),
      door_(&registry_, metrics_, tokens_.get(), options_.max_name_bytes),
      service_(&door_, options_.max_concurrent_calls,
               options_.max_streams_per_tenant, options_.header_timeout,
               options_.stream_idle_timeout, &timers_, metrics_,
               grpc_metrics_.get(), MaxUnreadAnswerBytes(options_)),
      admin_(&registry_, &memory_, kReducerVersion, &serving_, tokens_.get()) {}

void Server::RegisterServices(grpc::ServerBuilder& builder) {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  builder.RegisterService(&service_);
  builder.RegisterService(&admin_);
  if (grpc_metrics_ != nullptr) {
    std::vector<
        std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
        interceptors;
    // The Reducer service's reactors count their own calls (see
    // server/metrics/grpc_server_metrics.h for why).
    interceptors.push_back(grpc_metrics_->MakeInterceptorFactory(
        {v1::Reducer::service_full_name()}));
    builder.experimental().SetInterceptorCreators(std::move(interceptors));
  }
}

ServerState Server::State() {
  ServerState s;
  for (const JobSnapshot& job : registry_.Snapshot()) {
    ++s.jobs;
    s.ranks_connected += static_cast<int64_t>(job.joined_ranks.size());
    s.collectives_pending += static_cast<int64_t>(job.pending.size());
    for (const CollectiveSnapshot& c : job.pending) s.collectives_stalled += c.stalled;
  }
  s.memory_reserved_bytes = memory_.used();
  s.memory_budget_bytes = memory_.limit();
  return s;
}

void Server::ServeAsRelay(std::unique_ptr<Upstream> upstream) {
  upstream_ = std::move(upstream);
  char host[256] = "";
  gethostname(host, sizeof(host) - 1);
  RelayJobEnv env{upstream_.get(),
                  RelayEnv{&timers_, &memory_, metrics_, options_.chunk_bytes,
                           options_.window, relay_buffers_.get(),
                           &reduction_pool_, options_.offload_bytes},
                  &log_, absl::StrCat("relay ", host)};
  registry_.SetRelays(
      [env](const std::string& job, int world_size, const std::string& tenant,
            std::function<void(uint64_t, const std::string&)> ended,
            std::function<void(uint64_t, int, const std::string&)> rank_ended) {
        return std::make_shared<RelayJob>(
            env, job, world_size, std::move(ended), std::move(rank_ended));
      });
}

absl::Status Server::StartMetricsEndpoint() {
  const std::string& listen = options_.metrics_listen;
  try {
    // civetweb reports a port it cannot bind by throwing; nothing else here
    // throws.
    exposer_ = std::make_unique<prometheus::Exposer>(listen, /*num_threads=*/1);
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat(
        "cannot serve metrics on --metrics_listen=", listen, ": ", e.what()));
  }
  scrape_target_ = prometheus_->MakeScrapeTarget([this] { return State(); });
  exposer_->RegisterCollectable(scrape_target_);
  const std::vector<int> ports = exposer_->GetListeningPorts();
  if (ports.empty()) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve metrics on --metrics_listen=", listen));
  }
  metrics_address_ = BoundAddress(listen, ports[0]);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Server>> Server::Start(
    ServerOptions options, std::unique_ptr<Upstream> upstream) {
  if (options.chunk_bytes == 0 || options.chunk_bytes % 8 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--chunk_bytes must be a positive multiple of 8, got ",
        options.chunk_bytes));
  }
  ListenSecurity security;
  security.tls = !options.tls_cert_file.empty();
  security.job_tokens = !options.job_tokens_file.empty();
  security.allow_unauthenticated = options.allow_unauthenticated;
  absl::Status exposure = CheckListenExposure(options.listen, security);
  if (!exposure.ok()) return exposure;
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
  if (upstream != nullptr) server->ServeAsRelay(std::move(upstream));
  server->admin_.SetUpstream(o.upstream);
  if (server->prometheus_ != nullptr) {
    absl::Status metrics = server->StartMetricsEndpoint();
    if (!metrics.ok()) return metrics;
  }
  if (o.shared_memory) {
    // Before serving, so that every JobReady names the socket.
    absl::StatusOr<std::unique_ptr<SharedMemoryListener>> listener =
        SharedMemoryListener::Start(
            &server->door_, &server->log_, o.chunk_bytes,
            MaxUnreadAnswerBytes(o), o.max_same_host_handshakes,
            PeerUids{o.shared_memory_any_uid, o.shared_memory_allowed_uids});
    if (listener.ok()) {
      server->shm_listener_ = *std::move(listener);
      server->registry_.SetSharedMemorySocket(server->shm_listener_->name());
    } else {
      // An optimisation only: clients use gRPC when JobReady names no socket.
      server->log_.Log({LogSeverity::kWarning, "shm_unavailable",
                        absl::StrCat("same-host path not offered: ",
                                     listener.status().ToString())});
    }
  }
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(o.listen, *credentials, &port);
  server->RegisterServices(builder);
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
  server->address_ = BoundAddress(o.listen, port);
  if (!o.health_listen.empty()) {
    // The default health service is the only service of this server; the
    // main server's serving state is mirrored onto it in Shutdown().
    grpc::ServerBuilder health_builder;
    health_builder.SetOption(std::make_unique<WithoutReflection>());
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

const std::string& Server::shared_memory_socket() const {
  static const std::string* const kNone = new std::string();
  return shm_listener_ != nullptr ? shm_listener_->name() : *kNone;
}

absl::Status Server::Reload() {
  // What a reload never reads, in every line, so that the log says it.
  const std::string unread = absl::StrCat(
      "flags unchanged until a restart",
      options_.tls_cert_file.empty()
          ? ""
          : absl::StrCat("; TLS files re-read by their watcher every ",
                         absl::FormatDuration(options_.tls_refresh_interval)));
  if (tokens_ == nullptr) {
    log_.Log(
        {LogSeverity::kInfo, "reloaded",
         absl::StrCat("reload: no --job_tokens_file to re-read; ", unread)});
    return absl::OkStatus();
  }
  absl::StatusOr<size_t> jobs = tokens_->ReadNow();
  if (!jobs.ok()) {
    log_.Log({LogSeverity::kWarning, "reload_failed",
              absl::StrCat("reload: ", jobs.status().message(),
                           "; keeping the tokens read before; ", unread)});
    return jobs.status();
  }
  log_.Log({LogSeverity::kInfo, "reloaded",
            absl::StrCat("reload: re-read --job_tokens_file ", tokens_->path(),
                         ": ", *jobs, " jobs; ", unread)});
  return absl::OkStatus();
}

void Server::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    if (shut_down_) return;
    shut_down_ = true;
  }
  serving_.store(false, std::memory_order_relaxed);
  if (grpc_server_ == nullptr) return;  // Start failed before serving
  for (grpc::Server* serving : {grpc_server_.get(), health_server_.get()}) {
    if (serving == nullptr) continue;
    grpc::HealthCheckServiceInterface* health = serving->GetHealthCheckService();
    if (health != nullptr) health->SetServingStatus(false);
  }
  registry_.StopAccepting();
  const Clock& clock = timers_.clock();
  const absl::Time deadline = clock.Now() + options_.drain_budget;
  while (registry_.HasActiveCollectives() && clock.Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  if (registry_.HasActiveCollectives()) {
    log_.Log({LogSeverity::kWarning, "drain_budget_spent",
              "drain budget spent; failing the collectives still in flight"});
  }
  registry_.ShutdownAll(absl::UnavailableError(
      "reducerd is shutting down; Connect again once it is back"));
  if (shm_listener_ != nullptr) shm_listener_->Stop();
  // gRPC takes its deadlines as system_clock time points: the wall clock.
  grpc_server_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
  // Probes keep seeing NOT_SERVING until the main port is gone.
  if (health_server_ != nullptr) {
    health_server_->Shutdown(absl::ToChronoTime(absl::Now()));
  }
}

void Server::Wait() {
  if (grpc_server_ != nullptr) grpc_server_->Wait();
}

}  // namespace reducer
