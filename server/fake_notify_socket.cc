#include "server/fake_notify_socket.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstddef>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace reducer {

FakeNotifySocket::FakeNotifySocket(std::string address)
    : address_(std::move(address)) {
  fd_ = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd_ < 0) {
    status_ = absl::InternalError(absl::StrCat("socket: ", strerror(errno)));
    return;
  }
  const int on = 1;
  if (setsockopt(fd_, SOL_SOCKET, SO_PASSCRED, &on, sizeof(on)) != 0) {
    status_ = absl::InternalError(absl::StrCat("SO_PASSCRED: ", strerror(errno)));
    return;
  }
  sockaddr_un addr;
  memset(&addr, 0, sizeof(addr));
  addr.sun_family = AF_UNIX;
  if (address_.size() < 2 || address_.size() >= sizeof(addr.sun_path)) {
    status_ = absl::InternalError(absl::StrCat("bad socket address ", address_));
    return;
  }
  memcpy(addr.sun_path, address_.data(), address_.size());
  if (address_[0] == '@') addr.sun_path[0] = '\0';
  const socklen_t length =
      static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + address_.size());
  if (bind(fd_, reinterpret_cast<sockaddr*>(&addr), length) != 0) {
    status_ = absl::InternalError(
        absl::StrCat("bind ", address_, ": ", strerror(errno)));
  }
}

FakeNotifySocket::~FakeNotifySocket() {
  if (fd_ >= 0) close(fd_);
  if (status_.ok() && address_[0] == '/') unlink(address_.c_str());
}

std::string FakeNotifySocket::Receive(absl::Duration timeout, pid_t* sender) {
  *sender = 0;
  if (!status_.ok()) return "";
  pollfd ready = {fd_, POLLIN, 0};
  if (poll(&ready, 1, static_cast<int>(absl::ToInt64Milliseconds(timeout))) != 1) {
    return "";
  }
  char data[4096];
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(ucred))];
  iovec iov = {data, sizeof(data)};
  msghdr message;
  memset(&message, 0, sizeof(message));
  message.msg_iov = &iov;
  message.msg_iovlen = 1;
  message.msg_control = control;
  message.msg_controllen = sizeof(control);
  const ssize_t n = recvmsg(fd_, &message, MSG_DONTWAIT);
  if (n < 0) return "";
  for (cmsghdr* c = CMSG_FIRSTHDR(&message); c != nullptr;
       c = CMSG_NXTHDR(&message, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_CREDENTIALS) {
      ucred credentials;
      memcpy(&credentials, CMSG_DATA(c), sizeof(credentials));
      *sender = credentials.pid;
    }
  }
  return std::string(data, static_cast<size_t>(n));
}

std::string ShortTempDir() {
  char pattern[] = "/tmp/reducer_notify_XXXXXX";
  if (mkdtemp(pattern) == nullptr) return "";
  return pattern;
}

}  // namespace reducer
