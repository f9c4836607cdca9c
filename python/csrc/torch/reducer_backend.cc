#include "python/csrc/torch/reducer_backend.h"

#include <optional>
#include <utility>

#include "python/csrc/released_gil.h"
#include "python/csrc/torch/python_work.h"

namespace reducer::python {
namespace {

namespace py = pybind11;

std::optional<NativeDataType> DataTypeOf(at::ScalarType type) {
  switch (type) {
    case at::kFloat: return NativeDataType::kFloat32;
    case at::kDouble: return NativeDataType::kFloat64;
    case at::kHalf: return NativeDataType::kFloat16;
    case at::kBFloat16: return NativeDataType::kBFloat16;
    case at::kChar: return NativeDataType::kInt8;
    case at::kByte: return NativeDataType::kUInt8;
    case at::kInt: return NativeDataType::kInt32;
    case at::kLong: return NativeDataType::kInt64;
    case at::kBool: return NativeDataType::kBool;
    default: return std::nullopt;
  }
}

std::optional<NativeReduceOp> ReduceOpOf(const c10d::ReduceOp& op) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM: return NativeReduceOp::kSum;
    case c10d::ReduceOp::AVG: return NativeReduceOp::kAvg;
    case c10d::ReduceOp::PRODUCT: return NativeReduceOp::kProduct;
    case c10d::ReduceOp::MIN: return NativeReduceOp::kMin;
    case c10d::ReduceOp::MAX: return NativeReduceOp::kMax;
    case c10d::ReduceOp::BAND: return NativeReduceOp::kBitAnd;
    case c10d::ReduceOp::BOR: return NativeReduceOp::kBitOr;
    case c10d::ReduceOp::BXOR: return NativeReduceOp::kBitXor;
    default: return std::nullopt;  // PREMUL_SUM
  }
}

const NativeApi& ImportNativeApi() {
  auto* api = static_cast<const NativeApi*>(PyCapsule_Import(kNativeApiCapsule, 0));
  if (api == nullptr) throw py::error_already_set();
  if (api->version != kNativeApiVersion) {
    throw py::import_error(
        "reducer._torch_c was built for native API version " +
        std::to_string(kNativeApiVersion) + " but reducer._reducer exports " +
        std::to_string(api->version) + "; reinstall the reducer package");
  }
  return *api;
}

}  // namespace

ReducerBackend::ReducerBackend(int rank, int size, py::object ops,
                               const py::object& client, const std::string& where)
    : c10d::Backend(rank, size),
      ops_(std::move(ops)),
      all_reduce_what_(std::make_shared<const std::string>("all_reduce " + where)),
      completer_(std::make_shared<WorkCompleter>()) {
  if (!client.is_none()) {
    connection_ = ImportNativeApi().connection_of(client.ptr());
    if (connection_ == nullptr) throw py::error_already_set();
  }
}

ReducerBackend::~ReducerBackend() { DropReference(ops_); }

void ReducerBackend::shutdown() {
  py::gil_scoped_acquire gil;
  // Started native all-reduces hold the session through their own
  // reference to the connection; this one no longer does.
  connection_.reset();
  ops_.attr("close")();
}

template <typename... Args>
c10::intrusive_ptr<c10d::Work> ReducerBackend::CallOps(const char* method,
                                                       Args&&... args) {
  py::gil_scoped_acquire gil;
  py::object work = ops_.attr(method)(std::forward<Args>(args)...);
  return c10::make_intrusive<PythonWork>(std::move(work));
}

template <typename... Args>
c10::intrusive_ptr<c10d::Work> ReducerBackend::CallCollective(const char* method,
                                                              Args&&... args) {
  ++sequence_;
  return CallOps(method, std::forward<Args>(args)...);
}

c10::intrusive_ptr<c10d::Work> ReducerBackend::NativeAllReduce(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) {
  if (connection_ == nullptr || tensors.size() != 1) return {};
  at::Tensor& tensor = tensors[0];
  const std::optional<NativeDataType> dtype = DataTypeOf(tensor.scalar_type());
  const std::optional<NativeReduceOp> op = ReduceOpOf(opts.reduceOp);
  if (!dtype || !op || !tensor.device().is_cpu() || tensor.layout() != at::kStrided ||
      !tensor.is_contiguous() || tensor.is_neg() || tensor.is_conj()) {
    return {};
  }
  const double timeout_s = opts.timeout.count() > 0 ? opts.timeout.count() / 1000.0 : 0.0;
  std::unique_ptr<NativePending> pending;
  {
    // A caller that holds the GIL gives it up while the call starts.
    std::optional<ReleasedGil> released;
    if (PyGILState_Check()) released.emplace();
    pending = connection_->AllReduceInPlace(tensor.data_ptr(), tensor.numel(), *dtype,
                                            *op, timeout_s);
  }
  return c10::make_intrusive<NativeWork>(tensor, std::move(pending), completer_,
                                         all_reduce_what_);
}

c10::intrusive_ptr<c10d::Work> ReducerBackend::allreduce(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) {
  if (auto work = NativeAllReduce(tensors, opts)) {
    ++sequence_;
    return work;
  }
  return CallCollective("allreduce", tensors, opts);
}

c10::intrusive_ptr<c10d::Work> ReducerBackend::broadcast(
    std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts) {
  return CallCollective("broadcast", tensors, opts);
}

c10::intrusive_ptr<c10d::Work> ReducerBackend::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  return CallCollective("allreduce_coalesced", tensors, opts);
}

c10::intrusive_ptr<c10d::Work> ReducerBackend::reduce(
    std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) {
  return CallCollective("reduce", tensors, opts);
}

c10::intrusive_ptr<c10d::Work> ReducerBackend::allgather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  return CallCollective("allgather", outputs, inputs, opts);
}

c10::intrusive_ptr<c10d::Work> ReducerBackend::all_gather_single(
    at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& opts) {
  return CallCollective("all_gather_single", output, input, opts);
}

c10::intrusive_ptr<c10d::Work> ReducerBackend::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& output_lists, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  return CallCollective("allgather_coalesced", output_lists, inputs, opts);
}

c10::intrusive_ptr<c10d::Work> ReducerBackend::all_gather_single_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  return CallCollective("all_gather_single_coalesced", outputs, inputs, opts);
}

c10::intrusive_ptr<c10d::Work> ReducerBackend::gather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::GatherOptions& opts) {
  return CallCollective("gather", outputs, inputs, opts);
}

c10::intrusive_ptr<c10d::Work> ReducerBackend::scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ScatterOptions& opts) {
  return CallCollective("scatter", outputs, inputs, opts);
}

c10::intrusive_ptr<c10d::Work> ReducerBackend::reduce_scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  return CallCollective("reduce_scatter", outputs, inputs, opts);
}

c10::intrusive_ptr<c10d::Work> ReducerBackend::reduce_scatter_single(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  return CallCollective("reduce_scatter_single", output, input, opts);
}

c10::intrusive_ptr<c10d::Work> ReducerBackend::reduce_scatter_single_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  return CallCollective("reduce_scatter_single_coalesced", outputs, inputs, opts);
}

c10::intrusive_ptr<c10d::Work> ReducerBackend::all_to_all_single(
    at::Tensor& output, at::Tensor& input, std::vector<int64_t>& output_split_sizes,
    std::vector<int64_t>& input_split_sizes, const c10d::AllToAllOptions& opts) {
  return CallCollective("all_to_all_single", output, input, output_split_sizes,
                 input_split_sizes, opts);
}

c10::intrusive_ptr<c10d::Work> ReducerBackend::alltoall(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllToAllOptions& opts) {
  return CallCollective("alltoall", outputs, inputs, opts);
}

c10::intrusive_ptr<c10d::Work> ReducerBackend::send(std::vector<at::Tensor>& tensors,
                                                    int dst_rank, int tag) {
  return CallOps("send", tensors, dst_rank, tag);
}

c10::intrusive_ptr<c10d::Work> ReducerBackend::recv(std::vector<at::Tensor>& tensors,
                                                    int src_rank, int tag) {
  return CallOps("recv", tensors, src_rank, tag);
}

c10::intrusive_ptr<c10d::Work> ReducerBackend::recvAnysource(
    std::vector<at::Tensor>& tensors, int tag) {
  return CallOps("recv_anysource", tensors, tag);
}

c10::intrusive_ptr<c10d::Work> ReducerBackend::barrier(const c10d::BarrierOptions& opts) {
  return CallCollective("barrier", opts);
}

void ReducerBackend::monitoredBarrier(const c10d::BarrierOptions& opts,
                                      bool wait_all_ranks) {
  py::gil_scoped_acquire gil;
  ops_.attr("monitored_barrier")(opts, wait_all_ranks);
}

}  // namespace reducer::python
