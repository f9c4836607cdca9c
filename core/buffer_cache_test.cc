#include "core/buffer_cache.h"

#include <cstdint>
#include <memory>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace reducer {
namespace {

TEST(BufferCacheTest, FreedBufferOfSameSizeIsReused) {
  auto cache = std::make_shared<BufferCache>(size_t{64} << 20);
  void* first;
  {
    Buffer a = cache->Get(1 << 20);
    first = a.get();
  }
  EXPECT_EQ(cache->idle_bytes(), size_t{1} << 20);
  Buffer b = cache->Get(1 << 20);
  EXPECT_EQ(b.get(), first);
  EXPECT_EQ(cache->idle_bytes(), 0u);
}

TEST(BufferCacheTest, BuffersAreAligned) {
  auto cache = std::make_shared<BufferCache>(size_t{64} << 20);
  for (size_t bytes : {size_t{0}, size_t{3}, size_t{100000}, size_t{1} << 20}) {
    Buffer b = cache->Get(bytes);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b.get()) % 64, 0u) << bytes;
  }
}

TEST(BufferCacheTest, KeepsNoMoreThanItsLimitIdle) {
  auto cache = std::make_shared<BufferCache>(size_t{3} << 20);
  {
    Buffer a = cache->Get(2 << 20);
    Buffer b = cache->Get(2 << 20);
  }
  EXPECT_EQ(cache->idle_bytes(), size_t{2} << 20);
}

TEST(BufferCacheTest, SmallBuffersBypassTheCache) {
  auto cache = std::make_shared<BufferCache>(size_t{64} << 20);
  { Buffer a = cache->Get(100); }
  EXPECT_EQ(cache->idle_bytes(), 0u);
}

TEST(BufferCacheTest, BuffersOutliveTheirOwnersReference) {
  auto cache = std::make_shared<BufferCache>(size_t{64} << 20);
  Buffer a = cache->Get(1 << 20);
  cache.reset();  // the buffer keeps the cache alive
  static_cast<char*>(a.get())[0] = 1;
}

}  // namespace
}  // namespace reducer
