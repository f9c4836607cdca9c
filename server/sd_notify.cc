#include "server/sd_notify.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstddef>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace reducer {
namespace {

// Fills `addr` for `address` (a path, or "@name" for the abstract namespace,
// whose first byte of sun_path is then NUL) and returns its length.
socklen_t FillAddress(const std::string& address, sockaddr_un* addr) {
  memset(addr, 0, sizeof(*addr));
  addr->sun_family = AF_UNIX;
  memcpy(addr->sun_path, address.data(), address.size());
  if (address[0] == '@') addr->sun_path[0] = '\0';
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + address.size());
}

}  // namespace

absl::StatusOr<SystemdNotifier> SystemdNotifier::Create(std::string socket_address) {
  if (socket_address.empty()) return SystemdNotifier(std::string());
  if (socket_address[0] != '/' && socket_address[0] != '@') {
    return absl::InvalidArgumentError(absl::StrCat(
        "NOTIFY_SOCKET \"", socket_address,
        "\" is neither an absolute path nor an abstract socket name (@name)"));
  }
  // A path needs its terminating NUL inside sun_path; an abstract name does not.
  const size_t limit = sizeof(sockaddr_un::sun_path) - (socket_address[0] == '/' ? 1 : 0);
  if (socket_address.size() > limit || socket_address.size() < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "NOTIFY_SOCKET \"", socket_address, "\" has ", socket_address.size(),
        " bytes; a socket address takes 2 to ", limit));
  }
  return SystemdNotifier(std::move(socket_address));
}

absl::Status SystemdNotifier::Notify(absl::string_view state) const {
  if (!enabled()) return absl::OkStatus();
  const int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    return absl::UnavailableError(absl::StrCat(
        "sd_notify: socket(AF_UNIX, SOCK_DGRAM): ", strerror(errno)));
  }
  sockaddr_un addr;
  const socklen_t length = FillAddress(socket_address_, &addr);
  const ssize_t sent =
      sendto(fd, state.data(), state.size(), MSG_NOSIGNAL,
             reinterpret_cast<const sockaddr*>(&addr), length);
  const int error = errno;
  close(fd);
  if (sent < 0) {
    return absl::UnavailableError(absl::StrCat("sd_notify: sending \"", state,
                                               "\" to ", socket_address_, ": ",
                                               strerror(error)));
  }
  if (static_cast<size_t>(sent) != state.size()) {
    return absl::UnavailableError(absl::StrCat(
        "sd_notify: ", socket_address_, " took ", sent, " of ", state.size(),
        " bytes of \"", state, "\""));
  }
  return absl::OkStatus();
}

}  // namespace reducer
