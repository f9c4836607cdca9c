// RangeAllocator: hands out byte ranges of a fixed-size area (a shared
// segment) by offset, first fit, each aligned to 64 bytes; freed ranges
// merge with their free neighbours.
//
//   RangeAllocator ranges(segment.size());
//   std::optional<uint64_t> at = ranges.Allocate(n);   // nullopt: no room
//   ... use [*at, *at + n) ...
//   ranges.Free(*at);
//
// Thread-safe.
#ifndef REDUCER_CORE_SHM_RANGE_ALLOCATOR_H_
#define REDUCER_CORE_SHM_RANGE_ALLOCATOR_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace reducer {

class RangeAllocator {
 public:
  static constexpr size_t kAlignment = 64;

  explicit RangeAllocator(size_t bytes);

  // The offset of `n` bytes no other live range overlaps (a zero-byte
  // request takes kAlignment), or nullopt when no free span is that large.
  std::optional<uint64_t> Allocate(size_t n);
  // Returns the range Allocate gave at `offset`; false (and nothing freed)
  // if no live range starts there.
  bool Free(uint64_t offset);

  size_t size() const { return size_; }
  // Bytes in live ranges, rounded up to kAlignment each.
  size_t used() const;

 private:
  const size_t size_;
  mutable absl::Mutex mu_;
  std::map<uint64_t, uint64_t> free_ ABSL_GUARDED_BY(mu_);  // offset -> bytes
  std::map<uint64_t, uint64_t> live_ ABSL_GUARDED_BY(mu_);  // offset -> bytes
  size_t used_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace reducer

#endif  // REDUCER_CORE_SHM_RANGE_ALLOCATOR_H_
