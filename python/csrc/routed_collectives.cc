#include "python/csrc/routed_collectives.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "client/reducer_client.h"
#include "pybind11/stl.h"
#include "python/csrc/array_view.h"
#include "python/csrc/py_client.h"
#include "python/csrc/py_pending.h"
#include "python/csrc/released_gil.h"
#include "python/csrc/status_error.h"

namespace reducer::python {
namespace {

using py::arg;

// Runs `call(client)` with the GIL released and returns what it returned.
template <typename Call>
auto Released(PyClient& self, Call call) {
  std::shared_ptr<Client> client = self.client();
  ReleasedGil released;
  return call(*client);
}

// A result array, or None on a rank that gets none (`gets_result` false).
py::object ArrayOrNone(absl::StatusOr<Tensor> result, bool gets_result) {
  Tensor tensor = ValueOrThrow(std::move(result));
  if (!gets_result) return py::none();
  return ToArray(std::move(tensor));
}

py::object Reduce(PyClient& self, const py::object& x, const std::string& dtype,
                  const std::string& op, int root, const Group& group,
                  const std::string& name, Timeout timeout) {
  const TensorView view = ReadView(x, ParseDataType(dtype));
  const ReduceOp reduce_op = ParseReduceOp(op);
  const CallOptions options = MakeCallOptions(group, name, timeout, x);
  return ArrayOrNone(Released(self, [&](Client& c) {
                       return c.Reduce(view, reduce_op, root, options);
                     }),
                     self.rank() == root);
}

void ReduceInPlace(PyClient& self, const py::object& x,
                   const std::string& dtype, const std::string& op, int root,
                   const Group& group, const std::string& name,
                   Timeout timeout) {
  const MutableTensorView view = WriteView(x, ParseDataType(dtype));
  const ReduceOp reduce_op = ParseReduceOp(op);
  const CallOptions options = MakeCallOptions(group, name, timeout, x);
  ThrowIfError(Released(self, [&](Client& c) {
    return c.ReduceInPlace(view, reduce_op, root, options);
  }));
}

py::object Gather(PyClient& self, const py::object& x, const std::string& dtype,
                  int root, const Group& group, const std::string& name,
                  Timeout timeout) {
  const TensorView view = ReadView(x, ParseDataType(dtype));
  const CallOptions options = MakeCallOptions(group, name, timeout, x);
  return ArrayOrNone(Released(self, [&](Client& c) {
                       return c.Gather(view, root, options);
                     }),
                     self.rank() == root);
}

// `x` None on the ranks other than the root.
py::object Scatter(PyClient& self, const std::optional<py::object>& x,
                   const std::string& dtype, int root, const Group& group,
                   const std::string& name, Timeout timeout) {
  TensorView view;
  if (x.has_value()) view = ReadView(*x, ParseDataType(dtype));
  const CallOptions options =
      MakeCallOptions(group, name, timeout, x.value_or(py::none()));
  return ToArray(ValueOrThrow(Released(
      self, [&](Client& c) { return c.Scatter(view, root, options); })));
}

py::object AllToAll(PyClient& self, const py::object& x,
                    const std::string& dtype, const Group& group,
                    const std::string& name, Timeout timeout) {
  const TensorView view = ReadView(x, ParseDataType(dtype));
  const CallOptions options = MakeCallOptions(group, name, timeout, x);
  return ToArray(ValueOrThrow(
      Released(self, [&](Client& c) { return c.AllToAll(view, options); })));
}

// `rows` as AllToAllV takes them (a sequence of ints; None: none).
std::vector<int64_t> RowsOf(const std::optional<std::vector<int64_t>>& rows) {
  return rows.value_or(std::vector<int64_t>());
}

py::object AllToAllV(PyClient& self, const py::object& x,
                     const std::string& dtype,
                     const std::vector<int64_t>& send_rows,
                     const std::optional<std::vector<int64_t>>& recv_rows,
                     const Group& group, const std::string& name,
                     Timeout timeout) {
  const TensorView view = ReadView(x, ParseDataType(dtype));
  const CallOptions options = MakeCallOptions(group, name, timeout, x);
  const std::vector<int64_t> recv = RowsOf(recv_rows);
  return ToArray(ValueOrThrow(Released(self, [&](Client& c) {
    return c.AllToAllV(view, send_rows, recv, options);
  })));
}

void Send(PyClient& self, const py::object& x, const std::string& dtype,
          int destination, int tag, const Group& group, const std::string& name,
          Timeout timeout) {
  const TensorView view = ReadView(x, ParseDataType(dtype));
  const CallOptions options = MakeCallOptions(group, name, timeout, x);
  ThrowIfError(Released(self, [&](Client& c) {
    return c.Send(view, destination, tag, options);
  }));
}

py::object Receive(PyClient& self, int source, int tag, const Group& group,
                   const std::string& name, Timeout timeout) {
  const CallOptions options = MakeCallOptions(group, name, timeout);
  return ToArray(ValueOrThrow(Released(
      self, [&](Client& c) { return c.Receive(source, tag, options); })));
}

// (array, source): the first message to this rank with `tag` from any
// rank, and the sender's group rank.
py::tuple ReceiveAny(PyClient& self, int tag, const Group& group,
                     const std::string& name, Timeout timeout) {
  const CallOptions options = MakeCallOptions(group, name, timeout);
  int source = -1;
  py::object array = ToArray(ValueOrThrow(Released(
      self, [&](Client& c) { return c.ReceiveAny(tag, &source, options); })));
  return py::make_tuple(std::move(array), source);
}

void ReceiveInPlace(PyClient& self, const py::object& x,
                    const std::string& dtype, int source, int tag,
                    const Group& group, const std::string& name,
                    Timeout timeout) {
  const MutableTensorView view = WriteView(x, ParseDataType(dtype));
  const CallOptions options = MakeCallOptions(group, name, timeout, x);
  ThrowIfError(Released(self, [&](Client& c) {
    return c.ReceiveInPlace(view, source, tag, options);
  }));
}

// --- asynchronous forms: wait() returns the result arrays (none where the
// rank gets nothing).

std::unique_ptr<PyPending> ReduceAsync(PyClient& self, const py::object& x,
                                       const std::string& dtype,
                                       const std::string& op, int root,
                                       const Group& group,
                                       const std::string& name,
                                       Timeout timeout) {
  const TensorView view = ReadView(x, ParseDataType(dtype));
  const ReduceOp reduce_op = ParseReduceOp(op);
  const CallOptions options = MakeCallOptions(group, name, timeout, x);
  return StartPending(self, {x}, [&](Client& c) {
    return c.ReduceAsync(view, reduce_op, root, options);
  });
}

std::unique_ptr<PyPending> GatherAsync(PyClient& self, const py::object& x,
                                       const std::string& dtype, int root,
                                       const Group& group,
                                       const std::string& name,
                                       Timeout timeout) {
  const TensorView view = ReadView(x, ParseDataType(dtype));
  const CallOptions options = MakeCallOptions(group, name, timeout, x);
  return StartPending(self, {x}, [&](Client& c) {
    return c.GatherAsync(view, root, options);
  });
}

std::unique_ptr<PyPending> ScatterAsync(PyClient& self,
                                        const std::optional<py::object>& x,
                                        const std::string& dtype, int root,
                                        const Group& group,
                                        const std::string& name,
                                        Timeout timeout) {
  TensorView view;
  if (x.has_value()) view = ReadView(*x, ParseDataType(dtype));
  const CallOptions options =
      MakeCallOptions(group, name, timeout, x.value_or(py::none()));
  return StartPending(self, {x.value_or(py::none())}, [&](Client& c) {
    return c.ScatterAsync(view, root, options);
  });
}

std::unique_ptr<PyPending> AllToAllAsync(PyClient& self, const py::object& x,
                                         const std::string& dtype,
                                         const Group& group,
                                         const std::string& name,
                                         Timeout timeout) {
  const TensorView view = ReadView(x, ParseDataType(dtype));
  const CallOptions options = MakeCallOptions(group, name, timeout, x);
  return StartPending(self, {x}, [&](Client& c) {
    return c.AllToAllAsync(view, options);
  });
}

std::unique_ptr<PyPending> AllToAllVAsync(
    PyClient& self, const py::object& x, const std::string& dtype,
    const std::vector<int64_t>& send_rows,
    const std::optional<std::vector<int64_t>>& recv_rows, const Group& group,
    const std::string& name, Timeout timeout) {
  const TensorView view = ReadView(x, ParseDataType(dtype));
  const CallOptions options = MakeCallOptions(group, name, timeout, x);
  const std::vector<int64_t> recv = RowsOf(recv_rows);
  return StartPending(self, {x}, [&](Client& c) {
    return c.AllToAllVAsync(view, send_rows, recv, options);
  });
}

std::unique_ptr<PyPending> SendAsync(PyClient& self, const py::object& x,
                                     const std::string& dtype, int destination,
                                     int tag, const Group& group,
                                     const std::string& name, Timeout timeout) {
  const TensorView view = ReadView(x, ParseDataType(dtype));
  const CallOptions options = MakeCallOptions(group, name, timeout, x);
  return StartPending(self, {x}, [&](Client& c) {
    return c.SendAsync(view, destination, tag, options);
  });
}

std::unique_ptr<PyPending> ReceiveAsync(PyClient& self, int source, int tag,
                                        const Group& group,
                                        const std::string& name,
                                        Timeout timeout) {
  const CallOptions options = MakeCallOptions(group, name, timeout);
  return StartPending(self, {}, [&](Client& c) {
    return c.ReceiveAsync(source, tag, options);
  });
}

// wait() gives the message; the pending call's source() its sender's group
// rank.
std::unique_ptr<PyPending> ReceiveAnyAsync(PyClient& self, int tag,
                                           const Group& group,
                                           const std::string& name,
                                           Timeout timeout) {
  const CallOptions options = MakeCallOptions(group, name, timeout);
  return StartPending(self, {}, [&](Client& c) {
    return c.ReceiveAnyAsync(tag, options);
  });
}

}  // namespace

void DefineRoutedCollectives(py::class_<PyClient>& client) {
  DefCall(client, "reduce", &Reduce, arg("x"), arg("dtype"), arg("op"),
          arg("root"));
  DefCall(client, "reduce_", &ReduceInPlace, arg("x"), arg("dtype"),
          arg("op"), arg("root"));
  DefCall(client, "gather", &Gather, arg("x"), arg("dtype"), arg("root"));
  DefCall(client, "scatter", &Scatter, arg("x").none(true), arg("dtype"),
          arg("root"));
  DefCall(client, "all_to_all", &AllToAll, arg("x"), arg("dtype"));
  DefCall(client, "all_to_all_v", &AllToAllV, arg("x"), arg("dtype"),
          arg("send_rows"), arg("recv_rows") = py::none());
  DefCall(client, "send", &Send, arg("x"), arg("dtype"), arg("destination"),
          arg("tag"));
  DefCall(client, "recv", &Receive, arg("source"), arg("tag"));
  DefCall(client, "recv_any", &ReceiveAny, arg("tag"));
  DefCall(client, "recv_", &ReceiveInPlace, arg("x"), arg("dtype"),
          arg("source"), arg("tag"));
  DefCall(client, "reduce_async", &ReduceAsync, arg("x"), arg("dtype"),
          arg("op"), arg("root"));
  DefCall(client, "gather_async", &GatherAsync, arg("x"), arg("dtype"),
          arg("root"));
  DefCall(client, "scatter_async", &ScatterAsync, arg("x").none(true),
          arg("dtype"), arg("root"));
  DefCall(client, "all_to_all_async", &AllToAllAsync, arg("x"), arg("dtype"));
  DefCall(client, "all_to_all_v_async", &AllToAllVAsync, arg("x"),
          arg("dtype"), arg("send_rows"), arg("recv_rows") = py::none());
  DefCall(client, "send_async", &SendAsync, arg("x"), arg("dtype"),
          arg("destination"), arg("tag"));
  DefCall(client, "recv_async", &ReceiveAsync, arg("source"), arg("tag"));
  DefCall(client, "recv_any_async", &ReceiveAnyAsync, arg("tag"));
}

}  // namespace reducer::python
