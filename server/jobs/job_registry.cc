#include "server/jobs/job_registry.h"

#include <algorithm>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace reducer {
namespace {

constexpr absl::string_view kShuttingDown =
    "reducerd is shutting down; retry against another instance or after "
    "it restarts";

// The ranks a Join seats: `rank`, or the `ranks` of a session that holds
// several (a relay's): INVALID_ARGUMENT unless they are sorted, distinct,
// within the world, and start with `rank`.
absl::StatusOr<std::vector<int>> RanksOfJoin(const v1::JoinRequest& request) {
  if (request.ranks().empty()) return std::vector<int>{request.rank()};
  std::vector<int> ranks(request.ranks().begin(), request.ranks().end());
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i] < 0 || ranks[i] >= request.world_size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("JoinRequest.ranks[", i, "] ", ranks[i],
                       " is outside the world of ", request.world_size()));
    }
    if (i > 0 && ranks[i] <= ranks[i - 1]) {
      return absl::InvalidArgumentError(
          absl::StrCat("JoinRequest.ranks [", absl::StrJoin(ranks, ","),
                       "] must be sorted, each rank once"));
    }
  }
  if (ranks.front() != request.rank()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "JoinRequest.rank ", request.rank(),
        " must be the first of its ranks [", absl::StrJoin(ranks, ","), "]"));
  }
  return ranks;
}

}  // namespace

absl::Status JobRegistry::Join(const v1::JoinRequest& request,
                               std::shared_ptr<SessionChannel> session) {
  absl::Status joined = JoinOrRefuse(request, std::move(session));
  // Refusals over a limit are counted where the limit is known.
  if (!joined.ok() && joined.code() != absl::StatusCode::kResourceExhausted) {
    env_.metrics->RequestRefused(joined.code(), RefusedLimit::kNone);
  }
  return joined;
}

absl::Status JobRegistry::JoinOrRefuse(const v1::JoinRequest& request,
                                       std::shared_ptr<SessionChannel> session) {
  if (request.job().empty()) {
    return absl::InvalidArgumentError("JoinRequest.job must not be empty");
  }
  if (request.world_size() < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "JoinRequest.world_size must be at least 1, got ",
        request.world_size()));
  }
  if (request.world_size() > env_.options->max_world_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "JoinRequest.world_size ", request.world_size(),
        " is over the limit of ", env_.options->max_world_size,
        " ranks per job (--max_world_size)"));
  }
  if (request.rank() < 0 || request.rank() >= request.world_size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("JoinRequest.rank ", request.rank(),
                     " is outside the world of ", request.world_size()));
  }
  if (request.session_id().empty()) {
    return absl::InvalidArgumentError(
        "JoinRequest.session_id must not be empty");
  }
  absl::StatusOr<std::vector<int>> ranks = RanksOfJoin(request);
  if (!ranks.ok()) return ranks.status();
  // Before the lock: the tokens file may be read again.
  const std::string tenant_name = tenants_.NameOf(request.job());
  std::vector<std::string> shards(request.shards().begin(),
                                  request.shards().end());
  absl::MutexLock lock(&mu_);
  if (!accepting_) return absl::UnavailableError(kShuttingDown);
  auto it = jobs_.find(request.job());
  if (it == jobs_.end()) {
    std::shared_ptr<Tenant> tenant = tenants_.Get(tenant_name);
    if (tenant->jobs() >= env_.options->max_jobs_per_tenant) {
      env_.metrics->RequestRefused(absl::StatusCode::kResourceExhausted,
                                   RefusedLimit::kMaxJobsPerTenant);
      return absl::ResourceExhaustedError(absl::StrCat(
          "cannot create job ", request.job(), ": its tenant ", tenant_name,
          " already has ", tenant->jobs(),
          " jobs on this reducerd "
          "(--max_jobs_per_tenant=",
          env_.options->max_jobs_per_tenant, "); other tenants keep theirs"));
    }
    MakeRoomForAJobLocked();
    if (static_cast<int>(jobs_.size()) >= env_.options->max_jobs) {
      env_.metrics->RequestRefused(absl::StatusCode::kResourceExhausted,
                                   RefusedLimit::kMaxJobs);
      return absl::ResourceExhaustedError(absl::StrCat(
          "cannot create job ", request.job(), ": reducerd already serves ",
          jobs_.size(), " jobs (--max_jobs=", env_.options->max_jobs, ")"));
    }
    // The shard list of its first Join is the job's for its lifetime.
    const size_t rank_state_bytes =
        Job::RankStateBytes(request.world_size()) + Job::ShardListBytes(shards);
    std::vector<MemoryReservation> rank_state;
    rank_state.push_back(MemoryReservation::Try(env_.memory, rank_state_bytes));
    if (!rank_state.back().ok()) {
      env_.metrics->RequestRefused(absl::StatusCode::kResourceExhausted,
                                   RefusedLimit::kMemoryBudgetBytes);
      return absl::ResourceExhaustedError(absl::StrCat(
          "cannot create job ", request.job(), " of ", request.world_size(),
          " ranks: its per-rank state and shard list (", rank_state_bytes,
          " bytes) do not fit in the memory budget (--memory_budget_bytes=",
          env_.memory->limit(), ", ", env_.memory->used(), " in use)"));
    }
    if (std::shared_ptr<MemoryBudget> share = tenant->memory()) {
      rank_state.push_back(
          MemoryReservation::Try(share.get(), rank_state_bytes));
      if (!rank_state.back().ok()) {
        env_.metrics->RequestRefused(absl::StatusCode::kResourceExhausted,
                                     RefusedLimit::kMaxTenantMemoryFraction);
        return absl::ResourceExhaustedError(absl::StrCat(
            "cannot create job ", request.job(), " of ", request.world_size(),
            " ranks: its per-rank state and shard list (", rank_state_bytes,
            " bytes) do not fit in its tenant ", tenant_name,
            "'s share of the memory budget (",
            env_.options->tenant_memory_fraction_setting, "=",
            env_.options->max_tenant_memory_fraction, " of ",
            env_.options->memory_budget_setting, ": ", share->limit(),
            " bytes, ", share->used(), " in use)"));
      }
    }
    tenant->AddJob();
    auto made = std::make_shared<Job>(request.job(), request.world_size(), env_,
                                      shared_memory_socket_,
                                      std::move(rank_state), tenant);
    if (relays_) {
      std::weak_ptr<Job> weak = made;
      made->SetRelay(relays_(
          request.job(), request.world_size(), tenant_name,
          [weak](uint64_t epoch_id, const std::string& reason) {
            if (std::shared_ptr<Job> job = weak.lock()) {
              job->EndEpochFromUpstream(epoch_id, reason);
            }
          },
          [weak](uint64_t epoch_id, int rank, const std::string& reason) {
            if (std::shared_ptr<Job> job = weak.lock()) {
              job->EndRankFromUpstream(epoch_id, rank, reason);
            }
          }));
    }
    it = jobs_.emplace(request.job(), std::move(made)).first;
  }
  std::shared_ptr<Job> job = it->second;
  absl::Status joined = job->Join(
      *ranks, request.world_size(), request.session_id(), std::move(session),
      std::move(shards), request.local_world_size());
  // A refused Join touched no session: only a job it created itself has
  // none, and goes again.
  if (!joined.ok() && job->HasNoSessions()) FreeLocked(it);
  return joined;
}

void JobRegistry::Leave(const std::string& job, const std::string& session_id,
                        const SessionChannel* owner, const std::string& why,
                        EpochEndReason reason) {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job);
  if (it == jobs_.end()) return;
  if (it->second->Leave(session_id, owner, why, reason)) FreeLocked(it);
}

void JobRegistry::FreeLocked(
    absl::flat_hash_map<std::string, std::shared_ptr<Job>>::iterator it) {
  const absl::Time now = env_.timers->clock().Now();
  ExpireFreedLocked(now);
  it->second->KeepForReplaysOnly();
  if (it->second->tenant() != nullptr) it->second->tenant()->RemoveJob();
  std::shared_ptr<KeptResults> kept = it->second->kept_results();
  if (kept != nullptr && it->second->EndedByALoss() &&
      (kept->size() > 0 || it->second->HasActiveCollectives())) {
    // Its collectives may still be making (and keeping) results.
    freed_[it->first] = FreedJob{it->second, now + kKeepFreedResultsFor};
  } else if (kept != nullptr) {
    kept->Clear();
  }
  LetGoLocked(std::move(it->second));
  jobs_.erase(it);
}

void JobRegistry::LetGoLocked(std::shared_ptr<Job> job) {
  if (job != nullptr && job->has_relay()) reaper_.Retire(std::move(job));
}

void JobRegistry::ExpireFreedLocked(absl::Time now) {
  for (auto it = freed_.begin(); it != freed_.end();) {
    auto current = it++;
    if (current->second.until <= now) {
      current->second.job->kept_results()->Clear();
      LetGoLocked(std::move(current->second.job));
      freed_.erase(current);
    }
  }
}

void JobRegistry::MakeRoomForAJobLocked() {
  ExpireFreedLocked(env_.timers->clock().Now());
  const size_t max_jobs = static_cast<size_t>(env_.options->max_jobs);
  while (!freed_.empty() && jobs_.size() + freed_.size() >= max_jobs) {
    auto oldest = freed_.begin();
    for (auto f = freed_.begin(); f != freed_.end(); ++f) {
      if (f->second.until < oldest->second.until) oldest = f;
    }
    oldest->second.job->kept_results()->Clear();
    LetGoLocked(std::move(oldest->second.job));
    freed_.erase(oldest);
  }
}

absl::StatusOr<std::shared_ptr<Collective>> JobRegistry::ReplayForFreedJob(
    const v1::CollectiveHeader& header, std::shared_ptr<RankChannel> stream) {
  std::shared_ptr<Job> job;
  {
    absl::MutexLock lock(&mu_);
    ExpireFreedLocked(env_.timers->clock().Now());
    auto it = freed_.find(header.job());
    if (it != freed_.end()) job = it->second.job;
  }
  if (job == nullptr) return ReplayKept(nullptr, header, *stream, *env_.log);
  return job->Attach(header, std::move(stream));
}

void JobRegistry::SetRelays(JobRelayFactory factory) {
  absl::MutexLock lock(&mu_);
  relays_ = std::move(factory);
}

void JobRegistry::SetSharedMemorySocket(std::string name) {
  absl::MutexLock lock(&mu_);
  shared_memory_socket_ = std::move(name);
}

std::shared_ptr<Job> JobRegistry::Lookup(const std::string& job) {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job);
  return it == jobs_.end() ? nullptr : it->second;
}

void JobRegistry::Depart(const std::string& job,
                         const std::string& session_id) {
  if (std::shared_ptr<Job> found = Lookup(job)) found->Depart(session_id);
}

void JobRegistry::DepartRanks(const std::string& job,
                              const std::string& session_id,
                              const std::vector<int>& ranks) {
  if (std::shared_ptr<Job> found = Lookup(job)) {
    found->DepartRanks(session_id, ranks);
  }
}

void JobRegistry::LoseRanks(const std::string& job,
                            const std::string& session_id,
                            const std::vector<int>& ranks,
                            const std::string& cause) {
  if (std::shared_ptr<Job> found = Lookup(job)) {
    found->LoseRanks(session_id, ranks, cause);
  }
}

void JobRegistry::EndForOtherShard(const std::string& job,
                                   const std::string& session_id,
                                   const std::string& cause) {
  if (std::shared_ptr<Job> found = Lookup(job)) {
    found->EndForOtherShard(session_id, cause);
  }
}

absl::StatusOr<std::shared_ptr<Job>> JobRegistry::Find(const std::string& job) {
  absl::MutexLock lock(&mu_);
  if (!accepting_) return absl::UnavailableError(kShuttingDown);
  auto it = jobs_.find(job);
  if (it == jobs_.end()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", job, " has no open session on this reducerd (it restarted, "
        "or every rank left); Connect again"));
  }
  return it->second;
}

void JobRegistry::StopAccepting() {
  absl::MutexLock lock(&mu_);
  accepting_ = false;
}

bool JobRegistry::HasActiveCollectives() {
  std::vector<std::shared_ptr<Job>> jobs;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [name, job] : jobs_) jobs.push_back(job);
  }
  for (auto& job : jobs) {
    if (job->HasActiveCollectives()) return true;
  }
  return false;
}

std::vector<JobSnapshot> JobRegistry::Snapshot() {
  std::vector<std::shared_ptr<Job>> jobs;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [name, job] : jobs_) jobs.push_back(job);
  }
  std::vector<JobSnapshot> out;
  out.reserve(jobs.size());
  for (auto& job : jobs) out.push_back(job->Snapshot());
  std::sort(out.begin(), out.end(),
            [](const JobSnapshot& a, const JobSnapshot& b) {
              return a.name < b.name;
            });
  return out;
}

void JobRegistry::ShutdownAll(const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  for (auto& [name, job] : jobs_) job->Shutdown(status);
}

}  // namespace reducer
