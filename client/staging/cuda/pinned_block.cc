#include "client/staging/cuda/pinned_block.h"

#include <cuda_runtime.h>

namespace reducer {

PinnedBlock::~PinnedBlock() {
  absl::MutexLock lock(&mu_);
  if (block_ != nullptr) cudaFreeHost(block_);
}

void* PinnedBlock::Acquire(size_t bytes) {
  absl::MutexLock lock(&mu_);
  if (bytes == 0 || bytes > bytes_ || busy_ || failed_) return nullptr;
  if (block_ == nullptr && cudaMallocHost(&block_, bytes_) != cudaSuccess) {
    // Pinned memory is a speed-up, not a need: go on without it.
    cudaGetLastError();
    block_ = nullptr;
    failed_ = true;
    return nullptr;
  }
  busy_ = true;
  return block_;
}

void PinnedBlock::Release() {
  absl::MutexLock lock(&mu_);
  busy_ = false;
}

}  // namespace reducer
