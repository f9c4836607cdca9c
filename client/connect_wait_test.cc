// Client::Connect to an address where nothing listens: the client says on
// stderr, once, whom it waits for, and fails at its timeout naming it.
#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "client/reducer_client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/process_harness.h"
#include "tests/status_matchers.h"

namespace reducer {
namespace {

using ::reducer::testing::StatusIs;
using ::testing::HasSubstr;

TEST(ConnectWaitTest, SaysWhomItWaitsForOnceThenFailsNamingIt) {
  // Bound and not listening: connecting is refused.
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  absl::StatusOr<int> port = ::reducer::testing::BindLoopbackAnyPort(fd);
  ASSERT_TRUE(port.ok()) << port.status();
  ClientOptions options;
  options.target = absl::StrCat("127.0.0.1:", *port);
  options.job = "waiting";
  options.rank = 1;
  options.world_size = 2;
  options.timeout = absl::Seconds(4);
  options.shared_memory = SharedMemory::kOff;

  ::testing::internal::CaptureStderr();
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(options);
  const std::string err = ::testing::internal::GetCapturedStderr();
  close(fd);

  EXPECT_THAT(client.status(), StatusIs(absl::StatusCode::kUnavailable,
                                        HasSubstr(options.target)));
  // After half the 4 s timeout, naming the rank, the job and the address.
  EXPECT_THAT(err, HasSubstr("reducer: rank 1 of job waiting has waited "));
  EXPECT_THAT(err, HasSubstr(absl::StrCat(
                       " of 4s for reducerd at ", options.target,
                       " (is it running, and is the address right?)\n")));
  // Once.
  EXPECT_EQ(err.find("has waited"), err.rfind("has waited")) << err;
}

}  // namespace
}  // namespace reducer
