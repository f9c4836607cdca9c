// reducerd under a service manager: with $NOTIFY_SOCKET set, as systemd sets
// it for a Type=notify unit, reducerd sends READY=1 (naming the address it
// serves) from its main process once it serves, and STOPPING=1 when SIGTERM
// starts the drain, then exits 0. The manager's socket is a real AF_UNIX
// datagram socket (server/fake_notify_socket.h).
#include <stdlib.h>
#include <unistd.h>

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "server/fake_notify_socket.h"
#include "tests/fault_test_base.h"
#include "tests/process_harness.h"

namespace reducer {
namespace testing {
namespace {

constexpr absl::Duration kTestLimit = absl::Seconds(60);
constexpr absl::Duration kReceiveLimit = absl::Seconds(10);

TEST(ReducerdNotifyTest, SendsReadyOnceServingAndStoppingOnSigterm) {
  Watchdog watchdog("SendsReadyOnceServingAndStoppingOnSigterm", kTestLimit);
  const std::string dir = ShortTempDir();
  ASSERT_FALSE(dir.empty());
  const std::string path = dir + "/notify";
  {
    FakeNotifySocket manager(path);
    ASSERT_TRUE(manager.status().ok()) << manager.status();
    // reducerd inherits the environment (and nothing else here reads it).
    ASSERT_EQ(setenv("NOTIFY_SOCKET", path.c_str(), 1), 0);
    absl::StatusOr<std::unique_ptr<ReducerdProcess>> server = ReducerdProcess::Start();
    unsetenv("NOTIFY_SOCKET");
    ASSERT_TRUE(server.ok()) << server.status();

    pid_t sender = 0;
    EXPECT_EQ(manager.Receive(kReceiveLimit, &sender),
              absl::StrCat("READY=1\nSTATUS=serving on ", (*server)->address()));
    EXPECT_EQ(sender, (*server)->pid()) << "systemd accepts only the main PID";

    const pid_t server_pid = (*server)->pid();
    ProcessResult stopped = (*server)->Stop(absl::Seconds(15));
    EXPECT_TRUE(stopped.Succeeded()) << stopped.Describe();
    EXPECT_EQ(manager.Receive(kReceiveLimit, &sender), "STOPPING=1\nSTATUS=draining");
    EXPECT_EQ(sender, server_pid);
    EXPECT_EQ(manager.Receive(absl::Milliseconds(100), &sender), "")
        << "nothing after STOPPING=1";
  }
  rmdir(dir.c_str());
}

}  // namespace
}  // namespace testing
}  // namespace reducer
