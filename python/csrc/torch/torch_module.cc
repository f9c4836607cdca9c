// `_torch_c`: the torch backend "reducer" as a c10d::Backend
// (python/csrc/torch/reducer_backend.h), for reducer.torch. Built against
// the torch whose C++ headers and ABI it was compiled for (by Bazel from
// the project's Python venv, by pip from the torch it builds against).
//
//   reducer._torch_c.Backend(rank, size, ops, client, where)
//
// `ops` holds the collectives (reducer._torch_backend.BackendOps); `client`
// a `_reducer.Client` for the all-reduce in C++ (None: every all_reduce
// through `ops`); `where` names the group in errors ("in job J (rank R)").
// The backend's `ops` property returns `ops`; `native` says whether the
// C++ all-reduce is on.
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/utils/pybind.h>

#include <string>

#include "python/csrc/status_exception.h"
#include "python/csrc/torch/reducer_backend.h"

PYBIND11_MODULE(_torch_c, m) {
  namespace py = pybind11;
  using reducer::python::ReducerBackend;
  m.doc() = "The torch backend \"reducer\" as a c10d::Backend (used by reducer.torch)";
  // torch's types (Backend, Work, the options, tensors) are registered by
  // torch.distributed; it must be imported before they are cast.
  py::module_::import("torch.distributed");
  reducer::python::RegisterStatusErrorTranslator();
  py::class_<ReducerBackend, c10d::Backend, c10::intrusive_ptr<ReducerBackend>>(
      m, "Backend")
      .def(py::init<int, int, py::object, const py::object&, const std::string&>(),
           py::arg("rank"), py::arg("size"), py::arg("ops"), py::arg("client"),
           py::arg("where"))
      .def_property_readonly("ops", &ReducerBackend::ops)
      .def_property_readonly("native", &ReducerBackend::native);
}
