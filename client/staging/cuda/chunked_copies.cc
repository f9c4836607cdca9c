#include "client/staging/cuda/chunked_copies.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "client/staging/cuda/cuda_error.h"
#include "core/payload_layout.h"

namespace reducer {
namespace {

// A ChunkLanding's host function. Runs on CUDA's callback thread: no CUDA
// calls here.
void CUDART_CB LandChunk(void* data) {
  const ChunkLanding& landing = *static_cast<const ChunkLanding*>(data);
  if (landing.bounce != nullptr) {
    std::memcpy(landing.destination, landing.bounce, landing.bytes);
  }
  landing.progress->Advance(landing.end);
}

// `error`, after failing `staged`'s progress with it.
absl::Status QueueFailed(CudaStagedInputs* staged, absl::Status error) {
  cudaGetLastError();  // not sticky: clear it for the caller
  staged->progress()->Fail(error);
  return error;
}

}  // namespace

CudaStagedInputs::~CudaStagedInputs() {
  if (done_ != nullptr) {
    if (cudaEventSynchronize(done_) != cudaSuccess) {
      // The copies' fate is unknown (the context failed): copies and host
      // functions may still use the memory, the landings and the progress,
      // so all of them are leaked on purpose, and the pinned block stays
      // taken (later calls stage through ordinary memory).
      (void)progress_.release();
      new std::vector<ChunkLanding>(std::move(landings_));
      new Buffer(std::move(pageable_));
      cudaGetLastError();
      return;
    }
    cudaEventDestroy(done_);
  }
  if (pinned_ != nullptr) pinned_block_->Release();
}

absl::Status QueueInputCopies(const Contribution& contribution,
                              cudaStream_t copy, char* bounce,
                              CudaStagedInputs* staged) {
  const PayloadLayout& layout = contribution.layout;
  const size_t total = contribution.payload_bytes();
  const size_t chunk = kStagingChunkBytes;
  const size_t chunks = (total + chunk - 1) / chunk;
  // Reserved whole: host functions hold pointers into it.
  staged->landings().reserve(chunks);
  char* memory = staged->memory();
  for (size_t begin = 0; begin < total; begin += chunk) {
    const size_t end = std::min(begin + chunk, total);
    cudaError_t error = cudaSuccess;
    std::string failed;  // the piece whose copy could not be queued
    ForEachTensorPiece(
        layout, begin, end, [&](size_t i, size_t from, size_t to) {
          if (error != cudaSuccess) return;
          error = cudaMemcpyAsync(
              bounce != nullptr ? bounce + (from - begin) : memory + from,
              static_cast<const char*>(contribution.inputs[i]) +
                  (from - layout.offsets[i]),
              to - from, cudaMemcpyDeviceToHost, copy);
          if (error != cudaSuccess) {
            failed = absl::StrCat("device to host, tensor ", i, ", bytes ",
                                  from - layout.offsets[i], "..",
                                  to - layout.offsets[i], " from ",
                                  contribution.device.ToString());
          }
        });
    if (error != cudaSuccess) {
      return QueueFailed(staged, CudaError("cudaMemcpyAsync", failed, error));
    }
    ChunkLanding landing;
    landing.progress = staged->progress();
    landing.end = end;
    if (bounce != nullptr) {
      landing.bounce = bounce;
      landing.destination = memory + begin;
      landing.bytes = end - begin;
    }
    staged->landings().push_back(landing);
    error = cudaLaunchHostFunc(copy, &LandChunk, &staged->landings().back());
    if (error != cudaSuccess) {
      return QueueFailed(
          staged,
          CudaError("cudaLaunchHostFunc",
                    absl::StrCat("handing on input bytes ", begin, "..", end),
                    error));
    }
  }
  return absl::OkStatus();
}

absl::Status CopyToDeviceThroughPinned(const char* source, char* target,
                                       size_t bytes, char* pinned,
                                       cudaStream_t copy) {
  cudaEvent_t emptied[2] = {nullptr, nullptr};
  cudaError_t error = cudaSuccess;
  for (cudaEvent_t& e : emptied) {
    if (error == cudaSuccess) {
      error = cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
    }
  }
  absl::string_view failed = "cudaEventCreateWithFlags";
  for (size_t begin = 0, k = 0; error == cudaSuccess && begin < bytes;
       begin += kStagingChunkBytes, ++k) {
    const size_t n = std::min(kStagingChunkBytes, bytes - begin);
    char* chunk = pinned + (k % 2) * kStagingChunkBytes;
    if (k >= 2) {
      // The chunk's copy two turns ago must be done before it is refilled.
      error = cudaEventSynchronize(emptied[k % 2]);
      failed = "cudaEventSynchronize";
      if (error != cudaSuccess) break;
    }
    std::memcpy(chunk, source + begin, n);
    error =
        cudaMemcpyAsync(target + begin, chunk, n, cudaMemcpyHostToDevice, copy);
    failed = "cudaMemcpyAsync";
    if (error == cudaSuccess) {
      error = cudaEventRecord(emptied[k % 2], copy);
      failed = "cudaEventRecord";
    }
  }
  // Whatever was queued finishes before `pinned` goes back.
  const cudaError_t synced = cudaStreamSynchronize(copy);
  if (error == cudaSuccess && synced != cudaSuccess) {
    error = synced;
    failed = "cudaStreamSynchronize";
  }
  for (cudaEvent_t e : emptied) {
    if (e != nullptr) cudaEventDestroy(e);
  }
  if (error != cudaSuccess) {
    cudaGetLastError();
    return CudaError(failed, "through pinned chunks", error);
  }
  return absl::OkStatus();
}

}  // namespace reducer
