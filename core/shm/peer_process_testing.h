// Test helpers for the same-host tests that talk to a peer process: the
// socket pair they pass fds over, the deadline of their waits, and the exit
// code of a forked child.
#ifndef REDUCER_CORE_SHM_PEER_PROCESS_TESTING_H_
#define REDUCER_CORE_SHM_PEER_PROCESS_TESTING_H_

#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>

#include <utility>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/shm/unique_fd.h"

namespace reducer {

// A connected pair of AF_UNIX SOCK_SEQPACKET sockets, close-on-exec, the
// kind the same-host path passes fds over; both invalid when socketpair
// fails.
inline std::pair<UniqueFd, UniqueFd> SeqpacketPair() {
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds) != 0) {
    return {};
  }
  return {UniqueFd(fds[0]), UniqueFd(fds[1])};
}

// The deadline of a wait that must end (a peer's message, a doorbell's
// ring): far enough off that only a hang reaches it.
inline absl::Time Soon() { return absl::Now() + absl::Seconds(30); }

// Waits for `child` to end: its exit code, 128 + the signal that ended it,
// or -1 when waitpid fails.
inline int ExitCodeOf(pid_t child) {
  int status = 0;
  if (waitpid(child, &status, 0) != child) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace reducer

#endif  // REDUCER_CORE_SHM_PEER_PROCESS_TESTING_H_
