// The data paths a multi-process test runs a job over: gRPC to one
// reducerd, the same-host path, and gRPC over three reducerd shards; and
// the daemons each needs.
//
//   class MyTest : public ::testing::TestWithParam<JobPath> {};
//   TEST_P(MyTest, X) {
//     absl::StatusOr<JobPathServers> servers = StartJobPath(GetParam());
//     ASSERT_TRUE(servers.ok()) << servers.status();
//     ... "--target=" + servers->target ...
//   }
//   INSTANTIATE_TEST_SUITE_P(Paths, MyTest, ::testing::ValuesIn(kJobPaths),
//                            JobPathName);
//
// Not thread-safe (sets REDUCER_SHARED_MEMORY in this process, which the
// rank processes it starts inherit).
#ifndef REDUCER_TESTS_JOB_PATHS_H_
#define REDUCER_TESTS_JOB_PATHS_H_

#include <stdlib.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "tests/process_harness.h"

namespace reducer {
namespace testing {

// Where a job's collectives travel.
struct JobPath {
  const char* name;           // the test's suffix
  const char* shared_memory;  // REDUCER_SHARED_MEMORY for the ranks
  int shards;                 // reducerd daemons
};

inline constexpr JobPath kJobPaths[] = {
    {"Grpc", "off", 1}, {"SameHost", "required", 1}, {"ThreeShards", "off", 3}};

inline std::string JobPathName(const ::testing::TestParamInfo<JobPath>& info) {
  return info.param.name;
}

// The daemons of one path and the ranks' --target.
struct JobPathServers {
  std::vector<std::unique_ptr<ReducerdProcess>> servers;
  std::string target;  // their addresses, comma-separated

  // Every daemon's log.
  std::string Logs() const {
    std::string logs;
    for (const auto& server : servers) absl::StrAppend(&logs, server->Stderr());
    return logs;
  }
};

// Sets REDUCER_SHARED_MEMORY for `path` and starts its daemons.
inline absl::StatusOr<JobPathServers> StartJobPath(const JobPath& path) {
  setenv("REDUCER_SHARED_MEMORY", path.shared_memory, 1);
  JobPathServers out;
  std::vector<std::string> addresses;
  for (int s = 0; s < path.shards; ++s) {
    absl::StatusOr<std::unique_ptr<ReducerdProcess>> server =
        ReducerdProcess::Start();
    if (!server.ok()) return server.status();
    addresses.push_back((*server)->address());
    out.servers.push_back(*std::move(server));
  }
  out.target = absl::StrJoin(addresses, ",");
  return out;
}

}  // namespace testing
}  // namespace reducer

#endif  // REDUCER_TESTS_JOB_PATHS_H_
