#include "core/shm/range_allocator.h"

#include <iterator>

namespace reducer {

RangeAllocator::RangeAllocator(size_t bytes)
    : size_(bytes / kAlignment * kAlignment) {
  if (size_ > 0) free_[0] = size_;
}

std::optional<uint64_t> RangeAllocator::Allocate(size_t n) {
  // Also keeps the rounding below from overflowing.
  if (n > size_) return std::nullopt;
  const uint64_t bytes =
      n == 0 ? kAlignment : (n + kAlignment - 1) / kAlignment * kAlignment;
  absl::MutexLock lock(&mu_);
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < bytes) continue;
    const uint64_t offset = it->first;
    const uint64_t left = it->second - bytes;
    free_.erase(it);
    if (left > 0) free_[offset + bytes] = left;
    live_[offset] = bytes;
    used_ += bytes;
    return offset;
  }
  return std::nullopt;
}

bool RangeAllocator::Free(uint64_t offset) {
  absl::MutexLock lock(&mu_);
  auto live = live_.find(offset);
  if (live == live_.end()) return false;
  uint64_t begin = offset, bytes = live->second;
  used_ -= bytes;
  live_.erase(live);
  auto next = free_.lower_bound(begin);
  if (next != free_.end() && next->first == begin + bytes) {
    bytes += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == begin) {
      begin = prev->first;
      bytes += prev->second;
      free_.erase(prev);
    }
  }
  free_[begin] = bytes;
  return true;
}

size_t RangeAllocator::used() const {
  absl::MutexLock lock(&mu_);
  return used_;
}

}  // namespace reducer
