// What a job checks before it lets a collective in. Each refusal names the
// limit and its flag, and is counted in the metrics (RequestRefused)
// before anything is committed.
#ifndef REDUCER_SERVER_JOBS_COLLECTIVE_ADMISSION_H_
#define REDUCER_SERVER_JOBS_COLLECTIVE_ADMISSION_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/engine/collective.h"
#include "server/engine/memory_budget.h"

namespace reducer {

// The error of job `job`'s rank `rank` whose contribution is `invalid`
// (malformed: its own code and text; over --max_tensor_bytes:
// RESOURCE_EXHAUSTED naming the flag, and counted).
absl::Status RefusedContribution(const CollectiveEnv& env,
                                 const std::string& job, int rank,
                                 const absl::Status& invalid);

// RESOURCE_EXHAUSTED when `pending` collectives of job `job` already wait
// for ranks (--max_pending_collectives_per_job); `description` names the
// one refused.
absl::Status CheckPendingLimit(const CollectiveEnv& env, const std::string& job,
                               const std::string& description, size_t pending);

// The RESOURCE_EXHAUSTED of a collective (`description`) refused because
// the tenant's jobs (env.tenant) already have `pending` collectives waiting
// for ranks or remembered failed, `limit` being the most
// (--max_pending_collectives_per_tenant); counted.
absl::Status TenantPendingRefusal(const CollectiveEnv& env,
                                  const std::string& description,
                                  size_t pending, size_t limit);

// `bytes` for `what` (in a message: "the bookkeeping of ..."), reserved in
// the server's budget, the job's share and the tenant's share (those of
// them `env` has), one reservation each; RESOURCE_EXHAUSTED naming the
// first that cannot hold them now, and what `description` names.
absl::StatusOr<std::vector<MemoryReservation>> ReserveInShares(
    const CollectiveEnv& env, const std::string& job,
    const std::string& description, const std::string& what, size_t bytes);

// The memory of a new collective's per-rank bookkeeping (a group of
// `group_size`), held in the server's budget and the job's and tenant's
// shares (ReserveInShares).
absl::StatusOr<std::vector<MemoryReservation>> ReserveCollectiveState(
    const CollectiveEnv& env, const std::string& job,
    const std::string& description, size_t group_size);

// A collective's deadline: what its caller asked (`timeout_ms`), at most
// --max_collective_timeout, which is also what none (0) gets.
absl::Duration CollectiveTimeout(const CollectiveEnv& env, int64_t timeout_ms);

}  // namespace reducer

#endif  // REDUCER_SERVER_JOBS_COLLECTIVE_ADMISSION_H_
