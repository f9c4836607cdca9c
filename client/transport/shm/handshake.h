// ShakeHands: the client's half of the same-host path's handshake
// (docs/same_host.md): creates the control and input segments, connects to
// reducerd's abstract socket, sends SharedMemoryHello with both memfds, and
// maps the result segment reducerd answers with, checking its nonce.
//
//   absl::StatusOr<SharedMemoryChannel> channel =
//       ShakeHands(ready.shared_memory_socket(), hello, options.shared_memory_bytes,
//                  deadline);
//
// Errors say why the path cannot be used, for kRequired's message or
// kAuto's fallback: UNAVAILABLE when the socket cannot be reached (reducerd
// runs on another host or in another network namespace); reducerd's own
// status when it refused (a wrong token, a session not holding the rank, a
// nonce that differs: not the same memory); RESOURCE_EXHAUSTED naming the
// limit when a segment does not fit (core/shm/memory_room.h); DATA_LOSS when
// the result segment does not hold reducerd's nonce; DEADLINE_EXCEEDED.
#ifndef REDUCER_CLIENT_TRANSPORT_SHM_HANDSHAKE_H_
#define REDUCER_CLIENT_TRANSPORT_SHM_HANDSHAKE_H_

#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/client_options.h"
#include "core/shm/control_segment.h"
#include "core/shm/shared_segment.h"
#include "core/shm/unique_fd.h"
#include "proto/reducer/v1/reducer.pb.h"

namespace reducer {

// What a handshake leaves: the socket (open for the session's life: its
// closing tells each side the other is gone) and the three segments.
struct SharedMemoryChannel {
  UniqueFd socket;
  std::unique_ptr<ControlSegment> control;
  std::unique_ptr<SharedSegment> input;   // ours, read-write; reducerd maps
                                          // it read-only
  std::unique_ptr<SharedSegment> result;  // reducerd's, mapped read-only
};

// `option`, unless REDUCER_SHARED_MEMORY says otherwise for this process
// ("off", "auto" or "required"; for tests that run one suite over both
// paths, and for diagnosis). Read once per process.
SharedMemory SharedMemoryFromEnvironment(SharedMemory option);

// `hello` without its nonce (ShakeHands draws one); `input_bytes` sizes the
// input segment.
absl::StatusOr<SharedMemoryChannel> ShakeHands(const std::string& socket_name,
                                               v1::SharedMemoryHello hello,
                                               size_t input_bytes,
                                               absl::Time deadline);

}  // namespace reducer

#endif  // REDUCER_CLIENT_TRANSPORT_SHM_HANDSHAKE_H_
