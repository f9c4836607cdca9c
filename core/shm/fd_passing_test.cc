#include "core/shm/fd_passing.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/shm/peer_process_testing.h"
#include "core/shm/unique_fd.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/matchers.h"

namespace reducer {
namespace {

// Entries of /proc/self/fd (the directory's own descriptor included, the
// same in every count).
int OpenFdCount() {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  int count = 0;
  while (dirent* entry = readdir(dir)) count += entry->d_name[0] != '.';
  closedir(dir);
  return count;
}

class FdPassingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::tie(sender_, receiver_) = SeqpacketPair();
    ASSERT_TRUE(sender_.valid());
    path_ = absl::StrCat(::testing::TempDir(), "/fd_passing_file");
    file_.reset(
        open(path_.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
    ASSERT_TRUE(file_.valid());
    ASSERT_EQ(fstat(file_.get(), &file_stat_), 0);
  }
  void TearDown() override { unlink(path_.c_str()); }

  UniqueFd sender_, receiver_, file_;
  std::string path_;
  struct stat file_stat_;
};

TEST_F(FdPassingTest, SeveralFdsArriveAndReferToTheSameFile) {
  UniqueFd second(dup(file_.get()));
  UniqueFd third(open(path_.c_str(), O_RDONLY | O_CLOEXEC));
  ASSERT_TRUE(third.valid());
  std::vector<int> sent = {file_.get(), second.get(), third.get()};
  ASSERT_TRUE(SendWithFds(sender_.get(), "three", sent).ok());
  auto received = ReceiveWithFds(receiver_.get(), 64, 8, Soon());
  ASSERT_TRUE(received.ok()) << received.status();
  EXPECT_EQ(received->bytes, "three");
  ASSERT_EQ(received->fds.size(), 3u);
  for (const UniqueFd& fd : received->fds) {
    struct stat st;
    ASSERT_EQ(fstat(fd.get(), &st), 0);
    EXPECT_EQ(st.st_ino, file_stat_.st_ino);
    EXPECT_EQ(st.st_dev, file_stat_.st_dev);
    EXPECT_NE(fcntl(fd.get(), F_GETFD) & FD_CLOEXEC, 0);
    for (int original : sent) EXPECT_NE(fd.get(), original);
  }
  // The first two share one open file description (dup), so one offset.
  ASSERT_EQ(lseek(received->fds[0].get(), 7, SEEK_SET), 7);
  EXPECT_EQ(lseek(file_.get(), 0, SEEK_CUR), 7);
  EXPECT_EQ(lseek(received->fds[1].get(), 0, SEEK_CUR), 7);
  EXPECT_EQ(lseek(received->fds[2].get(), 0, SEEK_CUR), 0);
}

TEST_F(FdPassingTest, MessageWithoutFdsArrivesWithNone) {
  ASSERT_TRUE(SendWithFds(sender_.get(), "plain", {}).ok());
  auto received = ReceiveWithFds(receiver_.get(), 5, 0, Soon());
  ASSERT_TRUE(received.ok()) << received.status();
  EXPECT_EQ(received->bytes, "plain");
  EXPECT_TRUE(received->fds.empty());
}

TEST_F(FdPassingTest, MessagesKeepTheirBoundaries) {
  ASSERT_TRUE(SendWithFds(sender_.get(), "first", {file_.get()}).ok());
  ASSERT_TRUE(SendWithFds(sender_.get(), "2nd", {}).ok());
  auto first = ReceiveWithFds(receiver_.get(), 64, 4, Soon());
  auto second = ReceiveWithFds(receiver_.get(), 64, 4, Soon());
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_EQ(first->bytes, "first");
  EXPECT_EQ(first->fds.size(), 1u);
  EXPECT_EQ(second->bytes, "2nd");
  EXPECT_TRUE(second->fds.empty());
}

TEST_F(FdPassingTest, MoreFdsThanAllowedIsAnErrorAndLeaksNothing) {
  std::vector<int> sent = {file_.get(), file_.get(), file_.get()};
  for (size_t max_fds : {0, 1, 2}) {
    int before = OpenFdCount();
    ASSERT_TRUE(SendWithFds(sender_.get(), "too many", sent).ok());
    auto received = ReceiveWithFds(receiver_.get(), 64, max_fds, Soon());
    EXPECT_THAT(received.status(), StatusIs(absl::StatusCode::kOutOfRange))
        << max_fds;
    EXPECT_THAT(std::string(received.status().message()),
                HasSubstr(absl::StrCat("more than ", max_fds, " fds")));
    EXPECT_EQ(OpenFdCount(), before) << max_fds;
  }
}

TEST_F(FdPassingTest, LongerMessageThanAllowedIsAnErrorAndLeaksNothing) {
  int before = OpenFdCount();
  ASSERT_TRUE(SendWithFds(sender_.get(), "eleven byte", {file_.get()}).ok());
  auto received = ReceiveWithFds(receiver_.get(), 10, 4, Soon());
  EXPECT_THAT(received.status(), StatusIs(absl::StatusCode::kOutOfRange));
  EXPECT_THAT(std::string(received.status().message()),
              HasSubstr("longer than 10 bytes"));
  EXPECT_EQ(OpenFdCount(), before);
}

TEST_F(FdPassingTest, UnreleasedFdsCloseWithTheResultReleasedOnesStay) {
  int before = OpenFdCount();
  ASSERT_TRUE(
      SendWithFds(sender_.get(), "two", {file_.get(), file_.get()}).ok());
  int kept;
  {
    auto received = ReceiveWithFds(receiver_.get(), 64, 4, Soon());
    ASSERT_TRUE(received.ok()) << received.status();
    EXPECT_EQ(OpenFdCount(), before + 2);
    kept = received->fds[1].release();
  }
  EXPECT_EQ(OpenFdCount(), before + 1);
  EXPECT_EQ(fcntl(kept, F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
  close(kept);
}

TEST_F(FdPassingTest, NothingByTheDeadlineIsDeadlineExceeded) {
  auto received = ReceiveWithFds(receiver_.get(), 64, 4,
                                 absl::Now() + absl::Milliseconds(20));
  EXPECT_THAT(received.status(), StatusIs(absl::StatusCode::kDeadlineExceeded));
}

TEST_F(FdPassingTest, MessageAlreadyThereIsReceivedEvenPastTheDeadline) {
  ASSERT_TRUE(SendWithFds(sender_.get(), "waiting", {}).ok());
  auto received = ReceiveWithFds(receiver_.get(), 64, 4, absl::InfinitePast());
  ASSERT_TRUE(received.ok()) << received.status();
  EXPECT_EQ(received->bytes, "waiting");
}

TEST_F(FdPassingTest, ClosedPeerIsUnavailable) {
  sender_.reset();
  auto received = ReceiveWithFds(receiver_.get(), 64, 4, Soon());
  EXPECT_THAT(received.status(), StatusIs(absl::StatusCode::kUnavailable));
  absl::Status sent = SendWithFds(receiver_.get(), "anyone?", {});
  EXPECT_FALSE(sent.ok());
  EXPECT_THAT(std::string(sent.message()), HasSubstr(strerror(EPIPE)));
}

TEST_F(FdPassingTest, EmptyMessageIsRefused) {
  EXPECT_THAT(SendWithFds(sender_.get(), "", {file_.get()}),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_F(FdPassingTest, PeerOfASocketpairIsThisProcess) {
  auto peer = PeerOf(receiver_.get());
  ASSERT_TRUE(peer.ok()) << peer.status();
  EXPECT_EQ(peer->pid, getpid());
  EXPECT_EQ(peer->uid, getuid());
  EXPECT_EQ(peer->gid, getgid());
}

// A child connects to a listening socket (abstract name: nothing on disk);
// the accepted end's peer is the child.
TEST(PeerOfTest, PeerOfAConnectedChildIsTheChild) {
  UniqueFd listener(socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  ASSERT_TRUE(listener.valid());
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::string name = absl::StrCat("reducer-peer-of-test-", getpid());
  memcpy(addr.sun_path + 1, name.data(), name.size());
  socklen_t len = offsetof(sockaddr_un, sun_path) + 1 + name.size();
  ASSERT_EQ(bind(listener.get(), reinterpret_cast<sockaddr*>(&addr), len), 0);
  ASSERT_EQ(listen(listener.get(), 1), 0);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    int sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (connect(sock, reinterpret_cast<sockaddr*>(&addr), len) != 0) _exit(2);
    char byte;
    if (read(sock, &byte, 1) < 0) _exit(3);  // until the parent closes its end
    _exit(0);
  }
  UniqueFd accepted(accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
  ASSERT_TRUE(accepted.valid());
  auto peer = PeerOf(accepted.get());
  accepted.reset();
  EXPECT_EQ(ExitCodeOf(child), 0);
  ASSERT_TRUE(peer.ok()) << peer.status();
  EXPECT_EQ(peer->pid, child);
  EXPECT_EQ(peer->uid, getuid());
}

TEST(PeerOfTest, PeerOfANonSocketNamesTheFailure) {
  auto peer = PeerOf(-1);
  EXPECT_FALSE(peer.ok());
  EXPECT_THAT(std::string(peer.status().message()), HasSubstr("SO_PEERCRED"));
}

}  // namespace
}  // namespace reducer
