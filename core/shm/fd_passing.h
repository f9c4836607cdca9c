// Messages carrying file descriptors over a connected AF_UNIX SOCK_SEQPACKET
// socket (SCM_RIGHTS), and who is at the other end of one (SO_PEERCRED).
//
// A message is a nonempty string of bytes plus up to kMaxFdsPerMessage
// descriptors; SOCK_SEQPACKET keeps message boundaries, so one send is one
// receive. Received descriptors are close-on-exec (MSG_CMSG_CLOEXEC) and owned
// by the Received that holds them: each one not release()d is closed with it.
// A message whose bytes or descriptors do not fit the receiver's limits is an
// error, and every descriptor of it that arrived is closed, so nothing leaks.
// EINTR is retried everywhere. Blocking or nonblocking sockets both work.
#ifndef REDUCER_CORE_SHM_FD_PASSING_H_
#define REDUCER_CORE_SHM_FD_PASSING_H_

#include <sys/types.h>

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "core/shm/unique_fd.h"

namespace reducer {

// The kernel's limit on descriptors in one SCM_RIGHTS message (SCM_MAX_FD).
inline constexpr size_t kMaxFdsPerMessage = 253;

struct Received {
  std::string bytes;
  std::vector<UniqueFd> fds;
};

struct PeerCredentials {
  pid_t pid;
  uid_t uid;
  gid_t gid;
};

// Sends `bytes` (nonempty: an empty message would read as the peer closing)
// with duplicates of `fds` in the receiver. Waits while the socket's buffer
// is full; a closed peer is an error (no SIGPIPE).
absl::Status SendWithFds(int sock, absl::string_view bytes,
                         absl::Span<const int> fds);

// Receives one message of at most `max_bytes` bytes and `max_fds`
// descriptors, waiting until `deadline` (DEADLINE_EXCEEDED after it).
// UNAVAILABLE when the peer has closed its end; OUT_OF_RANGE when the message
// carried more bytes or descriptors than allowed (MSG_TRUNC / MSG_CTRUNC).
absl::StatusOr<Received> ReceiveWithFds(int sock, size_t max_bytes,
                                        size_t max_fds, absl::Time deadline);

// The process at the other end of `sock`, as it was when it connected (or
// created the socketpair).
absl::StatusOr<PeerCredentials> PeerOf(int sock);

}  // namespace reducer

#endif  // REDUCER_CORE_SHM_FD_PASSING_H_
