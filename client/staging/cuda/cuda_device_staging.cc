// DeviceStaging through the CUDA runtime.
//
// Device to host (ToHost), for one contribution:
//   1. an event is recorded on the caller's stream (CallOptions::cuda_stream,
//      null: the legacy default stream), and the client's copy stream for
//      that device (non-blocking, created once) waits on it, so the copies
//      read the input only after the work queued before the call;
//   2. the payload is copied in chunks of kStagingChunkBytes, front to back,
//      into host memory laid out as the payload, all queued at once on the
//      copy stream:
//      - into the client's pinned block when it is free and holds the whole
//        payload (allocated once, at the first staged call, of
//        ClientOptions::cuda_staging_bytes);
//      - else into ordinary memory, each chunk through the pinned block
//        (one chunk of it, when free) and moved on by the chunk's host
//        function; else straight into ordinary memory (cudaMemcpyAsync then
//        returns only once each chunk is copied);
//   3. after each chunk a host function (cudaLaunchHostFunc) advances the
//      contribution's CopyProgress, the gate the transports await, so the
//      first chunk is on the wire while later ones are still copying. A
//      payload of one chunk or less is waited for here instead: there is
//      nothing to overlap, and the transport then never waits.
// The staged inputs, when destroyed, wait for their copies (an event after
// the last one) before their memory is freed or the pinned block reused.
// Host to device (ToDevice): a new cudaMalloc allocation on the input's
// device, filled on the copy stream and synchronised before it is
// returned: a result of more than one chunk goes through two chunks of the
// pinned block in turn (the host fills one while the other is copied;
// events say when a chunk is free again), when the block is free; else it
// is copied from its own memory in one cudaMemcpyAsync. In place (CopyInto): the complete result is copied
// device to device on the caller's stream, and that stream synchronised.
// Every call restores the calling thread's current device.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "client/staging/copy_progress.h"
#include "client/staging/device_staging.h"
#include "core/buffer_cache.h"
#include "core/payload_layout.h"
#include "core/status_macros.h"

namespace reducer {
namespace {

// INTERNAL: "`call` (`context`) failed: cudaErrorX: its description".
absl::Status CudaError(absl::string_view call, absl::string_view context,
                       cudaError_t error) {
  return absl::InternalError(absl::StrCat(
      call, " (", context, ") failed: ", cudaGetErrorName(error), ": ",
      cudaGetErrorString(error)));
}

// Makes `index` the calling thread's current device for its lifetime, and
// restores the one before.
class ScopedDevice {
 public:
  ScopedDevice() = default;
  ~ScopedDevice() {
    if (previous_ >= 0 && previous_ != current_) cudaSetDevice(previous_);
  }
  ScopedDevice(const ScopedDevice&) = delete;
  ScopedDevice& operator=(const ScopedDevice&) = delete;

  absl::Status Set(int index) {
    cudaError_t error = cudaGetDevice(&previous_);
    if (error != cudaSuccess) return CudaError("cudaGetDevice", "", error);
    current_ = index;
    if (index == previous_) return absl::OkStatus();
    error = cudaSetDevice(index);
    if (error != cudaSuccess) {
      return CudaError("cudaSetDevice", absl::StrCat("device ", index), error);
    }
    return absl::OkStatus();
  }

 private:
  int previous_ = -1;
  int current_ = -1;
};

void FreeDeviceMemory(void* p) { cudaFree(p); }

// Tensor's copy constructor for a device tensor: aborts on failure, as
// host allocation does.
void* CloneDeviceMemory(const void* p, size_t bytes) {
  cudaPointerAttributes attributes;
  cudaError_t error = cudaPointerGetAttributes(&attributes, p);
  ScopedDevice device;
  void* copy = nullptr;
  if (error == cudaSuccess && device.Set(attributes.device).ok()) {
    error = cudaMalloc(&copy, std::max<size_t>(bytes, 1));
    if (error == cudaSuccess && bytes > 0) {
      error = cudaMemcpy(copy, p, bytes, cudaMemcpyDeviceToDevice);
    }
  }
  if (error != cudaSuccess) {
    std::fprintf(stderr, "reducer::Tensor: copying %zu bytes of device memory failed: %s: %s\n",
                 bytes, cudaGetErrorName(error), cudaGetErrorString(error));
    std::abort();
  }
  return copy;
}

constexpr ForeignMemory kCudaMemory = {&FreeDeviceMemory, &CloneDeviceMemory};

// Bytes copied (and handed to the transport) at a time. Copies of a few MiB
// run at the link's peak; the first message waits for one chunk (about
// 0.1 to 0.4 ms over PCIe), and a host function per chunk costs a few us.
constexpr size_t kStagingChunkBytes = size_t{4} << 20;

class CudaDeviceStaging;

// One chunk's host function: moves the chunk out of the bounce buffer when
// there is one, then advances the progress. Runs on CUDA's callback thread:
// no CUDA calls here.
struct ChunkLanding {
  CopyProgress* progress;         // the staged inputs'
  const char* bounce = nullptr;   // the pinned chunk the copy landed in, or null
  char* destination = nullptr;    // where the chunk goes (with a bounce)
  size_t bytes = 0;               // of the chunk (with a bounce)
  size_t end = 0;                 // the payload is there up to here
};

void CUDART_CB LandChunk(void* data);

// Host copies of one contribution's inputs: in the pinned block, or in
// ordinary memory (maybe through the pinned block), filled by the copy
// stream. Holds the pinned block, if it took it, until destroyed.
class CudaStagedInputs final : public StagedInputs {
 public:
  CudaStagedInputs(CudaDeviceStaging* pool, size_t total_bytes)
      : pool_(pool), progress_(std::make_unique<CopyProgress>(total_bytes)) {}
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
  CudaDeviceStaging* const pool_;  // not owned; outlives this
  void* pinned_ = nullptr;         // the pool's block (whole or bounce), or null
  Buffer pageable_;
  std::vector<const void*> inputs_;
  // On the heap, as the landings, so that both can outlive this when the
  // copies' end cannot be waited for (see the destructor).
  std::unique_ptr<CopyProgress> progress_;
  std::vector<ChunkLanding> landings_;
  bool gated_ = false;
  cudaEvent_t done_ = nullptr;
};

class CudaDeviceStaging final : public DeviceStaging {
 public:
  explicit CudaDeviceStaging(size_t pinned_bytes) : pinned_bytes_(pinned_bytes) {}

  ~CudaDeviceStaging() override {
    absl::MutexLock lock(&mu_);
    if (pinned_ != nullptr) cudaFreeHost(pinned_);
    for (cudaStream_t stream : copy_streams_) {
      if (stream != nullptr) cudaStreamDestroy(stream);
    }
  }

  absl::Status CheckMemory(Device device, absl::Span<const void* const> data,
                           absl::string_view what) override {
    int devices = 0;
    if (device.is_cpu()) {
      // Without a GPU in use no pointer can be device memory; probing for
      // one would start the CUDA runtime in every host-only client.
      absl::MutexLock lock(&mu_);
      if (!probed_ || !probe_.ok()) return absl::OkStatus();
      devices = device_count_;
    } else {
      absl::Status usable = Probe(&devices);
      if (!usable.ok()) {
        return absl::FailedPreconditionError(absl::StrCat(
            what, " is on ", device.ToString(), ", but ", usable.message()));
      }
      if (device.index() < 0 || device.index() >= devices) {
        return absl::InvalidArgumentError(absl::StrCat(
            what, " is on ", device.ToString(), ", but this machine has ",
            devices, " CUDA device", devices == 1 ? "" : "s", " (0..",
            devices - 1, ")"));
      }
    }
    for (size_t i = 0; i < data.size(); ++i) {
      if (data[i] == nullptr) continue;
      cudaPointerAttributes attributes;
      const cudaError_t error = cudaPointerGetAttributes(&attributes, data[i]);
      if (error != cudaSuccess) {
        cudaGetLastError();  // not sticky: clear it for the caller
        return absl::InvalidArgumentError(absl::StrCat(
            what, ": cudaPointerGetAttributes failed: ", cudaGetErrorName(error),
            ": ", cudaGetErrorString(error)));
      }
      const bool on_device = attributes.type == cudaMemoryTypeDevice;
      const bool managed = attributes.type == cudaMemoryTypeManaged;
      if (device.is_cpu() && on_device) {
        return absl::InvalidArgumentError(absl::StrCat(
            what, ": the data is memory of CUDA device ", attributes.device,
            " but the view says cpu; make the view with OnDevice(Device::Cuda(",
            attributes.device, "), ...)"));
      }
      if (device.is_cuda() && !on_device && !managed) {
        return absl::InvalidArgumentError(absl::StrCat(
            what, ": the view says ", device.ToString(),
            " but the data is host memory; make the view without OnDevice "
            "(Device::Cpu())"));
      }
      if (device.is_cuda() && on_device && attributes.device != device.index()) {
        return absl::InvalidArgumentError(absl::StrCat(
            what, ": the view says ", device.ToString(),
            " but the data is memory of cuda:", attributes.device));
      }
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::unique_ptr<StagedInputs>> ToHost(
      const Contribution& contribution) override {
    const size_t n = contribution.inputs.size();
    const size_t total = contribution.payload_bytes();
    auto staged = std::make_unique<CudaStagedInputs>(this, total);
    if (total == 0) {
      // Shapes only (a Broadcast's non-root), or nothing but empty tensors:
      // nothing is read.
      staged->mutable_inputs().assign(n, nullptr);
      return staged;
    }
    ScopedDevice scoped;
    REDUCER_RETURN_IF_ERROR(scoped.Set(contribution.device.index()));
    REDUCER_ASSIGN_OR_RETURN(cudaStream_t copy,
                             CopyStream(contribution.device.index()));

    // Where the bytes go: the pinned block whole, or ordinary memory
    // (through one pinned chunk when the block is free).
    char* bounce = nullptr;
    if (void* pinned = AcquirePinned(total)) {
      staged->UsePinned(pinned);
    } else {
      // A block smaller than a chunk is not worth the extra copy.
      bounce = static_cast<char*>(AcquirePinned(kStagingChunkBytes));
      staged->UsePageable(AllocateBuffer(total), bounce);
    }
    char* memory = staged->memory();
    for (size_t i = 0; i < n; ++i) {
      staged->mutable_inputs().push_back(memory + contribution.layout.offsets[i]);
    }

    cudaStream_t caller = static_cast<cudaStream_t>(contribution.cuda_stream);
    cudaEvent_t queued;
    cudaError_t error = cudaEventCreateWithFlags(&queued, cudaEventDisableTiming);
    if (error != cudaSuccess) {
      return CudaError("cudaEventCreateWithFlags", "staging inputs", error);
    }
    error = cudaEventRecord(queued, caller);
    if (error == cudaSuccess) error = cudaStreamWaitEvent(copy, queued, 0);
    cudaEventDestroy(queued);  // released once the wait is done
    if (error != cudaSuccess) {
      return CudaError("cudaEventRecord/cudaStreamWaitEvent",
                       "ordering the copies after the caller's stream", error);
    }

    const absl::Status queued_all =
        QueueChunks(contribution, copy, bounce, staged.get());
    cudaEvent_t done;
    error = cudaEventCreateWithFlags(&done, cudaEventDisableTiming);
    if (error == cudaSuccess) {
      error = cudaEventRecord(done, copy);
      if (error != cudaSuccess) cudaEventDestroy(done);
    }
    if (error == cudaSuccess) {
      staged->set_done(done);
    } else {
      // Without the event, wait here for what was queued.
      cudaStreamSynchronize(copy);
    }
    if (!queued_all.ok()) return queued_all;  // staged waits for its copies
    if (error != cudaSuccess) {
      return CudaError("cudaEventRecord", "marking the end of the input copies", error);
    }
    if (total <= kStagingChunkBytes) {
      // One chunk: nothing to overlap; the transport reads it complete.
      error = cudaStreamSynchronize(copy);
      if (error != cudaSuccess) {
        return CudaError("cudaStreamSynchronize",
                         absl::StrCat("device to host copies of ", n, " tensors (",
                                      total, " bytes) from ",
                                      contribution.device.ToString()),
                         error);
      }
    } else {
      staged->set_gated();
    }
    return staged;
  }

  absl::StatusOr<Tensor> ToDevice(const Tensor& host, Device device,
                                  void* /*cuda_stream*/) override {
    ScopedDevice scoped;
    REDUCER_RETURN_IF_ERROR(scoped.Set(device.index()));
    REDUCER_ASSIGN_OR_RETURN(cudaStream_t copy, CopyStream(device.index()));
    const size_t bytes = host.num_bytes();
    void* p = nullptr;
    cudaError_t error = cudaMalloc(&p, std::max<size_t>(bytes, 1));
    if (error != cudaSuccess) {
      return CudaError("cudaMalloc",
                       absl::StrCat(bytes, " bytes for the result on ", device.ToString()),
                       error);
    }
    Buffer buffer(p, BufferDeleter{nullptr, bytes, &kCudaMemory});
    if (bytes > 0) {
      // Through two pinned chunks when the block is free; else from the
      // result's own (pageable) memory in one copy.
      void* pinned = bytes > kStagingChunkBytes
                         ? AcquirePinned(2 * kStagingChunkBytes)
                         : nullptr;
      absl::Status copied;
      if (pinned != nullptr) {
        copied = CopyToDeviceThroughPinned(static_cast<const char*>(host.data()),
                                           static_cast<char*>(p), bytes,
                                           static_cast<char*>(pinned), copy);
        ReleasePinned();
      } else {
        error = cudaMemcpyAsync(p, host.data(), bytes, cudaMemcpyHostToDevice, copy);
        const cudaError_t synced = cudaStreamSynchronize(copy);
        if (error == cudaSuccess) error = synced;
        if (error != cudaSuccess) {
          copied = CudaError("cudaMemcpyAsync", "from pageable memory", error);
        }
      }
      if (!copied.ok()) {
        return absl::InternalError(absl::StrCat(
            "copying the result host to device, ", bytes, " bytes to ",
            device.ToString(), ": ", copied.message()));
      }
    }
    return Tensor::OnDevice(device, host.dtype(), host.shape(), std::move(buffer));
  }

  absl::Status CopyInto(const Tensor& result, const MutableTensorView& inout,
                        void* cuda_stream) override {
    ScopedDevice scoped;
    REDUCER_RETURN_IF_ERROR(scoped.Set(inout.device().index()));
    cudaStream_t stream = static_cast<cudaStream_t>(cuda_stream);
    const size_t bytes = result.num_bytes();
    if (bytes == 0) return absl::OkStatus();
    cudaError_t error = cudaMemcpyAsync(inout.data(), result.data(), bytes,
                                        cudaMemcpyDeviceToDevice, stream);
    const cudaError_t synced = cudaStreamSynchronize(stream);
    if (error == cudaSuccess) error = synced;
    if (error != cudaSuccess) {
      return CudaError("cudaMemcpyAsync",
                       absl::StrCat("device to device, ", bytes,
                                    " bytes of the result into the in-place buffer on ",
                                    inout.device().ToString()),
                       error);
    }
    return absl::OkStatus();
  }

  // Hands the pinned block back (CudaStagedInputs' destructor).
  void ReleasePinned() {
    absl::MutexLock lock(&mu_);
    pinned_busy_ = false;
  }

 private:
  // Queues the copies of `contribution`'s payload into staged->memory() on
  // `copy`, kStagingChunkBytes at a time (through `bounce`, a pinned chunk, when
  // not null), each followed by the host function that lands it. INTERNAL
  // naming the CUDA call when one cannot be queued (the progress fails with
  // it too; what was queued still runs).
  absl::Status QueueChunks(const Contribution& contribution, cudaStream_t copy,
                           char* bounce, CudaStagedInputs* staged) {
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
      ForEachTensorPiece(layout, begin, end, [&](size_t i, size_t from, size_t to) {
        if (error != cudaSuccess) return;
        error = cudaMemcpyAsync(
            bounce != nullptr ? bounce + (from - begin) : memory + from,
            static_cast<const char*>(contribution.inputs[i]) + (from - layout.offsets[i]),
            to - from, cudaMemcpyDeviceToHost, copy);
        if (error != cudaSuccess) {
          failed = absl::StrCat("device to host, tensor ", i, ", bytes ",
                                from - layout.offsets[i], "..", to - layout.offsets[i],
                                " from ", contribution.device.ToString());
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

  // Copies `bytes` from `source` (ordinary host memory) to `target` (on the
  // current device) on `copy`, kStagingChunkBytes at a time through the two
  // chunks of `pinned` in turn: the host fills one chunk while the other
  // is being copied to the device (an event per chunk says when it may be
  // filled again). Complete when this returns. INTERNAL naming the CUDA
  // call otherwise; `pinned` is no longer used either way.
  static absl::Status CopyToDeviceThroughPinned(const char* source, char* target,
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
      error = cudaMemcpyAsync(target + begin, chunk, n, cudaMemcpyHostToDevice, copy);
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

  // `error`, after failing `staged`'s progress with it.
  static absl::Status QueueFailed(CudaStagedInputs* staged, absl::Status error) {
    cudaGetLastError();  // not sticky: clear it for the caller
    staged->progress()->Fail(error);
    return error;
  }

  // OK with the number of devices once cudaGetDeviceCount found at least
  // one; else FAILED_PRECONDITION's reason. Probes once.
  absl::Status Probe(int* devices) {
    absl::MutexLock lock(&mu_);
    if (!probed_) {
      probed_ = true;
      const cudaError_t error = cudaGetDeviceCount(&device_count_);
      if (error != cudaSuccess) {
        cudaGetLastError();
        probe_ = absl::FailedPreconditionError(absl::StrCat(
            "the CUDA runtime has no usable device: cudaGetDeviceCount failed: ",
            cudaGetErrorName(error), ": ", cudaGetErrorString(error)));
        device_count_ = 0;
      } else if (device_count_ == 0) {
        probe_ = absl::FailedPreconditionError(
            "the CUDA runtime has no usable device: cudaGetDeviceCount found 0");
      } else {
        copy_streams_.assign(device_count_, nullptr);
      }
    }
    *devices = device_count_;
    return probe_;
  }

  // The copy stream of `index` (the current device), created at first use.
  absl::StatusOr<cudaStream_t> CopyStream(int index) {
    int devices = 0;
    REDUCER_RETURN_IF_ERROR(Probe(&devices));
    absl::MutexLock lock(&mu_);
    if (index < 0 || static_cast<size_t>(index) >= copy_streams_.size()) {
      return absl::InternalError(absl::StrCat("no copy stream for device ", index));
    }
    if (copy_streams_[index] == nullptr) {
      const cudaError_t error =
          cudaStreamCreateWithFlags(&copy_streams_[index], cudaStreamNonBlocking);
      if (error != cudaSuccess) {
        copy_streams_[index] = nullptr;
        return CudaError("cudaStreamCreateWithFlags",
                         absl::StrCat("the copy stream of cuda:", index), error);
      }
    }
    return copy_streams_[index];
  }

  // The pinned block when it is free and holds `bytes`, else null (the
  // caller stages through ordinary memory). Allocates it at first use.
  void* AcquirePinned(size_t bytes) {
    absl::MutexLock lock(&mu_);
    if (bytes == 0 || bytes > pinned_bytes_ || pinned_busy_ || pinned_failed_) {
      return nullptr;
    }
    if (pinned_ == nullptr &&
        cudaMallocHost(&pinned_, pinned_bytes_) != cudaSuccess) {
      // Pinned memory is a speed-up, not a need: go on without it.
      cudaGetLastError();
      pinned_ = nullptr;
      pinned_failed_ = true;
      return nullptr;
    }
    pinned_busy_ = true;
    return pinned_;
  }

  const size_t pinned_bytes_;

  absl::Mutex mu_;
  bool probed_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status probe_ ABSL_GUARDED_BY(mu_);
  int device_count_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<cudaStream_t> copy_streams_ ABSL_GUARDED_BY(mu_);  // by device
  void* pinned_ ABSL_GUARDED_BY(mu_) = nullptr;
  bool pinned_busy_ ABSL_GUARDED_BY(mu_) = false;
  bool pinned_failed_ ABSL_GUARDED_BY(mu_) = false;
};

void CUDART_CB LandChunk(void* data) {
  const ChunkLanding& landing = *static_cast<const ChunkLanding*>(data);
  if (landing.bounce != nullptr) {
    std::memcpy(landing.destination, landing.bounce, landing.bytes);
  }
  landing.progress->Advance(landing.end);
}

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
  if (pinned_ != nullptr) pool_->ReleasePinned();
}

}  // namespace

std::unique_ptr<DeviceStaging> NewDeviceStaging(size_t pinned_bytes) {
  return std::make_unique<CudaDeviceStaging>(pinned_bytes);
}

}  // namespace reducer
