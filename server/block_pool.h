// BlockPool: recycles the fixed-size buffers that hold staged contributions
// and reduced results.
//
// Why: on the virtual machines reducerd runs on, touching fresh pages costs
// a page fault each (measured: a third of reducerd's CPU at 64 MiB before
// this pool), and malloc returns blocks of a MiB to the kernel on free.
// Keeping up to `max_free` blocks warm removes those faults from the
// steady state.
//
//   BlockPool pool(1 << 20, 64);
//   BlockPool::Block b = pool.Get();        // chunk_bytes writable bytes
//   grpc::Slice s = pool.ToSlice(std::move(b), len);  // back to the pool
//                                                    // when gRPC drops it
//
// Thread-safe.
#ifndef REDUCER_SERVER_BLOCK_POOL_H_
#define REDUCER_SERVER_BLOCK_POOL_H_

#include <cstddef>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/support/slice.h"

namespace reducer {

class BlockPool {
 public:
  // Returns a block to its pool when destroyed.
  struct Returner {
    BlockPool* pool;
    void operator()(char* p) const;
  };
  using Block = std::unique_ptr<char[], Returner>;

  // Blocks hold `block_bytes`; at most `max_free` idle blocks are kept.
  BlockPool(size_t block_bytes, size_t max_free);
  ~BlockPool();
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  size_t block_bytes() const { return block_bytes_; }

  // A block of block_bytes() bytes, contents unspecified.
  Block Get();

  // Wraps the first `len` bytes of `block` as a slice that returns the
  // block to the pool once gRPC and every copy of the slice are done. The
  // pool must outlive the slice (the Server owns both and shuts gRPC down
  // first).
  grpc::Slice ToSlice(Block block, size_t len);

 private:
  void Put(char* p);

  const size_t block_bytes_;
  const size_t max_free_;
  absl::Mutex mu_;
  std::vector<char*> free_ ABSL_GUARDED_BY(mu_);
};

}  // namespace reducer

#endif  // REDUCER_SERVER_BLOCK_POOL_H_
