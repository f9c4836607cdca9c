// Client's asynchronous calls: each builds and checks its request
// (client/internal/collective_request.h) and starts it at once, behind a
// CollectiveHandle (a request that fails its checks makes a handle whose
// Wait() returns the error, nothing sent).
#include <memory>

#include "client/internal/client_impl.h"
#include "client/internal/collective_request.h"
#include "client/reducer_client.h"

namespace reducer {

std::unique_ptr<CollectiveHandle> Client::AllReduceAsync(
    const TensorView& input, ReduceOp op, const CallOptions& call) {
  return impl_->StartOneInput(CollectiveKind::kAllReduce, input, op,
                              "AllReduceAsync input", call);
}

std::unique_ptr<CollectiveHandle> Client::AllReduceInPlaceAsync(
    const MutableTensorView& inout, ReduceOp op, const CallOptions& call) {
  return impl_->StartAllReduceInPlace(inout, op, call, "AllReduceInPlaceAsync");
}

std::unique_ptr<CollectiveHandle> Client::AllReduceManyAsync(
    absl::Span<const TensorView> inputs, absl::Span<const ReduceOp> ops,
    const CallOptions& call) {
  return impl_->Start(AllReduceManySpec(impl_->staging(), inputs, ops), call);
}

std::unique_ptr<CollectiveHandle> Client::AllGatherAsync(
    const TensorView& input, const CallOptions& call) {
  return impl_->StartOneInput(CollectiveKind::kAllGather, input, ReduceOp::kSum,
                              "AllGather input", call);
}

std::unique_ptr<CollectiveHandle> Client::BroadcastAsync(
    const TensorView& input, int root, const CallOptions& call) {
  return impl_->Start(BroadcastSpec(impl_->staging(), input, root, rank()),
                      call);
}

std::unique_ptr<CollectiveHandle> Client::BroadcastInPlaceAsync(
    const MutableTensorView& inout, int root, const CallOptions& call) {
  return impl_->StartBroadcastInPlace(inout, root, call,
                                      "BroadcastInPlaceAsync");
}

std::unique_ptr<CollectiveHandle> Client::ReduceScatterAsync(
    const TensorView& input, ReduceOp op, const CallOptions& call) {
  return impl_->StartOneInput(CollectiveKind::kReduceScatter, input, op,
                              "ReduceScatter input", call);
}

std::unique_ptr<CollectiveHandle> Client::BarrierAsync(
    const CallOptions& call) {
  return impl_->Start(EmptySpec(CollectiveKind::kBarrier), call);
}

std::unique_ptr<CollectiveHandle> Client::ReduceAsync(const TensorView& input,
                                                      ReduceOp op, int root,
                                                      const CallOptions& call) {
  return impl_->Start(RootedSpec(impl_->staging(), CollectiveKind::kReduce,
                                 input, op, root, call, world_size(), "Reduce"),
                      call);
}

std::unique_ptr<CollectiveHandle> Client::ReduceInPlaceAsync(
    const MutableTensorView& inout, ReduceOp op, int root,
    const CallOptions& call) {
  return impl_->StartReduceInPlace(inout, op, root, call, "ReduceInPlaceAsync");
}

std::unique_ptr<CollectiveHandle> Client::GatherAsync(const TensorView& input,
                                                      int root,
                                                      const CallOptions& call) {
  return impl_->Start(
      RootedSpec(impl_->staging(), CollectiveKind::kGather, input,
                 ReduceOp::kSum, root, call, world_size(), "Gather"),
      call);
}

std::unique_ptr<CollectiveHandle> Client::ScatterAsync(
    const TensorView& input, int root, const CallOptions& call) {
  return impl_->Start(
      ScatterSpec(impl_->staging(), input, root, rank(), call, world_size()),
      call);
}

std::unique_ptr<CollectiveHandle> Client::AllToAllAsync(
    const TensorView& input, const CallOptions& call) {
  return impl_->StartOneInput(CollectiveKind::kAllToAll, input, ReduceOp::kSum,
                              "AllToAll input", call);
}

std::unique_ptr<CollectiveHandle> Client::AllToAllVAsync(
    const TensorView& input, absl::Span<const int64_t> send_rows,
    const CallOptions& call) {
  return AllToAllVAsync(input, send_rows, {}, call);
}

std::unique_ptr<CollectiveHandle> Client::AllToAllVAsync(
    const TensorView& input, absl::Span<const int64_t> send_rows,
    absl::Span<const int64_t> recv_rows, const CallOptions& call) {
  return impl_->Start(AllToAllVSpec(impl_->staging(), input, send_rows,
                                    recv_rows, call, world_size()),
                      call);
}

std::unique_ptr<CollectiveHandle> Client::SendAsync(const TensorView& input,
                                                    int destination, int tag,
                                                    const CallOptions& call) {
  if (input.is_empty_input()) {
    return impl_->Start(
        absl::InvalidArgumentError("Send: the source must pass its tensor"),
        call);
  }
  return impl_->Start(
      PointToPointSpec(impl_->staging(), input, rank(), destination, tag,
                       /*sends=*/true, "Send input"),
      call);
}

std::unique_ptr<CollectiveHandle> Client::ReceiveAsync(
    int source, int tag, const CallOptions& call) {
  return impl_->Start(PointToPointSpec(impl_->staging(), TensorView(), source,
                                       source, tag, /*sends=*/false, "Receive"),
                      call);
}

std::unique_ptr<CollectiveHandle> Client::ReceiveInPlaceAsync(
    const MutableTensorView& out, int source, int tag,
    const CallOptions& call) {
  return impl_->StartReceiveInPlace(out, source, tag, call,
                                    "ReceiveInPlaceAsync");
}

std::unique_ptr<CollectiveHandle> Client::ReceiveAnyAsync(
    int tag, const CallOptions& call) {
  return impl_->Start(ReceiveAnySpec(tag), call);
}

}  // namespace reducer
