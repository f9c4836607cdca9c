// SharedMemoryResults: one job's result segment on one reducerd (docs/same_host.md,
// "Results"): the memfd every same-host session of the job maps read-only (sealed with
// F_SEAL_FUTURE_WRITE: no session can map it writable),
// whose ranges reducerd fills with results and hands to ranks, each range
// counted by references and freed with its last.
//
//   auto results = SharedMemoryResults::Create(bytes);        // the job's first session
//   std::shared_ptr<SharedMemoryResults::Writing> w = (*results)->Open(identity);
//   ... copy the result into segment().data() + w->range ...
//   (*results)->Close(w);      // done writing; the reference stays
//   (*results)->Unref(w->range);  // the rank released it (or its session ended)
//
// A result that is the same for several ranks (an all-reduce's, a
// broadcast's, an all-gather's) is written once and its range handed to
// each: the Collective (or a relay) sends every such rank the same bytes
// (the same SharedBytes, of the same owner), so a call whose result's first
// message starts with the piece another call's did, at the same offset and
// with the same result size, shares that call's range for as long as the
// range lives (some rank still holds it), however late the call comes. A
// call skips a message whose bytes another call of the range copied
// already (the same offset, and at least as far); it copies any other
// itself (the bytes are the same), so every byte of a call's result is in
// the range once the call has taken all of its messages. A result only
// one rank gets (a reduce-scatter's part) is a range of its own.
//
// The first 64 bytes hold reducerd's nonce and are never handed out, so a
// result as large as the segment's size less 64 fits.
//
// Not thread-safe: the job's one serving thread (SharedMemoryJob) uses it.
#ifndef REDUCER_SERVER_SHM_RESULTS_H_
#define REDUCER_SERVER_SHM_RESULTS_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "core/shm/range_allocator.h"
#include "core/shm/shared_segment.h"
#include "server/engine/shared_bytes.h"

namespace reducer {

class SharedMemoryResults {
 public:
  // What tells results apart: the result's size, and the first piece of the
  // first message a call got for it, with that message's offset.
  struct Identity {
    size_t bytes = 0;
    uint64_t offset = 0;
    std::weak_ptr<const ByteOwner> owner;
    const char* data = nullptr;  // null: matches nothing
  };
  // A live range of a result, and what calls copied into it.
  struct Writing {
    uint64_t range = 0;
    Identity identity;
    int writers = 0;  // calls that opened it and did not close it
    // Message offset -> the end of the bytes copied in from there.
    absl::flat_hash_map<uint64_t, uint64_t> written;

    // True when some call copied a message starting at `offset` at least
    // as far as `end`: the range holds those bytes, nothing to copy.
    bool Holds(uint64_t offset, uint64_t end) const {
      auto it = written.find(offset);
      return it != written.end() && it->second >= end;
    }
    // Records that a call copied the message from `offset` to `end`.
    void MarkCopied(uint64_t offset, uint64_t end) {
      uint64_t& copied_to = written[offset];
      copied_to = std::max(copied_to, end);
    }
  };

  // A new segment of `bytes` (SharedSegment::Create's RESOURCE_EXHAUSTED
  // when it does not fit) with a fresh nonce in its first 64 bytes.
  static absl::StatusOr<std::unique_ptr<SharedMemoryResults>> Create(
      size_t bytes);

  const SharedSegment& segment() const { return segment_; }
  char* data() { return static_cast<char*>(segment_.data()); }
  size_t size() const { return segment_.size(); }
  const std::string& nonce() const { return nonce_; }
  // Bytes of live ranges (the nonce's included).
  size_t used() const { return ranges_.used(); }
  // Live ranges (the nonce's not counted).
  size_t live_ranges() const { return refs_.size(); }

  // The range for a call's result of `identity`: a live one whose
  // identity matches (with one reference more), else a new one with one
  // reference; null when no free span is that large.
  std::shared_ptr<Writing> Open(const Identity& identity);
  // The call that opened `writing` writes no more (its reference stays).
  void Close(const std::shared_ptr<Writing>& writing);
  // Drops one reference to the range at `range`; the last frees it (and
  // what matched its result with it). False when no live range starts
  // there.
  bool Unref(uint64_t range);

  explicit SharedMemoryResults(SharedSegment segment);  // Create()

 private:
  SharedSegment segment_;
  std::string nonce_;
  RangeAllocator ranges_;
  absl::flat_hash_map<uint64_t, int> refs_;  // range -> references
  std::vector<std::shared_ptr<Writing>> writing_;  // one per live range
};

}  // namespace reducer

#endif  // REDUCER_SERVER_SHM_RESULTS_H_
