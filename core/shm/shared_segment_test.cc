#include "core/shm/shared_segment.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/shm/mapped_bytes.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/matchers.h"

namespace reducer {
namespace {

constexpr size_t kBytes = 3 * 4096 + 100;

TEST(SharedSegmentTest, CreateGivesZeroedWritableMemoryOfTheSize) {
  auto segment = SharedSegment::Create("zeroed", kBytes);
  ASSERT_THAT(segment, IsOk());
  EXPECT_EQ(segment->size(), kBytes);
  auto* bytes = static_cast<unsigned char*>(segment->data());
  size_t nonzero = 0;
  for (size_t i = 0; i < kBytes; ++i) nonzero += bytes[i] != 0;
  EXPECT_EQ(nonzero, 0u);
  bytes[kBytes - 1] = 0xab;
  EXPECT_EQ(bytes[kBytes - 1], 0xab);
}

TEST(SharedSegmentTest, CreateOfNothingIsRefused) {
  EXPECT_THAT(SharedSegment::Create("empty", 0),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(SharedSegmentTest, CreateRefusesWhatDoesNotFitInMemory) {
  EXPECT_THAT(SharedSegment::Create("huge", size_t{1} << 60),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr(absl::StrCat(size_t{1} << 60))));
}

TEST(SharedSegmentTest, CheckRoomReadsTheSourcesItIsGiven) {
  MemorySources sources;
  sources.cgroup_root = absl::StrCat(::testing::TempDir(), "/no_cgroup");
  sources.self_cgroup = absl::StrCat(::testing::TempDir(), "/no_self_cgroup");
  sources.meminfo = absl::StrCat(::testing::TempDir(), "/none.meminfo");
  EXPECT_THAT(SharedSegment::CheckRoom(size_t{1} << 60, sources), IsOk());
}

TEST(SharedSegmentTest, CreatedMemfdIsSealedAgainstResizing) {
  auto segment = SharedSegment::Create("sealed", kBytes);
  ASSERT_THAT(segment, IsOk());
  int seals = fcntl(segment->fd(), F_GET_SEALS);
  EXPECT_EQ(seals, F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL);
  EXPECT_NE(fcntl(segment->fd(), F_GETFD) & FD_CLOEXEC, 0);
}

TEST(SharedSegmentTest, AdoptedFdCannotBeTruncatedNorGrown) {
  auto segment = SharedSegment::Create("truncate", kBytes);
  ASSERT_THAT(segment, IsOk());
  auto adopted = SharedSegment::Adopt(dup(segment->fd()),
                                      SharedSegment::Access::kReadWrite);
  ASSERT_THAT(adopted, IsOk());
  EXPECT_EQ(ftruncate(adopted->fd(), 4096), -1);
  EXPECT_EQ(errno, EPERM);
  EXPECT_EQ(ftruncate(adopted->fd(), 0), -1);
  EXPECT_EQ(errno, EPERM);
  EXPECT_EQ(ftruncate(adopted->fd(), 2 * kBytes), -1);
  EXPECT_EQ(errno, EPERM);
  EXPECT_EQ(fcntl(adopted->fd(), F_ADD_SEALS, F_SEAL_WRITE), -1);
  EXPECT_EQ(errno, EPERM);
}

TEST(SharedSegmentTest, AdoptionMapsTheSamePagesAtItsOwnAddress) {
  auto segment = SharedSegment::Create("same-pages", kBytes);
  ASSERT_THAT(segment, IsOk());
  auto adopted = SharedSegment::Adopt(dup(segment->fd()),
                                      SharedSegment::Access::kReadOnly);
  ASSERT_THAT(adopted, IsOk());
  EXPECT_EQ(adopted->size(), kBytes);
  EXPECT_NE(adopted->data(), segment->data());
  static_cast<char*>(segment->data())[kBytes - 1] = 'z';
  EXPECT_EQ(static_cast<const char*>(adopted->data())[kBytes - 1], 'z');
}

// A creator-only segment: the creator writes through its mapping, every
// other holder of the memfd maps it read-only at most, even through a
// reopening of /proc/self/fd (the seal is on the memfd, not the descriptor).
TEST(SharedSegmentTest, CreatorOnlySegmentIsWritableByItsCreatorAlone) {
  auto segment = SharedSegment::Create("creator-only", kBytes,
                                       SharedSegment::Writers::kCreatorOnly);
  ASSERT_THAT(segment, IsOk());
  static_cast<char*>(segment->data())[0] = 'c';
  auto reader = SharedSegment::Adopt(dup(segment->fd()),
                                     SharedSegment::Access::kReadOnly);
  ASSERT_THAT(reader, IsOk());
  EXPECT_EQ(static_cast<const char*>(reader->data())[0], 'c');

  auto writer = SharedSegment::Adopt(dup(segment->fd()),
                                     SharedSegment::Access::kReadWrite);
  EXPECT_FALSE(writer.ok());
  const std::string proc = absl::StrCat("/proc/self/fd/", segment->fd());
  const int reopened = open(proc.c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(reopened, 0) << strerror(errno);
  void* p = mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_SHARED, reopened, 0);
  EXPECT_EQ(p, MAP_FAILED);
  EXPECT_EQ(errno, EPERM);
  EXPECT_LT(pwrite(reopened, "x", 1, 0), 0);
  close(reopened);
  EXPECT_EQ(static_cast<const char*>(reader->data())[0], 'c');
  // The default: any holder may map it writable.
  auto open_segment = SharedSegment::Create("any-holder", kBytes);
  ASSERT_THAT(open_segment, IsOk());
  EXPECT_THAT(SharedSegment::Adopt(dup(open_segment->fd()),
                                   SharedSegment::Access::kReadWrite),
              IsOk());
}

// Pages are mapped as they are touched, or all at once by Populate, which
// leaves the contents as they were; each side's page tables are its own.
TEST(SharedSegmentTest, PopulateMapsEveryPageAndKeepsTheContents) {
  constexpr size_t kBytes = 1 << 20;
  auto segment = SharedSegment::Create("populate", kBytes);
  ASSERT_THAT(segment, IsOk());
  EXPECT_EQ(MappedBytes(segment->data()).value_or(kBytes), 0u);
  std::memcpy(segment->data(), "kept", 4);
  EXPECT_EQ(MappedBytes(segment->data()).value_or(0),
            static_cast<size_t>(sysconf(_SC_PAGESIZE)));  // one touched
  ASSERT_THAT(segment->Populate(), IsOk());
  EXPECT_EQ(MappedBytes(segment->data()).value_or(0), kBytes);
  auto adopted = SharedSegment::Adopt(dup(segment->fd()),
                                      SharedSegment::Access::kReadOnly);
  ASSERT_THAT(adopted, IsOk());
  EXPECT_EQ(MappedBytes(adopted->data()).value_or(kBytes), 0u);
  ASSERT_THAT(adopted->Populate(), IsOk());
  EXPECT_EQ(MappedBytes(adopted->data()).value_or(0), kBytes);
  EXPECT_EQ(std::memcmp(adopted->data(), "kept", 4), 0);
}

TEST(SharedSegmentTest, AdoptRefusesAnUnsealedMemfdAndClosesIt) {
  int fd = memfd_create("unsealed", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, kBytes), 0);
  auto adopted = SharedSegment::Adopt(fd, SharedSegment::Access::kReadWrite);
  EXPECT_THAT(adopted,
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       AllOf(HasSubstr("not sealed against resizing"),
                             HasSubstr(absl::StrCat(kBytes, " bytes")),
                             HasSubstr("F_SEAL_SHRINK"))));
  EXPECT_EQ(fcntl(fd, F_GETFD), -1);
  EXPECT_EQ(errno, EBADF);
}

TEST(SharedSegmentTest, AdoptRefusesAMemfdSealedOnlyAgainstGrowth) {
  int fd = memfd_create("half-sealed", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, kBytes), 0);
  ASSERT_EQ(fcntl(fd, F_ADD_SEALS, F_SEAL_GROW), 0);
  auto adopted = SharedSegment::Adopt(fd, SharedSegment::Access::kReadOnly);
  EXPECT_THAT(adopted, StatusIs(absl::StatusCode::kFailedPrecondition,
                                HasSubstr("has F_SEAL_GROW, needs")));
}

TEST(SharedSegmentTest, AdoptRefusesARegularFile) {
  std::string path = absl::StrCat(::testing::TempDir(), "/regular_file");
  int fd = open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, kBytes), 0);
  auto adopted = SharedSegment::Adopt(fd, SharedSegment::Access::kReadWrite);
  EXPECT_FALSE(adopted.ok());
  EXPECT_THAT(std::string(adopted.status().message()),
              AllOf(HasSubstr("is not a sealable memfd"),
                    HasSubstr(absl::StrCat(kBytes, " bytes")),
                    HasSubstr(strerror(EINVAL))));
  EXPECT_EQ(fcntl(fd, F_GETFD), -1);
  unlink(path.c_str());
}

TEST(SharedSegmentTest, AdoptRefusesAnEmptySealedMemfd) {
  int fd = memfd_create("sealed-empty", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(fcntl(fd, F_ADD_SEALS, F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL),
            0);
  auto adopted = SharedSegment::Adopt(fd, SharedSegment::Access::kReadWrite);
  EXPECT_THAT(adopted, StatusIs(absl::StatusCode::kFailedPrecondition,
                                HasSubstr("is empty (0 bytes)")));
}

TEST(SharedSegmentTest, AdoptRefusesAClosedFd) {
  int fd = memfd_create("closed", MFD_CLOEXEC);
  ASSERT_GE(fd, 0);
  close(fd);
  auto adopted = SharedSegment::Adopt(fd, SharedSegment::Access::kReadWrite);
  EXPECT_THAT(std::string(adopted.status().message()),
              AllOf(HasSubstr("fstat"), HasSubstr(strerror(EBADF))));
}

// The child reads through a read-only adoption, then writes through it; the
// write must kill it with SIGSEGV (exit codes name the steps that went wrong
// before that).
TEST(SharedSegmentTest, WriteThroughReadOnlyAdoptionKillsTheWriter) {
  auto segment = SharedSegment::Create("read-only", kBytes);
  ASSERT_THAT(segment, IsOk());
  static_cast<char*>(segment->data())[10] = 'r';
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto adopted = SharedSegment::Adopt(dup(segment->fd()),
                                        SharedSegment::Access::kReadOnly);
    if (!adopted.ok()) _exit(2);
    volatile char* bytes = static_cast<volatile char*>(adopted->data());
    if (bytes[10] != 'r') _exit(3);
    // Sanitizers catch SIGSEGV to report it; the test wants the plain signal.
    struct sigaction plain {};
    plain.sa_handler = SIG_DFL;
    sigaction(SIGSEGV, &plain, nullptr);
    bytes[10] = 'w';
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status))
      << "child exited with " << (WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  EXPECT_EQ(WTERMSIG(status), SIGSEGV);
  EXPECT_EQ(static_cast<char*>(segment->data())[10], 'r');
}

TEST(SharedSegmentTest, MovedSegmentKeepsTheMappingAndTheFd) {
  auto segment = SharedSegment::Create("moved", kBytes);
  ASSERT_THAT(segment, IsOk());
  void* data = segment->data();
  int fd = segment->fd();
  SharedSegment moved = std::move(*segment);
  EXPECT_EQ(moved.data(), data);
  EXPECT_EQ(moved.fd(), fd);
  EXPECT_EQ(moved.size(), kBytes);
  EXPECT_EQ(segment->data(), nullptr);
  EXPECT_EQ(segment->fd(), -1);
  EXPECT_EQ(segment->size(), 0u);
}

}  // namespace
}  // namespace reducer
