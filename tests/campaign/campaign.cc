#include "tests/campaign/campaign.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <fstream>
#include <memory>
#include <random>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "tests/campaign/cpu_load.h"
#include "tests/netns_harness.h"
#include "tests/process_harness.h"

namespace reducer {
namespace testing {
namespace {

constexpr int kShardPort = 50051;  // each shard's host is a namespace of its own
constexpr absl::Duration kWarmUp = absl::Seconds(4);
constexpr absl::Duration kShardReady = absl::Seconds(20);
constexpr absl::Duration kWorkersStop = absl::Seconds(60);
constexpr char kCrawlRate[] = "64kbit";

std::string ShardHost(int shard) { return absl::StrCat("s", shard); }
std::string RankHost(int job, int rank) { return absl::StrCat("w", job, rank); }
std::string RelayHost(int job, int relay) {
  return absl::StrCat("r", job, relay);
}
std::string JobName(int job) { return absl::StrCat("j", job); }

// The relays of a job of `ranks` ranks, `per_relay` ranks each.
int RelaysOfJob(int ranks, int per_relay) {
  return (ranks + per_relay - 1) / per_relay;
}

// Resident memory of `pid`, from /proc; -1 when unreadable.
int64_t ResidentBytes(pid_t pid) {
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(status, line)) {
    if (!absl::StartsWith(line, "VmRSS:")) continue;
    std::vector<std::string> parts =
        absl::StrSplit(line, ' ', absl::SkipWhitespace());
    int64_t kb = 0;
    if (parts.size() >= 2 && absl::SimpleAtoi(parts[1], &kb)) return kb << 10;
  }
  return -1;
}

// A directory of the campaign's own under the test's temporary one, for
// its histories and stop file: two campaigns of one seed in one process
// (with and without relays) must not read each other's histories.
std::string CampaignDir(const CampaignOptions& options) {
  std::string dir =
      absl::StrCat(TestTempDir(), "/campaign-", options.seed,
                   options.ranks_per_relay > 0
                       ? absl::StrCat("-relays", options.ranks_per_relay)
                       : std::string(),
                   "-XXXXXX");
  return mkdtemp(dir.data()) != nullptr ? dir : TestTempDir();
}

std::string PathOf(const std::string& path) {
  if (absl::StartsWith(path, "/")) return path;
  absl::StatusOr<std::string> runfile = RunfilePath(path);
  return runfile.ok() ? *runfile : path;
}

// The processes and the network of one campaign.
class Campaign {
 public:
  Campaign(const CampaignOptions& options, std::unique_ptr<VirtualNetwork> net)
      : options_(options), net_(std::move(net)), dir_(CampaignDir(options)) {
    for (int s = 0; s < options.shards; ++s) {
      targets_.push_back(absl::StrCat(net_->Address(ShardHost(s)), ":", kShardPort));
    }
    stop_file_ = absl::StrCat(dir_, "/campaign-", options.seed, ".stop");
    std::remove(stop_file_.c_str());
    shards_.resize(options.shards);
    baselines_.resize(options.shards, -1);
    ranks_.resize(options.job_sizes.size());
    relays_.resize(options.job_sizes.size());
    for (size_t j = 0; j < options.job_sizes.size(); ++j) {
      ranks_[j].resize(options.job_sizes[j]);
      if (options.ranks_per_relay > 0) {
        relays_[j].resize(
            RelaysOfJob(options.job_sizes[j], options.ranks_per_relay));
      }
    }
    give_up_ = absl::Now() + options.fault_phase + absl::Seconds(180);
  }

  absl::Status StartAll() {
    for (int s = 0; s < options_.shards; ++s) {
      if (absl::Status started = StartShard(s); !started.ok()) return started;
    }
    for (size_t j = 0; j < relays_.size(); ++j) {
      for (size_t k = 0; k < relays_[j].size(); ++k) {
        if (absl::Status started = StartRelay(j, k); !started.ok())
          return started;
      }
    }
    for (size_t j = 0; j < ranks_.size(); ++j) {
      for (size_t r = 0; r < ranks_[j].size(); ++r) {
        if (absl::Status started = StartRank(j, r); !started.ok()) return started;
      }
    }
    return absl::OkStatus();
  }

  void TakeBaselines() {
    for (int s = 0; s < options_.shards; ++s) baselines_[s] = ResidentBytes(shards_[s]->pid());
  }

  // Injects `fault` and heals it; returns its window.
  FaultWindow Inject(const PlannedFault& fault) {
    FaultWindow window;
    window.kind = fault.kind;
    const bool on_shard = fault.shard >= 0;
    const std::string host =
        on_shard ? ShardHost(fault.shard) : HostOf(fault.job, fault.rank);
    window.what = on_shard ? absl::StrCat("shard ", fault.shard, " (", targets_[fault.shard], ")")
                           : absl::StrCat(JobName(fault.job), " rank ", fault.rank, " (host ",
                                          net_->Address(host), ")");
    window.job = on_shard ? "" : JobName(fault.job);
    // A relay's own fault, or a link fault of its host (which cuts the
    // relay from the shards; its ranks reach it inside the host).
    const bool relay_kind = absl::StrContains(fault.kind, "relay") ||
                            fault.kind == "link_down" ||
                            fault.kind == "crawl" || fault.kind == "blackhole";
    const int relay = options_.ranks_per_relay > 0 && !on_shard
                          ? fault.rank / options_.ranks_per_relay
                          : -1;
    if (relay >= 0 && relay_kind) {
      window.ranks = RanksOfRelay(fault.job, relay);
      window.what =
          absl::StrCat(JobName(fault.job), " relay ", relay, " of ranks [",
                       absl::StrJoin(window.ranks, ","), "] (",
                       RelayAddress(fault.job, relay), ")");
    }
    window.start = absl::Now();
    absl::Status done;
    if (fault.kind == "kill_rank") {
      ranks_[fault.job][fault.rank]->Signal(SIGKILL);
      ranks_[fault.job][fault.rank]->Wait(absl::Seconds(5));
      absl::SleepFor(fault.length);
      done = StartRank(fault.job, fault.rank);
    } else if (fault.kind == "stop_rank") {
      ranks_[fault.job][fault.rank]->Signal(SIGSTOP);
      absl::SleepFor(fault.length);
      ranks_[fault.job][fault.rank]->Signal(SIGCONT);
    } else if (fault.kind == "kill_shard") {
      shards_[fault.shard]->Signal(SIGKILL);
      shards_[fault.shard]->Wait(absl::Seconds(5));
      absl::SleepFor(fault.length);
      done = StartShard(fault.shard);
    } else if (fault.kind == "stop_shard") {
      shards_[fault.shard]->Signal(SIGSTOP);
      absl::SleepFor(fault.length);
      shards_[fault.shard]->Signal(SIGCONT);
    } else if (fault.kind == "restart_shard") {
      shards_[fault.shard]->Signal(SIGTERM);
      ProcessResult ended = shards_[fault.shard]->Wait(absl::Seconds(15));
      if (!ended.Succeeded()) {
        problems_.push_back(absl::StrCat("shard ", fault.shard,
                                         " did not exit 0 on SIGTERM: ", ended.Describe()));
      }
      done = StartShard(fault.shard);
    } else if (fault.kind == "kill_relay") {
      relays_[fault.job][relay]->Signal(SIGKILL);
      relays_[fault.job][relay]->Wait(absl::Seconds(5));
      absl::SleepFor(fault.length);
      done = StartRelay(fault.job, relay);
    } else if (fault.kind == "stop_relay") {
      relays_[fault.job][relay]->Signal(SIGSTOP);
      absl::SleepFor(fault.length);
      relays_[fault.job][relay]->Signal(SIGCONT);
    } else if (fault.kind == "link_down") {
      done = net_->SetLinkUp(host, false);
      absl::SleepFor(fault.length);
      if (done.ok()) done = net_->SetLinkUp(host, true);
    } else if (fault.kind == "crawl") {
      done = net_->SetEgressRate(host, kCrawlRate);
      absl::SleepFor(fault.length);
      if (done.ok()) done = net_->SetEgressRate(host, options_.rate);
    } else if (fault.kind == "blackhole") {
      done = net_->SetBlackhole(host, true);
      absl::SleepFor(fault.length);
      if (done.ok()) done = net_->SetBlackhole(host, false);
    }
    if (!done.ok()) {
      problems_.push_back(absl::StrCat(fault.kind, " of ", window.what, ": ", done.message()));
    }
    window.end = absl::Now();
    return window;
  }

  // Tells the ranks to stop and waits for them; a rank that does not stop
  // (a hang) or fails is a problem.
  void StopRanks() {
    std::ofstream(stop_file_) << "stop\n";
    const absl::Time deadline = absl::Now() + kWorkersStop;
    for (size_t j = 0; j < ranks_.size(); ++j) {
      for (size_t r = 0; r < ranks_[j].size(); ++r) {
        ProcessResult result =
            ranks_[j][r]->Wait(std::max(deadline - absl::Now(), absl::Seconds(1)));
        if (!result.Succeeded()) {
          problems_.push_back(absl::StrCat(
              JobName(j), " rank ", r, " did not stop cleanly within ",
              absl::FormatDuration(kWorkersStop), " of the stop: ", result.Describe(),
              "; stderr: ", ranks_[j][r]->ReadStderr()));
        }
      }
    }
  }

  // Every shard and relay holds no job and no reserved memory, and every
  // shard's resident memory is back near its baseline.
  void CheckShardsAreClean() {
    for (size_t j = 0; j < relays_.size(); ++j) {
      for (size_t k = 0; k < relays_[j].size(); ++k) {
        ChildProcess& relay = *relays_[j][k];
        if (!relay.IsRunning()) {
          // Exited with no fault on it: say how, with what it said.
          problems_.push_back(absl::StrCat(
              JobName(j), " relay ", k, " is not running after the campaign: ",
              relay.Wait(absl::ZeroDuration()).Describe(),
              "; stderr: ", relay.ReadStderr()));
          continue;
        }
        CheckNoState(RelayHost(j, k), RelayAddress(j, k),
                     absl::StrCat(JobName(j), " relay ", k));
      }
    }
    for (int s = 0; s < options_.shards; ++s) {
      CheckNoState(ShardHost(s), targets_[s], absl::StrCat("shard ", s));
      const int64_t rss = ResidentBytes(shards_[s]->pid());
      if (baselines_[s] > 0 && rss > baselines_[s] + options_.rss_slack_bytes) {
        problems_.push_back(absl::StrFormat(
            "shard %d's resident memory is %d MiB after the campaign, %d MiB at its "
            "baseline (slack %d MiB)",
            s, rss >> 20, baselines_[s] >> 20, options_.rss_slack_bytes >> 20));
      }
    }
  }

  std::vector<Operation> History() const {
    std::vector<Operation> ops;
    for (size_t j = 0; j < ranks_.size(); ++j) {
      for (size_t r = 0; r < ranks_[j].size(); ++r) {
        absl::StatusOr<std::string> text = ReadFileToString(LogPath(j, r));
        if (!text.ok()) continue;
        std::vector<Operation> mine = ParseHistory(*text);
        ops.insert(ops.end(), mine.begin(), mine.end());
      }
    }
    return ops;
  }

  const std::vector<std::string>& problems() const { return problems_; }

 private:
  // The reducerd at `target` (in `host`) holds no job and no reserved
  // memory, or a problem naming `what`.
  void CheckNoState(const std::string& host, const std::string& target,
                    const std::string& what) {
    std::string status;
    // Jobs are freed once their last session ends: give it a moment.
    for (int tries = 0; tries < 20; ++tries) {
      std::vector<std::string> argv = net_->CommandPrefix(host);
      argv.insert(argv.end(), {PathOf(options_.reducerctl),
                               absl::StrCat("--target=", target), "status"});
      absl::StatusOr<std::string> out = VirtualNetwork::RunCommand(argv);
      status = out.ok() ? *out : std::string(out.status().message());
      if (absl::StrContains(status, "no jobs") &&
          absl::StrContains(status, "memory budget 0 of")) {
        return;
      }
      absl::SleepFor(absl::Milliseconds(250));
    }
    problems_.push_back(
        absl::StrCat(what, " still holds state after the campaign: ", status));
  }

  // The host of `job`'s `rank`: its relay's with relays, else its own.
  std::string HostOf(int job, int rank) const {
    if (options_.ranks_per_relay == 0) return RankHost(job, rank);
    return RelayHost(job, rank / options_.ranks_per_relay);
  }

  std::string RelayAddress(int job, int relay) const {
    return absl::StrCat(net_->Address(RelayHost(job, relay)), ":", kShardPort);
  }

  // The ranks of `job` that `relay` serves.
  std::vector<int> RanksOfRelay(int job, int relay) const {
    std::vector<int> ranks;
    for (int r = relay * options_.ranks_per_relay;
         r < std::min<int>((relay + 1) * options_.ranks_per_relay,
                           ranks_[job].size());
         ++r) {
      ranks.push_back(r);
    }
    return ranks;
  }

  // Starts `job`'s relay `relay` in its host, upstream to every shard.
  absl::Status StartRelay(int job, int relay) {
    std::vector<std::string> argv = net_->CommandPrefix(RelayHost(job, relay));
    argv.insert(argv.end(),
                {PathOf(options_.reducerd),
                 absl::StrCat("--listen=", RelayAddress(job, relay)),
                 absl::StrCat("--upstream=", absl::StrJoin(targets_, ",")),
                 "--drain_budget=2s", "--allow_unauthenticated"});
    absl::StatusOr<std::unique_ptr<ChildProcess>> child = ChildProcess::Start(
        argv, absl::StrCat("campaign-", options_.seed, "-", JobName(job),
                           "relay", relay, ".", starts_++));
    if (!child.ok()) return child.status();
    const absl::Time deadline = absl::Now() + kShardReady;
    while (!absl::StrContains((*child)->ReadStdout(), "listening")) {
      if (absl::Now() > deadline || !(*child)->IsRunning()) {
        return absl::InternalError(
            absl::StrCat(JobName(job), " relay ", relay,
                         " did not start: ", (*child)->ReadStderr()));
      }
      absl::SleepFor(absl::Milliseconds(50));
    }
    relays_[job][relay] = *std::move(child);
    return absl::OkStatus();
  }

  std::string LogPath(size_t job, size_t rank) const {
    return absl::StrCat(dir_, "/campaign-", options_.seed, "-", JobName(job), "-r", rank,
                        ".jsonl");
  }

  absl::Status StartShard(int s) {
    // A restarted shard's baseline is its predecessor's: same flags, same
    // work. It listens on its namespace's own address, plaintext and
    // without tokens: --allow_unauthenticated.
    std::vector<std::string> argv = net_->CommandPrefix(ShardHost(s));
    argv.insert(argv.end(), {PathOf(options_.reducerd),
                             absl::StrCat("--listen=", targets_[s]), "--drain_budget=2s",
                             "--allow_unauthenticated"});
    absl::StatusOr<std::unique_ptr<ChildProcess>> child =
        ChildProcess::Start(argv, absl::StrCat("campaign-", options_.seed, "-shard", s, ".",
                                               starts_++));
    if (!child.ok()) return child.status();
    const absl::Time deadline = absl::Now() + kShardReady;
    while (!absl::StrContains((*child)->ReadStdout(), "listening")) {
      if (absl::Now() > deadline || !(*child)->IsRunning()) {
        return absl::InternalError(absl::StrCat("shard ", s, " did not start: ",
                                                (*child)->ReadStderr()));
      }
      absl::SleepFor(absl::Milliseconds(50));
    }
    shards_[s] = *std::move(child);
    return absl::OkStatus();
  }

  bool IsQuorumJob(size_t job) const {
    return job + options_.quorum_jobs >= options_.job_sizes.size();
  }

  absl::Status StartRank(size_t job, size_t rank) {
    std::vector<std::string> argv = net_->CommandPrefix(HostOf(job, rank));
    if (IsQuorumJob(job)) {
      argv.insert(argv.end(),
                  {PathOf(options_.quorum_worker),
                   absl::StrCat("--min_ranks=", options_.quorum_min_ranks),
                   absl::StrCat("--grace_ms=", absl::ToInt64Milliseconds(options_.quorum_grace))});
    } else {
      argv.insert(argv.end(), {PathOf(options_.worker),
                               absl::StrCat("--seed=", options_.seed * 1000 + job)});
    }
    std::string target = absl::StrJoin(targets_, ",");
    if (options_.ranks_per_relay > 0) {
      const int relay = static_cast<int>(rank) / options_.ranks_per_relay;
      target = RelayAddress(job, relay);
      // 0 when the relay holds the whole job.
      const size_t local = RanksOfRelay(job, relay).size();
      argv.push_back(absl::StrCat("--local_world_size=",
                                  local == ranks_[job].size() ? 0 : local));
    }
    argv.insert(
        argv.end(),
        {absl::StrCat("--target=", target),
         absl::StrCat("--job=", JobName(job)), absl::StrCat("--rank=", rank),
         absl::StrCat("--world_size=", ranks_[job].size()),
         absl::StrCat("--max_elements=", options_.max_elements),
         absl::StrCat("--timeout_ms=",
                      absl::ToInt64Milliseconds(options_.collective_timeout)),
         absl::StrCat("--log=", LogPath(job, rank)),
         absl::StrCat("--stop_file=", stop_file_),
         absl::StrCat("--give_up_unix_s=", absl::ToUnixSeconds(give_up_))});
    absl::StatusOr<std::unique_ptr<ChildProcess>> child = ChildProcess::Start(
        argv, absl::StrCat("campaign-", options_.seed, "-", JobName(job), "r", rank, ".",
                           starts_++));
    if (!child.ok()) return child.status();
    ranks_[job][rank] = *std::move(child);
    return absl::OkStatus();
  }

  const CampaignOptions options_;
  const std::unique_ptr<VirtualNetwork> net_;
  const std::string dir_;
  std::vector<std::string> targets_;
  std::string stop_file_;
  absl::Time give_up_;
  std::vector<std::unique_ptr<ChildProcess>> shards_;
  std::vector<int64_t> baselines_;
  std::vector<std::vector<std::unique_ptr<ChildProcess>>> ranks_;
  // With relays: relays_[job][k] serves ranks [k, k + 1) * ranks_per_relay.
  std::vector<std::vector<std::unique_ptr<ChildProcess>>> relays_;
  std::vector<std::string> problems_;
  int starts_ = 0;
};

std::string DescribeFault(const PlannedFault& f) {
  return absl::StrFormat(
      "t+%.1fs %s %s for %.1fs", absl::ToDoubleSeconds(f.at), f.kind,
      f.shard >= 0 ? absl::StrCat("shard ", f.shard)
      : absl::StrContains(f.kind, "relay")
          ? absl::StrCat("the relay of j", f.job, " rank ", f.rank)
          : absl::StrCat("j", f.job, " rank ", f.rank),
      absl::ToDoubleSeconds(f.length));
}

}  // namespace

std::vector<PlannedFault> DrawSchedule(const CampaignOptions& options) {
  std::mt19937_64 gen(options.seed * 0x9E3779B97F4A7C15ull + 17);
  auto uniform = [&gen](int64_t lo, int64_t hi) {
    return lo + static_cast<int64_t>(gen() % static_cast<uint64_t>(hi - lo + 1));
  };
  std::vector<PlannedFault> schedule;
  absl::Duration t = absl::Seconds(1);
  std::vector<std::string> kinds(std::begin(kFaultKinds),
                                 std::end(kFaultKinds));
  if (options.ranks_per_relay > 0) {
    kinds.insert(kinds.end(), std::begin(kRelayFaultKinds),
                 std::end(kRelayFaultKinds));
  }
  const int kKinds = static_cast<int>(kinds.size());
  for (;;) {
    PlannedFault f;
    f.kind = kinds[uniform(0, kKinds - 1)];
    f.length = f.kind == "restart_shard" ? absl::ZeroDuration()
                                         : absl::Milliseconds(uniform(1500, 3500));
    const bool link = f.kind == "link_down" || f.kind == "crawl" || f.kind == "blackhole";
    const bool on_shard = absl::StrContains(f.kind, "shard") || (link && uniform(0, 1) == 0);
    if (on_shard) {
      f.shard = static_cast<int>(uniform(0, options.shards - 1));
    } else {
      f.job = static_cast<int>(uniform(0, options.job_sizes.size() - 1));
      f.rank = static_cast<int>(uniform(0, options.job_sizes[f.job] - 1));
    }
    f.at = t;
    if (t + f.length > options.fault_phase) break;
    schedule.push_back(f);
    // Time to recover: sessions noticed lost, ranks connected again.
    t += f.length + absl::Milliseconds(uniform(3000, 6000));
  }
  return schedule;
}

std::string CampaignReport::Summary() const {
  std::vector<std::string> kinds;
  int total = 0;
  for (const auto& [kind, n] : faults_by_kind) {
    kinds.push_back(absl::StrCat(kind, " ", n));
    total += n;
  }
  return absl::StrFormat(
      "seed %d: %d operations (%d collectives, %d succeeded), %d faults (%s), "
      "%d violations, "
      "%d results lost with their shard or relay",
      seed, operations, collectives, succeeded, total,
      absl::StrJoin(kinds, ", "), violations.size(), lost_with_shard.size());
}

std::string CampaignReport::Details() const {
  std::string out = absl::StrCat(Summary(), "\nschedule (replay with seed ", seed, "):\n");
  for (const PlannedFault& f : schedule) absl::StrAppend(&out, "  ", DescribeFault(f), "\n");
  absl::Time origin = absl::InfiniteFuture();
  for (const Operation& op : history) origin = std::min(origin, op.start);
  for (const FaultWindow& w : windows) {
    absl::StrAppendFormat(&out, "  injected %s of %s [t+%.3fs..t+%.3fs]\n", w.kind, w.what,
                          absl::ToDoubleSeconds(w.start - origin),
                          absl::ToDoubleSeconds(w.end - origin));
  }
  for (const std::string& v : violations) absl::StrAppend(&out, "VIOLATION ", v, "\n");
  for (const std::string& v : lost_with_shard) {
    absl::StrAppend(
        &out, "RESULT LOST WITH ITS SHARD OR RELAY (killed or restarted) ", v,
        "\n");
  }
  return out;
}

absl::StatusOr<CampaignReport> RunCampaign(const CampaignOptions& options) {
  if (absl::Status available = VirtualNetwork::Available(); !available.ok()) {
    return available;
  }
  VirtualNetwork::Options net_options;
  for (int s = 0; s < options.shards; ++s) net_options.hosts.push_back(ShardHost(s));
  for (size_t j = 0; j < options.job_sizes.size(); ++j) {
    if (options.ranks_per_relay > 0) {
      for (int k = 0;
           k < RelaysOfJob(options.job_sizes[j], options.ranks_per_relay);
           ++k) {
        net_options.hosts.push_back(RelayHost(j, k));
      }
      continue;
    }
    for (int r = 0; r < options.job_sizes[j]; ++r) net_options.hosts.push_back(RankHost(j, r));
  }
  net_options.rate = options.rate;
  absl::StatusOr<std::unique_ptr<VirtualNetwork>> net = VirtualNetwork::Create(net_options);
  if (!net.ok()) return net.status();

  CampaignReport report;
  report.seed = options.seed;
  report.schedule = DrawSchedule(options);
  // Declared before the campaign: it spins until the campaign is torn down.
  CpuLoad load(options.load_threads);
  Campaign campaign(options, *std::move(net));
  if (absl::Status started = campaign.StartAll(); !started.ok()) return started;
  absl::SleepFor(kWarmUp);
  campaign.TakeBaselines();
  const absl::Time phase_start = absl::Now();
  for (const PlannedFault& fault : report.schedule) {
    absl::SleepFor(phase_start + fault.at - absl::Now());
    report.windows.push_back(campaign.Inject(fault));
    ++report.faults_by_kind[fault.kind];
  }
  absl::SleepFor(phase_start + options.fault_phase - absl::Now());
  campaign.StopRanks();
  campaign.CheckShardsAreClean();

  report.history = campaign.History();
  Limits limits;
  limits.aftermath = options.collective_timeout + absl::Seconds(10);
  std::vector<Violation> violations = CheckHistory(report.history, report.windows, limits);
  for (const std::string& problem : campaign.problems()) report.violations.push_back(problem);
  absl::Time origin = absl::InfiniteFuture();
  for (const Operation& op : report.history) origin = std::min(origin, op.start);
  for (const Violation& v : violations) {
    // The history around it: the job's operations from 3 s before.
    std::string context;
    for (const Operation& op : report.history) {
      if (op.job == v.job && op.start >= v.at - absl::Seconds(3) &&
          op.start <= v.at + absl::Seconds(1)) {
        absl::StrAppend(&context, "\n    ", op.Describe(origin));
      }
    }
    (v.lost_with_shard ? report.lost_with_shard : report.violations)
        .push_back(absl::StrCat(v.what, "\n  history:", context));
  }
  report.operations = static_cast<int64_t>(report.history.size());
  for (const Operation& op : report.history) {
    if (!op.collective()) continue;
    ++report.collectives;
    if (op.ok()) ++report.succeeded;
  }
  return report;
}

}  // namespace testing
}  // namespace reducer
