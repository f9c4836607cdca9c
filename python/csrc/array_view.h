// numpy arrays as Reducer tensor views, and Reducer tensors as numpy arrays,
// for the `_reducer` extension module.
//
//   TensorView in = ReadView(array, ParseDataType("float32"));   // borrows
//   py::array out = ToArray(std::move(result));   // owns the Tensor, no copy
//
// bfloat16 has no numpy dtype: it travels as an int16 array carrying the raw
// bits, and the Python layer views it as torch.bfloat16.
//
// Errors raise Python exceptions (pybind11's): TypeError for an unknown
// dtype or op name or an array whose item size does not fit the dtype,
// ValueError for a non-contiguous array or a read-only one given to an
// in-place call. Call these with the GIL held. Not thread-safe beyond that.
#ifndef REDUCER_PYTHON_CSRC_ARRAY_VIEW_H_
#define REDUCER_PYTHON_CSRC_ARRAY_VIEW_H_

#include <optional>
#include <string>
#include <vector>

#include "client/reducer_client.h"
#include "core/data_type.h"
#include "core/tensor.h"
#include "pybind11/numpy.h"
#include "python/csrc/device_array.h"
#include "pybind11/pybind11.h"

namespace reducer::python {

// "float32", "float64", "float16", "bfloat16", "int8", "uint8", "int32",
// "int64", "bool"; TypeError naming the value otherwise.
DataType ParseDataType(const std::string& name);

// "sum", "product", "min", "max", "avg", "bit_and", "bit_or", "bit_xor";
// ValueError naming the value and the accepted names otherwise.
ReduceOp ParseReduceOp(const std::string& name);

// A read-only view of `x`'s memory, which must stay alive (and unchanged)
// for as long as the view is used. `x` is a numpy array, or a DeviceArray
// (python/csrc/device_array.h) for memory of a CUDA device.
TensorView ReadView(const pybind11::object& x, DataType dtype);

// A writable view of `x`'s memory (a numpy array must be writeable), which
// must stay alive for as long as the view is used.
MutableTensorView WriteView(const pybind11::object& x, DataType dtype);

// A numpy array that owns `tensor` (moved into it; no copy of the bytes),
// or for a tensor on a CUDA device a DeviceArray that owns it.
pybind11::object ToArray(Tensor tensor);

// CallOptions from the keyword arguments every collective takes: `group`
// (ranks, None for all), `name` (empty: match by call order) and `timeout`
// in seconds (None: the client's), and, when the call's input `x` is a
// DeviceArray, its stream as cuda_stream. ValueError for a negative timeout.
CallOptions MakeCallOptions(const std::optional<std::vector<int>>& group,
                            const std::string& name,
                            std::optional<double> timeout_s,
                            const pybind11::object& x = pybind11::none());

}  // namespace reducer::python

#endif  // REDUCER_PYTHON_CSRC_ARRAY_VIEW_H_
