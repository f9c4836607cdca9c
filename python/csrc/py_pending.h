// PyPending: `_reducer.Pending`, what the *_async methods other than
// all_reduce's return; StartPending, which starts one.
#ifndef REDUCER_PYTHON_CSRC_PY_PENDING_H_
#define REDUCER_PYTHON_CSRC_PY_PENDING_H_

#include <memory>
#include <utility>
#include <vector>

#include "client/reducer_client.h"
#include "pybind11/pybind11.h"
#include "python/csrc/array_view.h"
#include "python/csrc/py_client.h"
#include "python/csrc/released_gil.h"
#include "python/csrc/status_error.h"

namespace reducer::python {

// A collective started by one of the other *_async methods: references its
// input arrays and the client until waited for. Not thread-safe: one
// thread waits on a handle.
class PyPending {
 public:
  PyPending(std::shared_ptr<Client> client, std::vector<py::object> inputs,
            std::unique_ptr<CollectiveHandle> handle)
      : client_(std::move(client)),
        inputs_(std::move(inputs)),
        handle_(std::move(handle)) {}

  // A handle dropped without wait() waits first (its inputs are in use
  // until then), with the GIL released.
  ~PyPending() {
    ReleasedGil released;
    handle_.reset();
  }

  // The results, one array per result tensor (none for a barrier); raises
  // the collective's error. A second call raises ValueError.
  std::vector<py::object> Wait() {
    if (handle_ == nullptr) {
      throw py::value_error("reducer: wait() was already called");
    }
    absl::StatusOr<std::vector<Tensor>> result;
    {
      ReleasedGil released;
      result = handle_->Wait();
      source_ = handle_->source();
      handle_.reset();
    }
    inputs_.clear();
    std::vector<py::object> arrays;
    for (Tensor& t : ValueOrThrow(std::move(result))) {
      arrays.push_back(ToArray(std::move(t)));
    }
    return arrays;
  }

  // Never blocks: true once wait() would return without waiting for peers.
  bool IsCompleted() { return handle_ == nullptr || handle_->Ready(); }

  // recv_any_async: the sender's group rank once wait() returned its
  // message (CollectiveHandle::source); -1 before, and for other calls.
  int Source() const { return source_; }

 private:
  std::shared_ptr<Client> client_;
  std::vector<py::object> inputs_;
  std::unique_ptr<CollectiveHandle> handle_;  // null once waited for
  int source_ = -1;
};

// Starts `start(client)` with the GIL released; the pending call keeps
// `inputs` referenced.
template <typename Start>
std::unique_ptr<PyPending> StartPending(PyClient& self,
                                        std::vector<py::object> inputs,
                                        Start start) {
  std::shared_ptr<Client> client = self.client();
  std::unique_ptr<CollectiveHandle> handle;
  {
    ReleasedGil released;
    handle = start(*client);
  }
  return std::make_unique<PyPending>(std::move(client), std::move(inputs),
                                     std::move(handle));
}

}  // namespace reducer::python

#endif  // REDUCER_PYTHON_CSRC_PY_PENDING_H_
