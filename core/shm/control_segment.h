// ControlSegment: the shared memory through which one client session and
// reducerd exchange the same-host path's messages: a header holding the
// handshake's nonce, then two MessageRings, requests (client to reducerd) and
// responses (reducerd to client). Both sides map it read-write; each checks
// what the other writes (see MessageRing).
//
//   // client                                 // reducerd, given the memfd
//   auto control = ControlSegment::Create(nonce);
//   SendWithFds(sock, hello, {control->fd()}); auto c = ControlSegment::Adopt(fd);
//   control->requests().Push(...);            c->requests().TryPop(&record);
//
// Layout: bytes [0, 4096) hold the magic "RDCRCTL1", the layout version and
// the 16-byte nonce; the request ring starts at 4096 and the response ring
// right after it, each of MessageRing::kDefaultCapacity.
#ifndef REDUCER_CORE_SHM_CONTROL_SEGMENT_H_
#define REDUCER_CORE_SHM_CONTROL_SEGMENT_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/shm/message_ring.h"
#include "core/shm/shared_segment.h"

namespace reducer {

class ControlSegment {
 public:
  static constexpr size_t kNonceBytes = 16;
  static constexpr size_t kRingsOffset = 4096;
  static constexpr size_t kBytes =
      kRingsOffset + 2 * MessageRing::FootprintBytes(MessageRing::kDefaultCapacity);

  // A new segment with `nonce` (kNonceBytes) in its header.
  static absl::StatusOr<std::unique_ptr<ControlSegment>> Create(
      absl::string_view nonce);
  // Maps a received memfd read-write; refused (INVALID_ARGUMENT naming what
  // differs) unless its size, magic and version are this layout's.
  static absl::StatusOr<std::unique_ptr<ControlSegment>> Adopt(int fd);

  // The nonce in the header, as it reads now.
  std::string nonce() const;
  int fd() const { return segment_.fd(); }
  // Where it is mapped in this process (every page of it mapped already:
  // Create and Adopt populate it, SharedSegment::Populate).
  const void* data() const { return segment_.data(); }
  MessageRing& requests() { return requests_; }
  MessageRing& responses() { return responses_; }

  explicit ControlSegment(SharedSegment segment);  // Create() / Adopt()

 private:
  SharedSegment segment_;
  MessageRing requests_;
  MessageRing responses_;
};

// `n` random bytes from the kernel's generator (getrandom), for nonces.
std::string RandomBytes(size_t n);

}  // namespace reducer

#endif  // REDUCER_CORE_SHM_CONTROL_SEGMENT_H_
