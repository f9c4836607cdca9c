#include "python/csrc/device_array.h"

#include <utility>

#include "pybind11/stl.h"

namespace reducer::python {

namespace py = pybind11;

namespace {

// numpy's array-interface type string for `dtype` (little-endian).
const char* TypeString(DataType dtype) {
  switch (dtype) {
    case DataType::kFloat32: return "<f4";
    case DataType::kFloat64: return "<f8";
    case DataType::kFloat16: return "<f2";
    case DataType::kBFloat16: return "<i2";  // raw bits
    case DataType::kInt8: return "|i1";
    case DataType::kUInt8: return "|u1";
    case DataType::kInt32: return "<i4";
    case DataType::kInt64: return "<i8";
    case DataType::kBool: return "|b1";
  }
  throw py::type_error("unknown reducer dtype");
}

}  // namespace

py::dict CudaArrayInterface(const DeviceArray& array, DataType dtype) {
  py::dict interface;
  py::tuple shape(array.shape.size());
  for (size_t i = 0; i < array.shape.size(); ++i) shape[i] = array.shape[i];
  interface["shape"] = shape;
  interface["typestr"] = TypeString(dtype);
  interface["data"] = py::make_tuple(array.data, false);
  interface["strides"] = py::none();
  interface["version"] = 2;
  return interface;
}

py::object WrapDeviceResult(Tensor result) {
  DeviceArray array;
  array.data = reinterpret_cast<uintptr_t>(result.data());
  array.shape = result.shape();
  array.device = result.device().index();
  array.result = std::move(result);
  return py::cast(std::move(array));
}

void DefineDeviceArray(py::module_& m) {
  py::class_<DeviceArray>(m, "DeviceArray")
      .def(py::init([](uintptr_t data, std::vector<int64_t> shape, int device,
                       uintptr_t stream, py::object owner) {
             DeviceArray array;
             array.data = data;
             array.shape = std::move(shape);
             array.device = device;
             array.stream = stream;
             array.owner = std::move(owner);
             return array;
           }),
           py::arg("data"), py::arg("shape"), py::arg("device"),
           py::arg("stream"), py::arg("owner"))
      .def_readonly("device", &DeviceArray::device)
      .def_readonly("shape", &DeviceArray::shape)
      .def_property_readonly("__cuda_array_interface__", [](const DeviceArray& a) {
        if (!a.result.has_value()) {
          throw py::attribute_error(
              "reducer: only a result DeviceArray exposes its memory");
        }
        return CudaArrayInterface(a, a.result->dtype());
      });
}

}  // namespace reducer::python
