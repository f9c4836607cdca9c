#include "python/csrc/torch/python_work.h"

#include <torch/csrc/jit/python/pybind_utils.h>

#include <memory>
#include <string>
#include <utility>

namespace reducer::python {

namespace py = pybind11;

void DropReference(py::object& object) {
  if (!Py_IsInitialized()) {
    object.release();
    return;
  }
  py::gil_scoped_acquire gil;
  object = py::object();
}

PythonWork::PythonWork(py::object work)
    : c10d::Work(-1, c10d::OpType::UNKNOWN, "reducer"),
      work_(std::move(work)) {}

PythonWork::~PythonWork() { DropReference(work_); }

bool PythonWork::isCompleted() {
  py::gil_scoped_acquire gil;
  return work_.attr("is_completed")().cast<bool>();
}

bool PythonWork::isSuccess() const {
  py::gil_scoped_acquire gil;
  return work_.attr("is_success")().cast<bool>();
}

std::exception_ptr PythonWork::exception() const {
  py::gil_scoped_acquire gil;
  py::object error = work_.attr("exception")();
  if (error.is_none()) return nullptr;
  // As pybind11 error, so that rethrown into Python it is the same exception
  // (reducer.DeadlineExceeded, ...), and elsewhere a std::exception.
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(error.ptr())), error.ptr());
  return std::make_exception_ptr(py::error_already_set());
}

int PythonWork::sourceRank() const {
  py::gil_scoped_acquire gil;
  return work_.attr("source_rank")().cast<int>();
}

std::vector<at::Tensor> PythonWork::result() {
  py::gil_scoped_acquire gil;
  return work_.attr("result")().cast<std::vector<at::Tensor>>();
}

void PythonWork::synchronize() { wait(); }

bool PythonWork::wait(std::chrono::milliseconds timeout) {
  py::gil_scoped_acquire gil;
  py::object seconds = py::none();
  if (timeout > ::kNoTimeout) seconds = py::float_(timeout.count() / 1000.0);
  return work_.attr("wait")(seconds).cast<bool>();
}

c10::intrusive_ptr<c10::ivalue::Future> PythonWork::getFuture() {
  py::gil_scoped_acquire gil;
  py::object future = work_.attr("get_future")();
  return future.cast<std::shared_ptr<torch::jit::PythonFutureWrapper>>()->fut;
}

}  // namespace reducer::python
