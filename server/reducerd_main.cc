// reducerd: the Reducer daemon. Parses flags once, starts one Server, prints
// the address it serves, on SIGHUP reloads (Server::Reload: the job tokens
// file read again) and goes on serving, and on SIGTERM or SIGINT drains and
// exits 0. `reducerd --version` prints "reducerd VERSION" and exits 0.
#include <signal.h>
#include <time.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/client_options.h"
#include "client/security/token_file.h"
#include "core/process_memory.h"
#include "server/credential_path.h"
#include "server/log.h"
#include "server/relay/client/client_upstream.h"
#include "server/sd_notify.h"
#include "server/server.h"
#include "server/server_options.h"
#include "server/version.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:50051",
          "host:port to serve on; port 0 picks a free port");
ABSL_FLAG(absl::Duration, max_collective_timeout, absl::Minutes(30),
          "cap on any collective's timeout, whatever clients ask for");
ABSL_FLAG(int64_t, chunk_bytes, 1 << 20,
          "bytes per chunk, the most (see --chunk_time): the unit of transfer, "
          "staging and reduction (multiple of 8)");
ABSL_FLAG(absl::Duration, chunk_time, reducer::kDefaultChunkTime,
          "a job's reductions use chunks of about this much time at the pace "
          "its inputs arrive (64 KiB up to --chunk_bytes; slow links get "
          "smaller ones, and clients are told); 0: always --chunk_bytes");
ABSL_FLAG(int, window, 4,
          "chunks a rank may have staged or queued before the server stops "
          "reading from it; memory per collective <= 2 x ranks x window x chunk (staged in, queued out)");
ABSL_FLAG(absl::Duration, drain_budget, absl::Seconds(10),
          "on SIGTERM, time in-flight collectives get to finish");
ABSL_FLAG(int64_t, max_tensor_bytes, int64_t{4} << 30,
          "largest payload one rank may contribute to one collective");
ABSL_FLAG(int, max_jobs, 1024, "jobs served at once");
ABSL_FLAG(int, max_jobs_per_tenant, 256,
          "of --max_jobs, the most one tenant (a line of --job_tokens_file, "
          "or a job name without one) may hold");
ABSL_FLAG(int, max_world_size, 16384,
          "most ranks one job may have (its per-rank state also counts "
          "against --memory_budget_bytes)");
ABSL_FLAG(int64_t, max_name_bytes, 512,
          "longest job, session, collective or attempt name a request may "
          "carry");
ABSL_FLAG(int, max_pending_collectives_per_job, 1024,
          "collectives of one job waiting for ranks at once");
ABSL_FLAG(int, max_pending_collectives_per_tenant, 4096,
          "collectives of one tenant's jobs together waiting for ranks at "
          "once");
ABSL_FLAG(int, max_concurrent_calls, 4096,
          "collective calls (streams) served at once");
ABSL_FLAG(int, max_streams_per_tenant, 1024,
          "collective streams one tenant (a --job_tokens_file line and its "
          "jobs; without tokens, a job) may hold at once, silent ones "
          "included, so that no tenant can take every --max_concurrent_calls "
          "slot; without tokens, also the streams one client address may "
          "hold that sent no call yet");
ABSL_FLAG(std::optional<int>, max_streams_per_job, std::nullopt,
          "deprecated: the old name of --max_streams_per_tenant");
ABSL_FLAG(int, max_same_host_handshakes, 64,
          "same-host handshakes (a thread each) run at once; more "
          "connections are refused at once");
ABSL_FLAG(std::string, shared_memory_allowed_uids, "same",
          "local users whose processes may use the same-host path: same "
          "(reducerd's own), any, or a comma-separated list of uids "
          "(besides reducerd's own)");
ABSL_FLAG(absl::Duration, header_timeout, absl::ZeroDuration(),
          "a collective stream that sends no whole message this long after "
          "opening is closed (DEADLINE_EXCEEDED), giving its slot back; 0: "
          "never. Set it above the time one --chunk_bytes message takes on "
          "the slowest link");
ABSL_FLAG(absl::Duration, stream_idle_timeout, absl::Minutes(10),
          "a collective stream on which nothing happens this long (no "
          "message arrives, no call is in flight, no answer is left to "
          "write) is closed (UNAVAILABLE; the client library opens a new "
          "one), giving its slot and its tenant's share back; 0: never, else "
          "at least 1s. Join streams are never closed so");
ABSL_FLAG(int64_t, memory_budget_bytes, int64_t{2} << 30,
          "payload bytes the server may hold in all (reserved up front)");
ABSL_FLAG(double, max_job_memory_fraction, 0.5,
          "the most of --memory_budget_bytes one job's collectives may hold "
          "at once (1: no limit of its own)");
ABSL_FLAG(double, max_tenant_memory_fraction, 0.5,
          "the most of --memory_budget_bytes one tenant's jobs may hold "
          "together at once (1: no limit of its own)");
ABSL_FLAG(int64_t, kept_results_bytes, int64_t{64} << 20,
          "room for results kept until their receipt is acknowledged, so "
          "that a rank whose connection broke can ask again (0: none kept; "
          "a result over an eighth of this is not kept)");
ABSL_FLAG(int, reduction_threads, 2, "threads reducing large chunks");
ABSL_FLAG(absl::Duration, keepalive_time, absl::Seconds(1),
          "ping idle connections this often to find vanished peers");
ABSL_FLAG(absl::Duration, keepalive_timeout, absl::Seconds(2),
          "drop a connection whose ping is unanswered this long");
// Observability.
ABSL_FLAG(std::string, metrics_listen, "",
          "host:port serving Prometheus metrics at /metrics (port 0: any "
          "free port); empty: no metrics");
ABSL_FLAG(std::string, log_format, "text",
          "stderr log lines: text, or json (one object per line)");

// Transport security (docs/security.md). Each file flag's value may be a
// bare name (no '/'): under systemd it names a credential, the file of that
// name in $CREDENTIALS_DIRECTORY (LoadCredential=; server/credential_path.h).
ABSL_FLAG(std::string, tls_cert_file, "",
          "PEM certificate (chain) to serve TLS with; empty: plaintext");
ABSL_FLAG(std::string, tls_key_file, "", "PEM private key of --tls_cert_file");
ABSL_FLAG(std::string, tls_client_ca_file, "",
          "PEM CA certificates; when set, clients must present a certificate "
          "they signed (mutual TLS)");
ABSL_FLAG(absl::Duration, tls_refresh_interval, absl::Seconds(10),
          "how often the TLS files are re-read for a new version");
ABSL_FLAG(std::string, job_tokens_file, "",
          "lines `JOB SHA256_HEX_OF_TOKEN`; when set, every call must carry "
          "`authorization: Bearer TOKEN` of its job; re-read on change");
ABSL_FLAG(bool, allow_unauthenticated, false,
          "serve a --listen address other hosts can reach (anything but "
          "127.0.0.0/8, [::1], localhost or unix:) with neither TLS nor "
          "--job_tokens_file, to anyone who can reach the port; without "
          "it, reducerd refuses to start so");
ABSL_FLAG(std::string, upstream, "",
          "serve as the relay of this host: the reducerd shards its jobs go "
          "to (ADDR[,ADDR...], as a client names them); empty: not a relay");
ABSL_FLAG(std::string, upstream_token_file, "",
          "file holding the bearer token sent upstream (the job token of "
          "the jobs this relay serves); empty: none");
ABSL_FLAG(std::string, upstream_tls_ca_file, "",
          "PEM roots that sign the upstream shards' certificates; empty: "
          "plaintext upstream");
ABSL_FLAG(std::string, upstream_tls_cert_file, "",
          "PEM certificate this relay presents upstream (mutual TLS)");
ABSL_FLAG(std::string, upstream_tls_key_file, "",
          "PEM private key of --upstream_tls_cert_file");
ABSL_FLAG(std::string, upstream_tls_server_name, "",
          "name to check in the upstream shards' certificates; empty: each "
          "address's host");
ABSL_FLAG(bool, shared_memory, true,
          "offer same-host clients the shared-memory path (an abstract "
          "unix socket JobReady names; docs/same_host.md)");
ABSL_FLAG(std::string, health_listen, "",
          "host:port of a second, plaintext port serving only "
          "grpc.health.v1 (for kubelet probes); empty: none");

// The relay's upstream (--upstream and its TLS and token flags), or null
// when this reducerd is not a relay; an unreadable token file is an error.
absl::StatusOr<std::unique_ptr<reducer::Upstream>> UpstreamFromFlags(
    const char* credentials) {
  const std::string target = absl::GetFlag(FLAGS_upstream);
  if (target.empty()) return std::unique_ptr<reducer::Upstream>();
  reducer::ClientOptions options;
  options.target = target;
  const std::string token_file = reducer::CredentialPath(
      absl::GetFlag(FLAGS_upstream_token_file), credentials);
  if (!token_file.empty()) {
    absl::StatusOr<std::string> token =
        reducer::ReadTokenFile("--upstream_token_file", token_file);
    if (!token.ok()) return token.status();
    options.token = *std::move(token);
  }
  const std::string ca = reducer::CredentialPath(
      absl::GetFlag(FLAGS_upstream_tls_ca_file), credentials);
  if (!ca.empty()) {
    reducer::TlsOptions tls;
    tls.ca_file = ca;
    tls.cert_file = reducer::CredentialPath(
        absl::GetFlag(FLAGS_upstream_tls_cert_file), credentials);
    tls.key_file = reducer::CredentialPath(
        absl::GetFlag(FLAGS_upstream_tls_key_file), credentials);
    tls.server_name = absl::GetFlag(FLAGS_upstream_tls_server_name);
    options.tls = tls;
  }
  return std::unique_ptr<reducer::Upstream>(
      std::make_unique<reducer::ClientUpstream>(std::move(options)));
}

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "reducerd: the Reducer tensor reduction daemon.\n"
      "Usage: reducerd [--listen=127.0.0.1:50051] [flags]");
  // --version (Abseil's own flag) prints "reducerd VERSION" and exits 0.
  absl::FlagsUsageConfig usage_config;
  usage_config.version_string = [] {
    return absl::StrCat("reducerd ", reducer::kReducerVersion, "\n");
  };
  absl::SetFlagsUsageConfig(usage_config);
  absl::ParseCommandLine(argc, argv);

  // Memory in use stays bounded by the window and the chunk pool; what is
  // freed is kept for the next message rather than faulted in again.
  reducer::KeepFreedMemory();
  // Lock-order checking is for tests (the clang build checks lock
  // annotations statically); here it costs a graph lookup on every lock.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);

  reducer::ServerOptions options;
  options.listen = absl::GetFlag(FLAGS_listen);
  options.max_collective_timeout = absl::GetFlag(FLAGS_max_collective_timeout);
  options.chunk_bytes = static_cast<size_t>(absl::GetFlag(FLAGS_chunk_bytes));
  options.window = absl::GetFlag(FLAGS_window);
  options.chunk_time = absl::GetFlag(FLAGS_chunk_time);
  options.drain_budget = absl::GetFlag(FLAGS_drain_budget);
  options.max_tensor_bytes =
      static_cast<size_t>(absl::GetFlag(FLAGS_max_tensor_bytes));
  options.max_jobs = absl::GetFlag(FLAGS_max_jobs);
  options.max_jobs_per_tenant = absl::GetFlag(FLAGS_max_jobs_per_tenant);
  if (options.max_jobs_per_tenant < 1) {
    std::fprintf(stderr,
                 "reducerd: --max_jobs_per_tenant must be at least 1\n");
    return 1;
  }
  options.max_world_size = absl::GetFlag(FLAGS_max_world_size);
  options.max_name_bytes =
      static_cast<size_t>(absl::GetFlag(FLAGS_max_name_bytes));
  if (options.max_world_size < 1 || absl::GetFlag(FLAGS_max_name_bytes) < 64) {
    std::fprintf(stderr,
                 "reducerd: --max_world_size must be at least 1 and "
                 "--max_name_bytes at least 64 (the client library's own "
                 "session and attempt ids are up to 64 bytes)\n");
    return 1;
  }
  // An all-gather's result adds every rank's dim 0 and bytes; with both
  // bounds below 2^62 together, those sums cannot overflow.
  if (static_cast<double>(options.max_world_size) *
          static_cast<double>(options.max_tensor_bytes) >
      static_cast<double>(int64_t{1} << 62)) {
    std::fprintf(stderr,
                 "reducerd: --max_world_size x --max_tensor_bytes must stay "
                 "below 2^62 (an all-gather's result adds them up)\n");
    return 1;
  }
  options.max_pending_collectives_per_job =
      absl::GetFlag(FLAGS_max_pending_collectives_per_job);
  options.max_pending_collectives_per_tenant =
      absl::GetFlag(FLAGS_max_pending_collectives_per_tenant);
  if (options.max_pending_collectives_per_tenant < 1) {
    std::fprintf(stderr,
                 "reducerd: --max_pending_collectives_per_tenant must be at "
                 "least 1\n");
    return 1;
  }
  options.max_concurrent_calls = absl::GetFlag(FLAGS_max_concurrent_calls);
  options.max_streams_per_tenant = absl::GetFlag(FLAGS_max_streams_per_tenant);
  const std::optional<int> streams_old_name =
      absl::GetFlag(FLAGS_max_streams_per_job);
  if (streams_old_name.has_value()) {
    if (options.max_streams_per_tenant != *streams_old_name &&
        options.max_streams_per_tenant !=
            reducer::ServerOptions().max_streams_per_tenant) {
      std::fprintf(stderr,
                   "reducerd: --max_streams_per_job (the deprecated old name "
                   "of --max_streams_per_tenant) and --max_streams_per_tenant "
                   "say different things; give --max_streams_per_tenant "
                   "alone\n");
      return 1;
    }
    options.max_streams_per_tenant = *streams_old_name;
  }
  if (options.max_streams_per_tenant < 1) {
    std::fprintf(stderr,
                 "reducerd: --max_streams_per_tenant must be at least 1\n");
    return 1;
  }
  if (streams_old_name.has_value()) {
    std::fprintf(stderr,
                 "reducerd: --max_streams_per_job is deprecated; it sets "
                 "--max_streams_per_tenant, which bounds the streams of a "
                 "tenant (a --job_tokens_file line and its jobs)\n");
  }
  options.header_timeout = absl::GetFlag(FLAGS_header_timeout);
  options.stream_idle_timeout = absl::GetFlag(FLAGS_stream_idle_timeout);
  if (options.stream_idle_timeout != absl::ZeroDuration() &&
      options.stream_idle_timeout < absl::Seconds(1)) {
    std::fprintf(stderr,
                 "reducerd: --stream_idle_timeout must be 0 (never) or at "
                 "least 1s (shorter would close healthy streams between "
                 "calls)\n");
    return 1;
  }
  options.max_same_host_handshakes =
      absl::GetFlag(FLAGS_max_same_host_handshakes);
  const std::string uids = absl::GetFlag(FLAGS_shared_memory_allowed_uids);
  if (uids == "any") {
    options.shared_memory_any_uid = true;
  } else if (uids != "same") {
    for (absl::string_view uid : absl::StrSplit(uids, ',')) {
      uint32_t parsed = 0;
      if (!absl::SimpleAtoi(uid, &parsed)) {
        std::fprintf(stderr,
                     "reducerd: --shared_memory_allowed_uids must be same, "
                     "any or a comma-separated list of uids, got '%s'\n",
                     uids.c_str());
        return 1;
      }
      options.shared_memory_allowed_uids.push_back(parsed);
    }
  }
  options.memory_budget_bytes =
      static_cast<size_t>(absl::GetFlag(FLAGS_memory_budget_bytes));
  options.max_job_memory_fraction =
      absl::GetFlag(FLAGS_max_job_memory_fraction);
  if (!(options.max_job_memory_fraction > 0 &&
        options.max_job_memory_fraction <= 1)) {
    std::fprintf(stderr,
                 "reducerd: --max_job_memory_fraction must be in (0, 1]\n");
    return 1;
  }
  options.max_tenant_memory_fraction =
      absl::GetFlag(FLAGS_max_tenant_memory_fraction);
  if (!(options.max_tenant_memory_fraction > 0 &&
        options.max_tenant_memory_fraction <= 1)) {
    std::fprintf(stderr,
                 "reducerd: --max_tenant_memory_fraction must be in (0, 1]\n");
    return 1;
  }
  options.kept_results_bytes =
      static_cast<size_t>(absl::GetFlag(FLAGS_kept_results_bytes));
  options.reduction_threads = absl::GetFlag(FLAGS_reduction_threads);
  options.keepalive_time = absl::GetFlag(FLAGS_keepalive_time);
  options.keepalive_timeout = absl::GetFlag(FLAGS_keepalive_timeout);
  options.metrics_listen = absl::GetFlag(FLAGS_metrics_listen);
  absl::StatusOr<reducer::LogFormat> log_format =
      reducer::ParseLogFormat(absl::GetFlag(FLAGS_log_format));
  if (!log_format.ok()) {
    std::fprintf(stderr, "reducerd: %s\n", log_format.status().ToString().c_str());
    return 1;
  }
  options.log_format = *log_format;
  // Under systemd's LoadCredential=, a bare file name names a credential.
  const char* credentials = std::getenv("CREDENTIALS_DIRECTORY");
  options.tls_cert_file =
      reducer::CredentialPath(absl::GetFlag(FLAGS_tls_cert_file), credentials);
  options.tls_key_file =
      reducer::CredentialPath(absl::GetFlag(FLAGS_tls_key_file), credentials);
  options.tls_client_ca_file = reducer::CredentialPath(
      absl::GetFlag(FLAGS_tls_client_ca_file), credentials);
  options.tls_refresh_interval = absl::GetFlag(FLAGS_tls_refresh_interval);
  options.job_tokens_file = reducer::CredentialPath(
      absl::GetFlag(FLAGS_job_tokens_file), credentials);
  options.allow_unauthenticated = absl::GetFlag(FLAGS_allow_unauthenticated);
  options.health_listen = absl::GetFlag(FLAGS_health_listen);
  options.shared_memory = absl::GetFlag(FLAGS_shared_memory);
  options.upstream = absl::GetFlag(FLAGS_upstream);

  // Block the stop and reload signals in every thread (threads inherit the
  // mask), so that only sigwait below receives them.
  sigset_t handled_signals;
  sigemptyset(&handled_signals);
  sigaddset(&handled_signals, SIGTERM);
  sigaddset(&handled_signals, SIGINT);
  sigaddset(&handled_signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &handled_signals, nullptr);

  absl::StatusOr<std::unique_ptr<reducer::Upstream>> upstream =
      UpstreamFromFlags(credentials);
  if (!upstream.ok()) {
    std::fprintf(stderr, "reducerd: %s\n",
                 upstream.status().ToString().c_str());
    return 1;
  }
  absl::StatusOr<std::unique_ptr<reducer::Server>> server =
      reducer::Server::Start(options, *std::move(upstream));
  if (!server.ok()) {
    std::fprintf(stderr, "reducerd: %s\n", server.status().ToString().c_str());
    return 1;
  }
  if (!(*server)->metrics_address().empty()) {
    std::printf("reducerd metrics on http://%s/metrics\n",
                (*server)->metrics_address().c_str());
  }
  std::printf("reducerd listening on %s\n", (*server)->address().c_str());
  if (!(*server)->health_address().empty()) {
    std::printf("reducerd health checks on %s\n",
                (*server)->health_address().c_str());
  }
  if (!(*server)->shared_memory_socket().empty()) {
    std::printf("reducerd same-host path on abstract socket %s\n",
                (*server)->shared_memory_socket().c_str());
  }
  std::fflush(stdout);

  // Under systemd (Type=notify) $NOTIFY_SOCKET names the manager's socket:
  // READY=1 once serving, RELOADING=1 when a reload begins and READY=1 again
  // when it is done, STOPPING=1 when draining begins. A failure to notify is
  // logged; reducerd serves either way.
  const char* notify_socket = std::getenv("NOTIFY_SOCKET");
  absl::StatusOr<reducer::SystemdNotifier> notifier =
      reducer::SystemdNotifier::Create(notify_socket != nullptr ? notify_socket : "");
  auto notify = [&notifier, &server](const std::string& state) {
    absl::Status sent = notifier.ok() ? notifier->Notify(state) : notifier.status();
    if (!sent.ok()) {
      (*server)->logger().Log(
          {reducer::LogSeverity::kWarning, "notify_failed", sent.ToString()});
    }
  };
  const std::string serving = absl::StrCat("serving on ", (*server)->address());
  notify(absl::StrCat("READY=1\nSTATUS=", serving));

  int signal_number = 0;
  while (sigwait(&handled_signals, &signal_number) == 0 &&
         signal_number == SIGHUP) {
    // MONOTONIC_USEC: when the reload began, as systemd's notify-reload
    // services say it (systemd 253 and later require it; 252 ignores it).
    struct timespec now {};
    clock_gettime(CLOCK_MONOTONIC, &now);
    const int64_t now_us =
        int64_t{now.tv_sec} * 1000000 + int64_t{now.tv_nsec} / 1000;
    notify(absl::StrCat("RELOADING=1\nMONOTONIC_USEC=", now_us,
                        "\nSTATUS=reloading"));
    // A reload that fails keeps what was read before (Reload logged why);
    // reducerd serves on either way, and says so.
    const absl::Status reloaded = (*server)->Reload();
    notify(absl::StrCat(
        "READY=1\nSTATUS=", serving,
        reloaded.ok() ? "" : " (last reload failed: see the log)"));
  }
  const std::string message =
      absl::StrCat("received signal ", signal_number, "; draining");
  (*server)->logger().Log(
      {reducer::LogSeverity::kInfo, "draining", message});
  notify("STOPPING=1\nSTATUS=draining");
  (*server)->Shutdown();
  server->reset();
  return 0;
}
