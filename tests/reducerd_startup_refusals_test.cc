// What the real reducerd binary refuses to start with, each time with one
// line on stderr that names what is wrong and the flag to change:
// protected mode (on an address other hosts can reach, with neither TLS nor
// tokens, unless --allow_unauthenticated) and bounds that could not hold.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/process_harness.h"
#include "tests/watchdog.h"

namespace reducer {
namespace testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr absl::Duration kTestLimit = absl::Seconds(60);

// Runs reducerd with `flags` and returns the one line it printed on stderr
// before exiting nonzero (a test failure otherwise).
std::string RefusalOf(const std::vector<std::string>& flags,
                      const std::string& name) {
  absl::StatusOr<std::string> binary = RunfilePath("server/reducerd");
  EXPECT_TRUE(binary.ok()) << binary.status();
  if (!binary.ok()) return "";
  std::vector<std::string> argv = {*binary};
  argv.insert(argv.end(), flags.begin(), flags.end());
  absl::StatusOr<std::unique_ptr<ChildProcess>> reducerd =
      ChildProcess::Start(argv, name);
  EXPECT_TRUE(reducerd.ok()) << reducerd.status();
  if (!reducerd.ok()) return "";
  const ProcessResult result = (*reducerd)->Wait(absl::Seconds(30));
  EXPECT_TRUE(result.exited && result.exit_code != 0) << result.Describe();
  EXPECT_THAT(result.stdout_text, Not(HasSubstr("listening")));
  const std::vector<std::string> lines =
      absl::StrSplit(result.stderr_text, '\n', absl::SkipEmpty());
  EXPECT_EQ(lines.size(), 1u) << result.Describe();
  return lines.empty() ? "" : lines[0];
}

TEST(ReducerdProtectedModeTest, RefusesAllInterfacesWithoutTlsOrTokens) {
  Watchdog watchdog("RefusesAllInterfacesWithoutTlsOrTokens", kTestLimit);
  const std::string line = RefusalOf({"--listen=0.0.0.0:0"}, "reducerd.open");
  EXPECT_THAT(line, HasSubstr("--listen=0.0.0.0:0"));
  EXPECT_THAT(line, HasSubstr("neither TLS nor job tokens"));
  EXPECT_THAT(line, HasSubstr("--tls_cert_file/--tls_key_file"));
  EXPECT_THAT(line, HasSubstr("--job_tokens_file"));
  EXPECT_THAT(line, HasSubstr("--allow_unauthenticated"));
}

TEST(ReducerdProtectedModeTest, ServesAllInterfacesWithAllowUnauthenticated) {
  Watchdog watchdog("ServesAllInterfacesWithAllowUnauthenticated", kTestLimit);
  ReducerdPlacement all_interfaces;
  all_interfaces.host = "0.0.0.0";
  absl::StatusOr<std::unique_ptr<ReducerdProcess>> reducerd =
      ReducerdProcess::StartPlaced(all_interfaces, {"--allow_unauthenticated"});
  ASSERT_TRUE(reducerd.ok()) << reducerd.status();
  const ProcessResult stopped = (*reducerd)->Stop(absl::Seconds(15));
  EXPECT_TRUE(stopped.Succeeded()) << stopped.Describe();
}

// Bounds that could not hold are refused before anything is served.
TEST(ReducerdBoundsTest, RefusesBoundsThatCannotHold) {
  Watchdog watchdog("RefusesBoundsThatCannotHold", kTestLimit);
  // An all-gather's result adds every rank's bytes: 2^20 ranks of 2^43
  // bytes each would overflow.
  EXPECT_THAT(RefusalOf({"--max_world_size=1048576",
                         "--max_tensor_bytes=8796093022208"},
                        "reducerd.overflow"),
              HasSubstr("--max_world_size x --max_tensor_bytes must stay "
                        "below 2^62"));
  EXPECT_THAT(RefusalOf({"--max_streams_per_tenant=0"}, "reducerd.no_streams"),
              HasSubstr("--max_streams_per_tenant must be at least 1"));
  // The deprecated old name sets it, and is checked as it is.
  EXPECT_THAT(RefusalOf({"--max_streams_per_job=0"}, "reducerd.old_name"),
              HasSubstr("--max_streams_per_tenant must be at least 1"));
  EXPECT_THAT(
      RefusalOf({"--max_streams_per_job=8", "--max_streams_per_tenant=16"},
                "reducerd.both_names"),
      HasSubstr("give --max_streams_per_tenant alone"));
  EXPECT_THAT(RefusalOf({"--stream_idle_timeout=500ms"}, "reducerd.idle"),
              HasSubstr("--stream_idle_timeout must be 0 (never) or at "
                        "least 1s"));
  EXPECT_THAT(RefusalOf({"--shared_memory_allowed_uids=root"},
                        "reducerd.uids"),
              HasSubstr("--shared_memory_allowed_uids must be same, any or a "
                        "comma-separated list of uids, got 'root'"));
}

}  // namespace
}  // namespace testing
}  // namespace reducer
