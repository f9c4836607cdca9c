// libFuzzer target over what reducerd reads from the same-host path's shared
// memory, which its client writes: the control segment it adopts
// (ControlSegment::Adopt over a memfd of fuzzed size, seals and header), the
// request ring it drains (MessageRing::TryPop under hostile head, tail,
// lengths and wrap markers; each record then parsed as the
// v1::CollectiveRequest reducerd takes it for), the response ring it pushes
// into while the client owns the tail (MessageRing::TryPush), the doorbell
// words in both rings' headers, and the result segment's ranges
// (RangeAllocator, with hostile offsets to free).
//
// SharedMemorySession's checks of a parsed record (its call id, header,
// offset, `data_range` bounds and `released` ranges) are private to the
// session, which needs a job, a socket and a result segment: they are not
// reached here.
//
// Input layout (missing bytes read as zero; integers little-endian):
//   flags (u8): bit 0: also adopt a control segment built from this input;
//     bits 1, 2, 3: leave off F_SEAL_GROW, F_SEAL_SHRINK, F_SEAL_SEAL;
//     bit 4: add F_SEAL_WRITE; bits 5-7: the memfd's size in pages, 7
//     meaning the layout's size (ControlSegment::kBytes).
//   capacity (u8): the small rings hold 64 + 8 * capacity bytes.
//   request ring header, then response ring header, each: head (u64),
//     tail (u64), data bell word (u32), space bell word (u32).
//   control header (32 bytes, only when flags bit 0): the control
//     segment's first bytes (magic, version, nonce).
//   data_len (u16), then data_len bytes: the request ring's records, laid
//     from the ring's offset tail % capacity on, wrapping at its end.
//   push_count (u8), then push_count lengths (u16) of response records.
//   range_bytes (u16): the size of the area RangeAllocator divides; then,
//     to the end, operations of 3 bytes each: op (u8), argument (u16).
//
// Invariants checked (a trap when broken), besides nothing reading or
// writing outside its buffer (each small ring is its own heap block):
//   - a popped record is at most the ring's max_record_bytes();
//   - on a response ring that starts empty, what TryPush accepted pops back
//     in order, byte for byte, and a refusal is only for a record above the
//     limit;
//   - RangeAllocator gives what a first-fit model of its live ranges says,
//     frees exactly the offsets it gave, counts used() alike, and merges
//     every free range back into one.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/shm/control_segment.h"
#include "core/shm/message_ring.h"
#include "core/shm/range_allocator.h"
#include "proto/reducer/v1/reducer.pb.h"

namespace {

using reducer::ControlSegment;
using reducer::MessageRing;
using reducer::RangeAllocator;

// reducerd pops until a ring is empty; a bound keeps one input fast (a
// 1 MiB ring published whole holds 131072 empty records). A small ring
// holds at most 263 records, so it is always drained.
constexpr int kMaxPops = 512;

// Where MessageRing keeps its indices and bells (message_ring.h: three
// 64-byte lines, head's then tail's).
constexpr size_t kHeadIndex = 0;
constexpr size_t kDataBell = 8;
constexpr size_t kTailIndex = 64;
constexpr size_t kSpaceBell = 72;

class ByteReader {
 public:
  ByteReader(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  uint8_t Byte() { return pos_ < size_ ? data_[pos_++] : 0; }
  uint64_t Uint(int bytes) {
    uint64_t v = 0;
    for (int i = 0; i < bytes; ++i) {
      v |= static_cast<uint64_t>(Byte()) << (8 * i);
    }
    return v;
  }
  // Up to `n` bytes (fewer at the end of the input).
  absl::string_view Bytes(size_t n) {
    const size_t take = std::min(n, remaining());
    absl::string_view bytes(reinterpret_cast<const char*>(data_ + pos_), take);
    pos_ += take;
    return bytes;
  }
  size_t remaining() const { return pos_ < size_ ? size_ - pos_ : 0; }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

struct RingHeader {
  uint64_t head = 0;
  uint64_t tail = 0;
  uint32_t data_bell = 0;
  uint32_t space_bell = 0;
};

RingHeader ReadRingHeader(ByteReader& in) {
  RingHeader h;
  h.head = in.Uint(8);
  h.tail = in.Uint(8);
  h.data_bell = static_cast<uint32_t>(in.Uint(4));
  h.space_bell = static_cast<uint32_t>(in.Uint(4));
  return h;
}

// Writes `h` into the ring at `base` (zeroed, FootprintBytes(capacity)) and
// lays `records` from offset h.tail % capacity on, as the peer would.
void PlaceRing(char* base, size_t capacity, const RingHeader& h,
               absl::string_view records) {
  std::memcpy(base + kHeadIndex, &h.head, 8);
  std::memcpy(base + kDataBell, &h.data_bell, 4);
  std::memcpy(base + kTailIndex, &h.tail, 8);
  std::memcpy(base + kSpaceBell, &h.space_bell, 4);
  char* data = base + MessageRing::kHeaderBytes;
  const size_t n = std::min(records.size(), capacity);
  const size_t at = h.tail % capacity;
  const size_t first = std::min(n, capacity - at);
  std::memcpy(data + at, records.data(), first);
  std::memcpy(data, records.data() + first, n - first);
}

// Record `n` of `size` bytes, different from record to record.
std::string Record(size_t n, size_t size) {
  std::string bytes(size, '\0');
  for (size_t i = 0; i < size; ++i) {
    bytes[i] = static_cast<char>((n * 131 + i * 7 + 1) & 0xff);
  }
  return bytes;
}

// What reducerd does with its request ring: pop every record and parse it.
void DrainRequests(MessageRing& ring) {
  std::string record;
  for (int i = 0; i < kMaxPops; ++i) {
    absl::StatusOr<bool> popped = ring.TryPop(&record);
    if (!popped.ok() || !*popped) return;
    if (record.size() > ring.max_record_bytes()) __builtin_trap();
    reducer::v1::CollectiveRequest request;
    if (request.ParseFromString(record)) {
      (void)request.ByteSizeLong();  // walks every field parsed
    }
  }
}

// What reducerd does with its response ring (push records of `lengths`,
// reduced to at most a little over the limit), then what the client does
// (pop them). `empty_at_start`: the header said head == tail, aligned, far
// from wrapping, so every record accepted must pop back unchanged.
void ExerciseResponses(MessageRing& ring, const std::vector<uint16_t>& lengths,
                       bool empty_at_start) {
  std::deque<std::string> expected;
  std::string record;
  auto pop_one = [&]() -> bool {
    absl::StatusOr<bool> popped = ring.TryPop(&record);
    if (!empty_at_start) return popped.ok() && *popped;
    if (!popped.ok()) __builtin_trap();
    if (!*popped) {
      if (!expected.empty()) __builtin_trap();
      return false;
    }
    if (expected.empty() || record != expected.front()) __builtin_trap();
    expected.pop_front();
    return true;
  };
  for (size_t i = 0; i < lengths.size(); ++i) {
    const size_t size = lengths[i] % (ring.max_record_bytes() + 9);
    const std::string sent = Record(i, size);
    absl::StatusOr<bool> pushed = ring.TryPush(sent);
    if (!pushed.ok()) {
      const bool too_large =
          pushed.status().code() == absl::StatusCode::kInvalidArgument;
      if (too_large != (size > ring.max_record_bytes())) __builtin_trap();
      if (empty_at_start && !too_large) __builtin_trap();
      continue;
    }
    if (*pushed) {
      if (empty_at_start) expected.push_back(sent);
    } else {
      pop_one();  // full: the client makes room
    }
  }
  for (int i = 0; i < kMaxPops && pop_one(); ++i) {
  }
  if (empty_at_start && !expected.empty()) __builtin_trap();
}

// Whether a ring with header `h` starts empty and consistent, its indices
// far from 2^64: past that wrap, a capacity that is not a power of two
// places the next record away from where the last one ended (over
// unread ones), which only a peer that set the indices there can cause.
bool EmptyAndAligned(const RingHeader& h) {
  return h.head == h.tail && h.head % 8 == 0 && h.head < (uint64_t{1} << 63);
}

// A 64-byte aligned heap block of exactly one small ring, so that the
// sanitizers see any access past its end.
struct RingBlock {
  explicit RingBlock(size_t capacity)
      : bytes(MessageRing::FootprintBytes(capacity)),
        base(static_cast<char*>(::operator new(bytes, std::align_val_t{64}))) {
    std::memset(base, 0, bytes);
  }
  ~RingBlock() { ::operator delete(base, std::align_val_t{64}); }
  RingBlock(const RingBlock&) = delete;
  RingBlock& operator=(const RingBlock&) = delete;

  const size_t bytes;
  char* const base;
};

// What reducerd reads of a client's control segment: a memfd laid out from
// the input, adopted as SharedMemoryListener does, then its rings served.
void FuzzControlSegment(uint8_t flags, absl::string_view control_header,
                        const RingHeader& requests, const RingHeader& responses,
                        absl::string_view records,
                        const std::vector<uint16_t>& lengths) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t pages = flags >> 5;
  const size_t bytes = pages == 7 ? ControlSegment::kBytes : pages * page;
  const int fd = memfd_create("fuzz-control", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return;
  // What the client wrote: its header, then (at the layout's size) both
  // rings' headers and the request ring's records.
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    close(fd);
    return;
  }
  if (bytes > 0) {
    void* mapped =
        mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (mapped == MAP_FAILED) {
      close(fd);
      return;
    }
    char* base = static_cast<char*>(mapped);
    std::memcpy(base, control_header.data(),
                std::min(bytes, control_header.size()));
    if (bytes == ControlSegment::kBytes) {
      char* rings = base + ControlSegment::kRingsOffset;
      PlaceRing(rings, MessageRing::kDefaultCapacity, requests, records);
      PlaceRing(
          rings + MessageRing::FootprintBytes(MessageRing::kDefaultCapacity),
          MessageRing::kDefaultCapacity, responses, "");
    }
    munmap(mapped, bytes);
  }
  int seals = F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL;
  if ((flags & 2) != 0) seals &= ~F_SEAL_GROW;
  if ((flags & 4) != 0) seals &= ~F_SEAL_SHRINK;
  if ((flags & 8) != 0) seals &= ~F_SEAL_SEAL;
  if ((flags & 16) != 0) seals |= F_SEAL_WRITE;
  if (fcntl(fd, F_ADD_SEALS, seals) != 0) {
    close(fd);
    return;
  }
  absl::StatusOr<std::unique_ptr<ControlSegment>> control =
      ControlSegment::Adopt(fd);  // takes the descriptor
  if (!control.ok()) return;
  (void)(*control)->nonce();
  DrainRequests((*control)->requests());
  ExerciseResponses((*control)->responses(), lengths,
                    EmptyAndAligned(responses));
}

// The offset of `n` bytes that a first-fit allocator over `size` bytes with
// `live` ranges (offset -> rounded bytes) gives, or nullopt.
std::optional<uint64_t> FirstFit(const std::map<uint64_t, uint64_t>& live,
                                 uint64_t size, uint64_t n) {
  uint64_t free_from = 0;
  for (const auto& [offset, bytes] : live) {
    if (offset - free_from >= n) return free_from;
    free_from = offset + bytes;
  }
  if (size - free_from >= n) return free_from;
  return std::nullopt;
}

// The result segment's ranges: Allocate and Free in the input's order,
// checked against a model.
void FuzzRanges(ByteReader& in) {
  constexpr uint64_t kAlign = RangeAllocator::kAlignment;
  RangeAllocator ranges(in.Uint(2));
  if (ranges.size() % kAlign != 0) __builtin_trap();
  std::map<uint64_t, uint64_t> live;
  uint64_t used = 0;
  auto check_free = [&](uint64_t offset) {
    auto it = live.find(offset);
    const bool freed = ranges.Free(offset);
    if (freed != (it != live.end())) __builtin_trap();
    if (freed) {
      used -= it->second;
      live.erase(it);
    }
  };
  while (in.remaining() > 0) {
    const uint8_t op = in.Byte();
    const uint64_t arg = in.Uint(2);
    switch (op % 3) {
      case 0: {
        const uint64_t bytes =
            arg == 0 ? kAlign : (arg + kAlign - 1) / kAlign * kAlign;
        const std::optional<uint64_t> want =
            arg > ranges.size() ? std::nullopt
                                : FirstFit(live, ranges.size(), bytes);
        const std::optional<uint64_t> got = ranges.Allocate(arg);
        if (got != want) __builtin_trap();
        if (got.has_value()) {
          live[*got] = bytes;
          used += bytes;
        }
        break;
      }
      case 1:  // an offset on the alignment, live or not
        check_free(arg * kAlign % (ranges.size() + kAlign));
        break;
      default:  // any offset
        check_free(arg);
        break;
    }
    if (ranges.used() != used) __builtin_trap();
  }
  while (!live.empty()) check_free(live.begin()->first);
  if (ranges.used() != 0) __builtin_trap();
  if (ranges.size() > 0 && ranges.Allocate(ranges.size()) != uint64_t{0}) {
    __builtin_trap();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ByteReader in(data, size);
  const uint8_t flags = in.Byte();
  const size_t capacity = 64 + 8 * static_cast<size_t>(in.Byte());
  const RingHeader requests = ReadRingHeader(in);
  const RingHeader responses = ReadRingHeader(in);
  std::string control_header;
  if ((flags & 1) != 0) control_header = std::string(in.Bytes(32));
  const absl::string_view records = in.Bytes(in.Uint(2));
  std::vector<uint16_t> lengths(in.Byte());
  for (uint16_t& n : lengths) n = static_cast<uint16_t>(in.Uint(2));

  {
    RingBlock request_block(capacity);
    RingBlock response_block(capacity);
    PlaceRing(request_block.base, capacity, requests, records);
    PlaceRing(response_block.base, capacity, responses, "");
    MessageRing request_ring(request_block.base, capacity);
    MessageRing response_ring(response_block.base, capacity);
    DrainRequests(request_ring);
    ExerciseResponses(response_ring, lengths, EmptyAndAligned(responses));
  }
  if ((flags & 1) != 0) {
    FuzzControlSegment(flags, control_header, requests, responses, records,
                       lengths);
  }
  FuzzRanges(in);
  return 0;
}
