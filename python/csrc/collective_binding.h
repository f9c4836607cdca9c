// The one binding path of `_reducer.Client`'s collectives: each is a
// reducer::Client call wrapped by one of the templates below, by the shape
// of its arguments, and defined with DefCall.
//
//   DefCall(client, "reduce_scatter",
//           TensorCall<kBlocking, ReadsTensor, OpName>(&Client::ReduceScatter),
//           arg("x"), arg("dtype"), arg("op"));
//
// Every wrapper does the same steps in the same order, with the GIL held:
// the tensor `x` viewed with its dtype name (TypeError/ValueError), the
// arguments after it parsed (ParseArg: an op's name, ValueError), the
// CallOptions made from the keyword-only group, name and timeout
// (MakeCallOptions: ValueError; a DeviceArray's stream); then the call, with
// the GIL released. A kBlocking call returns its outcome as Python (ToPython:
// an array, a list of them, a scalar, None, or a ReducerError raised); a
// kAsync one returns a `_reducer.Pending` that references the input arrays
// until waited for. DefTensorCalls and DefOptionsCalls define a collective's
// blocking form and its `_async` one together.
//
// The shapes (the Python arguments before the keyword-only ones):
//   TensorCall   (x, dtype, extra...): one tensor in, x as `Input` reads it
//   OptionsCall  (extra...): no tensor in (scalars, receives, barrier)
//   ManyCall     (xs, dtypes, ops): one op per tensor, all read
// `extra` are the C++ types pybind11 converts the remaining positional
// arguments to, in order: OpName for an op's name, int, ...
//
// Header-only: the module's files share it. Call with the GIL held.
#ifndef REDUCER_PYTHON_CSRC_COLLECTIVE_BINDING_H_
#define REDUCER_PYTHON_CSRC_COLLECTIVE_BINDING_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/reducer_client.h"
#include "pybind11/pybind11.h"
#include "pybind11/stl.h"
#include "python/csrc/array_view.h"
#include "python/csrc/py_client.h"
#include "python/csrc/py_pending.h"
#include "python/csrc/released_gil.h"
#include "python/csrc/status_error.h"

namespace reducer::python {

// Whether a wrapper waits for the outcome or returns a Pending at once.
enum Form { kBlocking, kAsync };

// --- Arguments after the tensor, as the C++ call takes them.

// An op's name ("sum", ...) as Python passes it.
using OpName = std::string;
// all_to_all_v's recv_rows: None for none given.
using OptionalRows = std::optional<std::vector<int64_t>>;

inline ReduceOp ParseArg(const OpName& op) { return ParseReduceOp(op); }
inline std::vector<int64_t> ParseArg(const OptionalRows& rows) {
  return rows.value_or(std::vector<int64_t>());
}
template <typename T>
const T& ParseArg(const T& value) {
  return value;
}

// The parsed `Extra` arguments, in order.
template <typename... Extra>
using ParsedArgs = std::tuple<
    std::decay_t<decltype(ParseArg(std::declval<const Extra&>()))>...>;

// --- The tensor argument `x`: its Python type (Arg), its view, and the
// object the call references while it runs.

// Read only (an out-of-place call's input).
struct ReadsTensor {
  using Arg = py::object;
  static TensorView View(const Arg& x, const std::string& dtype) {
    return ReadView(x, ParseDataType(dtype));
  }
  static py::object Object(const Arg& x) { return x; }
};

// Written (an in-place call's input and output; a numpy array must be
// writeable).
struct WritesTensor {
  using Arg = py::object;
  static MutableTensorView View(const Arg& x, const std::string& dtype) {
    return WriteView(x, ParseDataType(dtype));
  }
  static py::object Object(const Arg& x) { return x; }
};

// Read where given; None on the ranks that send nothing (broadcast and
// scatter on ranks that do not know the root's dtype or shape): an empty
// view, and `dtype` is not parsed.
struct ReadsTensorIfGiven {
  using Arg = std::optional<py::object>;
  static TensorView View(const Arg& x, const std::string& dtype) {
    if (!x.has_value()) return TensorView();
    return ReadView(*x, ParseDataType(dtype));
  }
  static py::object Object(const Arg& x) { return x.value_or(py::none()); }
};

// --- Outcomes as Python.

// A result only the root gets: None on the other ranks (reduce, gather).
struct RootResult {
  absl::StatusOr<Tensor> result;
  bool is_root = false;
};

// A message and its sender's group rank (recv_any).
struct SourcedResult {
  absl::StatusOr<Tensor> result;
  int source = -1;
};

// Each raises the outcome's error as a ReducerError subclass.
inline void ToPython(const absl::Status& status) { ThrowIfError(status); }
inline py::object ToPython(absl::StatusOr<Tensor> result) {
  return ToArray(ValueOrThrow(std::move(result)));
}
inline std::vector<py::object> ToPython(
    absl::StatusOr<std::vector<Tensor>> results) {
  std::vector<py::object> arrays;
  for (Tensor& t : ValueOrThrow(std::move(results))) {
    arrays.push_back(ToArray(std::move(t)));
  }
  return arrays;
}
inline py::object ToPython(RootResult root) {
  Tensor tensor = ValueOrThrow(std::move(root.result));
  if (!root.is_root) return py::none();
  return ToArray(std::move(tensor));
}
// (array, source).
inline py::tuple ToPython(SourcedResult message) {
  py::object array = ToPython(std::move(message.result));
  return py::make_tuple(std::move(array), message.source);
}
// Scalars (double, int64_t).
template <typename T>
T ToPython(absl::StatusOr<T> result) {
  return ValueOrThrow(std::move(result));
}

// Runs `call(client)` with the GIL released and returns what it returned.
template <typename Call>
auto Released(PyClient& self, Call call) {
  std::shared_ptr<Client> client = self.client();
  ReleasedGil released;
  return call(*client);
}

// --- The wrappers. `call` is a member of Client, or a callable, taking
// (Client&, the view, the parsed extras..., const CallOptions&).

template <Form kForm, typename Input, typename... Extra, typename Call>
auto TensorCall(Call call) {
  return [call](PyClient& self, const typename Input::Arg& x,
                const std::string& dtype, const Extra&... extra,
                const Group& group, const std::string& name, Timeout timeout) {
    const auto view = Input::View(x, dtype);
    const ParsedArgs<Extra...> args{ParseArg(extra)...};
    const CallOptions options =
        MakeCallOptions(group, name, timeout, Input::Object(x));
    auto run = [&](Client& client) {
      return std::apply(
          [&](const auto&... parsed) {
            return std::invoke(call, client, view, parsed..., options);
          },
          args);
    };
    if constexpr (kForm == kAsync) {
      return StartPending(self, {Input::Object(x)}, run);
    } else {
      return ToPython(Released(self, run));
    }
  };
}

template <Form kForm, typename... Extra, typename Call>
auto OptionsCall(Call call) {
  return [call](PyClient& self, const Extra&... extra, const Group& group,
                const std::string& name, Timeout timeout) {
    const ParsedArgs<Extra...> args{ParseArg(extra)...};
    const CallOptions options = MakeCallOptions(group, name, timeout);
    auto run = [&](Client& client) {
      return std::apply(
          [&](const auto&... parsed) {
            return std::invoke(call, client, parsed..., options);
          },
          args);
    };
    if constexpr (kForm == kAsync) {
      return StartPending(self, {}, run);
    } else {
      return ToPython(Released(self, run));
    }
  };
}

// `call` takes (Client&, Span<const TensorView>, Span<const ReduceOp>,
// const CallOptions&). ValueError unless there are as many dtypes and ops as
// tensors; the first tensor gives the options' stream.
template <Form kForm, typename Call>
auto ManyCall(Call call) {
  return [call](PyClient& self, const std::vector<py::object>& xs,
                const std::vector<std::string>& dtypes,
                const std::vector<OpName>& ops, const Group& group,
                const std::string& name, Timeout timeout) {
    if (xs.size() != dtypes.size() || xs.size() != ops.size()) {
      throw py::value_error("reducer: all_reduce_many needs one op per tensor");
    }
    std::vector<TensorView> views;
    std::vector<ReduceOp> reduce_ops;
    for (size_t i = 0; i < xs.size(); ++i) {
      views.push_back(ReadsTensor::View(xs[i], dtypes[i]));
      reduce_ops.push_back(ParseArg(ops[i]));
    }
    const CallOptions options = MakeCallOptions(
        group, name, timeout, xs.empty() ? py::object(py::none()) : xs[0]);
    auto run = [&](Client& client) {
      return std::invoke(call, client, absl::Span<const TensorView>(views),
                         absl::Span<const ReduceOp>(reduce_ops), options);
    };
    if constexpr (kForm == kAsync) {
      return StartPending(self, xs, run);
    } else {
      return ToPython(Released(self, run));
    }
  };
}

// Defines method `name` of `cls` with the positional `args` followed by the
// keyword-only CallOptions every collective takes: group, name, timeout.
template <typename Class, typename F, typename... Args>
void DefCall(Class& cls, const char* name, F&& f, Args&&... args) {
  cls.def(name, std::forward<F>(f), std::forward<Args>(args)..., py::kw_only(),
          py::arg("group") = py::none(), py::arg("name") = "",
          py::arg("timeout") = py::none());
}

// Defines one collective in both forms, with the same `args`: `name`, a
// kBlocking TensorCall<Input, Extra...> of `call`, and `name`_async, a kAsync
// one of `async_call`.
//
//   DefTensorCalls<ReadsTensor, OpName>(client, "reduce_scatter",
//                                       &Client::ReduceScatter,
//                                       &Client::ReduceScatterAsync,
//                                       arg("x"), arg("dtype"), arg("op"));
template <typename Input, typename... Extra, typename Class, typename Call,
          typename AsyncCall, typename... Args>
void DefTensorCalls(Class& cls, const std::string& name, Call call,
                    AsyncCall async_call, const Args&... args) {
  DefCall(cls, name.c_str(), TensorCall<kBlocking, Input, Extra...>(call),
          args...);
  DefCall(cls, (name + "_async").c_str(),
          TensorCall<kAsync, Input, Extra...>(async_call), args...);
}

// DefTensorCalls' counterpart for the OptionsCall shape.
template <typename... Extra, typename Class, typename Call, typename AsyncCall,
          typename... Args>
void DefOptionsCalls(Class& cls, const std::string& name, Call call,
                     AsyncCall async_call, const Args&... args) {
  DefCall(cls, name.c_str(), OptionsCall<kBlocking, Extra...>(call), args...);
  DefCall(cls, (name + "_async").c_str(),
          OptionsCall<kAsync, Extra...>(async_call), args...);
}

}  // namespace reducer::python

#endif  // REDUCER_PYTHON_CSRC_COLLECTIVE_BINDING_H_
