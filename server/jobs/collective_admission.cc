#include "server/jobs/collective_admission.h"

#include "absl/strings/str_cat.h"

namespace reducer {

absl::Status RefusedContribution(const CollectiveEnv& env,
                                 const std::string& job, int rank,
                                 const absl::Status& invalid) {
  const bool over_limit =
      invalid.code() == absl::StatusCode::kResourceExhausted;
  const absl::Status status(
      invalid.code(),
      absl::StrCat("job ", job, ": rank ", rank,
                   over_limit ? " is over a limit: " : " sent a bad request: ",
                   invalid.message(),
                   over_limit ? absl::StrCat(" (--max_tensor_bytes=",
                                             env.options->max_tensor_bytes, ")")
                              : ""));
  if (over_limit) {
    env.metrics->RequestRefused(status.code(), RefusedLimit::kMaxTensorBytes);
  }
  return status;
}

absl::Status TenantPendingRefusal(const CollectiveEnv& env,
                                  const std::string& description,
                                  size_t pending, size_t limit) {
  env.metrics->RequestRefused(absl::StatusCode::kResourceExhausted,
                              RefusedLimit::kMaxPendingCollectivesPerTenant);
  return absl::ResourceExhaustedError(absl::StrCat(
      description, ": tenant ", env.tenant, "'s jobs already have ", pending,
      " collectives waiting for ranks (--max_pending_collectives_per_tenant=",
      limit, "); other tenants keep theirs"));
}

absl::Status CheckPendingLimit(const CollectiveEnv& env, const std::string& job,
                               const std::string& description, size_t pending) {
  const int limit = env.options->max_pending_collectives_per_job;
  if (static_cast<int>(pending) < limit) return absl::OkStatus();
  env.metrics->RequestRefused(absl::StatusCode::kResourceExhausted,
                              RefusedLimit::kMaxPendingCollectivesPerJob);
  return absl::ResourceExhaustedError(absl::StrCat(
      description, ": job ", job, " already has ", pending,
      " collectives waiting for ranks (--max_pending_collectives_per_job=",
      limit, ")"));
}

absl::StatusOr<std::vector<MemoryReservation>> ReserveInShares(
    const CollectiveEnv& env, const std::string& job,
    const std::string& description, const std::string& what, size_t bytes) {
  const EngineOptions& options = *env.options;
  std::vector<MemoryReservation> held;
  held.push_back(MemoryReservation::Try(env.memory, bytes));
  if (!held.back().ok()) {
    env.metrics->RequestRefused(absl::StatusCode::kResourceExhausted,
                                RefusedLimit::kMemoryBudgetBytes);
    return absl::ResourceExhaustedError(absl::StrCat(
        description, ": the server's memory budget of ", env.memory->limit(),
        " bytes (", options.memory_budget_setting, ") cannot hold ", what, " (",
        bytes, " bytes) now; retry later or raise the limit"));
  }
  if (env.job_memory != nullptr) {
    held.push_back(MemoryReservation::Try(env.job_memory.get(), bytes));
    if (!held.back().ok()) {
      env.metrics->RequestRefused(absl::StatusCode::kResourceExhausted,
                                  RefusedLimit::kMaxJobMemoryFraction);
      return absl::ResourceExhaustedError(absl::StrCat(
          description, ": job ", job, "'s share of the memory budget, ",
          env.job_memory->limit(), " bytes (",
          options.job_memory_fraction_setting, "=",
          options.max_job_memory_fraction, " of ",
          options.memory_budget_setting, "), cannot hold ", what, " (", bytes,
          " bytes) now; other jobs keep the rest"));
    }
  }
  if (env.tenant_memory != nullptr) {
    held.push_back(MemoryReservation::Try(env.tenant_memory.get(), bytes));
    if (!held.back().ok()) {
      env.metrics->RequestRefused(absl::StatusCode::kResourceExhausted,
                                  RefusedLimit::kMaxTenantMemoryFraction);
      return absl::ResourceExhaustedError(absl::StrCat(
          description, ": tenant ", env.tenant,
          "'s share of the memory budget, ", env.tenant_memory->limit(),
          " bytes (", options.tenant_memory_fraction_setting, "=",
          options.max_tenant_memory_fraction, " of ",
          options.memory_budget_setting, "), cannot hold ", what, " (", bytes,
          " bytes) now; other tenants keep the rest"));
    }
  }
  return held;
}

absl::StatusOr<std::vector<MemoryReservation>> ReserveCollectiveState(
    const CollectiveEnv& env, const std::string& job,
    const std::string& description, size_t group_size) {
  // Its per-rank bookkeeping counts in the budget and the shares, as its
  // payload will.
  return ReserveInShares(
      env, job, description,
      absl::StrCat("the bookkeeping of a collective of ", group_size, " ranks"),
      Collective::StateBytes(group_size));
}

absl::Duration CollectiveTimeout(const CollectiveEnv& env, int64_t timeout_ms) {
  const absl::Duration most = env.options->max_collective_timeout;
  const absl::Duration asked = absl::Milliseconds(timeout_ms);
  return asked <= absl::ZeroDuration() || asked > most ? most : asked;
}

}  // namespace reducer
