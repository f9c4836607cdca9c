// One block of pinned (page-locked) host memory that device staging's
// copies take whole, one user at a time, allocated at the first use.
//
//   PinnedBlock block(options.cuda_staging_bytes);
//   if (void* pinned = block.Acquire(bytes)) {
//     ... copy through `pinned` ...
//     block.Release();
//   } else {
//     ... copy through ordinary memory ...
//   }
#ifndef REDUCER_CLIENT_STAGING_CUDA_PINNED_BLOCK_H_
#define REDUCER_CLIENT_STAGING_CUDA_PINNED_BLOCK_H_

#include <cstddef>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace reducer {

// Thread-safe.
class PinnedBlock {
 public:
  // A block of `bytes`; nothing is allocated yet.
  explicit PinnedBlock(size_t bytes) : bytes_(bytes) {}
  // Frees the block. No copy may still use it.
  ~PinnedBlock();
  PinnedBlock(const PinnedBlock&) = delete;
  PinnedBlock& operator=(const PinnedBlock&) = delete;

  // The block when it is free and holds `bytes` (then taken until
  // Release()), else null: the caller copies through ordinary memory. The
  // first call that takes it allocates it (cudaMallocHost); when that fails
  // this returns null from then on, since pinned memory is a speed-up, not
  // a need.
  void* Acquire(size_t bytes);
  // Hands the block back. Only after an Acquire() that returned it, once
  // no copy uses it any more.
  void Release();

 private:
  const size_t bytes_;

  absl::Mutex mu_;
  void* block_ ABSL_GUARDED_BY(mu_) = nullptr;
  bool busy_ ABSL_GUARDED_BY(mu_) = false;
  bool failed_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace reducer

#endif  // REDUCER_CLIENT_STAGING_CUDA_PINNED_BLOCK_H_
