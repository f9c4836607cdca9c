// FakeNotifySocket: a bound AF_UNIX datagram socket standing in for
// systemd's notify socket in tests of SystemdNotifier and of reducerd. It
// receives datagrams with their sender's credentials (SO_PASSCRED), as the
// manager reads them to attribute a message to the service's main PID.
//
//   FakeNotifySocket manager("/tmp/dir/notify");   // or "@abstract-name"
//   setenv("NOTIFY_SOCKET", "/tmp/dir/notify", 1);  // for a child process
//   pid_t sender;
//   std::string state = manager.Receive(absl::Seconds(5), &sender);
//
// Not thread-safe.
#ifndef REDUCER_SERVER_FAKE_NOTIFY_SOCKET_H_
#define REDUCER_SERVER_FAKE_NOTIFY_SOCKET_H_

#include <sys/types.h>

#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace reducer {

class FakeNotifySocket {
 public:
  // Binds `address`: a filesystem path (removed again by the destructor) or
  // "@name" in the abstract namespace. status() says whether it worked.
  explicit FakeNotifySocket(std::string address);
  ~FakeNotifySocket();
  FakeNotifySocket(const FakeNotifySocket&) = delete;
  FakeNotifySocket& operator=(const FakeNotifySocket&) = delete;

  // OK once bound; INTERNAL naming the address and the system error if not.
  const absl::Status& status() const { return status_; }

  // The next datagram and its sender's PID; "" and 0 when none arrives
  // within `timeout`.
  std::string Receive(absl::Duration timeout, pid_t* sender);

 private:
  const std::string address_;
  int fd_ = -1;
  absl::Status status_;
};

// A fresh directory under /tmp for a socket: a path must fit in sun_path's
// 108 bytes, which Bazel's test directories may not. Empty if mkdtemp fails.
std::string ShortTempDir();

}  // namespace reducer

#endif  // REDUCER_SERVER_FAKE_NOTIFY_SOCKET_H_
