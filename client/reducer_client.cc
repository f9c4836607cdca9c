#include "client/reducer_client.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/client_session.h"
#include "client/quorum_step.h"
#include "client/staging/device_staging.h"
#include "core/quorum_rule.h"
#include "core/status_macros.h"

namespace reducer {
namespace {

TensorSpec SpecOf(const TensorView& view, ReduceOp op = ReduceOp::kSum) {
  return TensorSpec{view.dtype(), view.shape(), op};
}

// OK when `view` can be sent: a valid shape and memory behind its bytes.
// INVALID_ARGUMENT naming the input as `what`, followed by ` index` when
// index >= 0 (built only on error: a fused call checks many inputs).
absl::Status CheckView(const TensorView& view, absl::string_view what,
                       int index = -1) {
  absl::StatusOr<int64_t> bytes = NumBytes(view.dtype(), view.shape());
  if (bytes.ok() && (*bytes == 0 || view.data() != nullptr)) {
    return absl::OkStatus();
  }
  const std::string name =
      index < 0 ? std::string(what) : absl::StrCat(what, " ", index);
  if (!bytes.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": ", bytes.status().message()));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      name, ": data is null but the shape ", ShapeToString(view.shape()),
      " holds ", *bytes, " bytes"));
}

// OK when `view`'s memory is on the device it names (and that device is
// usable); DeviceStaging::CheckMemory's errors otherwise, naming `what`
// (and ` index` when index >= 0).
absl::Status CheckPlacement(DeviceStaging* staging, const TensorView& view,
                            absl::string_view what, int index = -1) {
  const void* data = view.data();
  if (view.device().is_cpu() && data == nullptr) return absl::OkStatus();
  return staging->CheckMemory(
      view.device(), absl::MakeConstSpan(&data, 1),
      index < 0 ? std::string(what) : absl::StrCat(what, " ", index));
}

// OK when `result` can be written into `inout` (same dtype, shape and
// device); else FAILED_PRECONDITION naming both, from `what`.
absl::Status CheckFits(const Tensor& result, const MutableTensorView& inout,
                       absl::string_view what) {
  if (result.dtype() == inout.dtype() && result.shape() == inout.shape() &&
      result.device() == inout.device()) {
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(absl::StrCat(
      what, ": the result is ", ShapeToString(result.shape()), " ",
      DataTypeName(result.dtype()), " on ", result.device().ToString(),
      " but the buffer is ", ShapeToString(inout.shape()), " ",
      DataTypeName(inout.dtype()), " on ", inout.device().ToString(),
      "; the buffer was left unchanged"));
}

// Copies `result` into `inout` once it is known to fit exactly: the
// all-or-nothing step of every in-place call. On a GPU through `staging`,
// ordered after the work queued on `cuda_stream`.
absl::Status CopyInto(const Tensor& result, const MutableTensorView& inout,
                      absl::string_view what, DeviceStaging* staging,
                      void* cuda_stream) {
  REDUCER_RETURN_IF_ERROR(CheckFits(result, inout, what));
  if (inout.device().is_cuda()) {
    return staging->CopyInto(result, inout, cuda_stream);
  }
  if (result.num_bytes() > 0) {
    std::memcpy(inout.data(), result.data(), result.num_bytes());
  }
  return absl::OkStatus();
}

absl::StatusOr<Tensor> Single(absl::StatusOr<std::vector<Tensor>> result) {
  if (!result.ok()) return result.status();
  if (result->size() != 1) {
    return absl::InternalError(absl::StrCat(
        "reducerd returned ", result->size(), " tensors where 1 was expected"));
  }
  return std::move((*result)[0]);
}

CollectiveRequestSpec OneTensor(CollectiveKind kind, const TensorView& input,
                                ReduceOp op) {
  CollectiveRequestSpec spec;
  spec.kind = kind;
  spec.tensors.push_back(SpecOf(input, op));
  spec.inputs.push_back(input.data());
  spec.device = input.device();
  return spec;
}

// The request of a collective of one input (`what` names it in errors), or
// INVALID_ARGUMENT when the input cannot be sent.
absl::StatusOr<CollectiveRequestSpec> OneInputSpec(DeviceStaging* staging,
                                                   CollectiveKind kind,
                                                   const TensorView& input,
                                                   ReduceOp op,
                                                   absl::string_view what) {
  absl::Status valid = CheckView(input, what);
  if (valid.ok()) valid = CheckPlacement(staging, input, what);
  if (!valid.ok()) return valid;
  return OneTensor(kind, input, op);
}

// An in-place all-reduce's request: `inout` is the input, and the result,
// copied into it by CopyInto as soon as the call returns it, may be lent
// by the transport (Contribution::result_may_be_lent), saving a copy.
absl::StatusOr<CollectiveRequestSpec> InPlaceAllReduceSpec(
    DeviceStaging* staging, const MutableTensorView& inout, ReduceOp op,
    absl::string_view what) {
  REDUCER_ASSIGN_OR_RETURN(
      CollectiveRequestSpec spec,
      OneInputSpec(staging, CollectiveKind::kAllReduce, inout.view(), op,
                   what));
  spec.result_may_be_lent = true;
  return spec;
}

// AllReduceMany's request: inputs[i] reduced with ops[i], all on one device.
absl::StatusOr<CollectiveRequestSpec> AllReduceManySpec(
    DeviceStaging* staging, absl::Span<const TensorView> inputs,
    absl::Span<const ReduceOp> ops) {
  if (inputs.size() != ops.size() || inputs.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "AllReduceMany needs one op per input and at least one input; got ",
        inputs.size(), " inputs and ", ops.size(), " ops"));
  }
  CollectiveRequestSpec spec;
  spec.kind = CollectiveKind::kAllReduce;
  spec.tensors.reserve(inputs.size());
  spec.inputs.reserve(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    absl::Status valid =
        CheckView(inputs[i], "AllReduceMany input", static_cast<int>(i));
    if (valid.ok() && inputs[i].device() != inputs[0].device()) {
      valid = absl::InvalidArgumentError(absl::StrCat(
          "AllReduceMany input ", i, " is on ", inputs[i].device().ToString(),
          " but input 0 is on ", inputs[0].device().ToString(),
          "; one call reduces tensors of one device"));
    }
    if (valid.ok()) {
      valid = CheckPlacement(staging, inputs[i], "AllReduceMany input",
                             static_cast<int>(i));
    }
    if (!valid.ok()) return valid;
    spec.device = inputs[i].device();
    spec.tensors.push_back(SpecOf(inputs[i], ops[i]));
    spec.inputs.push_back(inputs[i].data());
  }
  return spec;
}

// Broadcast's request from rank `rank`: the root sends its tensor, the
// others declare theirs (or nothing, given TensorView()).
absl::StatusOr<CollectiveRequestSpec> BroadcastSpec(DeviceStaging* staging,
                                                    const TensorView& input,
                                                    int root, int rank) {
  CollectiveRequestSpec spec;
  spec.kind = CollectiveKind::kBroadcast;
  spec.root = root;
  const bool is_root = root == rank;
  if (is_root && input.is_empty_input()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Broadcast: rank ", root, " is the root and must pass its tensor"));
  }
  if (!input.is_empty_input()) {
    absl::Status valid = CheckView(input, "Broadcast input");
    if (valid.ok()) valid = CheckPlacement(staging, input, "Broadcast input");
    if (!valid.ok()) return valid;
    spec.tensors.push_back(SpecOf(input));
    spec.inputs.push_back(input.data());
    spec.device = input.device();
  }
  spec.send_payload = is_root;
  return spec;
}

// OK when `root` is a rank of the call's group (CallOptions.group, empty:
// the whole world of `world_size`); else INVALID_ARGUMENT naming `what`.
absl::Status CheckRoot(absl::string_view what, int root,
                       const CallOptions& call, int world_size) {
  if (root < 0 || root >= world_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": root ", root, " is outside the world of ", world_size));
  }
  if (!call.group.empty() &&
      std::find(call.group.begin(), call.group.end(), root) ==
          call.group.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": root ", root, " is not in CallOptions.group [",
                     absl::StrJoin(call.group, ","), "]"));
  }
  return absl::OkStatus();
}

// The request of a collective of one input with a root (Reduce, Gather).
absl::StatusOr<CollectiveRequestSpec> RootedSpec(
    DeviceStaging* staging, CollectiveKind kind, const TensorView& input,
    ReduceOp op, int root, const CallOptions& call, int world_size,
    absl::string_view what) {
  REDUCER_RETURN_IF_ERROR(CheckRoot(what, root, call, world_size));
  REDUCER_ASSIGN_OR_RETURN(
      CollectiveRequestSpec spec,
      OneInputSpec(staging, kind, input, op, absl::StrCat(what, " input")));
  spec.root = root;
  return spec;
}

// Scatter's request from rank `rank`: the root sends its tensor, the others
// nothing (they pass TensorView()).
absl::StatusOr<CollectiveRequestSpec> ScatterSpec(DeviceStaging* staging,
                                                  const TensorView& input,
                                                  int root, int rank,
                                                  const CallOptions& call,
                                                  int world_size) {
  REDUCER_RETURN_IF_ERROR(CheckRoot("Scatter", root, call, world_size));
  if (root != rank) {
    if (!input.is_empty_input()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Scatter: rank ", rank, " is not the root (", root,
          ") and must pass TensorView(), got ", ShapeToString(input.shape()),
          " ", DataTypeName(input.dtype())));
    }
    CollectiveRequestSpec spec;
    spec.kind = CollectiveKind::kScatter;
    spec.root = root;
    spec.send_payload = false;
    return spec;
  }
  if (input.is_empty_input()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Scatter: rank ", root, " is the root and must pass its tensor"));
  }
  REDUCER_ASSIGN_OR_RETURN(
      CollectiveRequestSpec spec,
      OneInputSpec(staging, CollectiveKind::kScatter, input, ReduceOp::kSum,
                   "Scatter input"));
  spec.root = root;
  return spec;
}

// The one tensor of a rooted collective's result: the root's, or an empty
// Tensor() for a rank that gets none.
absl::StatusOr<Tensor> SingleOrNone(
    absl::StatusOr<std::vector<Tensor>> result) {
  if (result.ok() && result->empty()) return Tensor();
  return Single(std::move(result));
}

// A point-to-point message's request: as the source (`sends`; `source` is
// this rank) it sends `input` to `peer`; as the destination it
// declares `input`'s spec (its buffer's, for ReceiveInPlace) or nothing
// (TensorView()) and sends no bytes. The peer, tag and call options are
// checked by ClientSession::Start.
absl::StatusOr<CollectiveRequestSpec> PointToPointSpec(
    DeviceStaging* staging, const TensorView& input, int source, int peer,
    int tag, bool sends, absl::string_view what) {
  CollectiveRequestSpec spec;
  spec.kind = CollectiveKind::kSendReceive;
  spec.root = source;
  spec.peer = peer;
  spec.tag = tag;
  spec.send_payload = sends;
  if (!input.is_empty_input()) {
    absl::Status valid = CheckView(input, what);
    if (valid.ok()) valid = CheckPlacement(staging, input, what);
    if (!valid.ok()) return valid;
    spec.tensors.push_back(SpecOf(input));
    spec.inputs.push_back(input.data());
    spec.device = input.device();
  }
  return spec;
}

// AllToAllV's request: `input` (at least one dimension) cut by `send_rows`,
// one entry per rank of the call's group, none negative, summing to its
// dim 0; `recv_rows` empty or one entry per rank, none negative. Else
// INVALID_ARGUMENT naming the value, before anything is sent.
absl::StatusOr<CollectiveRequestSpec> AllToAllVSpec(
    DeviceStaging* staging, const TensorView& input,
    absl::Span<const int64_t> send_rows, absl::Span<const int64_t> recv_rows,
    const CallOptions& call, int world_size) {
  REDUCER_ASSIGN_OR_RETURN(
      CollectiveRequestSpec spec,
      OneInputSpec(staging, CollectiveKind::kAllToAllV, input, ReduceOp::kSum,
                   "AllToAllV input"));
  if (input.shape().empty()) {
    return absl::InvalidArgumentError(
        "AllToAllV: the input needs a dimension to cut (dim 0), got shape []");
  }
  const size_t group_size =
      call.group.empty() ? static_cast<size_t>(world_size) : call.group.size();
  auto check = [&](absl::Span<const int64_t> rows,
                   absl::string_view name) -> absl::Status {
    if (rows.size() != group_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "AllToAllV: ", name, " has ", rows.size(),
          rows.size() == 1 ? " entry" : " entries", ", but the group has ",
          group_size, " ranks (one entry per group rank)"));
    }
    for (size_t j = 0; j < rows.size(); ++j) {
      if (rows[j] < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "AllToAllV: ", name, "[", j, "] is ", rows[j], ", negative"));
      }
    }
    return absl::OkStatus();
  };
  REDUCER_RETURN_IF_ERROR(check(send_rows, "send_rows"));
  if (!recv_rows.empty()) REDUCER_RETURN_IF_ERROR(check(recv_rows, "recv_rows"));
  const int64_t dim0 = input.shape()[0];
  int64_t sum = 0;
  for (int64_t rows : send_rows) {
    if (rows > dim0 - sum) {  // more than its dim 0 (and no overflow)
      sum = -1;
      break;
    }
    sum += rows;
  }
  if (sum != dim0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "AllToAllV: send_rows [", absl::StrJoin(send_rows, ","),
        "] do not sum to the input's dim 0 (", dim0, ", shape ",
        ShapeToString(input.shape()), ")"));
  }
  spec.send_rows.assign(send_rows.begin(), send_rows.end());
  spec.recv_rows.assign(recv_rows.begin(), recv_rows.end());
  return spec;
}

CollectiveRequestSpec ReceiveAnySpec(int tag) {
  CollectiveRequestSpec spec;
  spec.kind = CollectiveKind::kMatch;
  spec.tag = tag;
  spec.send_payload = false;
  return spec;
}

CollectiveRequestSpec BarrierSpec() {
  CollectiveRequestSpec spec;
  spec.kind = CollectiveKind::kBarrier;
  return spec;
}

// How many times a quorum step runs again when a contributor is lost
// between its decision and its data, before the ABORTED is returned.
constexpr int kQuorumStepAttempts = 8;

absl::Status CheckQuorumCall(const QuorumOptions& options,
                             const CallOptions& call, int world_size) {
  if (!call.group.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "AllReduceQuorum: CallOptions.group is [", absl::StrJoin(call.group, ","),
        "]; a quorum step is over the whole job, so the group must be empty"));
  }
  // The rule reducerd applies, checked here so that nothing is sent.
  QuorumSettings settings;
  settings.min_ranks = options.min_ranks;
  settings.grace = options.grace;
  absl::Status valid = QuorumRule::Validate(world_size, settings);
  if (!valid.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "AllReduceQuorum: QuorumOptions: ", valid.message(),
        " (the group is the job's ", world_size, " ranks)"));
  }
  return absl::OkStatus();
}

}  // namespace

Client::Client(std::unique_ptr<ClientSession> session)
    : session_(std::move(session)) {}

Client::~Client() = default;

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(
    const ClientOptions& options) {
  REDUCER_ASSIGN_OR_RETURN(std::unique_ptr<ClientSession> session,
                           ClientSession::Open(options));
  return std::unique_ptr<Client>(new Client(std::move(session)));
}

DeviceStaging* Client::staging() const { return session_->staging(); }

int Client::rank() const { return session_->options().rank; }
int Client::world_size() const { return session_->options().world_size; }

std::unique_ptr<CollectiveHandle> Client::StartOrRefuse(
    absl::StatusOr<CollectiveRequestSpec> spec, const CallOptions& call) {
  if (!spec.ok()) {
    return std::unique_ptr<CollectiveHandle>(
        new CollectiveHandle(nullptr, spec.status()));
  }
  return std::unique_ptr<CollectiveHandle>(
      new CollectiveHandle(session_->Start(*spec, call), absl::OkStatus()));
}

absl::StatusOr<Tensor> Client::AllReduce(const TensorView& input, ReduceOp op,
                                         const CallOptions& call) {
  REDUCER_ASSIGN_OR_RETURN(
      CollectiveRequestSpec spec,
      OneInputSpec(staging(), CollectiveKind::kAllReduce, input, op,
                   "AllReduce input"));
  return Single(session_->Run(spec, call));
}

absl::Status Client::AllReduceInPlace(const MutableTensorView& inout,
                                      ReduceOp op, const CallOptions& call) {
  REDUCER_ASSIGN_OR_RETURN(CollectiveRequestSpec spec,
                           InPlaceAllReduceSpec(staging(), inout, op,
                                                "AllReduceInPlace buffer"));
  REDUCER_ASSIGN_OR_RETURN(Tensor result, Single(session_->Run(spec, call)));
  return CopyInto(result, inout, "AllReduceInPlace", staging(),
                  call.cuda_stream);
}

std::unique_ptr<AllReduceHandle> Client::AllReduceAsync(
    const TensorView& input, ReduceOp op, const CallOptions& call) {
  return std::unique_ptr<AllReduceHandle>(new AllReduceHandle(StartOrRefuse(
      OneInputSpec(staging(), CollectiveKind::kAllReduce, input, op,
                   "AllReduceAsync input"),
      call)));
}

std::unique_ptr<AllReduceInPlaceHandle> Client::AllReduceInPlaceAsync(
    const MutableTensorView& inout, ReduceOp op, const CallOptions& call) {
  std::unique_ptr<AllReduceHandle> handle(new AllReduceHandle(StartOrRefuse(
      InPlaceAllReduceSpec(staging(), inout, op,
                           "AllReduceInPlaceAsync buffer"),
      call)));
  return std::unique_ptr<AllReduceInPlaceHandle>(new AllReduceInPlaceHandle(
      std::move(handle), inout, staging(), call.cuda_stream));
}

std::unique_ptr<CollectiveHandle> Client::AllReduceManyAsync(
    absl::Span<const TensorView> inputs, absl::Span<const ReduceOp> ops,
    const CallOptions& call) {
  return StartOrRefuse(AllReduceManySpec(staging(), inputs, ops), call);
}

std::unique_ptr<CollectiveHandle> Client::AllGatherAsync(
    const TensorView& input, const CallOptions& call) {
  return StartOrRefuse(OneInputSpec(staging(), CollectiveKind::kAllGather,
                                    input, ReduceOp::kSum, "AllGather input"),
                       call);
}

std::unique_ptr<CollectiveHandle> Client::BroadcastAsync(
    const TensorView& input, int root, const CallOptions& call) {
  return StartOrRefuse(BroadcastSpec(staging(), input, root, rank()), call);
}

std::unique_ptr<CollectiveHandle> Client::ReduceScatterAsync(
    const TensorView& input, ReduceOp op, const CallOptions& call) {
  return StartOrRefuse(OneInputSpec(staging(), CollectiveKind::kReduceScatter,
                                    input, op, "ReduceScatter input"),
                       call);
}

std::unique_ptr<CollectiveHandle> Client::BarrierAsync(const CallOptions& call) {
  return StartOrRefuse(BarrierSpec(), call);
}

CollectiveHandle::CollectiveHandle(std::unique_ptr<PendingCollective> pending,
                                   absl::Status invalid)
    : pending_(std::move(pending)), invalid_(std::move(invalid)) {}

CollectiveHandle::~CollectiveHandle() {
  if (pending_ != nullptr) pending_->Wait().IgnoreError();
}

bool CollectiveHandle::Ready() {
  return waited_ || !invalid_.ok() || pending_->Ready();
}

absl::StatusOr<std::vector<Tensor>> CollectiveHandle::Wait() {
  if (waited_) {
    return absl::FailedPreconditionError(
        "Wait() was called a second time on the handle of one collective");
  }
  waited_ = true;
  if (!invalid_.ok()) return invalid_;
  std::unique_ptr<PendingCollective> pending = std::move(pending_);
  absl::StatusOr<std::vector<Tensor>> result = pending->Wait();
  if (result.ok()) source_ = pending->matched_source();
  return result;
}

AllReduceHandle::AllReduceHandle(std::unique_ptr<CollectiveHandle> handle)
    : handle_(std::move(handle)) {}

absl::StatusOr<Tensor> AllReduceHandle::Wait() {
  return Single(handle_->Wait());
}

AllReduceInPlaceHandle::AllReduceInPlaceHandle(
    std::unique_ptr<AllReduceHandle> handle, MutableTensorView inout,
    DeviceStaging* staging, void* cuda_stream)
    : handle_(std::move(handle)), inout_(inout), staging_(staging),
      cuda_stream_(cuda_stream) {}

absl::Status AllReduceInPlaceHandle::Wait() {
  REDUCER_ASSIGN_OR_RETURN(Tensor result, handle_->Wait());
  return CopyInto(result, inout_, "AllReduceInPlaceAsync", staging_,
                  cuda_stream_);
}

absl::StatusOr<double> Client::AllReduce(double value, ReduceOp op,
                                         const CallOptions& call) {
  REDUCER_ASSIGN_OR_RETURN(
      Tensor result,
      AllReduce(TensorView(&value, DataType::kFloat64, {}), op, call));
  return result.values<double>()[0];
}

absl::StatusOr<int64_t> Client::AllReduce(int64_t value, ReduceOp op,
                                          const CallOptions& call) {
  REDUCER_ASSIGN_OR_RETURN(
      Tensor result,
      AllReduce(TensorView(&value, DataType::kInt64, {}), op, call));
  return result.values<int64_t>()[0];
}

absl::StatusOr<std::vector<Tensor>> Client::AllReduceMany(
    absl::Span<const TensorView> inputs, absl::Span<const ReduceOp> ops,
    const CallOptions& call) {
  REDUCER_ASSIGN_OR_RETURN(CollectiveRequestSpec spec,
                           AllReduceManySpec(staging(), inputs, ops));
  return session_->Run(spec, call);
}

absl::StatusOr<Tensor> Client::AllGather(const TensorView& input,
                                         const CallOptions& call) {
  REDUCER_ASSIGN_OR_RETURN(
      CollectiveRequestSpec spec,
      OneInputSpec(staging(), CollectiveKind::kAllGather, input,
                   ReduceOp::kSum, "AllGather input"));
  return Single(session_->Run(spec, call));
}

absl::StatusOr<Tensor> Client::Broadcast(const TensorView& input, int root,
                                         const CallOptions& call) {
  REDUCER_ASSIGN_OR_RETURN(CollectiveRequestSpec spec,
                           BroadcastSpec(staging(), input, root, rank()));
  return Single(session_->Run(spec, call));
}

absl::Status Client::BroadcastInPlace(const MutableTensorView& inout, int root,
                                      const CallOptions& call) {
  REDUCER_ASSIGN_OR_RETURN(Tensor result, Broadcast(inout.view(), root, call));
  return CopyInto(result, inout, "BroadcastInPlace", staging(),
                  call.cuda_stream);
}

absl::StatusOr<Tensor> Client::ReduceScatter(const TensorView& input,
                                             ReduceOp op,
                                             const CallOptions& call) {
  REDUCER_ASSIGN_OR_RETURN(
      CollectiveRequestSpec spec,
      OneInputSpec(staging(), CollectiveKind::kReduceScatter, input, op,
                   "ReduceScatter input"));
  return Single(session_->Run(spec, call));
}

absl::Status Client::Barrier(const CallOptions& call) {
  return session_->Run(BarrierSpec(), call).status();
}

uint64_t Client::NextQuorumStep() {
  absl::MutexLock lock(&quorum_mu_);
  if (!next_quorum_step_.has_value()) {
    next_quorum_step_ = session_->FirstQuorumStep();
  }
  return (*next_quorum_step_)++;
}

absl::StatusOr<QuorumResult> Client::AllReduceQuorum(
    const TensorView& input, ReduceOp op, const QuorumOptions& options,
    const CallOptions& call) {
  REDUCER_RETURN_IF_ERROR(CheckQuorumCall(options, call, world_size()));
  REDUCER_RETURN_IF_ERROR(CheckView(input, "AllReduceQuorum input"));
  REDUCER_RETURN_IF_ERROR(
      CheckPlacement(staging(), input, "AllReduceQuorum input"));
  REDUCER_RETURN_IF_ERROR(CheckOpSupported(op, input.dtype()));
  QuorumResult out;
  out.step = NextQuorumStep();
  const std::string base =
      call.name.empty() ? absl::StrCat("quorum step ", out.step) : call.name;
  CollectiveRequestSpec barrier;
  barrier.kind = CollectiveKind::kQuorumBarrier;
  barrier.quorum_min_ranks = options.min_ranks;
  barrier.quorum_grace = options.grace;
  barrier.quorum_step = out.step;
  absl::Status aborted;
  for (int attempt = 0; attempt < kQuorumStepAttempts; ++attempt) {
    CallOptions step_call = call;
    step_call.name = QuorumBarrierName(base, attempt);
    REDUCER_ASSIGN_OR_RETURN(Tensor marks_tensor,
                             Single(session_->Run(barrier, step_call)));
    REDUCER_ASSIGN_OR_RETURN(
        QuorumMarks marks,
        ReadQuorumMarks(marks_tensor, world_size(), rank()));
    // A joining rank counts as the identity; kAvg then sums and divides
    // by the contributors alone.
    const bool divide = op == ReduceOp::kAvg && !marks.joined.empty();
    const ReduceOp data_op = divide ? ReduceOp::kSum : op;
    std::optional<Tensor> identity;
    if (std::binary_search(marks.joined.begin(), marks.joined.end(), rank())) {
      REDUCER_ASSIGN_OR_RETURN(
          identity, IdentityTensor(data_op, input.dtype(), input.shape()));
    }
    step_call.name = QuorumDataName(base, attempt);
    step_call.group = marks.taking_part;
    absl::StatusOr<Tensor> result = AllReduce(
        identity.has_value() ? identity->view() : input, data_op, step_call);
    if (result.status().code() == absl::StatusCode::kAborted) {
      aborted = result.status();  // a contributor was lost: decide again
      continue;
    }
    if (!result.ok()) return result.status();
    if (divide) {
      REDUCER_RETURN_IF_ERROR(DivideInPlace(
          *result, static_cast<int>(marks.contributors.size())));
    }
    out.tensor = *std::move(result);
    out.contributors = std::move(marks.contributors);
    out.joined = std::move(marks.joined);
    return out;
  }
  return aborted;
}

absl::Status Client::Done(const CallOptions& call) {
  if (!call.group.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Done: CallOptions.group is [", absl::StrJoin(call.group, ","),
        "]; Done is over the whole job, so the group must be empty"));
  }
  CallOptions done_call = call;
  if (done_call.name.empty()) {
    absl::MutexLock lock(&quorum_mu_);
    done_call.name = absl::StrCat("done #", done_calls_++);
  }
  CollectiveRequestSpec spec;
  spec.kind = CollectiveKind::kDone;
  REDUCER_ASSIGN_OR_RETURN(Tensor next,
                           Single(session_->Run(spec, done_call)));
  if (session_->shard_count() > 1) {
    // Each shard counted the unnamed calls it left this rank out of; the
    // client picks a call's shard from its number, so it moves its own.
    if (next.dtype() != DataType::kInt64 || next.num_elements() != 1) {
      return absl::InternalError("reducerd answered Done without its int64");
    }
    session_->CatchUpWholeSequence(
        static_cast<uint64_t>(next.values<int64_t>()[0]));
  }
  return absl::OkStatus();
}

absl::StatusOr<QuorumResult> Client::AllReduceQuorumInPlace(
    const MutableTensorView& inout, ReduceOp op, const QuorumOptions& options,
    const CallOptions& call) {
  REDUCER_ASSIGN_OR_RETURN(QuorumResult result,
                           AllReduceQuorum(inout.view(), op, options, call));
  REDUCER_RETURN_IF_ERROR(CopyInto(result.tensor, inout,
                                   "AllReduceQuorumInPlace", staging(),
                                   call.cuda_stream));
  result.tensor = Tensor();
  return result;
}

std::unique_ptr<CollectiveHandle> Client::ReduceAsync(const TensorView& input,
                                                      ReduceOp op, int root,
                                                      const CallOptions& call) {
  return StartOrRefuse(RootedSpec(staging(), CollectiveKind::kReduce, input,
                                  op, root, call, world_size(), "Reduce"),
                       call);
}

std::unique_ptr<CollectiveHandle> Client::GatherAsync(const TensorView& input,
                                                      int root,
                                                      const CallOptions& call) {
  return StartOrRefuse(RootedSpec(staging(), CollectiveKind::kGather, input,
                                  ReduceOp::kSum, root, call, world_size(),
                                  "Gather"),
                       call);
}

std::unique_ptr<CollectiveHandle> Client::ScatterAsync(
    const TensorView& input, int root, const CallOptions& call) {
  return StartOrRefuse(
      ScatterSpec(staging(), input, root, rank(), call, world_size()), call);
}

std::unique_ptr<CollectiveHandle> Client::AllToAllAsync(
    const TensorView& input, const CallOptions& call) {
  return StartOrRefuse(OneInputSpec(staging(), CollectiveKind::kAllToAll,
                                    input, ReduceOp::kSum, "AllToAll input"),
                       call);
}

absl::StatusOr<Tensor> Client::Reduce(const TensorView& input, ReduceOp op,
                                      int root, const CallOptions& call) {
  REDUCER_ASSIGN_OR_RETURN(
      CollectiveRequestSpec spec,
      RootedSpec(staging(), CollectiveKind::kReduce, input, op, root, call,
                 world_size(), "Reduce"));
  return SingleOrNone(session_->Run(spec, call));
}

absl::Status Client::ReduceInPlace(const MutableTensorView& inout, ReduceOp op,
                                   int root, const CallOptions& call) {
  REDUCER_ASSIGN_OR_RETURN(
      CollectiveRequestSpec spec,
      RootedSpec(staging(), CollectiveKind::kReduce, inout.view(), op, root,
                 call, world_size(), "ReduceInPlace"));
  REDUCER_ASSIGN_OR_RETURN(std::vector<Tensor> result,
                           session_->Run(spec, call));
  if (root != rank()) {
    if (result.empty()) return absl::OkStatus();
    return absl::InternalError(absl::StrCat(
        "ReduceInPlace: reducerd returned ", result.size(),
        " tensors to non-root rank ", rank(), " where none was expected"));
  }
  REDUCER_ASSIGN_OR_RETURN(Tensor reduced, Single(std::move(result)));
  return CopyInto(reduced, inout, "ReduceInPlace", staging(),
                  call.cuda_stream);
}

absl::StatusOr<Tensor> Client::Gather(const TensorView& input, int root,
                                      const CallOptions& call) {
  REDUCER_ASSIGN_OR_RETURN(
      CollectiveRequestSpec spec,
      RootedSpec(staging(), CollectiveKind::kGather, input, ReduceOp::kSum,
                 root, call, world_size(), "Gather"));
  return SingleOrNone(session_->Run(spec, call));
}

absl::StatusOr<Tensor> Client::Scatter(const TensorView& input, int root,
                                       const CallOptions& call) {
  REDUCER_ASSIGN_OR_RETURN(
      CollectiveRequestSpec spec,
      ScatterSpec(staging(), input, root, rank(), call, world_size()));
  return Single(session_->Run(spec, call));
}

absl::StatusOr<Tensor> Client::AllToAll(const TensorView& input,
                                        const CallOptions& call) {
  REDUCER_ASSIGN_OR_RETURN(
      CollectiveRequestSpec spec,
      OneInputSpec(staging(), CollectiveKind::kAllToAll, input, ReduceOp::kSum,
                   "AllToAll input"));
  return Single(session_->Run(spec, call));
}

std::unique_ptr<CollectiveHandle> Client::AllToAllVAsync(
    const TensorView& input, absl::Span<const int64_t> send_rows,
    const CallOptions& call) {
  return AllToAllVAsync(input, send_rows, {}, call);
}

std::unique_ptr<CollectiveHandle> Client::AllToAllVAsync(
    const TensorView& input, absl::Span<const int64_t> send_rows,
    absl::Span<const int64_t> recv_rows, const CallOptions& call) {
  return StartOrRefuse(AllToAllVSpec(staging(), input, send_rows, recv_rows,
                                     call, world_size()),
                       call);
}

absl::StatusOr<Tensor> Client::AllToAllV(const TensorView& input,
                                         absl::Span<const int64_t> send_rows,
                                         const CallOptions& call) {
  return AllToAllV(input, send_rows, {}, call);
}

absl::StatusOr<Tensor> Client::AllToAllV(const TensorView& input,
                                         absl::Span<const int64_t> send_rows,
                                         absl::Span<const int64_t> recv_rows,
                                         const CallOptions& call) {
  REDUCER_ASSIGN_OR_RETURN(CollectiveRequestSpec spec,
                           AllToAllVSpec(staging(), input, send_rows,
                                         recv_rows, call, world_size()));
  return Single(session_->Run(spec, call));
}

absl::StatusOr<Tensor> Client::ReceiveAny(int tag, int* source,
                                          const CallOptions& call) {
  std::unique_ptr<CollectiveHandle> handle = ReceiveAnyAsync(tag, call);
  absl::StatusOr<Tensor> result = Single(handle->Wait());
  if (result.ok() && source != nullptr) *source = handle->source();
  return result;
}

std::unique_ptr<CollectiveHandle> Client::ReceiveAnyAsync(
    int tag, const CallOptions& call) {
  return StartOrRefuse(ReceiveAnySpec(tag), call);
}

absl::Status Client::Send(const TensorView& input, int destination, int tag,
                          const CallOptions& call) {
  return SendAsync(input, destination, tag, call)->Wait().status();
}

absl::StatusOr<Tensor> Client::Receive(int source, int tag,
                                       const CallOptions& call) {
  return Single(ReceiveAsync(source, tag, call)->Wait());
}

absl::Status Client::ReceiveInPlace(const MutableTensorView& out, int source,
                                    int tag, const CallOptions& call) {
  REDUCER_ASSIGN_OR_RETURN(
      Tensor result,
      Single(StartOrRefuse(PointToPointSpec(staging(), out.view(), source,
                                            source, tag, /*sends=*/false,
                                            "ReceiveInPlace buffer"),
                           call)
                 ->Wait()));
  return CopyInto(result, out, "ReceiveInPlace", staging(), call.cuda_stream);
}

std::unique_ptr<CollectiveHandle> Client::SendAsync(const TensorView& input,
                                                    int destination, int tag,
                                                    const CallOptions& call) {
  if (input.is_empty_input()) {
    return StartOrRefuse(absl::InvalidArgumentError(
                             "Send: the source must pass its tensor"),
                         call);
  }
  return StartOrRefuse(PointToPointSpec(staging(), input, rank(), destination,
                                        tag, /*sends=*/true, "Send input"),
                       call);
}

std::unique_ptr<CollectiveHandle> Client::ReceiveAsync(
    int source, int tag, const CallOptions& call) {
  return StartOrRefuse(PointToPointSpec(staging(), TensorView(), source,
                                        source, tag, /*sends=*/false,
                                        "Receive"),
                       call);
}

MetricSync::MetricSync(Client* client) : client_(client) {}

void MetricSync::Add(std::string name, MutableTensorView state, ReduceOp op) {
  for (Entry& e : entries_) {
    if (e.name == name) {
      e.state = state;
      e.op = op;
      return;
    }
  }
  entries_.push_back(Entry{std::move(name), state, op});
}

absl::StatusOr<absl::flat_hash_map<std::string, Tensor>> MetricSync::Reduce(
    const CallOptions& call) {
  if (entries_.empty()) {
    return absl::FailedPreconditionError(
        "MetricSync::Reduce: no state registered (call Add first)");
  }
  std::vector<TensorView> inputs;
  std::vector<ReduceOp> ops;
  for (const Entry& e : entries_) {
    inputs.push_back(e.state.view());
    ops.push_back(e.op);
  }
  REDUCER_ASSIGN_OR_RETURN(std::vector<Tensor> reduced,
                           client_->AllReduceMany(inputs, ops, call));
  absl::flat_hash_map<std::string, Tensor> out;
  for (size_t i = 0; i < entries_.size(); ++i) {
    out.emplace(entries_[i].name, std::move(reduced[i]));
  }
  return out;
}

absl::Status MetricSync::ReduceInPlace(const CallOptions& call) {
  absl::StatusOr<absl::flat_hash_map<std::string, Tensor>> reduced =
      Reduce(call);
  if (!reduced.ok()) return reduced.status();
  // Check every state first so that either all are written or none.
  for (const Entry& e : entries_) {
    REDUCER_RETURN_IF_ERROR(
        CheckFits(reduced->at(e.name), e.state,
                  absl::StrCat("MetricSync::ReduceInPlace: state \"", e.name,
                               "\" (no state was written)")));
  }
  for (const Entry& e : entries_) {
    REDUCER_RETURN_IF_ERROR(
        CopyInto(reduced->at(e.name), e.state, "MetricSync::ReduceInPlace",
                 client_->staging(), call.cuda_stream));
  }
  return absl::OkStatus();
}

}  // namespace reducer
