// PyClient: `_reducer.Client`, a connected reducer::Client and its blocking
// collectives, as the extension module defines them (reducer_module.cc);
// DefCall, which defines a collective method with the keyword-only call
// options every collective takes. Header-only: the module's files share it.
#ifndef REDUCER_PYTHON_CSRC_PY_CLIENT_H_
#define REDUCER_PYTHON_CSRC_PY_CLIENT_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "client/reducer_client.h"
#include "pybind11/numpy.h"
#include "pybind11/pybind11.h"
#include "pybind11/stl.h"
#include "python/csrc/array_view.h"
#include "python/csrc/client_settings.h"
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
  // Connects (GIL released) with the options MakeClientOptions builds from
  // reducer.Client's arguments (its ValueErrors); Connect's errors raise
  // ReducerError subclasses.
  PyClient(const std::string& target, const std::string& job, int rank,
           int world_size, double timeout_s,
           const std::optional<std::string>& token,
           const std::optional<std::string>& tls_ca_file,
           const std::optional<std::string>& tls_cert_file,
           const std::optional<std::string>& tls_key_file,
           const std::optional<std::string>& server_name,
           const std::string& shared_memory) {
    const ClientOptions options = MakeClientOptions(
        target, job, rank, world_size, timeout_s, token, tls_ca_file,
        tls_cert_file, tls_key_file, server_name, shared_memory);
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

  py::object AllReduce(const py::object& x, const std::string& dtype,
                      const std::string& op, const Group& group,
                      const std::string& name, Timeout timeout) {
    TensorView view = ReadView(x, ParseDataType(dtype));
    ReduceOp reduce_op = ParseReduceOp(op);
    CallOptions options = MakeCallOptions(group, name, timeout, x);
    absl::StatusOr<Tensor> result;
    {
      ReleasedGil released;
      result = client()->AllReduce(view, reduce_op, options);
    }
    return ToArray(ValueOrThrow(std::move(result)));
  }

  void AllReduceInPlace(const py::object& x, const std::string& dtype,
                        const std::string& op, const Group& group,
                        const std::string& name, Timeout timeout) {
    MutableTensorView view = WriteView(x, ParseDataType(dtype));
    ReduceOp reduce_op = ParseReduceOp(op);
    CallOptions options = MakeCallOptions(group, name, timeout, x);
    absl::Status status;
    {
      ReleasedGil released;
      status = client()->AllReduceInPlace(view, reduce_op, options);
    }
    ThrowIfError(status);
  }

  double AllReduceFloat(double value, const std::string& op, const Group& group,
                        const std::string& name, Timeout timeout) {
    ReduceOp reduce_op = ParseReduceOp(op);
    CallOptions options = MakeCallOptions(group, name, timeout);
    absl::StatusOr<double> result;
    {
      ReleasedGil released;
      result = client()->AllReduce(value, reduce_op, options);
    }
    return ValueOrThrow(std::move(result));
  }

  int64_t AllReduceInt(int64_t value, const std::string& op, const Group& group,
                       const std::string& name, Timeout timeout) {
    ReduceOp reduce_op = ParseReduceOp(op);
    CallOptions options = MakeCallOptions(group, name, timeout);
    absl::StatusOr<int64_t> result;
    {
      ReleasedGil released;
      result = client()->AllReduce(value, reduce_op, options);
    }
    return ValueOrThrow(std::move(result));
  }

  std::vector<py::object> AllReduceMany(const std::vector<py::object>& xs,
                                       const std::vector<std::string>& dtypes,
                                       const std::vector<std::string>& ops,
                                       const Group& group,
                                       const std::string& name,
                                       Timeout timeout) {
    if (xs.size() != dtypes.size() || xs.size() != ops.size()) {
      throw py::value_error("reducer: all_reduce_many needs one op per tensor");
    }
    std::vector<TensorView> views;
    std::vector<ReduceOp> reduce_ops;
    for (size_t i = 0; i < xs.size(); ++i) {
      views.push_back(ReadView(xs[i], ParseDataType(dtypes[i])));
      reduce_ops.push_back(ParseReduceOp(ops[i]));
    }
    CallOptions options =
        MakeCallOptions(group, name, timeout, xs.empty() ? py::object(py::none()) : xs[0]);
    absl::StatusOr<std::vector<Tensor>> result;
    {
      ReleasedGil released;
      result = client()->AllReduceMany(views, reduce_ops, options);
    }
    std::vector<Tensor> tensors = ValueOrThrow(std::move(result));
    std::vector<py::object> arrays;
    for (Tensor& t : tensors) arrays.push_back(ToArray(std::move(t)));
    return arrays;
  }

  py::object AllGather(const py::object& x, const std::string& dtype,
                      const Group& group, const std::string& name,
                      Timeout timeout) {
    TensorView view = ReadView(x, ParseDataType(dtype));
    CallOptions options = MakeCallOptions(group, name, timeout, x);
    absl::StatusOr<Tensor> result;
    {
      ReleasedGil released;
      result = client()->AllGather(view, options);
    }
    return ToArray(ValueOrThrow(std::move(result)));
  }

  // `x` None: this rank does not know the root's dtype or shape.
  py::object Broadcast(const std::optional<py::object>& x,
                      const std::string& dtype, int root, const Group& group,
                      const std::string& name, Timeout timeout) {
    TensorView view;
    if (x.has_value()) view = ReadView(*x, ParseDataType(dtype));
    CallOptions options =
        MakeCallOptions(group, name, timeout, x.value_or(py::none()));
    absl::StatusOr<Tensor> result;
    {
      ReleasedGil released;
      result = client()->Broadcast(view, root, options);
    }
    return ToArray(ValueOrThrow(std::move(result)));
  }

  void BroadcastInPlace(const py::object& x, const std::string& dtype, int root,
                        const Group& group, const std::string& name,
                        Timeout timeout) {
    MutableTensorView view = WriteView(x, ParseDataType(dtype));
    CallOptions options = MakeCallOptions(group, name, timeout, x);
    absl::Status status;
    {
      ReleasedGil released;
      status = client()->BroadcastInPlace(view, root, options);
    }
    ThrowIfError(status);
  }

  py::object ReduceScatter(const py::object& x, const std::string& dtype,
                          const std::string& op, const Group& group,
                          const std::string& name, Timeout timeout) {
    TensorView view = ReadView(x, ParseDataType(dtype));
    ReduceOp reduce_op = ParseReduceOp(op);
    CallOptions options = MakeCallOptions(group, name, timeout, x);
    absl::StatusOr<Tensor> result;
    {
      ReleasedGil released;
      result = client()->ReduceScatter(view, reduce_op, options);
    }
    return ToArray(ValueOrThrow(std::move(result)));
  }

  void Barrier(const Group& group, const std::string& name, Timeout timeout) {
    CallOptions options = MakeCallOptions(group, name, timeout);
    absl::Status status;
    {
      ReleasedGil released;
      status = client()->Barrier(options);
    }
    ThrowIfError(status);
  }

 private:
  std::shared_ptr<Client> client_;  // null once closed
};

// Defines method `name` of `cls` with the positional `args` followed by the
// keyword-only CallOptions every collective takes: group, name, timeout.
template <typename Class, typename F, typename... Args>
void DefCall(Class& cls, const char* name, F&& f, Args&&... args) {
  cls.def(name, std::forward<F>(f), std::forward<Args>(args)..., py::kw_only(),
          py::arg("group") = py::none(), py::arg("name") = "",
          py::arg("timeout") = py::none());
}

}  // namespace reducer::python

#endif  // REDUCER_PYTHON_CSRC_PY_CLIENT_H_
