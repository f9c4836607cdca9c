#include "core/buffer.h"

#include <cstdio>
#include <cstdlib>

namespace reducer {
namespace {

// 64 bytes: a cache line, and the widest vector register (AVX-512).
constexpr size_t kAlignment = 64;

size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }

}  // namespace

void BufferDeleter::operator()(void* p) const {
  if (lender != nullptr) {
    lender.reset();  // the lender takes its memory back
    return;
  }
  if (p == nullptr) return;
  if (foreign != nullptr) {
    foreign->free(p);
  } else if (pool != nullptr) {
    pool->Put(p, capacity);
  } else {
    std::free(p);
  }
}

Buffer AllocateBuffer(size_t bytes) {
  const size_t capacity = bytes == 0 ? kAlignment : RoundUp(bytes, kAlignment);
  void* p =
      capacity < bytes ? nullptr : std::aligned_alloc(kAlignment, capacity);
  if (p == nullptr) {
    std::fprintf(stderr, "reducer: cannot allocate %zu bytes\n", bytes);
    std::abort();
  }
  return Buffer(p, BufferDeleter{nullptr, capacity});
}

}  // namespace reducer
