// MetricsSink: what reducerd's engine reports about its work (collectives
// ended, stalls, epochs aborted, requests refused), for whoever counts it.
// The base class is the null sink: every method does nothing, so a server
// without --metrics_listen pays one virtual call per event. The Prometheus
// implementation is PrometheusMetrics (server/metrics/prometheus_metrics.h).
//
//   MetricsSink none;                       // metrics off
//   CollectiveEnv env{..., &none};
//   env.metrics->EpochAborted(EpochEndReason::kSessionCancelled);
//
// Implementations must be thread-safe: events come from any thread, with
// the reporting component's locks held, so they must not call back into it.
#ifndef REDUCER_SERVER_METRICS_METRICS_SINK_H_
#define REDUCER_SERVER_METRICS_METRICS_SINK_H_

#include <cstdint>
#include <optional>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "core/fingerprint.h"

namespace reducer {

// The server limit a request was refused for; kNone for refusals that are
// not about a limit (a bad request, a job in another state).
enum class RefusedLimit {
  kNone,
  kMaxTensorBytes,
  kMaxJobs,
  kMaxPendingCollectivesPerJob,
  kMaxConcurrentCalls,
  kMemoryBudgetBytes,
  kMaxJobMemoryFraction,
  kMaxStreamsPerTenant,
  kMaxJobsPerTenant,
  kMaxTenantMemoryFraction,
  kMaxPendingCollectivesPerTenant,
};
inline constexpr int kNumRefusedLimits = 11;

// Why a job's epoch ended.
enum class EpochEndReason {
  // A rank's session stream was cancelled: its process exited or was
  // killed, or its connection dropped (keepalive).
  kSessionCancelled,
  // A rank's session stream ended otherwise (the server finished it).
  kSessionEnded,
  // A rank that had closed its client connected again (see Job::Join).
  kRankRejoined,
  // A rank's job failed on another of its shards, and its client said so
  // (LeaveRequest.cause; see Job::EndForOtherShard).
  kOtherShardFailed,
};
inline constexpr int kNumEpochEndReasons = 4;

class MetricsSink {
 public:
  virtual ~MetricsSink() = default;

  // A collective succeeded (outcome OK) or failed for every rank.
  // `kind` is unknown for a collective failed before any rank's well-formed
  // header named it. `duration` runs from the first rank's arrival;
  // `bytes_in` / `bytes_out` are the payload bytes received from and sent
  // to all of its ranks.
  virtual void CollectiveEnded(std::optional<CollectiveKind> /*kind*/,
                               absl::StatusCode /*outcome*/,
                               absl::Duration /*duration*/,
                               uint64_t /*bytes_in*/,
                               uint64_t /*bytes_out*/) {}

  // A collective reached its stall warning (half its timeout) with ranks
  // or payload still missing.
  virtual void CollectiveStalled(CollectiveKind /*kind*/) {}

  // A job's running epoch ended.
  virtual void EpochAborted(EpochEndReason /*reason*/) {}

  // A quorum step ended without `ranks` of its group (dead or late); the
  // log names them (event quorum_left_out).
  virtual void QuorumRanksLeftOut(int /*ranks*/) {}

  // A relay (reducerd --upstream) made one call upstream for `ranks` of
  // its host (1: a rank's own), which saved `saved_bytes` on the host's
  // link (relay_collective.h).
  virtual void RelayCallEnded(int /*ranks*/, uint64_t /*saved_bytes*/) {}
  // A relay answered a collective of a group on its host alone itself,
  // which saved `saved_bytes` on the host's link (relay_collective.h,
  // "Answered here").
  virtual void RelayCallAnsweredHere(uint64_t /*saved_bytes*/) {}
  // A relay matched a point-to-point message between two ranks of its
  // host itself, which saved `saved_bytes` on the host's link (its payload
  // up and back down: server/relay/local_messages.h).
  virtual void RelayMessageKept(uint64_t /*saved_bytes*/) {}

  // A Join or a collective was refused with `code` before it took part.
  virtual void RequestRefused(absl::StatusCode /*code*/,
                              RefusedLimit /*limit*/) {}
};

}  // namespace reducer

#endif  // REDUCER_SERVER_METRICS_METRICS_SINK_H_
