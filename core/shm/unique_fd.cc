#include "core/shm/unique_fd.h"

#include <unistd.h>

namespace reducer {

UniqueFd& UniqueFd::operator=(UniqueFd&& other) noexcept {
  if (this != &other) reset(other.release());
  return *this;
}

int UniqueFd::release() {
  int fd = fd_;
  fd_ = -1;
  return fd;
}

void UniqueFd::reset(int fd) {
  // close() is not retried on EINTR: on Linux the descriptor is released
  // even then, and a retry could close one another thread just opened.
  if (fd_ >= 0) close(fd_);
  fd_ = fd;
}

}  // namespace reducer
