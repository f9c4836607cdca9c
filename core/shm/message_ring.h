// MessageRing: a single-producer, single-consumer queue of byte records in
// memory two processes share (a SharedSegment), with a Doorbell each way:
// the producer rings `data_bell` after publishing, the consumer rings
// `space_bell` after consuming.
//
//   MessageRing ring(segment.data() + offset, MessageRing::kDefaultCapacity);
//   // producer                         // consumer
//   ring.Push("bytes", deadline);       std::string r;
//                                       uint32_t seen = ring.data_bell().value();
//                                       if (!*ring.TryPop(&r))
//                                         ring.data_bell().WaitChange(seen, d);
//
// Layout at `base` (64-byte aligned, zeroed when new): three cache lines of
// indices and bells, then `capacity` bytes of records. `head` counts the
// bytes ever published and `tail` those ever consumed (64-bit, never wrap in
// practice). A record is an 8-byte length and its bytes, padded to 8; one
// that does not fit before the end of the buffer is preceded by a wrap
// marker (length ~0) and starts at offset 0.
//
// Neither side trusts the other: each index written by the peer is checked
// (head - tail within capacity, a multiple of 8, a length that fits both
// what is published and the space before the buffer's end), and a
// violation is DATA_LOSS naming what was wrong, never an access outside the
// ring. One thread at a time may produce and one consume.
#ifndef REDUCER_CORE_SHM_MESSAGE_RING_H_
#define REDUCER_CORE_SHM_MESSAGE_RING_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "core/shm/doorbell.h"

namespace reducer {

class MessageRing {
 public:
  static constexpr size_t kHeaderBytes = 192;
  static constexpr size_t kDefaultCapacity = size_t{1} << 20;

  // Bytes a ring of `capacity` takes in its segment.
  static constexpr size_t FootprintBytes(size_t capacity) {
    return kHeaderBytes + capacity;
  }

  // A view of the ring at `base`; `capacity` (a multiple of 8, at least
  // 64) must be what both sides agreed. Owns nothing.
  MessageRing(void* base, size_t capacity);

  // The largest record Push accepts: a quarter of the capacity.
  size_t max_record_bytes() const { return capacity_ / 4; }

  // Producer: appends `record` if it fits now, and rings data_bell.
  // False when the ring is full; INVALID_ARGUMENT when `record` is larger
  // than max_record_bytes(); DATA_LOSS when the consumer's index is corrupt.
  absl::StatusOr<bool> TryPush(absl::string_view record);
  // TryPush, waiting on space_bell while the ring is full (polling each
  // millisecond where the kernel refuses the sleep); DEADLINE_EXCEEDED
  // (naming how long it waited) if it is still full at `deadline`.
  absl::Status Push(absl::string_view record, absl::Time deadline);

  // Consumer: the next record into `*record` (true) or false if none is
  // published; rings space_bell after consuming. DATA_LOSS when the
  // producer's index or a record's length is corrupt.
  absl::StatusOr<bool> TryPop(std::string* record);

  Doorbell& data_bell() { return data_bell_; }
  Doorbell& space_bell() { return space_bell_; }

 private:
  struct alignas(64) Line {
    std::atomic<uint64_t> index;
    std::atomic<uint32_t> bell;
  };
  struct Header {
    Line head;   // written by the producer
    Line tail;   // written by the consumer
    Line spare;
  };
  static_assert(sizeof(Header) == kHeaderBytes, "three cache lines");

  // head - tail, checked; DATA_LOSS when out of range.
  absl::StatusOr<uint64_t> Used(uint64_t head, uint64_t tail) const;

  Header* const header_;
  char* const data_;
  const size_t capacity_;
  Doorbell data_bell_;
  Doorbell space_bell_;
};

}  // namespace reducer

#endif  // REDUCER_CORE_SHM_MESSAGE_RING_H_
