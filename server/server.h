// Server: one running reducerd, owning the gRPC server, the job registry,
// the reduction pool and the timers. Built in main() from parsed flags.
//
//   ServerOptions options;
//   absl::StatusOr<std::unique_ptr<Server>> server = Server::Start(options);
//   ... (*server)->address() ...
//   (*server)->Shutdown();   // drains in-flight collectives, then stops
//
// Thread-safe.
#ifndef REDUCER_SERVER_SERVER_H_
#define REDUCER_SERVER_SERVER_H_

#include <atomic>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "core/buffer_cache.h"
#include "grpcpp/generic/async_generic_service.h"
#include "grpcpp/grpcpp.h"
#include "prometheus/exposer.h"
#include "server/engine/chunk_pool.h"
#include "server/engine/engine_options.h"
#include "server/engine/memory_budget.h"
#include "server/engine/thread_pool.h"
#include "server/engine/timer_queue.h"
#include "server/grpc/admin_service.h"
#include "server/grpc/reducer_service.h"
#include "server/jobs/job_door.h"
#include "server/jobs/job_registry.h"
#include "server/log.h"
#include "server/metrics/grpc_server_metrics.h"
#include "server/metrics/metrics_sink.h"
#include "server/metrics/prometheus_metrics.h"
#include "server/relay/upstream.h"
#include "server/security/job_tokens.h"
#include "server/server_options.h"
#include "server/shm/listener.h"

namespace reducer {

class Server {
 public:
  // Idle upstream payload buffers a relay keeps warm for its next calls.
  static constexpr size_t kRelayIdleBufferBytes = size_t{256} << 20;

  // Binds options.listen (and options.metrics_listen and
  // options.health_listen, when set) and starts serving. UNAVAILABLE when an
  // address cannot be bound; INVALID_ARGUMENT or NOT_FOUND for TLS or token
  // files that are unusable (see MakeServerCredentials and JobTokens::Load);
  // FAILED_PRECONDITION for a listen address other hosts can reach with
  // neither TLS nor tokens nor allow_unauthenticated (listen_exposure.h).
  //
  // With `upstream` (reducerd --upstream), it serves as a relay: every job
  // is its host's ranks' (server/relay/relay_job.h), taken upstream there.
  static absl::StatusOr<std::unique_ptr<Server>> Start(
      ServerOptions options, std::unique_ptr<Upstream> upstream = nullptr);
  ~Server();

  // The address actually bound (the port resolved if 0 was asked for).
  const std::string& address() const { return address_; }
  // Where /metrics is served ("127.0.0.1:9464"); empty when metrics are off.
  const std::string& metrics_address() const { return metrics_address_; }
  // The server's logger (options.log_format).
  const Logger& logger() const { return log_; }
  // The health port's address as bound; empty without --health_listen.
  const std::string& health_address() const { return health_address_; }
  // The same-host path's abstract socket (JobReady.shared_memory_socket);
  // empty with --shared_memory=false.
  const std::string& shared_memory_socket() const;

  // A reload (reducerd's SIGHUP, `systemctl reload`): re-reads
  // options.job_tokens_file now (JobTokens::ReadNow) and logs one line
  // saying what was re-read, or why the file could not be used, the tokens
  // read before then staying in force. Returns that error (OK when re-read,
  // or with no tokens file). Serving goes on throughout. Neither the flags
  // nor the TLS files are read here: flags take a restart, and the TLS
  // files' watcher (server_credentials.h) reads them again every
  // options.tls_refresh_interval on its own.
  absl::Status Reload();

  // Health goes NOT_SERVING and new calls get UNAVAILABLE; collectives in
  // flight get up to options.drain_budget to finish; the rest fail with
  // UNAVAILABLE; then the same-host sessions end (their threads joined) and
  // the gRPC server stops. Idempotent.
  void Shutdown();

  // Blocks until Shutdown() has completed.
  void Wait();

 private:
  Server(ServerOptions options, std::unique_ptr<JobTokens> tokens);

  // Every service reducerd serves, registered here and only here, so that
  // each gets the same port and credentials.
  void RegisterServices(grpc::ServerBuilder& builder);
  // The gauges' values now (read at each scrape).
  ServerState State();
  // Starts the /metrics endpoint on options_.metrics_listen.
  absl::Status StartMetricsEndpoint();
  // Makes every job a relay's, through `upstream` (before serving).
  void ServeAsRelay(std::unique_ptr<Upstream> upstream);

  // Constant after construction; members are declared in the order they
  // must be built (and destroyed in reverse).
  const ServerOptions options_;
  const EngineOptions engine_options_;  // the engine's share of options_
  const Logger log_;
  // Null when metrics are off; then metrics_ is the null sink.
  const std::unique_ptr<PrometheusMetrics> prometheus_;
  MetricsSink null_metrics_;
  MetricsSink* const metrics_;
  MemoryBudget memory_;
  MemoryBudget kept_memory_;  // for KeptResults
  ChunkPool chunks_;  // outlives the gRPC server, which may hold its slices
  TimerQueue timers_;
  ThreadPool reduction_pool_;
  // A relay's upstream (null: not a relay); outlives the jobs' relays and
  // their upstream sessions, whose ends it waits for.
  std::unique_ptr<Upstream> upstream_;
  // A relay's upstream payloads, reused from call to call: at most
  // kRelayIdleBufferBytes of them idle, besides the memory budget.
  const std::shared_ptr<BufferCache> relay_buffers_;
  JobRegistry registry_;
  // Null when metrics are off; outlives the gRPC server and its reactors.
  const std::unique_ptr<GrpcServerMetrics> grpc_metrics_;
  const std::unique_ptr<JobTokens> tokens_;  // null: no tokens required
  // How both transports enter the jobs.
  JobDoor door_;
  ReducerService service_;
  // False once Shutdown began. Atomic: read by Admin calls without mu_.
  std::atomic<bool> serving_{true};
  AdminService admin_;
  // Null with options.shared_memory false; stopped in Shutdown().
  std::unique_ptr<SharedMemoryListener> shm_listener_;
  std::unique_ptr<grpc::Server> grpc_server_;
  std::string address_;
  // Plaintext, grpc.health.v1 only; null without options.health_listen.
  grpc::CallbackGenericService health_fallback_;
  std::unique_ptr<grpc::Server> health_server_;
  std::string health_address_;
  // What the exposer serves (it holds only a weak reference).
  std::shared_ptr<prometheus::Collectable> scrape_target_;
  // Destroyed first: its scrapes read the members above.
  std::unique_ptr<prometheus::Exposer> exposer_;
  std::string metrics_address_;

  absl::Mutex mu_;
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace reducer

#endif  // REDUCER_SERVER_SERVER_H_
