// PrometheusMetrics: the MetricsSink that counts into a prometheus-cpp
// registry, plus the gauges read from the server's state at each scrape.
//
//   auto metrics = std::make_unique<PrometheusMetrics>("0.1.0");
//   CollectiveEnv env{..., metrics.get()};
//   exposer.RegisterCollectable(metrics->MakeScrapeTarget(
//       [&] { return CurrentState(); }));
//
// Families (every label from a fixed set; see server/metrics/metric_labels.h):
//   reducer_collectives_total{kind,outcome}          counter
//   reducer_collective_duration_seconds{kind}        histogram (succeeded)
//   reducer_payload_received_bytes_total{kind}       counter
//   reducer_payload_sent_bytes_total{kind}           counter
//   reducer_collective_stalls_total{kind}            counter
//   reducer_epochs_aborted_total{reason}             counter
//   reducer_quorum_ranks_left_out_total              counter
//   reducer_relay_upstream_calls_total{combined}     counter (a relay's)
//   reducer_relay_bytes_saved_total                  counter (a relay's)
//   reducer_relay_messages_kept_total                counter (a relay's)
//   reducer_relay_calls_answered_here_total          counter (a relay's)
//   reducer_requests_refused_total{code,limit}       counter
//   reducer_jobs, reducer_ranks_connected, reducer_collectives_pending,
//   reducer_collectives_stalled, reducer_memory_budget_reserved_bytes,
//   reducer_memory_budget_bytes                      gauges, read at scrape
//   reducer_build_info{version,grpc_version}         gauge, always 1
//
// Thread-safe.
#ifndef REDUCER_SERVER_METRICS_PROMETHEUS_METRICS_H_
#define REDUCER_SERVER_METRICS_PROMETHEUS_METRICS_H_

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>

#include "absl/strings/string_view.h"
#include "prometheus/collectable.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "server/metrics/metrics_sink.h"

namespace reducer {

// What the gauges show; read from the server at each scrape.
struct ServerState {
  int64_t jobs = 0;
  int64_t ranks_connected = 0;      // ranks holding a session, all jobs
  int64_t collectives_pending = 0;  // not yet done, all jobs
  int64_t collectives_stalled = 0;  // pending and past their stall warning
  uint64_t memory_reserved_bytes = 0;
  uint64_t memory_budget_bytes = 0;
};

class PrometheusMetrics final : public MetricsSink {
 public:
  // `version` labels reducer_build_info.
  explicit PrometheusMetrics(absl::string_view version);
  PrometheusMetrics(const PrometheusMetrics&) = delete;
  PrometheusMetrics& operator=(const PrometheusMetrics&) = delete;

  // Every family lives here; the gRPC server metrics register here too.
  prometheus::Registry& registry() { return *registry_; }

  // What an Exposer serves: each Collect() first sets the gauges from
  // `state()`, then collects the registry. `state` is called on the
  // exposer's threads and must be thread-safe; the target keeps this
  // object's registry alive but calls `state` only, so `state`'s captures
  // must outlive every scrape (stop the exposer first).
  std::shared_ptr<prometheus::Collectable> MakeScrapeTarget(
      std::function<ServerState()> state);

  // MetricsSink.
  void CollectiveEnded(std::optional<CollectiveKind> kind,
                       absl::StatusCode outcome, absl::Duration duration,
                       uint64_t bytes_in, uint64_t bytes_out) override;
  void CollectiveStalled(CollectiveKind kind) override;
  void EpochAborted(EpochEndReason reason) override;
  void QuorumRanksLeftOut(int ranks) override;
  void RelayCallEnded(int ranks, uint64_t saved_bytes) override;
  void RelayMessageKept(uint64_t saved_bytes) override;
  void RelayCallAnsweredHere(uint64_t saved_bytes) override;
  void RequestRefused(absl::StatusCode code, RefusedLimit limit) override;

 private:
  // Index kNumCollectiveKinds is "unknown".
  static constexpr int kKinds = kNumCollectiveKinds + 1;
  struct PerKind {
    prometheus::Counter* succeeded;
    prometheus::Histogram* duration;
    prometheus::Counter* bytes_in;
    prometheus::Counter* bytes_out;
    prometheus::Counter* stalls;
  };
  struct Gauges {
    prometheus::Gauge* jobs;
    prometheus::Gauge* ranks_connected;
    prometheus::Gauge* collectives_pending;
    prometheus::Gauge* collectives_stalled;
    prometheus::Gauge* memory_reserved;
    prometheus::Gauge* memory_total;
  };
  class ScrapeTarget;

  // Constant after construction (the metrics they point to are
  // thread-safe; Family::Add is too).
  const std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Counter>& collectives_;
  prometheus::Family<prometheus::Counter>& epochs_aborted_;
  prometheus::Counter& quorum_left_out_;
  prometheus::Counter& relay_calls_alone_;
  prometheus::Counter& relay_calls_combined_;
  prometheus::Counter& relay_bytes_saved_;
  prometheus::Counter& relay_messages_kept_;
  prometheus::Counter& relay_answered_here_;
  prometheus::Family<prometheus::Counter>& refused_;
  std::array<PerKind, kKinds> per_kind_;
  Gauges gauges_;
};

}  // namespace reducer

#endif  // REDUCER_SERVER_METRICS_PROMETHEUS_METRICS_H_
