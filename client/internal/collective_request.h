// The request of one collective, as the Client API asks for it, and every
// check made of it before anything is sent: the inputs (shape, memory,
// device), the roots, the call options (group, name, timeout) and the
// point-to-point peers. Each builder returns the request, or
// INVALID_ARGUMENT naming the call and the value that is wrong; nothing is
// sent for a request that fails here. BuildContribution then turns a
// checked request into the contribution every attempt sends.
//
// Functions only; thread-compatible. Internal to the client library.
#ifndef REDUCER_CLIENT_INTERNAL_COLLECTIVE_REQUEST_H_
#define REDUCER_CLIENT_INTERNAL_COLLECTIVE_REQUEST_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "client/client_options.h"
#include "client/internal/collective_attempt.h"
#include "client/staging/device_staging.h"
#include "core/data_type.h"
#include "core/device.h"
#include "core/fingerprint.h"
#include "core/tensor.h"

namespace reducer {

// One collective as the Client API asks for it.
struct CollectiveRequestSpec {
  CollectiveKind kind = CollectiveKind::kAllReduce;
  std::vector<TensorSpec> tensors;  // declared to the server
  std::vector<const void*> inputs;  // bytes of each tensor (caller memory)
  bool send_payload = true;         // false: declare shapes, send no bytes
  int root = -1;                    // Broadcast; SendReceive: the source
  Device device;                    // of every input, and of the results
  // SendReceive: the other rank (the destination on the source, which sets
  // send_payload; the source on the destination) and the tag; root is the
  // source. Matched by the reserved name ClientSession::Start
  // gives it (core/point_to_point_name.h), never by the group's sequence.
  // Match (ReceiveAny): the tag, root -1; its sources are the call's group
  // (CallOptions.group, else the whole job) but this rank.
  int peer = -1;
  int64_t tag = 0;
  // AllToAllV: the rows sent to each rank of the group, in group order, and
  // those expected from each (empty: not checked).
  std::vector<int64_t> send_rows;
  std::vector<int64_t> recv_rows;
  // QuorumBarrier: its settings, and the step's number (sent as the
  // header's sequence; the name, from CallOptions, matches it).
  int quorum_min_ranks = 0;
  absl::Duration quorum_grace;
  uint64_t quorum_step = 0;
  // The caller copies the result into its buffer and drops it at once (an
  // in-place call): see Contribution::result_may_be_lent.
  bool result_may_be_lent = false;
};

// The server answers a stalled collective with DEADLINE_EXCEEDED naming the
// missing ranks at the collective's timeout; the client's own deadline
// comes this much later so that the server's message is the one seen.
inline constexpr absl::Duration kDeadlineSlack = absl::Seconds(5);

// --- Inputs -------------------------------------------------------------

// OK when `view` can be sent: a valid shape and memory behind its bytes.
// INVALID_ARGUMENT naming the input as `what`, followed by ` index` when
// index >= 0 (built only on error: a fused call checks many inputs).
absl::Status CheckView(const TensorView& view, absl::string_view what,
                       int index = -1);

// OK when `view`'s memory is on the device it names (and that device is
// usable); DeviceStaging::CheckMemory's errors otherwise, naming `what`
// (and ` index` when index >= 0). `staging` is the session's.
absl::Status CheckPlacement(DeviceStaging* staging, const TensorView& view,
                            absl::string_view what, int index = -1);

// --- Requests, one per kind of call ---------------------------------------

// The request of a collective of one input (`what` names it in errors), or
// INVALID_ARGUMENT when the input cannot be sent.
absl::StatusOr<CollectiveRequestSpec> OneInputSpec(DeviceStaging* staging,
                                                   CollectiveKind kind,
                                                   const TensorView& input,
                                                   ReduceOp op,
                                                   absl::string_view what);

// An in-place all-reduce's request: `inout` is the input, and the result,
// copied into it (CopyInto) as soon as the call returns it, may be lent
// by the transport (Contribution::result_may_be_lent), saving a copy.
absl::StatusOr<CollectiveRequestSpec> InPlaceAllReduceSpec(
    DeviceStaging* staging, const MutableTensorView& inout, ReduceOp op,
    absl::string_view what);

// AllReduceMany's request: inputs[i] reduced with ops[i], all on one device;
// as many ops as inputs, and at least one.
absl::StatusOr<CollectiveRequestSpec> AllReduceManySpec(
    DeviceStaging* staging, absl::Span<const TensorView> inputs,
    absl::Span<const ReduceOp> ops);

// Broadcast's request from rank `rank`: the root sends its tensor, the
// others declare theirs (or nothing, given TensorView()).
absl::StatusOr<CollectiveRequestSpec> BroadcastSpec(DeviceStaging* staging,
                                                    const TensorView& input,
                                                    int root, int rank);

// The request of a collective of one input with a root (Reduce, Gather):
// `root` must be a rank of the call's group (CallOptions.group, empty: the
// whole world of `world_size`). `what` names the call.
absl::StatusOr<CollectiveRequestSpec> RootedSpec(
    DeviceStaging* staging, CollectiveKind kind, const TensorView& input,
    ReduceOp op, int root, const CallOptions& call, int world_size,
    absl::string_view what);

// Scatter's request from rank `rank`: the root sends its tensor, the others
// nothing (they pass TensorView()).
absl::StatusOr<CollectiveRequestSpec> ScatterSpec(DeviceStaging* staging,
                                                  const TensorView& input,
                                                  int root, int rank,
                                                  const CallOptions& call,
                                                  int world_size);

// A point-to-point message's request: as the source (`sends`; `source` is
// this rank) it sends `input` to `peer`; as the destination it declares
// `input`'s spec (its buffer's, for ReceiveInPlace) or nothing
// (TensorView()) and sends no bytes. The peer, tag and call options are
// checked by CallGroup.
absl::StatusOr<CollectiveRequestSpec> PointToPointSpec(DeviceStaging* staging,
                                                       const TensorView& input,
                                                       int source, int peer,
                                                       int tag, bool sends,
                                                       absl::string_view what);

// AllToAllV's request: `input` (at least one dimension) cut by `send_rows`,
// one entry per rank of the call's group, none negative, summing to its
// dim 0; `recv_rows` empty or one entry per rank, none negative.
absl::StatusOr<CollectiveRequestSpec> AllToAllVSpec(
    DeviceStaging* staging, const TensorView& input,
    absl::Span<const int64_t> send_rows, absl::Span<const int64_t> recv_rows,
    const CallOptions& call, int world_size);

// A ReceiveAny's request (a match of `tag`).
CollectiveRequestSpec ReceiveAnySpec(int tag);
// A request with no tensor: a barrier, or Done.
CollectiveRequestSpec EmptySpec(CollectiveKind kind);
// The quorum barrier of quorum step `step`, with its settings.
CollectiveRequestSpec QuorumBarrierSpec(int min_ranks, absl::Duration grace,
                                        uint64_t step);

// OK when a quorum step may be asked for: an empty CallOptions.group and
// settings reducerd accepts for a job of `world_size` ranks.
absl::Status CheckQuorumCall(int min_ranks, absl::Duration grace,
                             const CallOptions& call, int world_size);
// Done's own check: an empty CallOptions.group.
absl::Status CheckDoneCall(const CallOptions& call);

// --- From a request to what is sent ---------------------------------------

// The call's group, sorted, once the call is known to be sendable: for a
// point-to-point message its two ranks (the peer, tag and options checked:
// another rank of the world, a tag not negative, no CallOptions.name or
// group); else CallOptions.group, with "empty" spelled out as every rank
// (so that both spellings share one sequence of collectives), checked to
// repeat no rank, to name ranks of the world and this one; for a
// ReceiveAny also a tag not negative, no name, and another rank to receive
// from. A negative CallOptions.timeout is refused too. INVALID_ARGUMENT
// naming the value otherwise.
absl::StatusOr<std::vector<int>> CallGroup(const CollectiveRequestSpec& spec,
                                           const CallOptions& call,
                                           const ClientOptions& options);

// Fills `contribution` (default-constructed) for `spec` over `group` (from
// CallGroup): the payload's layout and inputs, the deadline, and the
// header's fields that do not depend on the session's counts (job, session,
// rank, group, kind, tensors, root, timeout, quorum settings, rows). The
// caller sets the attempt id, the epoch, the sequence or name. Errors: the
// layout's (INVALID_ARGUMENT).
absl::Status BuildContribution(const CollectiveRequestSpec& spec,
                               const CallOptions& call,
                               const ClientOptions& options,
                               const std::string& session_id,
                               const std::vector<int>& group,
                               Contribution& contribution);

}  // namespace reducer

#endif  // REDUCER_CLIENT_INTERNAL_COLLECTIVE_REQUEST_H_
