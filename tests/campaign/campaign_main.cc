// The robustness campaign's long form: campaigns of consecutive seeds
// (tests/campaign/campaign.h) until --minutes have passed, each summary
// printed as it ends, the details of any violation, and the totals.
//
//   bazel run //tests/campaign:campaign -- --minutes=30 --first_seed=100
//   bazel run //tests/campaign:campaign -- --minutes=8 --load=$(nproc)
//   bazel run //tests/campaign:campaign -- --minutes=5 --ranks_per_relay=2
//
// Exits 1 if any campaign found a violation, 2 if one could not run.
#include <cstdio>
#include <map>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "tests/campaign/campaign.h"

ABSL_FLAG(int, minutes, 30, "run campaigns until this much time has passed");
ABSL_FLAG(uint64_t, first_seed, 100, "the first campaign's seed; then +1");
ABSL_FLAG(int, fault_phase_s, 60, "each campaign's seconds of faults");
ABSL_FLAG(
    int, ranks_per_relay, 0,
    "0: every rank reaches the shards itself; else a job's ranks share "
    "hosts of this many, each host's through a relay (reducerd --upstream), "
    "and relays are faulted too");
ABSL_FLAG(int, load, 0,
          "busy threads spinning beside each campaign, for a loaded machine's "
          "timing (one per core: --load=$(nproc)); 0: none");

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  using reducer::testing::CampaignOptions;
  using reducer::testing::CampaignReport;
  const absl::Time end = absl::Now() + absl::Minutes(absl::GetFlag(FLAGS_minutes));
  std::map<std::string, int> faults;
  int64_t operations = 0, collectives = 0, succeeded = 0, violations = 0, lost = 0,
          campaigns = 0;
  for (uint64_t seed = absl::GetFlag(FLAGS_first_seed); absl::Now() < end; ++seed) {
    CampaignOptions options;
    options.seed = seed;
    options.fault_phase = absl::Seconds(absl::GetFlag(FLAGS_fault_phase_s));
    options.load_threads = absl::GetFlag(FLAGS_load);
    options.ranks_per_relay = absl::GetFlag(FLAGS_ranks_per_relay);
    absl::StatusOr<CampaignReport> report = reducer::testing::RunCampaign(options);
    if (!report.ok()) {
      std::fprintf(stderr, "seed %lu could not run: %s\n", static_cast<unsigned long>(seed),
                   std::string(report.status().message()).c_str());
      return 2;
    }
    std::printf("%s\n", report->Summary().c_str());
    if (!report->violations.empty() || !report->lost_with_shard.empty()) {
      std::printf("%s\n", report->Details().c_str());
    }
    std::fflush(stdout);
    ++campaigns;
    operations += report->operations;
    collectives += report->collectives;
    succeeded += report->succeeded;
    violations += static_cast<int64_t>(report->violations.size());
    lost += static_cast<int64_t>(report->lost_with_shard.size());
    for (const auto& [kind, n] : report->faults_by_kind) faults[kind] += n;
  }
  std::string by_kind;
  int total = 0;
  for (const auto& [kind, n] : faults) {
    by_kind += (by_kind.empty() ? "" : ", ") + kind + " " + std::to_string(n);
    total += n;
  }
  std::printf(
      "TOTAL %ld campaigns: %ld operations checked (%ld collectives, %ld "
      "succeeded), "
      "%d faults injected (%s), %ld violations, %ld results lost with their "
      "shard or relay\n",
      static_cast<long>(campaigns), static_cast<long>(operations),
      static_cast<long>(collectives), static_cast<long>(succeeded), total,
      by_kind.c_str(), static_cast<long>(violations), static_cast<long>(lost));
  return violations == 0 ? 0 : 1;
}
