// ChunkPool: recycles the fixed-size buffers, one chunk (--chunk_bytes)
// each, that hold staged contributions and reduced results.
//
// Why: on the virtual machines reducerd runs on, touching fresh pages costs
// a page fault each (measured: a third of reducerd's CPU at 64 MiB before
// this pool), and malloc returns buffers of a MiB to the kernel on free.
// Keeping up to `max_free` buffers warm removes those faults from the
// steady state.
//
//   ChunkPool pool(1 << 20, 64);
//   ChunkPool::Buffer b = pool.Get();              // chunk_bytes() writable
//   SharedBytes s = pool.Share(std::move(b), len); // read-only from here on;
//                                                  // back to the pool when
//                                                  // the last copy goes
//
// Thread-safe.
#ifndef REDUCER_SERVER_ENGINE_CHUNK_POOL_H_
#define REDUCER_SERVER_ENGINE_CHUNK_POOL_H_

#include <cstddef>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "server/engine/shared_bytes.h"

namespace reducer {

class ChunkPool {
 public:
  // Returns a buffer to its pool when destroyed.
  struct Returner {
    ChunkPool* pool;
    void operator()(char* p) const;
  };
  using Buffer = std::unique_ptr<char[], Returner>;

  // Buffers hold `chunk_bytes`; at most `max_free` idle ones are kept.
  ChunkPool(size_t chunk_bytes, size_t max_free);
  ~ChunkPool();
  ChunkPool(const ChunkPool&) = delete;
  ChunkPool& operator=(const ChunkPool&) = delete;

  size_t chunk_bytes() const { return chunk_bytes_; }

  // A buffer of chunk_bytes() bytes, contents unspecified.
  Buffer Get();

  // The first `len` bytes of `buffer`, shared read-only; the buffer goes
  // back to the pool once every copy is gone. The pool must outlive them
  // (the Server owns it and shuts its transports down first).
  SharedBytes Share(Buffer buffer, size_t len);

 private:
  void Put(char* p);

  const size_t chunk_bytes_;
  const size_t max_free_;
  absl::Mutex mu_;
  std::vector<char*> free_ ABSL_GUARDED_BY(mu_);
};

}  // namespace reducer

#endif  // REDUCER_SERVER_ENGINE_CHUNK_POOL_H_
