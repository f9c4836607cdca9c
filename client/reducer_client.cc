// Client's construction and its blocking calls. Each builds its request
// (client/internal/collective_request.h) and runs it on the session; the
// in-place forms are their asynchronous form waited for at once
// (async_collectives.cc), so that both write the buffer the same way.
#include "client/reducer_client.h"

#include <utility>

#include "client/internal/call_results.h"
#include "client/internal/client_impl.h"
#include "client/internal/client_session.h"
#include "client/internal/collective_request.h"
#include "client/staging/device_staging.h"
#include "core/status_macros.h"

namespace reducer {

Client::Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Client::~Client() = default;

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(
    const ClientOptions& options) {
  REDUCER_ASSIGN_OR_RETURN(
      std::unique_ptr<ClientSession> session,
      ClientSession::Open(options,
                          NewDeviceStaging(options.cuda_staging_bytes)));
  return std::unique_ptr<Client>(
      new Client(std::make_unique<Impl>(std::move(session))));
}

int Client::rank() const { return impl_->rank(); }
int Client::world_size() const { return impl_->world_size(); }

absl::StatusOr<Tensor> Client::AllReduce(const TensorView& input, ReduceOp op,
                                         const CallOptions& call) {
  return impl_->RunOneInput(CollectiveKind::kAllReduce, input, op,
                            "AllReduce input", call);
}

absl::Status Client::AllReduceInPlace(const MutableTensorView& inout,
                                      ReduceOp op, const CallOptions& call) {
  return impl_->StartAllReduceInPlace(inout, op, call, "AllReduceInPlace")
      ->Wait()
      .status();
}

namespace {

// The all-reduce of one scalar through `client`: `value` as a 0-d tensor of
// its dtype, and the result's one element.
template <typename T>
absl::StatusOr<T> AllReduceScalar(Client& client, T value, ReduceOp op,
                                  const CallOptions& call) {
  REDUCER_ASSIGN_OR_RETURN(
      Tensor result,
      client.AllReduce(TensorView(&value, DataTypeOf<T>::value, {}), op, call));
  return result.values<T>()[0];
}

}  // namespace

absl::StatusOr<double> Client::AllReduce(double value, ReduceOp op,
                                         const CallOptions& call) {
  return AllReduceScalar(*this, value, op, call);
}

absl::StatusOr<int64_t> Client::AllReduce(int64_t value, ReduceOp op,
                                          const CallOptions& call) {
  return AllReduceScalar(*this, value, op, call);
}

absl::StatusOr<std::vector<Tensor>> Client::AllReduceMany(
    absl::Span<const TensorView> inputs, absl::Span<const ReduceOp> ops,
    const CallOptions& call) {
  return impl_->Run(AllReduceManySpec(impl_->staging(), inputs, ops), call);
}

absl::StatusOr<Tensor> Client::AllGather(const TensorView& input,
                                         const CallOptions& call) {
  return impl_->RunOneInput(CollectiveKind::kAllGather, input, ReduceOp::kSum,
                            "AllGather input", call);
}

absl::StatusOr<Tensor> Client::Broadcast(const TensorView& input, int root,
                                         const CallOptions& call) {
  return Single(
      impl_->Run(BroadcastSpec(impl_->staging(), input, root, rank()), call));
}

absl::Status Client::BroadcastInPlace(const MutableTensorView& inout, int root,
                                      const CallOptions& call) {
  return impl_->StartBroadcastInPlace(inout, root, call, "BroadcastInPlace")
      ->Wait()
      .status();
}

absl::StatusOr<Tensor> Client::ReduceScatter(const TensorView& input,
                                             ReduceOp op,
                                             const CallOptions& call) {
  return impl_->RunOneInput(CollectiveKind::kReduceScatter, input, op,
                            "ReduceScatter input", call);
}

absl::Status Client::Barrier(const CallOptions& call) {
  return impl_->Run(EmptySpec(CollectiveKind::kBarrier), call).status();
}

absl::StatusOr<Tensor> Client::Reduce(const TensorView& input, ReduceOp op,
                                      int root, const CallOptions& call) {
  return SingleOrNone(
      impl_->Run(RootedSpec(impl_->staging(), CollectiveKind::kReduce, input,
                            op, root, call, world_size(), "Reduce"),
                 call));
}

absl::Status Client::ReduceInPlace(const MutableTensorView& inout, ReduceOp op,
                                   int root, const CallOptions& call) {
  return impl_->StartReduceInPlace(inout, op, root, call, "ReduceInPlace")
      ->Wait()
      .status();
}

absl::StatusOr<Tensor> Client::Gather(const TensorView& input, int root,
                                      const CallOptions& call) {
  return SingleOrNone(
      impl_->Run(RootedSpec(impl_->staging(), CollectiveKind::kGather, input,
                            ReduceOp::kSum, root, call, world_size(), "Gather"),
                 call));
}

absl::StatusOr<Tensor> Client::Scatter(const TensorView& input, int root,
                                       const CallOptions& call) {
  return Single(impl_->Run(
      ScatterSpec(impl_->staging(), input, root, rank(), call, world_size()),
      call));
}

absl::StatusOr<Tensor> Client::AllToAll(const TensorView& input,
                                        const CallOptions& call) {
  return impl_->RunOneInput(CollectiveKind::kAllToAll, input, ReduceOp::kSum,
                            "AllToAll input", call);
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
  return Single(impl_->Run(AllToAllVSpec(impl_->staging(), input, send_rows,
                                         recv_rows, call, world_size()),
                           call));
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
  return impl_->StartReceiveInPlace(out, source, tag, call, "ReceiveInPlace")
      ->Wait()
      .status();
}

absl::StatusOr<Tensor> Client::ReceiveAny(int tag, int* source,
                                          const CallOptions& call) {
  std::unique_ptr<CollectiveHandle> handle = ReceiveAnyAsync(tag, call);
  absl::StatusOr<Tensor> result = Single(handle->Wait());
  if (result.ok() && source != nullptr) *source = handle->source();
  return result;
}

}  // namespace reducer
