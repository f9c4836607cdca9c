// The copies of device staging, a chunk (kStagingChunkBytes) at a time:
//
// Device to host (QueueInputCopies), for one contribution: every chunk's
// copy is queued at once on the copy stream, each followed by a host
// function (cudaLaunchHostFunc) that moves the chunk out of the pinned
// bounce chunk when there is one and advances the contribution's
// CopyProgress, the gate the transports await, so that the first chunk is
// on the wire while later ones are still copying. CudaStagedInputs holds
// the host copies until the transports are done with them, and waits for
// the copies before it frees their memory.
//
// Host to device (CopyToDeviceThroughPinned): through two pinned chunks in
// turn, the host filling one while the other is copied.
//
//   auto staged = std::make_unique<CudaStagedInputs>(&pinned_block, total);
//   staged->UsePinned(pinned);  // or UsePageable(AllocateBuffer(total), bounce)
//   absl::Status queued = QueueInputCopies(contribution, copy_stream, bounce,
//                                          staged.get());
#ifndef REDUCER_CLIENT_STAGING_CUDA_CHUNKED_COPIES_H_
#define REDUCER_CLIENT_STAGING_CUDA_CHUNKED_COPIES_H_

#include <cuda_runtime.h>

#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "client/internal/collective_attempt.h"
#include "client/internal/input_gate.h"
#include "client/staging/copy_progress.h"
#include "client/staging/cuda/pinned_block.h"
#include "client/staging/device_staging.h"
#include "core/buffer_cache.h"

namespace reducer {

// Bytes copied (and handed to the transport) at a time. Copies of a few MiB
// run at the link's peak; the first message waits for one chunk (about
// 0.1 to 0.4 ms over PCIe), and a host function per chunk costs a few us.
constexpr size_t kStagingChunkBytes = size_t{4} << 20;

// One chunk's host function's argument: moves the chunk out of the bounce
// buffer when there is one, then advances the progress.
struct ChunkLanding {
  CopyProgress* progress;        // the staged inputs'
  const char* bounce = nullptr;  // the pinned chunk the copy landed in, or null
  char* destination = nullptr;   // where the chunk goes (with a bounce)
  size_t bytes = 0;              // of the chunk (with a bounce)
  size_t end = 0;                // the payload is there up to here
};

// Host copies of one contribution's inputs: in the pinned block, or in
// ordinary memory (maybe through the pinned block), filled by the copy
// stream. Holds the pinned block, if it took it, until destroyed. Not
// thread-safe; gate() may be awaited from any thread.
class CudaStagedInputs final : public StagedInputs {
 public:
  // `pinned_block` (not owned) must outlive this.
  CudaStagedInputs(PinnedBlock* pinned_block, size_t total_bytes)
      : pinned_block_(pinned_block),
        progress_(std::make_unique<CopyProgress>(total_bytes)) {}
  // Waits for the copies (the event set_done() gave), then hands the pinned
  // block back. When that wait fails, leaks what the copies may still use.
  ~CudaStagedInputs() override;

  const std::vector<const void*>& inputs() const override { return inputs_; }
  const InputGate* gate() const override {
    return gated_ ? progress_.get() : nullptr;
  }

  // The staging memory: the pinned block, or `pageable` (copied through
  // `bounce`, the pinned block, unless it is null). This holds the pinned
  // block until destroyed.
  void UsePinned(void* pinned) { pinned_ = pinned; }
  void UsePageable(Buffer pageable, void* bounce) {
    pageable_ = std::move(pageable);
    pinned_ = bounce;
  }
  char* memory() {
    return static_cast<char*>(pageable_ != nullptr ? pageable_.get() : pinned_);
  }
  std::vector<const void*>& mutable_inputs() { return inputs_; }
  CopyProgress* progress() { return progress_.get(); }
  // Landings live here until the copies are done.
  std::vector<ChunkLanding>& landings() { return landings_; }
  // The transports must await the progress.
  void set_gated() { gated_ = true; }
  // Recorded on the copy stream after the last copy: the destructor waits
  // for it. Owned from here on.
  void set_done(cudaEvent_t done) { done_ = done; }

 private:
  PinnedBlock* const pinned_block_;  // not owned; outlives this
  void* pinned_ = nullptr;  // the block (whole or bounce) when taken, or null
  Buffer pageable_;
  std::vector<const void*> inputs_;
  // On the heap, as the landings, so that both can outlive this when the
  // copies' end cannot be waited for (see the destructor).
  std::unique_ptr<CopyProgress> progress_;
  std::vector<ChunkLanding> landings_;
  bool gated_ = false;
  cudaEvent_t done_ = nullptr;
};

// Queues the copies of `contribution`'s payload into staged->memory() on
// `copy`, kStagingChunkBytes at a time (through `bounce`, a pinned chunk,
// when not null), each followed by the host function that lands it. OK
// once all are queued; INTERNAL naming the CUDA call when one cannot be
// (the progress fails with it too; what was queued still runs).
absl::Status QueueInputCopies(const Contribution& contribution,
                              cudaStream_t copy, char* bounce,
                              CudaStagedInputs* staged);

// Copies `bytes` from `source` (ordinary host memory) to `target` (on the
// current device) on `copy`, kStagingChunkBytes at a time through the two
// chunks of `pinned` in turn: the host fills one chunk while the other
// is being copied to the device (an event per chunk says when it may be
// filled again). Complete when this returns. INTERNAL naming the CUDA
// call otherwise; `pinned` is no longer used either way.
absl::Status CopyToDeviceThroughPinned(const char* source, char* target,
                                       size_t bytes, char* pinned,
                                       cudaStream_t copy);

}  // namespace reducer

#endif  // REDUCER_CLIENT_STAGING_CUDA_CHUNKED_COPIES_H_
