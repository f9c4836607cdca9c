#include "server/engine/chunk_pacing.h"

#include <algorithm>
#include <cmath>

namespace reducer {

size_t PacedChunkBytes(double bytes_per_second, absl::Duration chunk_time,
                       size_t max_chunk_bytes, size_t current_chunk_bytes) {
  if (bytes_per_second <= 0 || chunk_time <= absl::ZeroDuration()) {
    return max_chunk_bytes;
  }
  const double target = bytes_per_second * absl::ToDoubleSeconds(chunk_time);
  const double current = static_cast<double>(current_chunk_bytes);
  if (current_chunk_bytes <= max_chunk_bytes && target >= current / 2 && target <= current * 2) {
    return current_chunk_bytes;
  }
  if (target >= static_cast<double>(max_chunk_bytes)) return max_chunk_bytes;
  if (target <= static_cast<double>(kMinPacedChunkBytes)) {
    return std::min(kMinPacedChunkBytes, max_chunk_bytes);
  }
  const size_t nearest = size_t{1} << static_cast<int>(std::lround(std::log2(target)));
  return std::clamp(nearest, std::min(kMinPacedChunkBytes, max_chunk_bytes),
                    max_chunk_bytes);
}

size_t InitialChunkBytes(absl::Duration chunk_time, size_t max_chunk_bytes) {
  if (chunk_time <= absl::ZeroDuration()) return max_chunk_bytes;
  return std::min(kUnpacedChunkBytes, max_chunk_bytes);
}

void PaceEstimate::Note(double bytes_per_second) {
  if (bytes_per_second <= 0) return;
  bytes_per_second_ = bytes_per_second_ == 0
                          ? bytes_per_second
                          : (bytes_per_second_ + bytes_per_second) / 2;
}

}  // namespace reducer
