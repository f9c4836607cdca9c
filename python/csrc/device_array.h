// DeviceArray: a tensor in a CUDA GPU's memory as the `_reducer` extension
// passes it, the counterpart of a numpy array for host memory.
//
// Given (Python builds one from a torch CUDA tensor): it names the memory,
// the shape, the device and the stream whose queued work the collective
// waits for, and holds `owner` (the tensor) so the memory stays valid.
// Returned (a collective's result on the device): it owns the Tensor and
// exposes `__cuda_array_interface__` (version 2), which torch.as_tensor
// turns into a torch tensor sharing the memory without a copy.
//
//   x = _reducer.DeviceArray(t.data_ptr(), list(t.shape), t.device.index,
//                            torch.cuda.current_stream(t.device).cuda_stream, t)
//   r = client.all_reduce(x, "float32", "sum")       # a DeviceArray
//   out = torch.as_tensor(r, device=t.device)
//
// Call with the GIL held. Not thread-safe beyond that.
#ifndef REDUCER_PYTHON_CSRC_DEVICE_ARRAY_H_
#define REDUCER_PYTHON_CSRC_DEVICE_ARRAY_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "core/data_type.h"
#include "core/device.h"
#include "core/tensor.h"
#include "pybind11/pybind11.h"

namespace reducer::python {

struct DeviceArray {
  uintptr_t data = 0;           // device pointer
  std::vector<int64_t> shape;
  int device = 0;               // CUDA device index
  uintptr_t stream = 0;         // cudaStream_t of the input; 0: the default stream
  pybind11::object owner;       // keeps given memory alive (None for results)
  std::optional<Tensor> result; // owns a result's memory
};

// Registers DeviceArray in `m`.
void DefineDeviceArray(pybind11::module_& m);

// A DeviceArray owning `result` (a tensor on a CUDA device).
pybind11::object WrapDeviceResult(Tensor result);

// `__cuda_array_interface__` of a result of Reducer dtype `dtype`:
// "typestr" as numpy spells it (bfloat16 as "<i2", its raw bits).
pybind11::dict CudaArrayInterface(const DeviceArray& array, DataType dtype);

}  // namespace reducer::python

#endif  // REDUCER_PYTHON_CSRC_DEVICE_ARRAY_H_
