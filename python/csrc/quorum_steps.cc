#include "python/csrc/quorum_steps.h"

#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "client/reducer_client.h"
#include "pybind11/stl.h"
#include "python/csrc/array_view.h"
#include "python/csrc/collective_binding.h"
#include "python/csrc/py_client.h"
#include "python/csrc/released_gil.h"
#include "python/csrc/status_error.h"

namespace reducer::python {
namespace {

using py::arg;

// QuorumOptions from the Python arguments; ValueError naming the value for
// one the client library would refuse, so that nothing is sent.
QuorumOptions MakeQuorumOptions(int min_ranks, double grace_s, int world_size) {
  if (min_ranks < 0 || min_ranks > world_size) {
    throw py::value_error(absl::StrCat(
        "reducer: min_ranks must be between 0 (every rank) and the world "
        "size, ",
        world_size, "; got ", min_ranks));
  }
  if (!(grace_s >= 0) || std::isinf(grace_s)) {
    throw py::value_error(absl::StrCat(
        "reducer: grace must be a finite number of seconds, 0 or more; got ",
        grace_s));
  }
  QuorumOptions options;
  options.min_ranks = min_ranks;
  options.grace = absl::Seconds(grace_s);
  return options;
}

// (result, contributors, joined, step); `result` None when the step's
// tensor is empty (the in-place form).
py::tuple ToTuple(QuorumResult result, bool in_place) {
  py::object tensor =
      in_place ? py::object(py::none()) : ToArray(std::move(result.tensor));
  return py::make_tuple(tensor, py::cast(result.contributors),
                        py::cast(result.joined), py::int_(result.step));
}

// Runs one quorum step on `x`: in place when `in_place`.
py::tuple Step(PyClient& self, const py::object& x, const std::string& dtype,
               const std::string& op, int min_ranks, double grace_s,
               const std::string& name, Timeout timeout, bool in_place) {
  const DataType data_type = ParseDataType(dtype);
  const ReduceOp reduce_op = ParseReduceOp(op);
  const QuorumOptions quorum =
      MakeQuorumOptions(min_ranks, grace_s, self.world_size());
  const CallOptions options = MakeCallOptions(std::nullopt, name, timeout, x);
  std::shared_ptr<Client> client = self.client();
  absl::StatusOr<QuorumResult> result;
  if (in_place) {
    const MutableTensorView view = WriteView(x, data_type);
    ReleasedGil released;
    result = client->AllReduceQuorumInPlace(view, reduce_op, quorum, options);
  } else {
    const TensorView view = ReadView(x, data_type);
    ReleasedGil released;
    result = client->AllReduceQuorum(view, reduce_op, quorum, options);
  }
  return ToTuple(ValueOrThrow(std::move(result)), in_place);
}

py::tuple AllReduceQuorum(PyClient& self, const py::object& x,
                          const std::string& dtype, const std::string& op,
                          int min_ranks, double grace_s,
                          const std::string& name, Timeout timeout) {
  return Step(self, x, dtype, op, min_ranks, grace_s, name, timeout,
              /*in_place=*/false);
}

py::tuple AllReduceQuorumInPlace(PyClient& self, const py::object& x,
                                 const std::string& dtype,
                                 const std::string& op, int min_ranks,
                                 double grace_s, const std::string& name,
                                 Timeout timeout) {
  return Step(self, x, dtype, op, min_ranks, grace_s, name, timeout,
              /*in_place=*/true);
}

void Done(PyClient& self, const std::string& name, Timeout timeout) {
  const CallOptions options = MakeCallOptions(std::nullopt, name, timeout);
  ToPython(Released(self, [&](Client& c) { return c.Done(options); }));
}

}  // namespace

void DefineQuorumSteps(py::class_<PyClient>& client) {
  // Not DefCall: a step takes no group.
  client.def("all_reduce_quorum", &AllReduceQuorum, arg("x"), arg("dtype"),
             arg("op"), arg("min_ranks"), arg("grace"), py::kw_only(),
             arg("name") = "", arg("timeout") = py::none());
  client.def("all_reduce_quorum_", &AllReduceQuorumInPlace, arg("x"),
             arg("dtype"), arg("op"), arg("min_ranks"), arg("grace"),
             py::kw_only(), arg("name") = "", arg("timeout") = py::none());
  client.def("done", &Done, py::kw_only(), arg("name") = "",
             arg("timeout") = py::none());
}

}  // namespace reducer::python
