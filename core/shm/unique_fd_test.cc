#include "core/shm/unique_fd.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

#include "gtest/gtest.h"

namespace reducer {
namespace {

bool IsOpen(int fd) { return fcntl(fd, F_GETFD) != -1 || errno != EBADF; }

TEST(UniqueFdTest, ClosesWhatItOwnsWhenDestroyed) {
  int raw = dup(STDERR_FILENO);
  ASSERT_GE(raw, 0);
  {
    UniqueFd fd(raw);
    EXPECT_EQ(fd.get(), raw);
  }
  EXPECT_FALSE(IsOpen(raw));
}

TEST(UniqueFdTest, ReleaseHandsTheFdOverOpen) {
  int raw = dup(STDERR_FILENO);
  int released;
  {
    UniqueFd fd(raw);
    released = fd.release();
    EXPECT_FALSE(fd.valid());
  }
  EXPECT_EQ(released, raw);
  EXPECT_TRUE(IsOpen(raw));
  close(raw);
}

TEST(UniqueFdTest, MoveTransfersOwnershipAndResetClosesTheOld) {
  int first = dup(STDERR_FILENO);
  int second = dup(STDERR_FILENO);
  UniqueFd a(first);
  UniqueFd b(std::move(a));
  EXPECT_EQ(a.get(), -1);
  EXPECT_EQ(b.get(), first);
  b.reset(second);
  EXPECT_FALSE(IsOpen(first));
  UniqueFd c;
  c = std::move(b);
  EXPECT_EQ(c.get(), second);
  c.reset();
  EXPECT_FALSE(IsOpen(second));
}

}  // namespace
}  // namespace reducer
