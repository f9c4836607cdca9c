// The command line both campaign workers share (tests/campaign/
// campaign_worker.cc, quorum_worker.cc): which shards, job and rank, the
// timeouts, the history file, and when to stop. Each worker defines
// --world_size (its default differs) and its further flags itself.
//
//   --target              the shards, as ClientOptions::target
//   --job, --rank         the job's name and this rank
//   --timeout_ms          each collective's timeout
//   --connect_timeout_ms  each Connect's timeout
//   --log                 the history file (appended to)
//   --stop_file           the ranks stop once this exists
//   --give_up_unix_s      the rank exits 3 at this time, whatever happens
//
//   int main(int argc, char** argv) {
//     return reducer::testing::CampaignRankMain<MyRank>(argc, argv);
//   }
#ifndef REDUCER_TESTS_CAMPAIGN_RANK_FLAGS_H_
#define REDUCER_TESTS_CAMPAIGN_RANK_FLAGS_H_

#include <cstdint>
#include <string>

#include "absl/flags/declare.h"
#include "absl/flags/parse.h"
#include "absl/time/time.h"
#include "client/client_options.h"

ABSL_DECLARE_FLAG(std::string, target);
ABSL_DECLARE_FLAG(std::string, job);
ABSL_DECLARE_FLAG(int, local_world_size);
ABSL_DECLARE_FLAG(int, rank);
ABSL_DECLARE_FLAG(int, timeout_ms);
ABSL_DECLARE_FLAG(int, connect_timeout_ms);
ABSL_DECLARE_FLAG(std::string, log);
ABSL_DECLARE_FLAG(std::string, stop_file);
ABSL_DECLARE_FLAG(int64_t, give_up_unix_s);

namespace reducer {
namespace testing {

// ClientOptions of this rank of a `world_size`-rank job: target, job and
// rank from the flags, Connect's timeout --connect_timeout_ms.
ClientOptions CampaignClientOptions(int world_size);

// --log opened for appending (created if missing); -1 when it cannot be.
int OpenHistoryLog();

// True once --stop_file exists.
bool StopFileExists();

// When the rank gives up, whatever happens (--give_up_unix_s).
absl::Time GiveUpTime();

// A campaign worker's main: parses the command line, then runs a `Rank`
// (constructed from the flags) and returns what its Run() does.
template <typename Rank>
int CampaignRankMain(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  Rank rank;
  return rank.Run();
}

}  // namespace testing
}  // namespace reducer

#endif  // REDUCER_TESTS_CAMPAIGN_RANK_FLAGS_H_
