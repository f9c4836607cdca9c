#include "core/buffer_cache.h"

#include <cstdlib>

namespace reducer {
namespace {

// Cached sizes are rounded up to whole pages, so that tensors whose sizes
// differ by a few elements share buffers.
constexpr size_t kSizeClass = 4096;

size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }

}  // namespace

BufferCache::BufferCache(size_t max_idle_bytes)
    : max_idle_bytes_(max_idle_bytes) {}

BufferCache::~BufferCache() {
  absl::MutexLock lock(&mu_);
  for (auto& [capacity, p] : idle_) std::free(p);
}

Buffer BufferCache::Get(size_t bytes) {
  if (bytes < kMinCachedBytes) return AllocateBuffer(bytes);
  const size_t capacity = RoundUp(bytes, kSizeClass);
  {
    absl::MutexLock lock(&mu_);
    auto it = idle_.find(capacity);
    if (it != idle_.end()) {
      void* p = it->second;
      idle_.erase(it);
      idle_bytes_ -= capacity;
      return Buffer(p, BufferDeleter{shared_from_this(), capacity});
    }
  }
  Buffer fresh = AllocateBuffer(capacity);
  return Buffer(fresh.release(), BufferDeleter{shared_from_this(), capacity});
}

void BufferCache::Put(void* p, size_t capacity) {
  {
    absl::MutexLock lock(&mu_);
    if (idle_bytes_ + capacity <= max_idle_bytes_) {
      idle_.emplace(capacity, p);
      idle_bytes_ += capacity;
      return;
    }
  }
  std::free(p);
}

size_t BufferCache::idle_bytes() {
  absl::MutexLock lock(&mu_);
  return idle_bytes_;
}

}  // namespace reducer
