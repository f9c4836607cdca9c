// `_torch_c`: the torch backend's all-reduce in C++, for the backend
// "reducer" (python/src/reducer/torch.py). Built only against the torch
// whose C++ headers and ABI it was compiled for (by Bazel where libtorch-dev
// is installed, by pip where torch's headers are found); without it the
// backend runs every collective through Python.
//
// `_torch_c.Group(client, what)` wraps a `_reducer.Client`'s connection
// (python/csrc/native_api.h); its `allreduce(tensors, opts)` starts the
// in-place all-reduce of one contiguous CPU tensor and returns a torch Work
// (python/csrc/torch/native_work.h), or None for a call it leaves to the
// Python backend (several tensors, CUDA, a layout or dtype or op it does not
// take), which then raises or handles it as before.
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/utils/pybind.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "python/csrc/native_api.h"
#include "python/csrc/released_gil.h"
#include "python/csrc/status_exception.h"
#include "python/csrc/torch/native_work.h"

namespace reducer::python {
namespace {

namespace py = pybind11;

std::optional<NativeDataType> DataTypeOf(at::ScalarType type) {
  switch (type) {
    case at::kFloat: return NativeDataType::kFloat32;
    case at::kDouble: return NativeDataType::kFloat64;
    case at::kHalf: return NativeDataType::kFloat16;
    case at::kBFloat16: return NativeDataType::kBFloat16;
    case at::kChar: return NativeDataType::kInt8;
    case at::kByte: return NativeDataType::kUInt8;
    case at::kInt: return NativeDataType::kInt32;
    case at::kLong: return NativeDataType::kInt64;
    case at::kBool: return NativeDataType::kBool;
    default: return std::nullopt;
  }
}

std::optional<NativeReduceOp> ReduceOpOf(const c10d::ReduceOp& op) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM: return NativeReduceOp::kSum;
    case c10d::ReduceOp::AVG: return NativeReduceOp::kAvg;
    case c10d::ReduceOp::PRODUCT: return NativeReduceOp::kProduct;
    case c10d::ReduceOp::MIN: return NativeReduceOp::kMin;
    case c10d::ReduceOp::MAX: return NativeReduceOp::kMax;
    case c10d::ReduceOp::BAND: return NativeReduceOp::kBitAnd;
    case c10d::ReduceOp::BOR: return NativeReduceOp::kBitOr;
    case c10d::ReduceOp::BXOR: return NativeReduceOp::kBitXor;
    default: return std::nullopt;  // PREMUL_SUM
  }
}

const NativeApi& ImportNativeApi() {
  auto* api = static_cast<const NativeApi*>(PyCapsule_Import(kNativeApiCapsule, 0));
  if (api == nullptr) throw py::error_already_set();
  if (api->version != kNativeApiVersion) {
    throw py::import_error(
        "reducer._torch_c was built for native API version " +
        std::to_string(kNativeApiVersion) + " but reducer._reducer exports " +
        std::to_string(api->version) + "; reinstall the reducer package");
  }
  return *api;
}

// One process group's native path. Thread-safe.
class Group {
 public:
  // `client` is a `_reducer.Client`; `where` names the group in errors
  // ("in job J (rank R)").
  Group(const py::object& client, const std::string& where)
      : all_reduce_what_(
            std::make_shared<const std::string>("all_reduce " + where)),
        completer_(std::make_shared<WorkCompleter>()) {
    connection_ = ImportNativeApi().connection_of(client.ptr());
    if (connection_ == nullptr) throw py::error_already_set();
  }

  // `opts`: None (SUM) or torch's AllreduceOptions. None when the call is
  // not one this path takes.
  py::object AllReduce(std::vector<at::Tensor>& tensors, const py::object& opts) {
    c10d::AllreduceOptions options;
    if (!opts.is_none()) {
      if (!py::isinstance<c10d::AllreduceOptions>(opts)) return py::none();
      options = opts.cast<c10d::AllreduceOptions>();
    }
    if (tensors.size() != 1) return py::none();
    at::Tensor& tensor = tensors[0];
    const std::optional<NativeDataType> dtype = DataTypeOf(tensor.scalar_type());
    const std::optional<NativeReduceOp> op = ReduceOpOf(options.reduceOp);
    if (!dtype || !op || !tensor.device().is_cpu() ||
        tensor.layout() != at::kStrided || !tensor.is_contiguous()) {
      return py::none();
    }
    const double timeout_s =
        options.timeout.count() > 0 ? options.timeout.count() / 1000.0 : 0.0;
    std::unique_ptr<NativePending> pending;
    {
      ReleasedGil released;
      pending = connection_->AllReduceInPlace(tensor.data_ptr(), tensor.numel(),
                                              *dtype, *op, timeout_s);
    }
    c10::intrusive_ptr<c10d::Work> work = c10::make_intrusive<NativeWork>(
        tensor, std::move(pending), completer_, all_reduce_what_);
    return py::cast(work);
  }

 private:
  const std::shared_ptr<const std::string> all_reduce_what_;
  const std::shared_ptr<WorkCompleter> completer_;
  std::unique_ptr<NativeConnection> connection_;
};

}  // namespace
}  // namespace reducer::python

PYBIND11_MODULE(_torch_c, m) {
  namespace py = pybind11;
  using reducer::python::Group;
  m.doc() = "The torch backend's all-reduce in C++ (used by reducer.torch)";
  // torch's types (Work, AllreduceOptions, tensors) are registered by
  // torch.distributed; it must be imported before they are cast.
  py::module_::import("torch.distributed");
  reducer::python::RegisterStatusErrorTranslator();
  py::class_<Group>(m, "Group")
      .def(py::init<const py::object&, const std::string&>(), py::arg("client"),
           py::arg("where"))
      .def("allreduce", &Group::AllReduce, py::arg("tensors"), py::arg("opts"));
}
