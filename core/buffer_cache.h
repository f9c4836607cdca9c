// BufferCache keeps large freed tensor buffers for reuse: the BufferPool
// (core/buffer.h) that a Client's result tensors take their buffers from.
//
// Why: fresh memory is expensive on virtual machines (measured: copying
// 64 MiB into freshly mapped pages took 110-270 ms here, against a few ms
// into pages already touched), and malloc maps buffers this large anew on
// every allocation. A Client owns one cache; the tensors it returns hand
// their buffers back to it when they are destroyed, so a training loop that
// reduces the same sizes each step reuses warm memory.
//
//   auto cache = std::make_shared<BufferCache>(256 << 20);
//   Tensor t = Tensor::Uninitialized(DataType::kFloat32, {1 << 24}, cache);
//   // ~Tensor returns the buffer to `cache` (or frees it if the cache is
//   // full); buffers keep the cache alive, so it may outlive its owner.
//
// Thread-safe.
#ifndef REDUCER_CORE_BUFFER_CACHE_H_
#define REDUCER_CORE_BUFFER_CACHE_H_

#include <cstddef>
#include <map>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "core/buffer.h"

namespace reducer {

class BufferCache final : public BufferPool,
                          public std::enable_shared_from_this<BufferCache> {
 public:
  // Buffers smaller than this are left to malloc, which serves them well.
  static constexpr size_t kMinCachedBytes = 64 << 10;

  // Keeps at most `max_idle_bytes` of idle buffers.
  explicit BufferCache(size_t max_idle_bytes);
  ~BufferCache() override;
  BufferCache(const BufferCache&) = delete;
  BufferCache& operator=(const BufferCache&) = delete;

  // A buffer of at least `bytes` bytes, reused when one of the same size
  // class is idle. Contents unspecified. The cache must be owned by a
  // shared_ptr.
  Buffer Get(size_t bytes) override;

  size_t idle_bytes();

 private:
  void Put(void* p, size_t capacity) override;

  const size_t max_idle_bytes_;
  absl::Mutex mu_;
  std::multimap<size_t, void*> idle_ ABSL_GUARDED_BY(mu_);  // by capacity
  size_t idle_bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace reducer

#endif  // REDUCER_CORE_BUFFER_CACHE_H_
