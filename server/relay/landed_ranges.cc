#include "server/relay/landed_ranges.h"

#include <algorithm>
#include <iterator>

namespace reducer {

void LandedRanges::Add(size_t begin, size_t end) {
  if (end <= begin) return;
  // The first range that ends at or after `begin` (it touches or overlaps
  // the new one, or lies after it).
  auto it = ranges_.upper_bound(begin);
  if (it != ranges_.begin() && std::prev(it)->second >= begin) --it;
  // Swallow every range that touches or overlaps [begin, end).
  while (it != ranges_.end() && it->first <= end) {
    begin = std::min(begin, it->first);
    end = std::max(end, it->second);
    it = ranges_.erase(it);
  }
  ranges_.emplace(begin, end);
}

bool LandedRanges::Covers(size_t begin, size_t end) const {
  if (end <= begin) return true;
  auto it = ranges_.upper_bound(begin);
  if (it == ranges_.begin()) return false;
  --it;
  return it->first <= begin && it->second >= end;
}

}  // namespace reducer
