// SystemdNotifier tells the service manager about reducerd's state through
// the sd_notify datagram protocol (systemd's Type=notify services), without
// linking libsystemd.
//
//   // in main(), once: $NOTIFY_SOCKET is set by systemd, unset otherwise
//   const char* address = std::getenv("NOTIFY_SOCKET");
//   absl::StatusOr<SystemdNotifier> notifier =
//       SystemdNotifier::Create(address != nullptr ? address : "");
//   ...
//   notifier->Notify("READY=1\nSTATUS=serving on 127.0.0.1:50051");
//   ...
//   notifier->Notify("STOPPING=1");
//
// The protocol: the manager binds an AF_UNIX datagram socket and passes its
// address in $NOTIFY_SOCKET, either a filesystem path ("/run/systemd/notify")
// or, with a leading '@', a name in Linux's abstract namespace. A message is
// one datagram of newline-separated VAR=VALUE assignments; the manager reads
// the sender's PID from the socket's credentials, so the service's main
// process must send it (NotifyAccess=main).
//
// Thread-safe: Notify opens a socket of its own for every message.
#ifndef REDUCER_SERVER_SD_NOTIFY_H_
#define REDUCER_SERVER_SD_NOTIFY_H_

#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace reducer {

class SystemdNotifier {
 public:
  // A notifier that sends to `socket_address` ($NOTIFY_SOCKET's value).
  // Empty: a notifier that sends nothing (not started by systemd).
  // INVALID_ARGUMENT naming the address when it is neither an absolute path
  // nor "@name", or does not fit in sockaddr_un.
  static absl::StatusOr<SystemdNotifier> Create(std::string socket_address);

  // False for the notifier of an empty address.
  bool enabled() const { return !socket_address_.empty(); }

  // Sends `state` ("READY=1", "STOPPING=1", "STATUS=...", several joined by
  // '\n') as one datagram. OK without sending when not enabled. UNAVAILABLE
  // naming the socket and the system error when it cannot be sent (nothing
  // listens there, the manager is gone).
  absl::Status Notify(absl::string_view state) const;

 private:
  explicit SystemdNotifier(std::string socket_address)
      : socket_address_(std::move(socket_address)) {}

  std::string socket_address_;  // as given: a path or "@name"; empty: off
};

}  // namespace reducer

#endif  // REDUCER_SERVER_SD_NOTIFY_H_
