#include "server/engine/chunk_pool.h"

#include <utility>

namespace reducer {
namespace {

// Holds a pooled buffer for as long as SharedBytes refer to it.
class PooledOwner final : public ByteOwner {
 public:
  explicit PooledOwner(ChunkPool::Buffer buffer) : buffer_(std::move(buffer)) {}
  const char* data() const { return buffer_.get(); }

 private:
  ChunkPool::Buffer buffer_;
};

}  // namespace

void ChunkPool::Returner::operator()(char* p) const { pool->Put(p); }

ChunkPool::ChunkPool(size_t chunk_bytes, size_t max_free)
    : chunk_bytes_(chunk_bytes), max_free_(max_free) {}

ChunkPool::~ChunkPool() {
  absl::MutexLock lock(&mu_);
  for (char* p : free_) delete[] p;
}

ChunkPool::Buffer ChunkPool::Get() {
  {
    absl::MutexLock lock(&mu_);
    if (!free_.empty()) {
      char* p = free_.back();
      free_.pop_back();
      return Buffer(p, Returner{this});
    }
  }
  return Buffer(new char[chunk_bytes_], Returner{this});
}

void ChunkPool::Put(char* p) {
  if (p == nullptr) return;
  {
    absl::MutexLock lock(&mu_);
    if (free_.size() < max_free_) {
      free_.push_back(p);
      return;
    }
  }
  delete[] p;
}

SharedBytes ChunkPool::Share(Buffer buffer, size_t len) {
  auto owner = std::make_shared<const PooledOwner>(std::move(buffer));
  const char* data = owner->data();
  return SharedBytes(std::move(owner), data, len);
}

}  // namespace reducer
