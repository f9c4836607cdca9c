// Protected mode, with the real reducerd binary: on an address other hosts
// can reach, with neither TLS nor tokens, it refuses to start with one line
// naming the address and the ways out; with --allow_unauthenticated it
// serves there.
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

TEST(ReducerdProtectedModeTest, RefusesAllInterfacesWithoutTlsOrTokens) {
  Watchdog watchdog("RefusesAllInterfacesWithoutTlsOrTokens", kTestLimit);
  absl::StatusOr<std::string> binary = RunfilePath("server/reducerd");
  ASSERT_TRUE(binary.ok()) << binary.status();
  absl::StatusOr<std::unique_ptr<ChildProcess>> reducerd =
      ChildProcess::Start({*binary, "--listen=0.0.0.0:0"}, "reducerd.open");
  ASSERT_TRUE(reducerd.ok()) << reducerd.status();
  const ProcessResult result = (*reducerd)->Wait(absl::Seconds(30));

  EXPECT_TRUE(result.exited && result.exit_code != 0) << result.Describe();
  EXPECT_THAT(result.stdout_text, Not(HasSubstr("listening")));
  const std::vector<std::string> lines =
      absl::StrSplit(result.stderr_text, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 1u) << result.Describe();
  EXPECT_THAT(lines[0], HasSubstr("--listen=0.0.0.0:0"));
  EXPECT_THAT(lines[0], HasSubstr("neither TLS nor job tokens"));
  EXPECT_THAT(lines[0], HasSubstr("--tls_cert_file/--tls_key_file"));
  EXPECT_THAT(lines[0], HasSubstr("--job_tokens_file"));
  EXPECT_THAT(lines[0], HasSubstr("--allow_unauthenticated"));
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

}  // namespace
}  // namespace testing
}  // namespace reducer
