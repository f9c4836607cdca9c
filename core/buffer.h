// Buffer: the memory a Tensor owns, with the deleter that knows where it goes
// back to (malloc, a BufferPool, another device, or a lender).
#ifndef REDUCER_CORE_BUFFER_H_
#define REDUCER_CORE_BUFFER_H_

#include <cstddef>
#include <memory>

namespace reducer {

class BufferPool;

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

// Frees a tensor buffer: through `foreign` if set, else back to its pool if
// it has one, else to malloc; or, for memory lent by another owner (a range
// of a shared-memory segment, see Tensor::Lent), frees nothing and drops the
// reference `lender`, whose last holder takes the memory back.
struct BufferDeleter {
  std::shared_ptr<BufferPool> pool;
  size_t capacity = 0;  // bytes the buffer holds (for the pool)
  const ForeignMemory* foreign = nullptr;      // not owned; static
  mutable std::shared_ptr<const void> lender;  // set: lent memory
  void operator()(void* p) const;
};

using Buffer = std::unique_ptr<void, BufferDeleter>;

// A buffer of `bytes` bytes (at least one cache line), 64-byte aligned, from
// malloc; its contents are unspecified. Aborts when memory is exhausted, as
// operator new does.
Buffer AllocateBuffer(size_t bytes);

// Hands out host buffers and takes them back for reuse when they are freed
// (BufferCache, core/buffer_cache.h). A pool must be owned by a shared_ptr:
// its buffers hold one, so it outlives them.
class BufferPool {
 public:
  virtual ~BufferPool() = default;

  // A buffer of at least `bytes` bytes, 64-byte aligned, whose deleter hands
  // it back to this pool. Contents unspecified.
  virtual Buffer Get(size_t bytes) = 0;

 private:
  friend struct BufferDeleter;
  // Takes back `p`, a buffer of `capacity` bytes that Get handed out.
  virtual void Put(void* p, size_t capacity) = 0;
};

}  // namespace reducer

#endif  // REDUCER_CORE_BUFFER_H_
