// ReleasedGil: releases the GIL for its scope, like pybind11's
// gil_scoped_release, except when the scope ends while the interpreter is
// shutting down.
//
//   {
//     ReleasedGil released;
//     status = client->Barrier(options);   // other Python threads run
//   }
//
// Why: a thread that waits on reducerd with the GIL released (a daemon
// thread, such as the torch backend's completer) may see its call end after
// the main thread began to finalize the interpreter. Taking the GIL then
// makes Python end the thread with pthread_exit, whose unwinding through
// pybind11's noexcept destructor calls std::terminate and aborts the
// process instead of letting it exit. So past that point such a thread
// parks until the process exits; it holds no lock of the client library
// then. The main thread, which is the one finalizing (and may destroy a
// client on the way), takes the GIL back as usual.
//
// Not copyable; construct with the GIL held, on the thread that holds it.
#ifndef REDUCER_PYTHON_CSRC_RELEASED_GIL_H_
#define REDUCER_PYTHON_CSRC_RELEASED_GIL_H_

#include <Python.h>
#include <unistd.h>

namespace reducer::python {

class ReleasedGil {
 public:
  ReleasedGil() : state_(PyEval_SaveThread()) {}
  ~ReleasedGil() {
    // The main thread's id is the process id.
    while (_Py_IsFinalizing() && gettid() != getpid()) pause();
    PyEval_RestoreThread(state_);
  }
  ReleasedGil(const ReleasedGil&) = delete;
  ReleasedGil& operator=(const ReleasedGil&) = delete;

 private:
  PyThreadState* const state_;
};

}  // namespace reducer::python

#endif  // REDUCER_PYTHON_CSRC_RELEASED_GIL_H_
