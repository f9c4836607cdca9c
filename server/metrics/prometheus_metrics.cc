#include "server/metrics/prometheus_metrics.h"

#include <string>
#include <utility>
#include <vector>

#include "grpcpp/grpcpp.h"
#include "prometheus/metric_family.h"
#include "server/metrics/metric_families.h"
#include "server/metrics/metric_labels.h"

namespace reducer {
namespace {

// From 100 us (a small all-reduce on loopback) to a minute (large tensors
// on slow links); past that the count and sum still say how many and how
// long in all.
const prometheus::Histogram::BucketBoundaries& DurationBuckets() {
  static const auto* const kBuckets = new prometheus::Histogram::BucketBoundaries{
      0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
      0.1,    0.25,    0.5,    1,     2.5,    5,     10,   30,    60};
  return *kBuckets;
}

std::optional<CollectiveKind> KindAt(int i) {
  if (i == kNumCollectiveKinds) return std::nullopt;
  return static_cast<CollectiveKind>(i);
}

int IndexOf(std::optional<CollectiveKind> kind) {
  return kind.has_value() ? static_cast<int>(*kind) : kNumCollectiveKinds;
}

}  // namespace

class PrometheusMetrics::ScrapeTarget final : public prometheus::Collectable {
 public:
  ScrapeTarget(std::shared_ptr<prometheus::Registry> registry, Gauges gauges,
               std::function<ServerState()> state)
      : registry_(std::move(registry)),
        gauges_(gauges),
        state_(std::move(state)) {}

  std::vector<prometheus::MetricFamily> Collect() const override {
    const ServerState s = state_();
    gauges_.jobs->Set(static_cast<double>(s.jobs));
    gauges_.ranks_connected->Set(static_cast<double>(s.ranks_connected));
    gauges_.collectives_pending->Set(static_cast<double>(s.collectives_pending));
    gauges_.collectives_stalled->Set(static_cast<double>(s.collectives_stalled));
    gauges_.memory_reserved->Set(static_cast<double>(s.memory_reserved_bytes));
    gauges_.memory_total->Set(static_cast<double>(s.memory_budget_bytes));
    return registry_->Collect();
  }

 private:
  const std::shared_ptr<prometheus::Registry> registry_;
  const Gauges gauges_;
  const std::function<ServerState()> state_;
};

PrometheusMetrics::PrometheusMetrics(absl::string_view version)
    : registry_(std::make_shared<prometheus::Registry>()),
      collectives_(CounterFamily(*registry_, "reducer_collectives_total",
                                 "Collectives ended, by kind and outcome (the "
                                 "status code every rank got)")),
      epochs_aborted_(
          CounterFamily(*registry_, "reducer_epochs_aborted_total",
                        "Job epochs aborted because a rank's session "
                        "was lost, by how it ended")),
      quorum_left_out_(CounterFamily(*registry_,
                                     "reducer_quorum_ranks_left_out_total",
                                     "Ranks that a quorum step ended without "
                                     "(dead or later than its grace)")
                           .Add({})),
      relay_calls_alone_(
          CounterFamily(*registry_, "reducer_relay_upstream_calls_total",
                        "Calls a relay made upstream: for several ranks of "
                        "its host combined, or for one alone")
              .Add({{"combined", "false"}})),
      relay_calls_combined_(
          CounterFamily(*registry_, "reducer_relay_upstream_calls_total",
                        "Calls a relay made upstream: for several ranks of "
                        "its host combined, or for one alone")
              .Add({{"combined", "true"}})),
      relay_bytes_saved_(
          CounterFamily(*registry_, "reducer_relay_bytes_saved_total",
                        "Bytes a relay's combined calls and the messages it "
                        "kept on its host did not move over its host's link")
              .Add({})),
      relay_messages_kept_(
          CounterFamily(*registry_, "reducer_relay_messages_kept_total",
                        "Point-to-point messages between two ranks of a "
                        "relay's host that it matched itself")
              .Add({})),
      relay_answered_here_(
          CounterFamily(*registry_, "reducer_relay_calls_answered_here_total",
                        "Collectives of a group on a relay's host alone that "
                        "it answered itself, sending nothing upstream")
              .Add({})),
      refused_(CounterFamily(*registry_, "reducer_requests_refused_total",
                             "Joins and collective calls refused before taking "
                             "part, by status code and the limit they hit "
                             "(none: not a limit)")) {
  auto& duration =
      HistogramFamily(*registry_, "reducer_collective_duration_seconds",
                      "Time from a collective's first rank arriving to "
                      "its last rank's result, collectives that "
                      "succeeded");
  auto& bytes_in =
      CounterFamily(*registry_, "reducer_payload_received_bytes_total",
                    "Payload bytes received from ranks");
  auto& bytes_out =
      CounterFamily(*registry_, "reducer_payload_sent_bytes_total",
                    "Result bytes sent to ranks");
  auto& stalls =
      CounterFamily(*registry_, "reducer_collective_stalls_total",
                    "Collectives that reached their stall warning (half "
                    "their timeout) with ranks or payload missing");
  for (int i = 0; i < kKinds; ++i) {
    const prometheus::Labels kind{{"kind", std::string(KindLabel(KindAt(i)))}};
    prometheus::Labels ok = kind;
    ok["outcome"] = std::string(StatusCodeLabel(absl::StatusCode::kOk));
    per_kind_[i] = PerKind{&collectives_.Add(ok),
                           &duration.Add(kind, DurationBuckets()),
                           &bytes_in.Add(kind), &bytes_out.Add(kind),
                           &stalls.Add(kind)};
  }
  auto gauge = [this](const std::string& name, const std::string& help) {
    return &GaugeFamily(*registry_, name, help).Add({});
  };
  gauges_.jobs = gauge("reducer_jobs", "Jobs with an open session");
  gauges_.ranks_connected = gauge(
      "reducer_ranks_connected",
      "Ranks holding a session in their job's current epoch, all jobs");
  gauges_.collectives_pending =
      gauge("reducer_collectives_pending",
            "Collectives not yet done (waiting for ranks or in flight)");
  gauges_.collectives_stalled = gauge(
      "reducer_collectives_stalled",
      "Pending collectives past their stall warning (half their timeout)");
  gauges_.memory_reserved =
      gauge("reducer_memory_budget_reserved_bytes",
            "Payload bytes reserved in the memory budget now");
  gauges_.memory_total = gauge("reducer_memory_budget_bytes",
                               "The memory budget (--memory_budget_bytes)");
  for (int r = 0; r < kNumEpochEndReasons; ++r) {
    epochs_aborted_.Add({{"reason", std::string(EpochEndReasonLabel(
                                        static_cast<EpochEndReason>(r)))}});
  }
  for (int l = 1; l < kNumRefusedLimits; ++l) {
    refused_.Add(
        {{"code", std::string(StatusCodeLabel(absl::StatusCode::kResourceExhausted))},
         {"limit", std::string(LimitLabel(static_cast<RefusedLimit>(l)))}});
  }
  GaugeFamily(*registry_, "reducer_build_info",
              "Always 1; the labels name the reducerd build")
      .Add({{"version", std::string(version)},
            {"grpc_version", grpc::Version()}})
      .Set(1);
}

std::shared_ptr<prometheus::Collectable> PrometheusMetrics::MakeScrapeTarget(
    std::function<ServerState()> state) {
  return std::make_shared<ScrapeTarget>(registry_, gauges_, std::move(state));
}

void PrometheusMetrics::CollectiveEnded(std::optional<CollectiveKind> kind,
                                        absl::StatusCode outcome,
                                        absl::Duration duration,
                                        uint64_t bytes_in, uint64_t bytes_out) {
  const PerKind& k = per_kind_[IndexOf(kind)];
  if (outcome == absl::StatusCode::kOk) {
    k.succeeded->Increment();
    k.duration->Observe(absl::ToDoubleSeconds(duration));
  } else {
    collectives_
        .Add({{"kind", std::string(KindLabel(kind))},
              {"outcome", std::string(StatusCodeLabel(outcome))}})
        .Increment();
  }
  if (bytes_in > 0) k.bytes_in->Increment(static_cast<double>(bytes_in));
  if (bytes_out > 0) k.bytes_out->Increment(static_cast<double>(bytes_out));
}

void PrometheusMetrics::CollectiveStalled(CollectiveKind kind) {
  per_kind_[IndexOf(kind)].stalls->Increment();
}

void PrometheusMetrics::EpochAborted(EpochEndReason reason) {
  epochs_aborted_
      .Add({{"reason", std::string(EpochEndReasonLabel(reason))}})
      .Increment();
}

void PrometheusMetrics::RelayCallEnded(int ranks, uint64_t saved_bytes) {
  (ranks > 1 ? relay_calls_combined_ : relay_calls_alone_).Increment();
  relay_bytes_saved_.Increment(static_cast<double>(saved_bytes));
}

void PrometheusMetrics::RelayMessageKept(uint64_t saved_bytes) {
  relay_messages_kept_.Increment();
  relay_bytes_saved_.Increment(static_cast<double>(saved_bytes));
}

void PrometheusMetrics::RelayCallAnsweredHere(uint64_t saved_bytes) {
  relay_answered_here_.Increment();
  relay_bytes_saved_.Increment(static_cast<double>(saved_bytes));
}

void PrometheusMetrics::QuorumRanksLeftOut(int ranks) {
  quorum_left_out_.Increment(ranks);
}

void PrometheusMetrics::RequestRefused(absl::StatusCode code,
                                       RefusedLimit limit) {
  refused_
      .Add({{"code", std::string(StatusCodeLabel(code))},
            {"limit", std::string(LimitLabel(limit))}})
      .Increment();
}

}  // namespace reducer
