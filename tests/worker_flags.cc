#include "tests/worker_flags.h"

#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/time/time.h"

ABSL_FLAG(std::string, target, "127.0.0.1:50051", "reducerd address");
ABSL_FLAG(std::string, job, "", "job name, shared by the ranks of one job");
ABSL_FLAG(int, rank, 0, "this process's rank");
ABSL_FLAG(int, world_size, 1, "ranks in the job");
ABSL_FLAG(int, local_world_size, 0,
          "ranks of the job on this host (ClientOptions::local_world_size; "
          "for a relay), 0: unknown");
ABSL_FLAG(int, timeout_s, 0,
          "ClientOptions::timeout in seconds (Connect and calls that set "
          "none); default: the worker's own");

namespace reducer::testing {

ClientOptions ParseWorkerFlags(int argc, char** argv, int default_timeout_s) {
  // Set before parsing, so that a --timeout_s given wins.
  absl::SetFlag(&FLAGS_timeout_s, default_timeout_s);
  absl::ParseCommandLine(argc, argv);
  return WorkerClientOptions();
}

ClientOptions WorkerClientOptions() {
  ClientOptions options;
  options.target = absl::GetFlag(FLAGS_target);
  options.job = absl::GetFlag(FLAGS_job);
  options.rank = absl::GetFlag(FLAGS_rank);
  options.world_size = absl::GetFlag(FLAGS_world_size);
  options.local_world_size = absl::GetFlag(FLAGS_local_world_size);
  options.timeout = absl::Seconds(absl::GetFlag(FLAGS_timeout_s));
  return options;
}

}  // namespace reducer::testing
