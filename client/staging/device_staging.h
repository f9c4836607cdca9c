// DeviceStaging: how the client moves tensors between a GPU's memory and
// the host memory its transports send from and receive into. One per
// client; the build picks the implementation (client/staging/cuda/: the CUDA
// runtime's, or, built without the CUDA Toolkit, one that refuses every
// device with FAILED_PRECONDITION). StagingBackend and the in-place calls
// use it; nothing else in the client sees device memory.
//
//   absl::Status ok = staging->CheckMemory(view.device(), {view.data()}, "AllReduce input");
//   absl::StatusOr<std::unique_ptr<StagedInputs>> host = staging->ToHost(contribution);
//   ... the host collective on (*host)->inputs(), gated by (*host)->gate() ...
//   absl::StatusOr<Tensor> on_gpu = staging->ToDevice(result, device, stream);
//
// Implementations are thread-safe.
#ifndef REDUCER_CLIENT_STAGING_DEVICE_STAGING_H_
#define REDUCER_CLIENT_STAGING_DEVICE_STAGING_H_

#include <cstddef>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "client/internal/collective_attempt.h"
#include "client/internal/input_gate.h"
#include "core/device.h"
#include "core/tensor.h"

namespace reducer {

// Host copies of one contribution's device inputs, possibly still being
// filled. Holds its host memory (pinned memory goes back to the client's
// pool); destroying it first waits for copies still running.
class StagedInputs {
 public:
  virtual ~StagedInputs() = default;
  // inputs()[i]: tensor i's bytes in host memory, as Contribution::inputs.
  virtual const std::vector<const void*>& inputs() const = 0;
  // Null when every byte of inputs() is there already; else the gate that
  // says which are (Contribution::inputs_gate), valid while this lives.
  virtual const InputGate* gate() const { return nullptr; }
};

class DeviceStaging {
 public:
  virtual ~DeviceStaging() = default;

  // OK when every non-null pointer of `data` is memory of `device`, as far
  // as the runtime can tell (cudaPointerGetAttributes; CPU views are checked
  // once this client has used a CUDA device, so that host-only clients never
  // start the CUDA runtime). INVALID_ARGUMENT naming `what` for a
  // device pointer in a CPU view or the reverse, a pointer on another GPU
  // than the view says, or a device index the machine does not have;
  // FAILED_PRECONDITION for a CUDA device when the library was built
  // without CUDA or the machine has no usable GPU (cudaGetDeviceCount's
  // error named).
  virtual absl::Status CheckMemory(Device device,
                                   absl::Span<const void* const> data,
                                   absl::string_view what) = 0;

  // Host copies of `contribution.inputs` (memory of contribution.device,
  // payload_bytes() of them laid out by contribution.layout), read after
  // the work queued on contribution.cuda_stream. May return while the
  // copies still run, chunk by chunk; the result's gate() then says which
  // bytes are there. INTERNAL naming the CUDA call and its error when a
  // copy cannot be queued (or, through the gate, when one fails).
  virtual absl::StatusOr<std::unique_ptr<StagedInputs>> ToHost(
      const Contribution& contribution) = 0;

  // A new tensor on `device` holding `host`'s bytes (a CPU tensor), complete
  // when this returns. INTERNAL naming the CUDA call when allocation or the
  // copy fails.
  virtual absl::StatusOr<Tensor> ToDevice(const Tensor& host, Device device,
                                          void* cuda_stream) = 0;

  // Copies `result` (a tensor on inout's device, of inout's dtype and
  // shape) into `inout`, ordered after the work queued on `cuda_stream`,
  // complete when this returns. INTERNAL naming the CUDA call on failure.
  virtual absl::Status CopyInto(const Tensor& result,
                                const MutableTensorView& inout,
                                void* cuda_stream) = 0;
};

// The implementation this build has (client/staging/cuda/), pinning at most
// `pinned_bytes` of host memory (ClientOptions::cuda_staging_bytes).
std::unique_ptr<DeviceStaging> NewDeviceStaging(size_t pinned_bytes);

}  // namespace reducer

#endif  // REDUCER_CLIENT_STAGING_DEVICE_STAGING_H_
