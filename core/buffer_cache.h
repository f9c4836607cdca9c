// BufferCache keeps large freed tensor buffers for reuse.
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

namespace reducer {

class BufferCache;

// Memory the host cannot address directly (a GPU's): how a buffer of it is
// freed and copied. Implemented outside core/ (the client's CUDA staging);
// an instance has static storage duration.
struct ForeignMemory {
  // Frees `p`.
  void (*free)(void* p);
  // New memory of the same kind (on the same device) holding a copy of the
  // `bytes` bytes at `p`; aborts when that fails, as allocation does.
  void* (*clone)(const void* p, size_t bytes);
};

// Frees a tensor buffer: through `foreign` if set, else back to its cache if
// it has one, else to malloc; or, for memory lent by another owner (a range
// of a shared-memory segment, see Tensor::Lent), frees nothing and drops the
// reference `lender`, whose last holder takes the memory back.
struct BufferDeleter {
  std::shared_ptr<BufferCache> cache;
  size_t capacity = 0;  // bytes the buffer holds (for the cache)
  const ForeignMemory* foreign = nullptr;  // not owned; static
  mutable std::shared_ptr<const void> lender;  // set: lent memory
  void operator()(void* p) const;
};

using Buffer = std::unique_ptr<void, BufferDeleter>;

// A buffer of `bytes` bytes (at least one cache line), 64-byte aligned, from
// malloc; its contents are unspecified. Aborts when memory is exhausted, as
// operator new does.
Buffer AllocateBuffer(size_t bytes);

class BufferCache : public std::enable_shared_from_this<BufferCache> {
 public:
  // Buffers smaller than this are left to malloc, which serves them well.
  static constexpr size_t kMinCachedBytes = 64 << 10;

  // Keeps at most `max_idle_bytes` of idle buffers.
  explicit BufferCache(size_t max_idle_bytes);
  ~BufferCache();
  BufferCache(const BufferCache&) = delete;
  BufferCache& operator=(const BufferCache&) = delete;

  // A buffer of at least `bytes` bytes, reused when one of the same size
  // class is idle. Contents unspecified. The cache must be owned by a
  // shared_ptr.
  Buffer Get(size_t bytes);

  size_t idle_bytes();

 private:
  friend struct BufferDeleter;
  void Put(void* p, size_t capacity);

  const size_t max_idle_bytes_;
  absl::Mutex mu_;
  std::multimap<size_t, void*> idle_ ABSL_GUARDED_BY(mu_);  // by capacity
  size_t idle_bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace reducer

#endif  // REDUCER_CORE_BUFFER_CACHE_H_
