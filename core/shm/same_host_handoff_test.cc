// Two processes on one host sharing a segment the way reducerd and a worker
// will: the segment's fd goes over a SOCK_SEQPACKET socketpair, the peer maps
// it, and a doorbell inside it says when data is there.
#include <dirent.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <fstream>
#include <optional>
#include <set>
#include <string>
#include <tuple>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/shm/doorbell.h"
#include "core/shm/fd_passing.h"
#include "core/shm/peer_process_testing.h"
#include "core/shm/shared_segment.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/matchers.h"

namespace reducer {
namespace {

constexpr size_t kBytes = size_t{1} << 20;
// The doorbell's word sits at offset 0; the payload starts a cache line on.
constexpr size_t kPayloadOffset = 64;
constexpr size_t kWords = (kBytes - kPayloadOffset) / sizeof(uint32_t);
constexpr uint32_t kStep = 2654435761u;

class HandoffTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::tie(parent_end_, child_end_) = SeqpacketPair();
    ASSERT_TRUE(parent_end_.valid());
  }

  // Forks a child that runs `body` on its end of the socket and exits with
  // its result; the parent keeps only its own end.
  template <typename Body>
  pid_t Fork(Body body) {
    pid_t child = fork();
    if (child == 0) {
      parent_end_.reset();
      _exit(body(child_end_.get()));
    }
    child_end_.reset();
    return child;
  }

  UniqueFd parent_end_, child_end_;
};

// In the child: adopt the received segment read-write, write word i of the
// payload as i * kStep, ring. Exit codes name the step that failed.
int WritePatternAndRing(int sock) {
  auto received = ReceiveWithFds(sock, 64, 1, Soon());
  if (!received.ok() || received->fds.size() != 1) return 2;
  if (received->bytes != "segment") return 3;
  auto segment = SharedSegment::Adopt(received->fds[0].release(),
                                      SharedSegment::Access::kReadWrite);
  if (!segment.ok()) return 4;
  if (segment->size() != kBytes) return 5;
  char* base = static_cast<char*>(segment->data());
  auto* words = reinterpret_cast<uint32_t*>(base + kPayloadOffset);
  for (size_t i = 0; i < kWords; ++i)
    words[i] = static_cast<uint32_t>(i) * kStep;
  Doorbell(reinterpret_cast<std::atomic<uint32_t>*>(base)).Ring();
  return 0;
}

TEST_F(HandoffTest, ChildWritesThroughThePassedSegmentAndRingsTheParent) {
  // Forked first, so the child can reach the segment only through the fd.
  pid_t child = Fork(WritePatternAndRing);
  ASSERT_GT(child, 0);
  auto segment = SharedSegment::Create("handoff", kBytes);
  ASSERT_TRUE(segment.ok()) << segment.status();
  char* base = static_cast<char*>(segment->data());
  Doorbell bell(reinterpret_cast<std::atomic<uint32_t>*>(base));
  uint32_t seen = bell.value();
  ASSERT_TRUE(SendWithFds(parent_end_.get(), "segment", {segment->fd()}).ok());
  auto rung = bell.WaitChange(seen, Soon());
  ASSERT_TRUE(rung.ok()) << rung.status();
  EXPECT_EQ(*rung, seen + 1);
  // Expected words by repeated addition, not by the child's multiplication.
  const auto* words = reinterpret_cast<const uint32_t*>(base + kPayloadOffset);
  uint32_t expected = 0;
  size_t wrong = 0;
  for (size_t i = 0; i < kWords; ++i, expected += kStep) {
    wrong += words[i] != expected;
  }
  EXPECT_EQ(wrong, 0u);
  EXPECT_EQ(words[1], 2654435761u);
  EXPECT_EQ(words[2], 1013904226u);  // 2 * 2654435761 mod 2^32
  EXPECT_EQ(ExitCodeOf(child), 0);
}

// What /proc/<pid>/fd/<fd> links to, "" if it does not exist.
std::string LinkOf(const std::string& path) {
  char target[512];
  ssize_t n = readlink(path.c_str(), target, sizeof(target));
  return n < 0 ? "" : std::string(target, static_cast<size_t>(n));
}

// The lines of /proc/<pid>/maps that name `label`.
std::string MappingsOf(const std::string& maps_path, const std::string& label) {
  std::ifstream in(maps_path);
  std::string line, found;
  while (std::getline(in, line)) {
    if (line.find(label) != std::string::npos)
      absl::StrAppend(&found, line, "\n");
  }
  return found;
}

std::set<std::string> DevShmEntries() {
  std::set<std::string> names;
  if (DIR* dir = opendir("/dev/shm")) {
    while (dirent* entry = readdir(dir)) names.insert(entry->d_name);
    closedir(dir);
  }
  return names;
}

// In the child: adopt the segment, report the fd it holds, then on "close"
// drop the segment, say "closed" and stay until the parent hangs up (so that
// the parent looks at a live process, not one whose tables are gone).
int HoldUntilTold(int sock) {
  auto received = ReceiveWithFds(sock, 64, 1, Soon());
  if (!received.ok() || received->fds.size() != 1) return 2;
  std::optional<SharedSegment> segment;
  {
    auto adopted = SharedSegment::Adopt(received->fds[0].release(),
                                        SharedSegment::Access::kReadOnly);
    if (!adopted.ok()) return 3;
    segment.emplace(std::move(*adopted));
  }
  if (!SendWithFds(sock, absl::StrCat(segment->fd()), {}).ok()) return 4;
  auto told = ReceiveWithFds(sock, 64, 0, Soon());
  if (!told.ok() || told->bytes != "close") return 5;
  segment.reset();
  if (!SendWithFds(sock, "closed", {}).ok()) return 6;
  auto hangup = ReceiveWithFds(sock, 64, 0, Soon());
  if (hangup.status().code() != absl::StatusCode::kUnavailable) return 7;
  return 0;
}

TEST_F(HandoffTest, MemfdIsGoneOnceBothProcessesCloseIt) {
  std::set<std::string> shm_before = DevShmEntries();
  std::string name = absl::StrCat("gone-", getpid());
  std::string label = absl::StrCat("/memfd:", name);
  // Forked first, so the child holds only what it adopts from the fd.
  pid_t child = Fork(HoldUntilTold);
  ASSERT_GT(child, 0);
  std::optional<SharedSegment> segment;
  {
    auto created = SharedSegment::Create(name, kBytes);
    ASSERT_TRUE(created.ok()) << created.status();
    segment.emplace(std::move(*created));
  }
  std::string own_fd = absl::StrCat("/proc/self/fd/", segment->fd());
  ASSERT_THAT(LinkOf(own_fd), HasSubstr(label));
  ASSERT_TRUE(SendWithFds(parent_end_.get(), "segment", {segment->fd()}).ok());

  auto reported = ReceiveWithFds(parent_end_.get(), 64, 0, Soon());
  ASSERT_TRUE(reported.ok()) << reported.status();
  int child_fd;
  ASSERT_TRUE(absl::SimpleAtoi(reported->bytes, &child_fd));
  std::string child_fd_link = absl::StrCat("/proc/", child, "/fd/", child_fd);
  std::string child_maps = absl::StrCat("/proc/", child, "/maps");
  EXPECT_THAT(LinkOf(child_fd_link), HasSubstr(label));
  EXPECT_THAT(MappingsOf(child_maps, label), HasSubstr("r--s"));

  ASSERT_TRUE(SendWithFds(parent_end_.get(), "close", {}).ok());
  auto closed = ReceiveWithFds(parent_end_.get(), 64, 0, Soon());
  ASSERT_TRUE(closed.ok()) << closed.status();
  EXPECT_EQ(closed->bytes, "closed");
  EXPECT_EQ(LinkOf(child_fd_link), "");
  EXPECT_EQ(MappingsOf(child_maps, label), "");
  EXPECT_THAT(MappingsOf(child_maps, "[stack]"), HasSubstr("[stack]"))
      << "the child must still be alive here";
  parent_end_.reset();
  EXPECT_EQ(ExitCodeOf(child), 0);

  segment.reset();
  EXPECT_THAT(LinkOf(own_fd), Not(HasSubstr(label)));
  EXPECT_EQ(MappingsOf("/proc/self/maps", label), "");
  EXPECT_EQ(DevShmEntries(), shm_before);
}

}  // namespace
}  // namespace reducer
