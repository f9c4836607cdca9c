#include "tests/campaign/rank_flags.h"

#include <fcntl.h>
#include <unistd.h>

#include "absl/flags/flag.h"

ABSL_FLAG(std::string, target, "", "the shards, as ClientOptions::target");
ABSL_FLAG(std::string, job, "", "job name");
ABSL_FLAG(
    int, local_world_size, 0,
    "ranks of the job on this rank's relay (ClientOptions::local_world_size; "
    "0: all of them, or no relay)");
ABSL_FLAG(int, rank, 0, "this rank");
ABSL_FLAG(int, timeout_ms, 6000, "each collective's timeout");
ABSL_FLAG(int, connect_timeout_ms, 5000, "each Connect's timeout");
ABSL_FLAG(std::string, log, "", "the history file (appended to)");
ABSL_FLAG(std::string, stop_file, "", "the ranks stop once this exists");
ABSL_FLAG(int64_t, give_up_unix_s, 0, "exit 3 at this time, whatever happens");

namespace reducer {
namespace testing {

ClientOptions CampaignClientOptions(int world_size) {
  ClientOptions options;
  options.target = absl::GetFlag(FLAGS_target);
  options.job = absl::GetFlag(FLAGS_job);
  options.rank = absl::GetFlag(FLAGS_rank);
  options.world_size = world_size;
  options.local_world_size = absl::GetFlag(FLAGS_local_world_size);
  options.timeout = absl::Milliseconds(absl::GetFlag(FLAGS_connect_timeout_ms));
  return options;
}

int OpenHistoryLog() {
  return open(absl::GetFlag(FLAGS_log).c_str(),
              O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
}

bool StopFileExists() {
  return access(absl::GetFlag(FLAGS_stop_file).c_str(), F_OK) == 0;
}

absl::Time GiveUpTime() {
  return absl::FromUnixSeconds(absl::GetFlag(FLAGS_give_up_unix_s));
}

}  // namespace testing
}  // namespace reducer
