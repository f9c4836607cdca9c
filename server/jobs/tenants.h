// Tenants: what each tenant's jobs hold on this reducerd together, so that
// every bound protecting one user of a shared reducerd from another is kept
// per tenant, never per job name. A tenant is a line of the tokens file
// (the line for JOB governs JOB and every JOB/anything); without a tokens
// file each job name is its own tenant (TenantOf in
// server/security/job_tokens.h).
//
// Per tenant:
//  - jobs: counted by the JobRegistry, which refuses a tenant's new job
//    past EngineOptions::max_jobs_per_tenant (--max_jobs_per_tenant);
//  - a share of the memory budget (--max_tenant_memory_fraction of
//    --memory_budget_bytes), a MemoryBudget that every reservation of its
//    jobs takes as well as the server's budget (and, inside it, the job's
//    own share, --max_job_memory_fraction): payload, buffered sends
//    included, collectives' bookkeeping, jobs' per-rank state, failed
//    collectives remembered;
//  - pending collectives: its jobs' collectives waiting for ranks and the
//    failed ones remembered for ranks yet to call them (each job reports
//    its count), at most --max_pending_collectives_per_tenant, as a job's
//    are at most --max_pending_collectives_per_job. A buffered send is a
//    pending collective until its receiver takes it, so buffered sends are
//    bounded per tenant by this count and by the memory share.
//
// A Tenant lives while anything of its jobs does (each Job holds it, each
// Collective its memory share, which holds the Tenant); Tenants hands out
// the live one for a name, or a new one once every holder let go.
//
// Thread-safe. Tenants' lock is a leaf (lock order: JobRegistry, then Job,
// then Tenants); a Tenant's counts are atomic.
#ifndef REDUCER_SERVER_JOBS_TENANTS_H_
#define REDUCER_SERVER_JOBS_TENANTS_H_

#include <atomic>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "server/engine/engine_options.h"
#include "server/engine/memory_budget.h"
#include "server/security/job_tokens.h"

namespace reducer {

class Tenant : public std::enable_shared_from_this<Tenant> {
 public:
  // `memory_limit`: its share of the memory budget, in bytes (none: no
  // share of its own); `max_pending`: the most collectives its jobs may
  // have pending together. Made by Tenants, as a shared_ptr.
  Tenant(std::string name, std::optional<size_t> memory_limit,
         size_t max_pending);
  Tenant(const Tenant&) = delete;
  Tenant& operator=(const Tenant&) = delete;

  const std::string& name() const { return name_; }
  // Its share of the memory budget, null when it has none of its own
  // (--max_tenant_memory_fraction=1). Holding it holds the Tenant, so
  // that a collective outliving its job keeps its bytes counted in the
  // share its tenant's next job gets.
  std::shared_ptr<MemoryBudget> memory();

  // Its jobs served now (the JobRegistry counts them).
  int jobs() const { return jobs_.load(std::memory_order_relaxed); }
  void AddJob() { jobs_.fetch_add(1, std::memory_order_relaxed); }
  void RemoveJob() { jobs_.fetch_sub(1, std::memory_order_relaxed); }

  // Counts `n` more pending collectives if that keeps the count within
  // max_pending(); false (nothing counted) otherwise.
  bool TryAddPending(size_t n);
  // Counts `n` more pending collectives, whatever the bound (a job's
  // count moved by something already admitted).
  void AddPending(size_t n) {
    pending_.fetch_add(n, std::memory_order_relaxed);
  }
  void RemovePending(size_t n) {
    pending_.fetch_sub(n, std::memory_order_relaxed);
  }
  size_t pending() const { return pending_.load(std::memory_order_relaxed); }
  size_t max_pending() const { return max_pending_; }

 private:
  const std::string name_;
  std::optional<MemoryBudget> memory_;  // set at construction only
  const size_t max_pending_;
  std::atomic<int> jobs_{0};
  std::atomic<size_t> pending_{0};
};

class Tenants {
 public:
  // `options` and `memory` (the server's budget, whose limit the shares
  // are fractions of) outlive it; `tokens` may be null (no tokens file:
  // each job name is its own tenant).
  Tenants(const EngineOptions* options, const MemoryBudget* memory,
          JobTokens* tokens);

  // The name of the tenant `job` belongs to.
  std::string NameOf(absl::string_view job) const;

  // The live tenant named `name`, or a new one holding nothing.
  std::shared_ptr<Tenant> Get(const std::string& name) ABSL_LOCKS_EXCLUDED(mu_);

  // Tenants alive now (a test's view of its memory).
  size_t live() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // Forgets the entries of tenants nobody holds any more.
  void ForgetGoneLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const EngineOptions* const options_;
  const MemoryBudget* const memory_;
  JobTokens* const tokens_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::weak_ptr<Tenant>> tenants_
      ABSL_GUARDED_BY(mu_);
  // Entries after the last ForgetGoneLocked: the table is swept once it
  // has doubled since, so entries stay within twice the live tenants.
  size_t swept_size_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace reducer

#endif  // REDUCER_SERVER_JOBS_TENANTS_H_
