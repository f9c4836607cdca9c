// PythonWork: a c10d::Work over a Work object of Python (reducer's
// TorchWork, python/src/reducer/_torch_work.py) that forwards every query
// to it, so that torch's Work API answers the same from Python and from C++.
//
//   c10::intrusive_ptr<c10d::Work> work =
//       c10::make_intrusive<PythonWork>(ops.attr("broadcast")(tensors, opts));
//   work->isCompleted();   // TorchWork.is_completed(), under the GIL
//
// Why: a Work that a Backend returns reaches Python through torch's
// ProcessGroup, and torch 2.15 wraps a Work of Python in a holder that
// forwards only wait() and getFuture(), so is_completed() stayed false and
// exception() empty forever. A Work made in C++ is returned as it is.
//
// Thread-safe as the Python object is; each call takes the GIL. The Python
// object is held (and released under the GIL) for the work's lifetime.
#ifndef REDUCER_PYTHON_CSRC_TORCH_PYTHON_WORK_H_
#define REDUCER_PYTHON_CSRC_TORCH_PYTHON_WORK_H_

#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/csrc/utils/pybind.h>

#include <chrono>
#include <exception>
#include <vector>

namespace reducer::python {

// Drops the reference `object` holds, for a destructor: under the GIL, or,
// where the interpreter is gone already (a destructor run at exit), by
// leaking it, since nothing is left to free then. Takes the GIL itself.
void DropReference(pybind11::object& object);

class PythonWork : public c10d::Work {
 public:
  // `work`: an object with TorchWork's methods (wait(timeout_seconds),
  // is_completed(), is_success(), exception(), result(), get_future(),
  // source_rank()); the caller holds the GIL.
  explicit PythonWork(pybind11::object work);
  ~PythonWork() override;

  bool isCompleted() override;
  bool isSuccess() const override;
  // The Python exception (as pybind11::error_already_set: the same
  // exception when rethrown into Python); null while running or after
  // success.
  std::exception_ptr exception() const override;
  int sourceRank() const override;
  std::vector<at::Tensor> result() override;
  void synchronize() override;
  // kNoTimeout: until the collective ends; else at most `timeout`. Raises
  // the Python error (as pybind11::error_already_set: the same exception
  // when it reaches Python again).
  bool wait(std::chrono::milliseconds timeout = ::kNoTimeout) override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;

 private:
  pybind11::object work_;
};

}  // namespace reducer::python

#endif  // REDUCER_PYTHON_CSRC_TORCH_PYTHON_WORK_H_
