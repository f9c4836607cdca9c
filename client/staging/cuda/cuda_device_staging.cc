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
//
// The copies, chunk by chunk, are chunked_copies.h's; the pinned block is
// pinned_block.h's.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "client/staging/cuda/chunked_copies.h"
#include "client/staging/cuda/cuda_error.h"
#include "client/staging/cuda/pinned_block.h"
#include "client/staging/device_staging.h"
#include "core/buffer_cache.h"
#include "core/status_macros.h"

namespace reducer {
namespace {

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

class CudaDeviceStaging final : public DeviceStaging {
 public:
  explicit CudaDeviceStaging(size_t pinned_bytes)
      : pinned_block_(pinned_bytes) {}

  ~CudaDeviceStaging() override {
    absl::MutexLock lock(&mu_);
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
    auto staged = std::make_unique<CudaStagedInputs>(&pinned_block_, total);
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
    if (void* pinned = pinned_block_.Acquire(total)) {
      staged->UsePinned(pinned);
    } else {
      // A block smaller than a chunk is not worth the extra copy.
      bounce = static_cast<char*>(pinned_block_.Acquire(kStagingChunkBytes));
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
        QueueInputCopies(contribution, copy, bounce, staged.get());
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
                         ? pinned_block_.Acquire(2 * kStagingChunkBytes)
                         : nullptr;
      absl::Status copied;
      if (pinned != nullptr) {
        copied = CopyToDeviceThroughPinned(static_cast<const char*>(host.data()),
                                           static_cast<char*>(p), bytes,
                                           static_cast<char*>(pinned), copy);
        pinned_block_.Release();
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

 private:
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

  // Taken whole by one copy at a time (ToHost's staged inputs hold it until
  // destroyed); thread-safe, not under mu_.
  PinnedBlock pinned_block_;

  absl::Mutex mu_;
  bool probed_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status probe_ ABSL_GUARDED_BY(mu_);
  int device_count_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<cudaStream_t> copy_streams_ ABSL_GUARDED_BY(mu_);  // by device
};

}  // namespace

std::unique_ptr<DeviceStaging> NewDeviceStaging(size_t pinned_bytes) {
  return std::make_unique<CudaDeviceStaging>(pinned_bytes);
}

}  // namespace reducer
