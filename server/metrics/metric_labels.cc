#include "server/metrics/metric_labels.h"

namespace reducer {

absl::string_view StatusCodeLabel(absl::StatusCode code) {
  static constexpr absl::string_view kNames[kNumStatusCodes] = {
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
  const int i = static_cast<int>(code);
  return i >= 0 && i < kNumStatusCodes ? kNames[i] : "Unknown";
}

absl::string_view KindLabel(std::optional<CollectiveKind> kind) {
  return kind.has_value() ? CollectiveKindName(*kind) : "unknown";
}

absl::string_view LimitLabel(RefusedLimit limit) {
  switch (limit) {
    case RefusedLimit::kNone:
      return "none";
    case RefusedLimit::kMaxTensorBytes:
      return "max_tensor_bytes";
    case RefusedLimit::kMaxJobs:
      return "max_jobs";
    case RefusedLimit::kMaxPendingCollectivesPerJob:
      return "max_pending_collectives_per_job";
    case RefusedLimit::kMaxConcurrentCalls:
      return "max_concurrent_calls";
    case RefusedLimit::kMemoryBudgetBytes:
      return "memory_budget_bytes";
    case RefusedLimit::kMaxJobMemoryFraction:
      return "max_job_memory_fraction";
    case RefusedLimit::kMaxStreamsPerJob:
      return "max_streams_per_job";
  }
  return "none";
}

absl::string_view EpochEndReasonLabel(EpochEndReason reason) {
  switch (reason) {
    case EpochEndReason::kSessionCancelled:
      return "session_cancelled";
    case EpochEndReason::kSessionEnded:
      return "session_ended";
    case EpochEndReason::kRankRejoined:
      return "rank_rejoined";
    case EpochEndReason::kOtherShardFailed:
      return "other_shard_failed";
  }
  return "session_ended";
}

}  // namespace reducer
