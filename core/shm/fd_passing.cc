#include "core/shm/fd_passing.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

namespace reducer {
namespace {

// Waits until `sock` has `events` or `deadline` passes (an event already
// there is seen even after the deadline).
absl::Status WaitFor(int sock, short events, absl::Time deadline) {
  while (true) {
    int timeout_ms = -1;
    if (deadline != absl::InfiniteFuture()) {
      absl::Duration left =
          std::max(deadline - absl::Now(), absl::ZeroDuration());
      // Rounded up, so that the wait does not end just before the deadline.
      timeout_ms = static_cast<int>(std::min<int64_t>(
          absl::ToInt64Milliseconds(absl::Ceil(left, absl::Milliseconds(1))),
          std::numeric_limits<int>::max()));
    }
    pollfd p{sock, events, 0};
    int n = poll(&p, 1, timeout_ms);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      return absl::ErrnoToStatus(errno, absl::StrCat("poll of socket ", sock));
    }
    if (n > 0) return absl::OkStatus();
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("no message on socket ", sock, " by the deadline"));
    }
  }
}

}  // namespace

absl::Status SendWithFds(int sock, absl::string_view bytes,
                         absl::Span<const int> fds) {
  if (bytes.empty()) {
    return absl::InvalidArgumentError("SendWithFds of an empty message");
  }
  if (fds.size() > kMaxFdsPerMessage) {
    return absl::InvalidArgumentError(absl::StrCat("SendWithFds of ",
                                                   fds.size(), " fds (at most ",
                                                   kMaxFdsPerMessage, ")"));
  }
  iovec iov{const_cast<char*>(bytes.data()), bytes.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  std::vector<char> control;
  if (!fds.empty()) {
    size_t fd_bytes = fds.size() * sizeof(int);
    control.assign(CMSG_SPACE(fd_bytes), 0);
    msg.msg_control = control.data();
    msg.msg_controllen = control.size();
    cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
    cmsg->cmsg_level = SOL_SOCKET;
    cmsg->cmsg_type = SCM_RIGHTS;
    cmsg->cmsg_len = CMSG_LEN(fd_bytes);
    memcpy(CMSG_DATA(cmsg), fds.data(), fd_bytes);
  }
  while (true) {
    ssize_t n = sendmsg(sock, &msg, MSG_NOSIGNAL);
    if (n >= 0) return absl::OkStatus();
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      REDUCER_RETURN_IF_ERROR(WaitFor(sock, POLLOUT, absl::InfiniteFuture()));
      continue;
    }
    return absl::ErrnoToStatus(
        errno, absl::StrCat("sendmsg of ", bytes.size(), " bytes and ",
                            fds.size(), " fds on socket ", sock));
  }
}

absl::StatusOr<Received> ReceiveWithFds(int sock, size_t max_bytes,
                                        size_t max_fds, absl::Time deadline) {
  if (max_fds > kMaxFdsPerMessage) max_fds = kMaxFdsPerMessage;
  Received received;
  // One byte more than allowed, so that an oversized message is seen as such
  // even where MSG_TRUNC would not be reported.
  std::string buffer(max_bytes + 1, '\0');
  std::vector<char> control(max_fds > 0 ? CMSG_SPACE(max_fds * sizeof(int))
                                        : 0);
  while (true) {
    REDUCER_RETURN_IF_ERROR(WaitFor(sock, POLLIN, deadline));
    iovec iov{buffer.data(), buffer.size()};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.empty() ? nullptr : control.data();
    msg.msg_controllen = control.size();
    ssize_t n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
    if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) {
      continue;
    }
    if (n < 0) {
      return absl::ErrnoToStatus(errno,
                                 absl::StrCat("recvmsg on socket ", sock));
    }
    // Take ownership of whatever arrived before judging the message.
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr;
         c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < count; ++i) {
        int fd;
        memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        received.fds.emplace_back(fd);
      }
    }
    if (n == 0 && received.fds.empty()) {
      return absl::UnavailableError(absl::StrCat("peer closed socket ", sock));
    }
    if ((msg.msg_flags & MSG_CTRUNC) != 0 || received.fds.size() > max_fds) {
      return absl::OutOfRangeError(absl::StrCat(
          "message on socket ", sock, " carried more than ", max_fds, " fds (",
          received.fds.size(), " arrived, closed)"));
    }
    if ((msg.msg_flags & MSG_TRUNC) != 0 ||
        static_cast<size_t>(n) > max_bytes) {
      return absl::OutOfRangeError(absl::StrCat(
          "message on socket ", sock, " is longer than ", max_bytes, " bytes (",
          received.fds.size(), " fds with it closed)"));
    }
    buffer.resize(static_cast<size_t>(n));
    received.bytes = std::move(buffer);
    return received;
  }
}

absl::StatusOr<PeerCredentials> PeerOf(int sock) {
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
    return absl::ErrnoToStatus(
        errno, absl::StrCat("getsockopt(SO_PEERCRED) on socket ", sock));
  }
  return PeerCredentials{cred.pid, cred.uid, cred.gid};
}

}  // namespace reducer
