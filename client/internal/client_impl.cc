#include "client/internal/client_impl.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "client/internal/collective_handle_impl.h"

namespace reducer {

Client::Impl::Impl(std::unique_ptr<ClientSession> session)
    : session_(std::move(session)) {}

std::unique_ptr<CollectiveHandle> Client::Impl::Start(
    absl::StatusOr<CollectiveRequestSpec> spec, const CallOptions& call) {
  if (!spec.ok()) {
    return std::unique_ptr<CollectiveHandle>(new CollectiveHandle(
        std::make_unique<CollectiveHandle::Impl>(spec.status())));
  }
  return std::unique_ptr<CollectiveHandle>(
      new CollectiveHandle(std::make_unique<CollectiveHandle::Impl>(
          session_->Start(*spec, call), std::nullopt)));
}

std::unique_ptr<CollectiveHandle> Client::Impl::StartInPlace(
    absl::StatusOr<CollectiveRequestSpec> spec, const CallOptions& call,
    const MutableTensorView& buffer, absl::string_view what, bool gets_result) {
  if (!spec.ok()) return Start(std::move(spec), call);
  InPlaceTarget target{buffer,           what,        staging(),
                       call.cuda_stream, gets_result, rank()};
  return std::unique_ptr<CollectiveHandle>(
      new CollectiveHandle(std::make_unique<CollectiveHandle::Impl>(
          session_->Start(*spec, call), std::move(target))));
}

std::unique_ptr<CollectiveHandle> Client::Impl::StartAllReduceInPlace(
    const MutableTensorView& inout, ReduceOp op, const CallOptions& call,
    absl::string_view what) {
  return StartInPlace(
      InPlaceAllReduceSpec(staging(), inout, op, absl::StrCat(what, " buffer")),
      call, inout, what);
}

std::unique_ptr<CollectiveHandle> Client::Impl::StartBroadcastInPlace(
    const MutableTensorView& inout, int root, const CallOptions& call,
    absl::string_view what) {
  return StartInPlace(BroadcastSpec(staging(), inout.view(), root, rank()),
                      call, inout, what);
}

std::unique_ptr<CollectiveHandle> Client::Impl::StartReduceInPlace(
    const MutableTensorView& inout, ReduceOp op, int root,
    const CallOptions& call, absl::string_view what) {
  return StartInPlace(
      RootedSpec(staging(), CollectiveKind::kReduce, inout.view(), op, root,
                 call, world_size(), what),
      call, inout, what, /*gets_result=*/root == rank());
}

std::unique_ptr<CollectiveHandle> Client::Impl::StartReceiveInPlace(
    const MutableTensorView& out, int source, int tag, const CallOptions& call,
    absl::string_view what) {
  return StartInPlace(
      PointToPointSpec(staging(), out.view(), source, source, tag,
                       /*sends=*/false, absl::StrCat(what, " buffer")),
      call, out, what);
}

std::unique_ptr<CollectiveHandle> Client::Impl::StartOneInput(
    CollectiveKind kind, const TensorView& input, ReduceOp op,
    absl::string_view what, const CallOptions& call) {
  return Start(OneInputSpec(staging(), kind, input, op, what), call);
}

absl::StatusOr<Tensor> Client::Impl::RunOneInput(CollectiveKind kind,
                                                 const TensorView& input,
                                                 ReduceOp op,
                                                 absl::string_view what,
                                                 const CallOptions& call) {
  return Single(Run(OneInputSpec(staging(), kind, input, op, what), call));
}

absl::StatusOr<std::vector<Tensor>> Client::Impl::Run(
    absl::StatusOr<CollectiveRequestSpec> spec, const CallOptions& call) {
  if (!spec.ok()) return spec.status();
  return session_->Run(*spec, call);
}

uint64_t Client::Impl::NextQuorumStep() {
  absl::MutexLock lock(&mu_);
  if (!next_quorum_step_.has_value()) {
    next_quorum_step_ = session_->FirstQuorumStep();
  }
  return (*next_quorum_step_)++;
}

std::string Client::Impl::NextDoneName() {
  absl::MutexLock lock(&mu_);
  return absl::StrCat("done #", done_calls_++);
}

}  // namespace reducer
