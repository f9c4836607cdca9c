// Label values shared by reducerd's metrics. Every value comes from a fixed
// set, so no label can grow with the number of jobs, ranks or requests.
// Thread-safe (pure functions).
#ifndef REDUCER_SERVER_METRICS_METRIC_LABELS_H_
#define REDUCER_SERVER_METRICS_METRIC_LABELS_H_

#include <optional>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "core/fingerprint.h"
#include "server/metrics/metrics_sink.h"

namespace reducer {

// Number of canonical status codes (OK .. UNAUTHENTICATED).
inline constexpr int kNumStatusCodes = 17;

// A status code as Go's grpc codes.Code.String() spells it ("OK",
// "Canceled", "InvalidArgument", ...), as go-grpc-prometheus labels
// grpc_code; "Unknown" for a value outside the canonical codes.
absl::string_view StatusCodeLabel(absl::StatusCode code);

// "allreduce", "allgather", ...; "unknown" for nullopt.
absl::string_view KindLabel(std::optional<CollectiveKind> kind);

// "max_tensor_bytes", "max_jobs", ... (the flag's name); "none".
absl::string_view LimitLabel(RefusedLimit limit);

// "session_cancelled", "session_ended", "rank_rejoined",
// "other_shard_failed".
absl::string_view EpochEndReasonLabel(EpochEndReason reason);

}  // namespace reducer

#endif  // REDUCER_SERVER_METRICS_METRIC_LABELS_H_
