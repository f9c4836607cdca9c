#include "server/metrics/metric_labels.h"

#include <iterator>

#include "core/enum_tables.h"

namespace reducer {

absl::string_view StatusCodeLabel(absl::StatusCode code) {
  static constexpr absl::string_view kNames[] = {
      "OK",
      "Canceled",
      "Unknown",
      "InvalidArgument",
      "DeadlineExceeded",
      "NotFound",
      "AlreadyExists",
      "PermissionDenied",
      "ResourceExhausted",
      "FailedPrecondition",
      "Aborted",
      "OutOfRange",
      "Unimplemented",
      "Internal",
      "Unavailable",
      "DataLoss",
      "Unauthenticated",
  };
  static_assert(std::size(kNames) == kNumStatusCodes);
  return EnumName(code, kNames, "Unknown");
}

absl::string_view KindLabel(std::optional<CollectiveKind> kind) {
  return kind.has_value() ? CollectiveKindName(*kind) : "unknown";
}

absl::string_view LimitLabel(RefusedLimit limit) {
  static constexpr absl::string_view kNames[] = {
      "none",
      "max_tensor_bytes",
      "max_jobs",
      "max_pending_collectives_per_job",
      "max_concurrent_calls",
      "memory_budget_bytes",
      "max_job_memory_fraction",
      "max_streams_per_tenant",
      "max_jobs_per_tenant",
      "max_tenant_memory_fraction",
      "max_pending_collectives_per_tenant"};
  static_assert(std::size(kNames) == kNumRefusedLimits);
  return EnumName(limit, kNames, "none");
}

absl::string_view EpochEndReasonLabel(EpochEndReason reason) {
  static constexpr absl::string_view kNames[] = {
      "session_cancelled", "session_ended", "rank_rejoined",
      "other_shard_failed"};
  static_assert(std::size(kNames) == kNumEpochEndReasons);
  return EnumName(reason, kNames, "session_ended");
}

}  // namespace reducer
