#include "server/block_pool.h"

#include <utility>

#include "grpc/slice.h"

namespace reducer {
namespace {

struct SliceOwner {
  BlockPool::Block block;
};

void DestroySliceOwner(void* owner) { delete static_cast<SliceOwner*>(owner); }

}  // namespace

void BlockPool::Returner::operator()(char* p) const { pool->Put(p); }

BlockPool::BlockPool(size_t block_bytes, size_t max_free)
    : block_bytes_(block_bytes), max_free_(max_free) {}

BlockPool::~BlockPool() {
  absl::MutexLock lock(&mu_);
  for (char* p : free_) delete[] p;
}

BlockPool::Block BlockPool::Get() {
  {
    absl::MutexLock lock(&mu_);
    if (!free_.empty()) {
      char* p = free_.back();
      free_.pop_back();
      return Block(p, Returner{this});
    }
  }
  return Block(new char[block_bytes_], Returner{this});
}

void BlockPool::Put(char* p) {
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

grpc::Slice BlockPool::ToSlice(Block block, size_t len) {
  char* data = block.get();
  auto* owner = new SliceOwner{std::move(block)};
  return grpc::Slice(
      grpc_slice_new_with_user_data(data, len, DestroySliceOwner, owner),
      grpc::Slice::STEAL_REF);
}

}  // namespace reducer
