#include "python/csrc/routed_collectives.h"

#include <cstdint>
#include <vector>

#include "client/reducer_client.h"
#include "python/csrc/collective_binding.h"

namespace reducer::python {
namespace {

using py::arg;

// The rows each rank sends, as all_to_all_v takes them.
using Rows = std::vector<int64_t>;

RootResult Reduce(Client& c, const TensorView& x, ReduceOp op, int root,
                  const CallOptions& options) {
  return {c.Reduce(x, op, root, options), c.rank() == root};
}

RootResult Gather(Client& c, const TensorView& x, int root,
                  const CallOptions& options) {
  return {c.Gather(x, root, options), c.rank() == root};
}

absl::StatusOr<Tensor> AllToAllV(Client& c, const TensorView& x,
                                 const Rows& send_rows, const Rows& recv_rows,
                                 const CallOptions& options) {
  return c.AllToAllV(x, send_rows, recv_rows, options);
}

std::unique_ptr<CollectiveHandle> AllToAllVAsync(Client& c, const TensorView& x,
                                                 const Rows& send_rows,
                                                 const Rows& recv_rows,
                                                 const CallOptions& options) {
  return c.AllToAllVAsync(x, send_rows, recv_rows, options);
}

SourcedResult ReceiveAny(Client& c, int tag, const CallOptions& options) {
  SourcedResult message;
  message.result = c.ReceiveAny(tag, &message.source, options);
  return message;
}

}  // namespace

void DefineRoutedCollectives(py::class_<PyClient>& client) {
  DefCall(
      client, "reduce_",
      TensorCall<kBlocking, WritesTensor, OpName, int>(&Client::ReduceInPlace),
      arg("x"), arg("dtype"), arg("op"), arg("root"));
  DefCall(
      client, "recv_",
      TensorCall<kBlocking, WritesTensor, int, int>(&Client::ReceiveInPlace),
      arg("x"), arg("dtype"), arg("source"), arg("tag"));

  // Blocking, and *_async.
  DefTensorCalls<ReadsTensor, OpName, int>(
      client, "reduce", &Reduce, &Client::ReduceAsync, arg("x"), arg("dtype"),
      arg("op"), arg("root"));
  DefTensorCalls<ReadsTensor, int>(client, "gather", &Gather,
                                   &Client::GatherAsync, arg("x"), arg("dtype"),
                                   arg("root"));
  DefTensorCalls<ReadsTensorIfGiven, int>(
      client, "scatter", &Client::Scatter, &Client::ScatterAsync,
      arg("x").none(true), arg("dtype"), arg("root"));
  DefTensorCalls<ReadsTensor>(client, "all_to_all", &Client::AllToAll,
                              &Client::AllToAllAsync, arg("x"), arg("dtype"));
  DefTensorCalls<ReadsTensor, Rows, OptionalRows>(
      client, "all_to_all_v", &AllToAllV, &AllToAllVAsync, arg("x"),
      arg("dtype"), arg("send_rows"), arg("recv_rows") = py::none());
  DefTensorCalls<ReadsTensor, int, int>(
      client, "send", &Client::Send, &Client::SendAsync, arg("x"), arg("dtype"),
      arg("destination"), arg("tag"));
  DefOptionsCalls<int, int>(client, "recv", &Client::Receive,
                            &Client::ReceiveAsync, arg("source"), arg("tag"));
  DefOptionsCalls<int>(client, "recv_any", &ReceiveAny,
                       &Client::ReceiveAnyAsync, arg("tag"));
}

}  // namespace reducer::python
