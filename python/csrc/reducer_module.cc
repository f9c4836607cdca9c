// `_reducer`: the Reducer client library as a Python extension module. The
// public face is the `reducer` package (python/src/reducer/__init__.py), which
// turns numpy arrays and torch tensors into the (array, dtype name) pairs
// this module takes and wraps results back into the caller's kind.
//
// Every call that talks to reducerd releases the GIL while it waits, so other
// Python threads (and other ranks' clients in the same process) keep running.
// Arrays given to a call are referenced until the call (or, for async calls,
// the handle's wait()) is done, so their memory stays valid.
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "client/reducer_client.h"
#include "pybind11/numpy.h"
#include "pybind11/pybind11.h"
#include "pybind11/stl.h"
#include "python/csrc/array_view.h"
#include "python/csrc/client_settings.h"
#include "python/csrc/collective_binding.h"
#include "python/csrc/collectives.h"
#include "python/csrc/device_array.h"
#include "python/csrc/native_api.h"
#include "python/csrc/native_api_impl.h"
#include "python/csrc/py_client.h"
#include "python/csrc/py_pending.h"
#include "python/csrc/quorum_steps.h"
#include "python/csrc/released_gil.h"
#include "python/csrc/routed_collectives.h"
#include "python/csrc/status_error.h"

namespace reducer::python {
namespace {

namespace py = pybind11;
using py::arg;

// An all-reduce started by all_reduce_async (out of place, `in_place` false)
// or all_reduce_async_ (in place). Holds the input array and the client until
// waited for. Not thread-safe: one thread waits on a handle.
class PyHandle {
 public:
  PyHandle(std::shared_ptr<Client> client, py::object input,
           std::unique_ptr<CollectiveHandle> handle, bool in_place)
      : client_(std::move(client)),
        input_(std::move(input)),
        handle_(std::move(handle)),
        in_place_(in_place) {}

  // A handle dropped without wait() waits first (its input is in use until
  // then), with the GIL released.
  ~PyHandle() {
    ReleasedGil released;
    handle_.reset();
  }

  // The result array (out of place) or None (in place, the input written).
  // A second call raises ValueError.
  py::object Wait() {
    if (waited_) throw py::value_error("reducer: wait() was already called");
    waited_ = true;
    absl::StatusOr<std::vector<Tensor>> result;
    {
      ReleasedGil released;
      result = handle_->Wait();
    }
    if (in_place_) {
      ThrowIfError(result.status());
      return py::none();
    }
    std::vector<Tensor> tensors = ValueOrThrow(std::move(result));
    if (tensors.size() != 1) {
      ThrowIfError(absl::InternalError(
          absl::StrCat("reducer: all_reduce_async returned ", tensors.size(),
                       " tensors where 1 was expected")));
    }
    return ToArray(std::move(tensors[0]));
  }

  // Never blocks: true once wait() would return without waiting for peers.
  bool IsCompleted() { return waited_ || handle_->Ready(); }

 private:
  std::shared_ptr<Client> client_;
  py::object input_;
  std::unique_ptr<CollectiveHandle> handle_;
  bool in_place_;  // all_reduce_async_: wait() writes the input
  bool waited_ = false;
};

std::unique_ptr<PyHandle> AllReduceAsync(PyClient& self, const py::object& x,
                                         const std::string& dtype,
                                         const std::string& op, bool in_place,
                                         const Group& group,
                                         const std::string& name,
                                         Timeout timeout) {
  DataType data_type = ParseDataType(dtype);
  ReduceOp reduce_op = ParseReduceOp(op);
  CallOptions options = MakeCallOptions(group, name, timeout, x);
  std::shared_ptr<Client> client = self.client();
  if (in_place) {
    MutableTensorView view = WriteView(x, data_type);
    std::unique_ptr<CollectiveHandle> handle;
    {
      ReleasedGil released;
      handle = client->AllReduceInPlaceAsync(view, reduce_op, options);
    }
    return std::make_unique<PyHandle>(client, x, std::move(handle),
                                      /*in_place=*/true);
  }
  TensorView view = ReadView(x, data_type);
  std::unique_ptr<CollectiveHandle> handle;
  {
    ReleasedGil released;
    handle = client->AllReduceAsync(view, reduce_op, options);
  }
  return std::make_unique<PyHandle>(client, x, std::move(handle),
                                    /*in_place=*/false);
}

// reducer::MetricSync over arrays the caller keeps. Not thread-safe.
class PyMetricSync {
 public:
  explicit PyMetricSync(const PyClient& client)
      : client_(client.client()), sync_(client_.get()) {}

  // Registers `state` (referenced, not copied) under `name`; a repeated name
  // replaces the earlier state. A read-only state may be reduced out of place
  // only.
  void Add(const std::string& name, const py::object& state,
           const std::string& dtype, const std::string& op) {
    DataType data_type = ParseDataType(dtype);
    ReduceOp reduce_op = ParseReduceOp(op);
    const TensorView read = ReadView(state, data_type);  // layout checks
    // The out-of-place Reduce only reads the state; reduce_() checks that
    // every host state is writeable before it starts.
    MutableTensorView view = MutableTensorView::OnDevice(
        read.device(), const_cast<void*>(read.data()), data_type, read.shape());
    sync_.Add(name, view, reduce_op);
    states_[name] = state;
  }

  py::dict Reduce(const Group& group, const std::string& name,
                  Timeout timeout) {
    CallOptions options = MakeCallOptions(group, name, timeout);
    absl::StatusOr<absl::flat_hash_map<std::string, Tensor>> result;
    {
      ReleasedGil released;
      result = sync_.Reduce(options);
    }
    py::dict out;
    for (auto& [key, tensor] : ValueOrThrow(std::move(result))) {
      out[py::str(key)] = ToArray(std::move(tensor));
    }
    return out;
  }

  void ReduceInPlace(const Group& group, const std::string& name,
                     Timeout timeout) {
    for (const auto& [key, state] : states_) {
      if (py::isinstance<py::array>(state) &&
          !state.cast<py::array>().writeable()) {
        throw py::value_error("reducer: MetricSync.reduce_() needs writeable "
                              "states; '" + key + "' is read-only");
      }
    }
    CallOptions options = MakeCallOptions(group, name, timeout);
    absl::Status status;
    {
      ReleasedGil released;
      status = sync_.ReduceInPlace(options);
    }
    ThrowIfError(status);
  }

 private:
  std::shared_ptr<Client> client_;  // keeps the client alive for sync_
  MetricSync sync_;
  absl::flat_hash_map<std::string, py::object> states_;
};

// NativeApi::connection_of: the connection of a `_reducer.Client`.
std::unique_ptr<NativeConnection> ConnectionOf(PyObject* client) {
  try {
    return MakeNativeConnection(
        py::reinterpret_borrow<py::object>(client).cast<PyClient&>().client());
  } catch (py::error_already_set& e) {
    e.restore();
  } catch (const py::cast_error&) {
    PyErr_SetString(PyExc_TypeError,
                    "reducer: the native API needs a _reducer.Client");
  } catch (const std::exception& e) {  // the client was closed
    PyErr_SetString(PyExc_ValueError, e.what());
  }
  return nullptr;
}

const NativeApi kNativeApi = {kNativeApiVersion, &ConnectionOf};

void DefineModule(py::module_& m) {
  m.doc() = "Reducer client (use the `reducer` package, not this module)";
  RegisterStatusErrorTranslator();

  DefineDeviceArray(m);
  m.attr("_native_api") = py::capsule(&kNativeApi, kNativeApiCapsule);

  py::class_<PyClient> client(m, "Client");
  client
      .def(py::init([](const std::string& target, const std::string& job,
                       int rank, int world_size, double timeout,
                       const std::optional<std::string>& token,
                       const std::optional<std::string>& tls_ca_file,
                       const std::optional<std::string>& tls_cert_file,
                       const std::optional<std::string>& tls_key_file,
                       const std::optional<std::string>& server_name,
                       const std::string& shared_memory, int local_world_size) {
             return std::make_unique<PyClient>(MakeClientOptions(
                 {target, job, rank, world_size, timeout, token, tls_ca_file,
                  tls_cert_file, tls_key_file, server_name, shared_memory,
                  local_world_size}));
           }),
           arg("target"), arg("job"), arg("rank"), arg("world_size"),
           arg("timeout"), py::kw_only(), arg("token") = py::none(),
           arg("tls_ca_file") = py::none(), arg("tls_cert_file") = py::none(),
           arg("tls_key_file") = py::none(), arg("server_name") = py::none(),
           arg("shared_memory") = "auto", arg("local_world_size") = 0)
      .def("close", &PyClient::Close)
      .def_property_readonly("rank", &PyClient::rank)
      .def_property_readonly("world_size", &PyClient::world_size);
  DefineCollectives(client);
  DefCall(client, "all_reduce_async", &AllReduceAsync, arg("x"), arg("dtype"),
          arg("op"), arg("in_place"));

  DefineRoutedCollectives(client);
  DefineQuorumSteps(client);

  py::class_<PyPending>(m, "Pending")
      .def("wait", &PyPending::Wait)
      .def("is_completed", &PyPending::IsCompleted)
      .def("source", &PyPending::Source);

  py::class_<PyHandle>(m, "Handle")
      .def("wait", &PyHandle::Wait)
      .def("is_completed", &PyHandle::IsCompleted);

  py::class_<PyMetricSync> sync(m, "MetricSync");
  sync.def(py::init<const PyClient&>(), arg("client"))
      .def("add", &PyMetricSync::Add, arg("name"), arg("state"), arg("dtype"),
           arg("op"));
  DefCall(sync, "reduce", &PyMetricSync::Reduce);
  DefCall(sync, "reduce_", &PyMetricSync::ReduceInPlace);
}

}  // namespace
}  // namespace reducer::python

PYBIND11_MODULE(_reducer, m) { reducer::python::DefineModule(m); }
