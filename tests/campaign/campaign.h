// The robustness campaign: several jobs of several ranks reduce over a few
// reducerd shards on a network of their own (tests/netns_harness.h: a host
// namespace per rank and per shard), each rank running its job's seeded mix
// of collectives (tests/campaign/campaign_worker.cc) or, in a quorum job,
// a training loop of quorum steps that goes on without a rank while it is
// down (tests/campaign/quorum_worker.cc), while faults drawn
// from the same seed hit them one after another: SIGKILL and SIGSTOP of
// ranks and of shards, a shard restarted (SIGTERM, then started again), a
// host's link taken down, slowed to a crawl or blackholed. With relays
// (CampaignOptions::ranks_per_relay), a job's ranks share worker hosts,
// each with a relay (reducerd --upstream) that its ranks reach instead of
// the shards; the relays are SIGKILLed (and started again) and SIGSTOPped
// too, and a link fault of a worker host cuts its relay from the shards.
// Every operation
// is recorded, and the history is held to the contract
// (tests/campaign/history.h); then every shard must be back to no job, no
// memory reserved, and its resident memory near its baseline.
//
//   CampaignOptions options;
//   options.seed = 7;
//   absl::StatusOr<CampaignReport> report = RunCampaign(options);
//   // report->violations: empty when the contract held
//
// A violation report carries the seed, the fault schedule and the history
// around the violating operations: RunCampaign with the same options
// replays the same schedule and workload (timing, and so the interleaving,
// is the machine's).
//
// Needs root (namespaces; see VirtualNetwork::Available). One campaign at a
// time per process.
#ifndef REDUCER_TESTS_CAMPAIGN_CAMPAIGN_H_
#define REDUCER_TESTS_CAMPAIGN_CAMPAIGN_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "tests/campaign/history.h"

namespace reducer {
namespace testing {

// One fault of the schedule: `kind` on `target` at `at` (from the start of
// the fault phase), healed `length` later.
struct PlannedFault {
  absl::Duration at;
  std::string kind;  // see kFaultKinds
  int job = -1;      // a rank's fault: its job and rank
  int rank = -1;
  int shard = -1;    // a shard's fault: its index
  absl::Duration length;
};

// Every kind of fault the campaign draws from.
inline constexpr const char* kFaultKinds[] = {
    "kill_rank",   "stop_rank",  "kill_shard", "stop_shard", "restart_shard",
    "link_down",   "crawl",      "blackhole",
};
// Drawn as well with relays: a relay (the one of `job`'s `rank`) SIGKILLed
// and started again, or SIGSTOPped.
inline constexpr const char* kRelayFaultKinds[] = {"kill_relay", "stop_relay"};

struct CampaignOptions {
  uint64_t seed = 1;
  std::vector<int> job_sizes = {3, 2, 3};  // ranks of each job
  // The last `quorum_jobs` jobs run quorum steps, with these options.
  int quorum_jobs = 1;
  int quorum_min_ranks = 2;
  absl::Duration quorum_grace = absl::Seconds(3);
  int shards = 2;
  // 0: every rank a host of its own, reaching the shards directly. Else
  // each job's ranks in hosts of this many (the last may hold fewer), each
  // host's ranks through a relay of its own there.
  int ranks_per_relay = 0;
  std::string rate = "200mbit";         // every host's link
  absl::Duration fault_phase = absl::Seconds(45);
  // Float32 elements of the largest tensor: 2.5 MiB, cut over two shards.
  int64_t max_elements = 640 << 10;
  absl::Duration collective_timeout = absl::Seconds(6);
  // Paths of the programs (runfiles-relative or absolute).
  std::string reducerd = "server/reducerd";
  std::string worker = "tests/campaign/campaign_worker";
  std::string quorum_worker = "tests/campaign/campaign_quorum_worker";
  std::string reducerctl = "tools/reducerctl";
  // Resident memory a shard may keep above its baseline at the end: what
  // the allocator keeps of the busiest moment's buffers (2 x ranks x window
  // x chunk per collective at most). With the quorum job's 2.5 MiB steps
  // beside the others, seen up to 31 MiB (seed 14, while the machine also
  // ran other builds), none of it held by a job (the shard's status says
  // no job and no memory reserved).
  int64_t rss_slack_bytes = int64_t{48} << 20;
  // Busy threads (tests/campaign/cpu_load.h) spinning from the start of the
  // campaign to its end: a loaded machine's timing. Zero: none.
  int load_threads = 0;
};

struct CampaignReport {
  uint64_t seed = 0;
  std::vector<PlannedFault> schedule;
  std::map<std::string, int> faults_by_kind;  // as injected
  int64_t operations = 0;  // every recorded operation
  int64_t collectives = 0;  // of which collectives (not connect or resync)
  int64_t succeeded = 0;
  std::vector<std::string> violations;
  // Disagreements where the result died with its shard or its relay
  // (Violation::lost_with_shard).
  std::vector<std::string> lost_with_shard;
  // The seed, the schedule and, for each violation, the history around
  // it: enough to replay and read the run.
  std::string Details() const;
  // "seed 7: 812 operations (640 collectives, 587 succeeded), 9 faults
  // (kill_rank 2, ...), 0 violations, 1 result lost with its shard".
  std::string Summary() const;

  // Filled by RunCampaign for Details().
  std::vector<Operation> history;
  std::vector<FaultWindow> windows;
};

// The fault schedule for `options` (pure; the same for the same options).
std::vector<PlannedFault> DrawSchedule(const CampaignOptions& options);

// Runs one campaign. An error (not a violation) when the network or the
// processes cannot be set up.
absl::StatusOr<CampaignReport> RunCampaign(const CampaignOptions& options);

}  // namespace testing
}  // namespace reducer

#endif  // REDUCER_TESTS_CAMPAIGN_CAMPAIGN_H_
