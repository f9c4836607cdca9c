// PyClient: `_reducer.Client`, a connected reducer::Client, whose
// collectives the module's files define on it (collective_binding.h);
// Group and Timeout, the keyword-only call options as Python passes them.
// Header-only: the module's files share it.
#ifndef REDUCER_PYTHON_CSRC_PY_CLIENT_H_
#define REDUCER_PYTHON_CSRC_PY_CLIENT_H_

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "client/reducer_client.h"
#include "pybind11/pybind11.h"
#include "pybind11/stl.h"
#include "python/csrc/released_gil.h"
#include "python/csrc/status_error.h"

namespace reducer::python {

namespace py = pybind11;

using Group = std::optional<std::vector<int>>;
using Timeout = std::optional<double>;

// A connected client. Thread-safe (as reducer::Client). close() leaves the
// job; handles still pending keep the underlying client alive until waited.
class PyClient {
 public:
  // Connects (GIL released) with `options` (MakeClientOptions builds them
  // from reducer.Client's arguments); Connect's errors raise ReducerError
  // subclasses.
  explicit PyClient(const ClientOptions& options) {
    absl::StatusOr<std::unique_ptr<Client>> client;
    {
      ReleasedGil released;
      client = Client::Connect(options);
    }
    client_ = std::shared_ptr<Client>(ValueOrThrow(std::move(client)));
  }

  ~PyClient() { Close(); }

  // Leaves the job (the session closes). Later calls raise ValueError.
  void Close() {
    std::shared_ptr<Client> client = std::move(client_);
    ReleasedGil released;
    client.reset();
  }

  const std::shared_ptr<Client>& client() const {
    if (client_ == nullptr) {
      throw py::value_error("reducer: the client was closed");
    }
    return client_;
  }

  int rank() const { return client()->rank(); }
  int world_size() const { return client()->world_size(); }

 private:
  std::shared_ptr<Client> client_;  // null once closed
};

}  // namespace reducer::python

#endif  // REDUCER_PYTHON_CSRC_PY_CLIENT_H_
