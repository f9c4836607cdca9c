#include "python/csrc/array_view.h"

#include <cmath>
#include <cstdint>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"

namespace reducer::python {

namespace py = pybind11;

namespace {

// numpy's type number of float16 (NPY_HALF), which pybind11 names no C++
// type for.
constexpr int kNumpyHalfTypeNumber = 23;

// The numpy dtype that carries `dtype`'s bytes. By type number rather than by
// name: a result is made on every call, and parsing a dtype name costs more
// than the rest of wrapping it.
py::dtype NumpyDtype(DataType dtype) {
  switch (dtype) {
    case DataType::kFloat32: return py::dtype::of<float>();
    case DataType::kFloat64: return py::dtype::of<double>();
    case DataType::kFloat16: return py::dtype(kNumpyHalfTypeNumber);
    case DataType::kBFloat16: return py::dtype::of<int16_t>();  // raw bits
    case DataType::kInt8: return py::dtype::of<int8_t>();
    case DataType::kUInt8: return py::dtype::of<uint8_t>();
    case DataType::kInt32: return py::dtype::of<int32_t>();
    case DataType::kInt64: return py::dtype::of<int64_t>();
    case DataType::kBool: return py::dtype::of<bool>();
  }
  throw py::type_error("unknown reducer dtype");
}

std::vector<int64_t> ShapeOf(const py::array& array) {
  std::vector<int64_t> shape(array.ndim());
  for (py::ssize_t i = 0; i < array.ndim(); ++i) shape[i] = array.shape(i);
  return shape;
}

void CheckLayout(const py::array& array, DataType dtype) {
  if (static_cast<size_t>(array.itemsize()) != DataTypeSize(dtype)) {
    throw py::type_error(absl::StrCat(
        "reducer: an array of item size ", array.itemsize(),
        " cannot carry ", DataTypeName(dtype), " (item size ",
        DataTypeSize(dtype), ")"));
  }
  if (!(array.flags() & py::array::c_style)) {
    throw py::value_error(
        "reducer: the array is not C-contiguous; pass a contiguous copy "
        "(numpy.ascontiguousarray, tensor.contiguous())");
  }
}

// `x` as the numpy array it must be when it is not a DeviceArray.
py::array AsNumpy(const py::object& x) {
  if (!py::isinstance<py::array>(x)) {
    throw py::type_error(absl::StrCat(
        "reducer: expected a numpy array or a DeviceArray, got ",
        std::string(py::str(py::type::of(x).attr("__name__")))));
  }
  return x.cast<py::array>();
}

}  // namespace

DataType ParseDataType(const std::string& name) {
  for (int i = 0; i < kNumDataTypes; ++i) {
    DataType dtype = static_cast<DataType>(i);
    if (DataTypeName(dtype) == name) return dtype;
  }
  throw py::type_error(absl::StrCat("reducer: unsupported dtype '", name,
                                    "'"));
}

ReduceOp ParseReduceOp(const std::string& name) {
  for (int i = 0; i < kNumReduceOps; ++i) {
    ReduceOp op = static_cast<ReduceOp>(i);
    if (ReduceOpName(op) == name) return op;
  }
  std::vector<std::string> names;
  for (int i = 0; i < kNumReduceOps; ++i) {
    names.emplace_back(ReduceOpName(static_cast<ReduceOp>(i)));
  }
  throw py::value_error(absl::StrCat("reducer: unknown op '", name,
                                     "'; expected one of ",
                                     absl::StrJoin(names, ", ")));
}

TensorView ReadView(const py::object& x, DataType dtype) {
  if (py::isinstance<DeviceArray>(x)) {
    const DeviceArray& d = x.cast<const DeviceArray&>();
    return TensorView::OnDevice(Device::Cuda(d.device),
                                reinterpret_cast<const void*>(d.data), dtype,
                                d.shape);
  }
  py::array array = AsNumpy(x);
  CheckLayout(array, dtype);
  return TensorView(array.data(), dtype, ShapeOf(array));
}

MutableTensorView WriteView(const py::object& x, DataType dtype) {
  if (py::isinstance<DeviceArray>(x)) {
    const DeviceArray& d = x.cast<const DeviceArray&>();
    return MutableTensorView::OnDevice(Device::Cuda(d.device),
                                       reinterpret_cast<void*>(d.data), dtype,
                                       d.shape);
  }
  py::array array = AsNumpy(x);
  CheckLayout(array, dtype);
  if (!array.writeable()) {
    throw py::value_error(
        "reducer: an in-place call needs a writeable array; this one is "
        "read-only (use the out-of-place form)");
  }
  return MutableTensorView(const_cast<void*>(array.data()), dtype,
                           ShapeOf(array));
}

py::object ToArray(Tensor tensor) {
  if (tensor.device().is_cuda()) return WrapDeviceResult(std::move(tensor));
  py::dtype dtype = NumpyDtype(tensor.dtype());
  std::vector<py::ssize_t> shape(tensor.shape().begin(), tensor.shape().end());
  auto owned = std::make_unique<Tensor>(std::move(tensor));
  void* data = owned->mutable_data();
  py::capsule base(owned.get(), [](void* p) { delete static_cast<Tensor*>(p); });
  owned.release();  // the capsule owns it now
  return py::array(dtype, shape, data, base);
}

CallOptions MakeCallOptions(const std::optional<std::vector<int>>& group,
                            const std::string& name,
                            std::optional<double> timeout_s,
                            const py::object& x) {
  CallOptions options;
  if (py::isinstance<DeviceArray>(x)) {
    options.cuda_stream =
        reinterpret_cast<void*>(x.cast<const DeviceArray&>().stream);
  }
  if (group.has_value()) options.group = *group;
  options.name = name;
  if (timeout_s.has_value()) {
    if (!(*timeout_s > 0) || std::isinf(*timeout_s)) {
      throw py::value_error(absl::StrCat(
          "reducer: timeout must be a positive number of seconds, got ",
          *timeout_s));
    }
    options.timeout = absl::Seconds(*timeout_s);
  }
  return options;
}

}  // namespace reducer::python
