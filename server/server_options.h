// ServerOptions: every tunable of reducerd, filled from flags in main().
// A plain value type.
#ifndef REDUCER_SERVER_SERVER_OPTIONS_H_
#define REDUCER_SERVER_SERVER_OPTIONS_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "server/engine/chunk_pacing.h"
#include "server/log.h"

namespace reducer {

struct ServerOptions {
  std::string listen = "127.0.0.1:50051";
  // The unit of transfer and staging: the server reduces and answers in
  // chunks of this many bytes (a multiple of 8; at most, see chunk_time),
  // and clients cut payloads at it (they learn it at Connect, and smaller
  // paced chunks as the job goes). About 1 MiB keeps one chunk per gRPC
  // message, large enough to amortise per-message costs and small enough to
  // pipeline.
  size_t chunk_bytes = 1 << 20;
  // A job's all-reduces, reduce-scatters and reduces use smaller chunks
  // where its inputs come slowly: about this much time of payload at the
  // pace its earlier inputs arrived, between 64 KiB and chunk_bytes
  // (server/engine/chunk_pacing.h); its clients are told. Zero: always
  // chunk_bytes.
  absl::Duration chunk_time = kDefaultChunkTime;
  // Chunks a rank may have staged (received, not yet reduced) or queued for
  // sending before the server stops reading from it. With the chunk size
  // this bounds memory per collective to 2 x ranks x window x chunk (staged
  // in plus queued out), whatever the tensor size.
  int window = 4;
  // Upper bound on a collective's timeout, whatever the client asks for.
  absl::Duration max_collective_timeout = absl::Minutes(30);
  // Time SIGTERM gives in-flight collectives to finish.
  absl::Duration drain_budget = absl::Seconds(10);
  // Limits: over any of them a request gets RESOURCE_EXHAUSTED.
  size_t max_tensor_bytes = size_t{4} << 30;   // one contribution's payload
  int max_jobs = 1024;
  // Of those, the most one tenant (a line of the tokens file, or a job name
  // without one; server/jobs/tenants.h) may hold, so that no tenant takes
  // every slot.
  int max_jobs_per_tenant = 256;
  // Ranks of one job; a Join naming more gets INVALID_ARGUMENT. A job's
  // per-rank state is counted in memory_budget_bytes as well.
  int max_world_size = 16384;
  // Longest job, session, collective or attempt name a request may carry
  // (INVALID_ARGUMENT beyond): reducerd keeps names in its tables.
  size_t max_name_bytes = 512;
  int max_pending_collectives_per_job = 1024;
  // The most collectives one tenant's jobs may have waiting for ranks (or
  // remembered failed for ranks yet to call them) together.
  int max_pending_collectives_per_tenant = 4096;
  int max_concurrent_calls = 4096;  // Collective and Collectives streams open at once
  // Of those, the most one tenant may hold (a stream counts for a tenant
  // from the moment it opens with the tenant's token, and once a call of
  // one of its jobs attaches on it), so that no tenant takes every slot;
  // without tokens, also the most one client address may hold that sent no
  // call yet (server/jobs/stream_shares.h).
  int max_streams_per_tenant = 1024;
  // Local users, besides reducerd's own, whose processes may use the
  // same-host path (any: every user).
  bool shared_memory_any_uid = false;
  std::vector<uint32_t> shared_memory_allowed_uids;
  // Same-host handshakes (a thread each) running at once.
  int max_same_host_handshakes = 64;
  // A collective stream must send its first message this soon after
  // opening; zero: no limit. Off by default: on a slow link a stream's
  // first message (up to a chunk) can take minutes to arrive whole.
  absl::Duration header_timeout = absl::ZeroDuration();
  // A collective stream on which nothing happens this long (no message
  // arrives, no call is in flight, no answer is left to write) is closed
  // UNAVAILABLE, which the client library answers by opening a new one;
  // zero: never. Join streams are never closed so (keepalive finds vanished
  // peers). Long enough for one chunk on a slow link (1 MiB at 2 KiB/s).
  absl::Duration stream_idle_timeout = absl::Minutes(10);
  size_t memory_budget_bytes = size_t{2} << 30;  // staged and result chunks
  // The most of memory_budget_bytes one job's collectives may hold at once
  // (1: no share of its own), so that one job cannot starve the others.
  double max_job_memory_fraction = 0.5;
  // The most of memory_budget_bytes one tenant's jobs may hold together
  // (1: no share of its own), so that one tenant, whatever its number of
  // jobs, cannot starve the others. A job's share counts inside it.
  double max_tenant_memory_fraction = 0.5;
  // Room, apart from memory_budget_bytes, for results kept until a later
  // call acknowledges their receipt (server/engine/kept_results.h); 0: none kept.
  size_t kept_results_bytes = size_t{64} << 20;
  // Reductions of chunks at least this large run on the reduction pool
  // rather than the gRPC thread that received the last contribution.
  size_t offload_bytes = 64 << 10;
  int reduction_threads = 2;
  // Idle chunk buffers kept for reuse (see ChunkPool): enough for a few
  // large collectives in flight without returning pages to the kernel.
  size_t idle_chunks = 64;
  // Session keepalive: a peer that stops answering pings is dropped after
  // about keepalive_time + keepalive_timeout.
  absl::Duration keepalive_time = absl::Seconds(1);
  absl::Duration keepalive_timeout = absl::Seconds(2);
  // host:port serving Prometheus metrics at /metrics (port 0: any free
  // port); empty: no metrics, and every metric call is a no-op.
  std::string metrics_listen;
  LogFormat log_format = LogFormat::kText;

  // Transport security (see server_credentials.h and job_tokens.h). Empty
  // strings: off. TLS needs both the certificate and its key; a client CA
  // makes it mutual TLS.
  std::string tls_cert_file;
  std::string tls_key_file;
  std::string tls_client_ca_file;
  // How often certificate files are looked at for a new version. Seconds:
  // a rotated Secret reaches the pod within a minute anyway.
  absl::Duration tls_refresh_interval = absl::Seconds(10);
  std::string job_tokens_file;  // `JOB SHA256_HEX` per line
  // How often, at most, the tokens file is looked at for a new version.
  absl::Duration job_tokens_refresh_interval = absl::Seconds(1);
  // Protected mode (listen_exposure.h): with neither TLS nor a tokens file,
  // Server::Start refuses a `listen` address other hosts can reach
  // (anything but 127.0.0.0/8, [::1], localhost and Unix sockets) unless
  // this is true, which serves anyone who can reach the port.
  bool allow_unauthenticated = false;
  // Offer same-host clients the shared-memory path (docs/same_host.md): an
  // abstract AF_UNIX socket that JobReady names. A socket that cannot be
  // bound is logged, and clients then use gRPC.
  bool shared_memory = true;
  // A second, plaintext port serving only grpc.health.v1 (for kubelet
  // probes, which cannot speak TLS); empty: none.
  std::string health_listen;
  // A relay's upstream shards (reducerd --upstream), for status reports;
  // the relay itself is Server::Start's Upstream.
  std::string upstream;
};

}  // namespace reducer

#endif  // REDUCER_SERVER_SERVER_OPTIONS_H_
