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
  DefCall(client, "reduce",
          TensorCall<kBlocking, ReadsTensor, OpName, int>(&Reduce), arg("x"),
          arg("dtype"), arg("op"), arg("root"));
  DefCall(
      client, "reduce_",
      TensorCall<kBlocking, WritesTensor, OpName, int>(&Client::ReduceInPlace),
      arg("x"), arg("dtype"), arg("op"), arg("root"));
  DefCall(client, "gather", TensorCall<kBlocking, ReadsTensor, int>(&Gather),
          arg("x"), arg("dtype"), arg("root"));
  DefCall(client, "scatter",
          TensorCall<kBlocking, ReadsTensorIfGiven, int>(&Client::Scatter),
          arg("x").none(true), arg("dtype"), arg("root"));
  DefCall(client, "all_to_all",
          TensorCall<kBlocking, ReadsTensor>(&Client::AllToAll), arg("x"),
          arg("dtype"));
  DefCall(client, "all_to_all_v",
          TensorCall<kBlocking, ReadsTensor, Rows, OptionalRows>(&AllToAllV),
          arg("x"), arg("dtype"), arg("send_rows"),
          arg("recv_rows") = py::none());
  DefCall(client, "send",
          TensorCall<kBlocking, ReadsTensor, int, int>(&Client::Send), arg("x"),
          arg("dtype"), arg("destination"), arg("tag"));
  DefCall(client, "recv", OptionsCall<kBlocking, int, int>(&Client::Receive),
          arg("source"), arg("tag"));
  DefCall(client, "recv_any", OptionsCall<kBlocking, int>(&ReceiveAny),
          arg("tag"));
  DefCall(
      client, "recv_",
      TensorCall<kBlocking, WritesTensor, int, int>(&Client::ReceiveInPlace),
      arg("x"), arg("dtype"), arg("source"), arg("tag"));

  DefCall(client, "reduce_async",
          TensorCall<kAsync, ReadsTensor, OpName, int>(&Client::ReduceAsync),
          arg("x"), arg("dtype"), arg("op"), arg("root"));
  DefCall(client, "gather_async",
          TensorCall<kAsync, ReadsTensor, int>(&Client::GatherAsync), arg("x"),
          arg("dtype"), arg("root"));
  DefCall(client, "scatter_async",
          TensorCall<kAsync, ReadsTensorIfGiven, int>(&Client::ScatterAsync),
          arg("x").none(true), arg("dtype"), arg("root"));
  DefCall(client, "all_to_all_async",
          TensorCall<kAsync, ReadsTensor>(&Client::AllToAllAsync), arg("x"),
          arg("dtype"));
  DefCall(client, "all_to_all_v_async",
          TensorCall<kAsync, ReadsTensor, Rows, OptionalRows>(&AllToAllVAsync),
          arg("x"), arg("dtype"), arg("send_rows"),
          arg("recv_rows") = py::none());
  DefCall(client, "send_async",
          TensorCall<kAsync, ReadsTensor, int, int>(&Client::SendAsync),
          arg("x"), arg("dtype"), arg("destination"), arg("tag"));
  DefCall(client, "recv_async",
          OptionsCall<kAsync, int, int>(&Client::ReceiveAsync), arg("source"),
          arg("tag"));
  DefCall(client, "recv_any_async",
          OptionsCall<kAsync, int>(&Client::ReceiveAnyAsync), arg("tag"));
}

}  // namespace reducer::python
