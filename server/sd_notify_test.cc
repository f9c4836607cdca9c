#include "server/sd_notify.h"

#include <unistd.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/fake_notify_socket.h"
#include "tests/matchers.h"

namespace reducer {
namespace {

constexpr absl::Duration kReceiveLimit = absl::Seconds(5);

TEST(SystemdNotifierTest, SendsStateAsOneDatagramFromThisProcess) {
  const std::string dir = ShortTempDir();
  ASSERT_FALSE(dir.empty());
  const std::string path = dir + "/notify";
  {
    FakeNotifySocket manager(path);
    ASSERT_TRUE(manager.status().ok()) << manager.status();
    absl::StatusOr<SystemdNotifier> notifier = SystemdNotifier::Create(path);
    ASSERT_TRUE(notifier.ok()) << notifier.status();
    EXPECT_TRUE(notifier->enabled());

    ASSERT_TRUE(notifier->Notify("READY=1\nSTATUS=serving on 127.0.0.1:1").ok());
    ASSERT_TRUE(notifier->Notify("STOPPING=1").ok());
    pid_t sender = 0;
    EXPECT_EQ(manager.Receive(kReceiveLimit, &sender),
              "READY=1\nSTATUS=serving on 127.0.0.1:1");
    EXPECT_EQ(sender, getpid());
    EXPECT_EQ(manager.Receive(kReceiveLimit, &sender), "STOPPING=1");
    EXPECT_EQ(sender, getpid());
  }
  rmdir(dir.c_str());
}

TEST(SystemdNotifierTest, SendsToAbstractNamespaceSocket) {
  const std::string address = absl::StrCat("@reducer-sd-notify-test-", getpid());
  FakeNotifySocket manager(address);
  ASSERT_TRUE(manager.status().ok()) << manager.status();
  absl::StatusOr<SystemdNotifier> notifier = SystemdNotifier::Create(address);
  ASSERT_TRUE(notifier.ok()) << notifier.status();
  ASSERT_TRUE(notifier->Notify("READY=1").ok());
  pid_t sender = 0;
  EXPECT_EQ(manager.Receive(kReceiveLimit, &sender), "READY=1");
  EXPECT_EQ(sender, getpid());
}

TEST(SystemdNotifierTest, EmptyAddressSendsNothingAndSucceeds) {
  absl::StatusOr<SystemdNotifier> notifier = SystemdNotifier::Create("");
  ASSERT_TRUE(notifier.ok()) << notifier.status();
  EXPECT_FALSE(notifier->enabled());
  EXPECT_TRUE(notifier->Notify("READY=1").ok());
}

TEST(SystemdNotifierTest, RejectsRelativeAndOverlongAddresses) {
  EXPECT_THAT(SystemdNotifier::Create("run/notify"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("\"run/notify\"")));
  EXPECT_THAT(
      SystemdNotifier::Create("/" + std::string(200, 'x')),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("201 bytes")));
}

TEST(SystemdNotifierTest, UnavailableNamingTheSocketWhenNothingListens) {
  const std::string dir = ShortTempDir();
  ASSERT_FALSE(dir.empty());
  const std::string path = dir + "/nobody";
  absl::StatusOr<SystemdNotifier> notifier = SystemdNotifier::Create(path);
  ASSERT_TRUE(notifier.ok()) << notifier.status();
  EXPECT_THAT(notifier->Notify("READY=1"),
              StatusIs(absl::StatusCode::kUnavailable,
                       AllOf(HasSubstr(path), HasSubstr("READY=1"))));
  rmdir(dir.c_str());
}

}  // namespace
}  // namespace reducer
