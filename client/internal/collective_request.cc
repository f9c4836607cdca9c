#include "client/internal/collective_request.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/payload_layout.h"
#include "core/quorum_rule.h"
#include "core/status_macros.h"
#include "proto/reducer/v1/wire_conversion.h"

namespace reducer {
namespace {

TensorSpec SpecOf(const TensorView& view, ReduceOp op = ReduceOp::kSum) {
  return TensorSpec{view.dtype(), view.shape(), op};
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

// OK when `root` is a rank of the call's group (CallOptions.group, empty:
// the whole world of `world_size`); else INVALID_ARGUMENT naming `what`.
absl::Status CheckRoot(absl::string_view what, int root,
                       const CallOptions& call, int world_size) {
  if (root < 0 || root >= world_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": root ", root, " is outside the world of ", world_size));
  }
  if (!call.group.empty() && std::find(call.group.begin(), call.group.end(),
                                       root) == call.group.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": root ", root, " is not in CallOptions.group [",
                     absl::StrJoin(call.group, ","), "]"));
  }
  return absl::OkStatus();
}

// `requested` sorted, with "empty" spelled out as every rank (so that both
// spellings share one sequence of collectives). INVALID_ARGUMENT for a
// repeated rank, a rank outside the world, or a group without `rank`.
absl::StatusOr<std::vector<int>> NormalizeGroup(
    const std::vector<int>& requested, int rank, int world_size) {
  std::vector<int> group = requested;
  if (group.empty()) {
    for (int r = 0; r < world_size; ++r) group.push_back(r);
    return group;
  }
  std::sort(group.begin(), group.end());
  if (std::adjacent_find(group.begin(), group.end()) != group.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("CallOptions.group [", absl::StrJoin(requested, ","),
                     "] names a rank twice"));
  }
  for (int r : group) {
    if (r < 0 || r >= world_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "CallOptions.group names rank ", r, ", outside the world of ",
          world_size, " (group [", absl::StrJoin(requested, ","), "])"));
    }
  }
  if (!std::binary_search(group.begin(), group.end(), rank)) {
    return absl::InvalidArgumentError(
        absl::StrCat("CallOptions.group [", absl::StrJoin(group, ","),
                     "] does not contain this rank (", rank, ")"));
  }
  return group;
}

// A point-to-point call's own checks, before anything is sent: the other
// rank (`spec.peer`; the destination when spec.send_payload, else the
// source) is another rank of the world, the tag is not negative,
// and the call options leave matching and the group to the message.
// INVALID_ARGUMENT naming the value; `Send` or `Receive` by who calls.
absl::Status CheckPointToPointCall(const CollectiveRequestSpec& spec,
                                   const CallOptions& call,
                                   const ClientOptions& options) {
  const bool sends = spec.send_payload;
  const absl::string_view what = sends ? "Send" : "Receive";
  const absl::string_view peer = sends ? "destination" : "source";
  if (spec.peer == options.rank) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", peer, " ", spec.peer, " is this rank itself"));
  }
  if (spec.peer < 0 || spec.peer >= options.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", peer, " ", spec.peer,
                     " is outside the world of ", options.world_size));
  }
  if (spec.tag < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": tag ", spec.tag, " is negative"));
  }
  if (!call.name.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": CallOptions.name \"", call.name,
        "\" must be empty; point-to-point messages are matched by (source, "
        "destination, tag) in call order"));
  }
  if (!call.group.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": CallOptions.group [", absl::StrJoin(call.group, ","),
        "] must be empty; a point-to-point message's group is its source and "
        "destination"));
  }
  return absl::OkStatus();
}

// The group of a point-to-point message between `rank` and `peer` (checked
// distinct): both, sorted.
absl::StatusOr<std::vector<int>> PointToPointGroup(int rank, int peer) {
  return std::vector<int>{std::min(rank, peer), std::max(rank, peer)};
}

// A ReceiveAny's own checks, before anything is sent: a tag that is not
// negative, no CallOptions.name, and another rank to receive from in
// `group` (the call's, normalized). INVALID_ARGUMENT naming the value.
absl::Status CheckReceiveAnyCall(const CollectiveRequestSpec& spec,
                                 const CallOptions& call,
                                 const std::vector<int>& group) {
  if (spec.tag < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("ReceiveAny: tag ", spec.tag, " is negative"));
  }
  if (!call.name.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ReceiveAny: CallOptions.name \"", call.name,
        "\" must be empty; a message is matched by its destination and tag"));
  }
  if (group.size() < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("ReceiveAny: the group [", absl::StrJoin(group, ","),
                     "] has no other rank to receive from"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckView(const TensorView& view, absl::string_view what,
                       int index) {
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
  return absl::InvalidArgumentError(
      absl::StrCat(name, ": data is null but the shape ",
                   ShapeToString(view.shape()), " holds ", *bytes, " bytes"));
}

absl::Status CheckPlacement(DeviceStaging* staging, const TensorView& view,
                            absl::string_view what, int index) {
  const void* data = view.data();
  if (view.device().is_cpu() && data == nullptr) return absl::OkStatus();
  return staging->CheckMemory(
      view.device(), absl::MakeConstSpan(&data, 1),
      index < 0 ? std::string(what) : absl::StrCat(what, " ", index));
}

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

absl::StatusOr<CollectiveRequestSpec> InPlaceAllReduceSpec(
    DeviceStaging* staging, const MutableTensorView& inout, ReduceOp op,
    absl::string_view what) {
  REDUCER_ASSIGN_OR_RETURN(CollectiveRequestSpec spec,
                           OneInputSpec(staging, CollectiveKind::kAllReduce,
                                        inout.view(), op, what));
  spec.result_may_be_lent = true;
  return spec;
}

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

absl::StatusOr<CollectiveRequestSpec> PointToPointSpec(DeviceStaging* staging,
                                                       const TensorView& input,
                                                       int source, int peer,
                                                       int tag, bool sends,
                                                       absl::string_view what) {
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
  if (!recv_rows.empty())
    REDUCER_RETURN_IF_ERROR(check(recv_rows, "recv_rows"));
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
    return absl::InvalidArgumentError(
        absl::StrCat("AllToAllV: send_rows [", absl::StrJoin(send_rows, ","),
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

CollectiveRequestSpec EmptySpec(CollectiveKind kind) {
  CollectiveRequestSpec spec;
  spec.kind = kind;
  return spec;
}

CollectiveRequestSpec QuorumBarrierSpec(int min_ranks, absl::Duration grace,
                                        uint64_t step) {
  CollectiveRequestSpec spec;
  spec.kind = CollectiveKind::kQuorumBarrier;
  spec.quorum_min_ranks = min_ranks;
  spec.quorum_grace = grace;
  spec.quorum_step = step;
  return spec;
}

absl::Status CheckQuorumCall(int min_ranks, absl::Duration grace,
                             const CallOptions& call, int world_size) {
  if (!call.group.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "AllReduceQuorum: CallOptions.group is [",
        absl::StrJoin(call.group, ","),
        "]; a quorum step is over the whole job, so the group must be empty"));
  }
  // The rule reducerd applies, checked here so that nothing is sent.
  QuorumSettings settings;
  settings.min_ranks = min_ranks;
  settings.grace = grace;
  absl::Status valid = QuorumRule::Validate(world_size, settings);
  if (!valid.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("AllReduceQuorum: QuorumOptions: ", valid.message(),
                     " (the group is the job's ", world_size, " ranks)"));
  }
  return absl::OkStatus();
}

absl::Status CheckDoneCall(const CallOptions& call) {
  if (call.group.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "Done: CallOptions.group is [", absl::StrJoin(call.group, ","),
      "]; Done is over the whole job, so the group must be empty"));
}

absl::StatusOr<std::vector<int>> CallGroup(const CollectiveRequestSpec& spec,
                                           const CallOptions& call,
                                           const ClientOptions& options) {
  const bool p2p = spec.kind == CollectiveKind::kSendReceive;
  if (p2p) REDUCER_RETURN_IF_ERROR(CheckPointToPointCall(spec, call, options));
  REDUCER_ASSIGN_OR_RETURN(
      std::vector<int> group,
      p2p ? PointToPointGroup(options.rank, spec.peer)
          : NormalizeGroup(call.group, options.rank, options.world_size));
  if (spec.kind == CollectiveKind::kMatch) {
    REDUCER_RETURN_IF_ERROR(CheckReceiveAnyCall(spec, call, group));
  }
  if (call.timeout < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "CallOptions.timeout must not be negative");
  }
  return group;
}

absl::Status BuildContribution(const CollectiveRequestSpec& spec,
                               const CallOptions& call,
                               const ClientOptions& options,
                               const std::string& session_id,
                               const std::vector<int>& group,
                               Contribution& contribution) {
  const absl::Duration timeout =
      call.timeout == absl::ZeroDuration() ? options.timeout : call.timeout;
  REDUCER_ASSIGN_OR_RETURN(contribution.layout,
                           ComputePayloadLayout(spec.tensors));
  contribution.inputs = spec.inputs;
  contribution.send_payload = spec.send_payload;
  contribution.result_may_be_lent = spec.result_may_be_lent;
  contribution.device = spec.device;
  contribution.cuda_stream = call.cuda_stream;
  contribution.deadline = absl::Now() + timeout + kDeadlineSlack;
  v1::CollectiveHeader& header = contribution.header;
  header.set_job(options.job);
  header.set_session_id(session_id);
  header.set_rank(options.rank);
  for (int r : group) header.add_group(r);
  header.set_kind(
      static_cast<v1::CollectiveKind>(CollectiveKindToWire(spec.kind)));
  header.mutable_tensors()->Reserve(static_cast<int>(spec.tensors.size()));
  for (const TensorSpec& t : spec.tensors) {
    *header.add_tensors() = TensorSpecToWire(t);
  }
  header.set_root(spec.root);
  header.set_timeout_ms(absl::ToInt64Milliseconds(timeout));
  if (spec.kind == CollectiveKind::kQuorumBarrier) {
    header.set_sequence(spec.quorum_step);
    header.set_quorum_min_ranks(spec.quorum_min_ranks);
    header.set_quorum_grace_ms(absl::ToInt64Milliseconds(spec.quorum_grace));
  }
  for (int64_t rows : spec.send_rows) header.add_send_rows(rows);
  for (int64_t rows : spec.recv_rows) header.add_recv_rows(rows);
  return absl::OkStatus();
}

}  // namespace reducer
