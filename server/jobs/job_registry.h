// JobRegistry: every job the server knows, by name. A job is created by the
// first Join naming it and freed when its last session closes. A job freed
// after its epoch ended by a loss still answers replays (and keeps what its
// collectives still make) for kKeepFreedResultsFor: the rank that was lost
// may ask for the result of its last collective after the others had
// theirs and left, or were lost at once.
//
// Each job belongs to a tenant (server/jobs/tenants.h): a tenant's jobs are
// counted, and bounded by --max_jobs_per_tenant, so that no tenant takes
// every one of the --max_jobs; they share the tenant's memory share and
// its pending collectives.
//
// Thread-safe. Lock order: JobRegistry::mu_ before any Job's lock, and
// before Tenants' (a leaf).
#ifndef REDUCER_SERVER_JOBS_JOB_REGISTRY_H_
#define REDUCER_SERVER_JOBS_JOB_REGISTRY_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "proto/reducer/v1/reducer.pb.h"
#include "server/engine/collective.h"
#include "server/jobs/job.h"
#include "server/jobs/job_reaper.h"
#include "server/jobs/tenants.h"
#include "server/security/job_tokens.h"

namespace reducer {

class JobRegistry {
 public:
  // `tokens` (null: no tokens file, each job name its own tenant) says
  // which tenant a job belongs to; it outlives the registry.
  explicit JobRegistry(CollectiveEnv env, JobTokens* tokens = nullptr)
      : env_(env), tenants_(env_.options, env_.memory, tokens) {}

  // The same-host path's socket name, for the JobReady of jobs created from
  // now on (set before serving; empty: not offered).
  void SetSharedMemorySocket(std::string name);
  // Makes this reducerd a relay (--upstream): every job created from now
  // on gets a JobRelay from `factory` (set before serving).
  void SetRelays(JobRelayFactory factory);

  // Validates `request` and joins its job, creating the job if needed.
  // INVALID_ARGUMENT for a bad field, RESOURCE_EXHAUSTED when --max_jobs
  // jobs exist, or --max_jobs_per_tenant of the job's tenant, or when the
  // new job's per-rank state fits in neither the memory budget nor its
  // tenant's share, UNAVAILABLE while shutting down; else as Job::Join. A
  // refused Join leaves nothing behind: it touches no session (Job::Join),
  // and a job it created, having no session, is freed again.
  absl::Status Join(const v1::JoinRequest& request,
                    std::shared_ptr<SessionChannel> session);

  // The session stream `owner` ended (Job::Leave: only the session's own
  // stream ends it); frees the job when it was the last session.
  void Leave(const std::string& job, const std::string& session_id,
             const SessionChannel* owner, const std::string& why,
             EpochEndReason reason);

  // The session's client is closing on purpose (see Job::Depart).
  void Depart(const std::string& job, const std::string& session_id);

  // The session's client reports `ranks` of it departed (see
  // Job::DepartRanks).
  void DepartRanks(const std::string& job, const std::string& session_id,
                   const std::vector<int>& ranks);
  // The session's client reports `ranks` of it lost (see Job::LoseRanks).
  void LoseRanks(const std::string& job, const std::string& session_id,
                 const std::vector<int>& ranks, const std::string& cause);
  // The session's job failed on another shard (see Job::EndForOtherShard).
  void EndForOtherShard(const std::string& job, const std::string& session_id,
                        const std::string& cause);

  // The job named `job`; FAILED_PRECONDITION when no session of it is open
  // (reducerd restarted, or every rank left), UNAVAILABLE while shutting down.
  absl::StatusOr<std::shared_ptr<Job>> Find(const std::string& job);

  // A replay (`header.replay`) for a job that was freed (and may have been
  // joined again since): answered by the freed job as Job::Attach answers
  // one; NOT_FOUND when no such job is kept.
  absl::StatusOr<std::shared_ptr<Collective>> ReplayForFreedJob(
      const v1::CollectiveHeader& header, std::shared_ptr<RankChannel> stream);

  // Refuses new work from now on (UNAVAILABLE).
  void StopAccepting();
  // True while some job has a collective in flight.
  bool HasActiveCollectives();
  // Fails every collective and session with `status`.
  void ShutdownAll(const absl::Status& status);

  // Every job's state now, sorted by name (status reports, metrics).
  std::vector<JobSnapshot> Snapshot();


 private:
  // Join, without counting a refusal.
  absl::Status JoinOrRefuse(const v1::JoinRequest& request,
                            std::shared_ptr<SessionChannel> session);
  // The job named `job`, or null; without any status (see Find).
  std::shared_ptr<Job> Lookup(const std::string& job) ABSL_LOCKS_EXCLUDED(mu_);
  // Frees the job `it` points at, keeping it for replays for
  // kKeepFreedResultsFor if its epoch ended by a loss and it has something
  // to replay (kept results, or collectives still making them).
  void FreeLocked(
      absl::flat_hash_map<std::string, std::shared_ptr<Job>>::iterator it)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Lets go of `job`: a relay's on the reaper's thread (its going may wait
  // on upstream), any other's here.
  void LetGoLocked(std::shared_ptr<Job> job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Forgets the freed jobs whose time is up, and what they kept.
  void ExpireFreedLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Forgets freed jobs, the oldest first, until the jobs served and kept
  // leave room for one more under --max_jobs: freed jobs count toward it,
  // but never keep a new job out.
  void MakeRoomForAJobLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  struct FreedJob {
    std::shared_ptr<Job> job;
    absl::Time until;
  };
  static constexpr absl::Duration kKeepFreedResultsFor = absl::Seconds(30);

  // Drops the relays' jobs that the registry lets go of: first declared,
  // so that it outlives the maps that hold them.
  JobReaper reaper_;
  const CollectiveEnv env_;
  Tenants tenants_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<Job>> jobs_
      ABSL_GUARDED_BY(mu_);
  bool accepting_ ABSL_GUARDED_BY(mu_) = true;
  std::string shared_memory_socket_ ABSL_GUARDED_BY(mu_);
  JobRelayFactory relays_ ABSL_GUARDED_BY(mu_);  // SetRelays; empty: none
  // Jobs freed after a loss, kept for replays, by name.
  absl::flat_hash_map<std::string, FreedJob> freed_ ABSL_GUARDED_BY(mu_);
};

}  // namespace reducer

#endif  // REDUCER_SERVER_JOBS_JOB_REGISTRY_H_
