// Client's fault-tolerant calls: the quorum step's retry loop (decide who
// contributes, then reduce over them; decide again when a contributor is
// lost in between) and Done, for uneven inputs.
#include <algorithm>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/internal/call_results.h"
#include "client/internal/client_impl.h"
#include "client/internal/collective_request.h"
#include "client/internal/quorum_step.h"
#include "client/reducer_client.h"
#include "core/status_macros.h"

namespace reducer {
namespace {

// How many times a quorum step runs again when a contributor is lost
// between its decision and its data, before the ABORTED is returned.
constexpr int kQuorumStepAttempts = 8;

}  // namespace

absl::StatusOr<QuorumResult> Client::AllReduceQuorum(
    const TensorView& input, ReduceOp op, const QuorumOptions& options,
    const CallOptions& call) {
  REDUCER_RETURN_IF_ERROR(
      CheckQuorumCall(options.min_ranks, options.grace, call, world_size()));
  REDUCER_RETURN_IF_ERROR(CheckView(input, "AllReduceQuorum input"));
  REDUCER_RETURN_IF_ERROR(
      CheckPlacement(impl_->staging(), input, "AllReduceQuorum input"));
  REDUCER_RETURN_IF_ERROR(CheckOpSupported(op, input.dtype()));
  QuorumResult out;
  out.step = impl_->NextQuorumStep();
  const std::string base =
      call.name.empty() ? absl::StrCat("quorum step ", out.step) : call.name;
  const CollectiveRequestSpec barrier =
      QuorumBarrierSpec(options.min_ranks, options.grace, out.step);
  absl::Status aborted;
  for (int attempt = 0; attempt < kQuorumStepAttempts; ++attempt) {
    CallOptions step_call = call;
    step_call.name = QuorumBarrierName(base, attempt);
    REDUCER_ASSIGN_OR_RETURN(Tensor marks_tensor,
                             Single(impl_->session().Run(barrier, step_call)));
    REDUCER_ASSIGN_OR_RETURN(
        QuorumMarks marks, ReadQuorumMarks(marks_tensor, world_size(), rank()));
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
      REDUCER_RETURN_IF_ERROR(
          DivideInPlace(*result, static_cast<int>(marks.contributors.size())));
    }
    out.tensor = *std::move(result);
    out.contributors = std::move(marks.contributors);
    out.joined = std::move(marks.joined);
    return out;
  }
  return aborted;
}

absl::StatusOr<QuorumResult> Client::AllReduceQuorumInPlace(
    const MutableTensorView& inout, ReduceOp op, const QuorumOptions& options,
    const CallOptions& call) {
  REDUCER_ASSIGN_OR_RETURN(QuorumResult result,
                           AllReduceQuorum(inout.view(), op, options, call));
  REDUCER_RETURN_IF_ERROR(CopyInto(result.tensor, inout,
                                   "AllReduceQuorumInPlace", impl_->staging(),
                                   call.cuda_stream));
  result.tensor = Tensor();
  return result;
}

absl::Status Client::Done(const CallOptions& call) {
  REDUCER_RETURN_IF_ERROR(CheckDoneCall(call));
  CallOptions done_call = call;
  if (done_call.name.empty()) done_call.name = impl_->NextDoneName();
  REDUCER_ASSIGN_OR_RETURN(
      Tensor next,
      Single(impl_->Run(EmptySpec(CollectiveKind::kDone), done_call)));
  if (impl_->session().shard_count() > 1) {
    // Each shard counted the unnamed calls it left this rank out of; the
    // client picks a call's shard from its number, so it moves its own.
    if (next.dtype() != DataType::kInt64 || next.num_elements() != 1) {
      return absl::InternalError("reducerd answered Done without its int64");
    }
    impl_->session().CatchUpWholeSequence(
        static_cast<uint64_t>(next.values<int64_t>()[0]));
  }
  return absl::OkStatus();
}

}  // namespace reducer
