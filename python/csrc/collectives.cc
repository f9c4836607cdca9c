#include "python/csrc/collectives.h"

#include <cstdint>

#include "client/reducer_client.h"
#include "python/csrc/collective_binding.h"

namespace reducer::python {

using py::arg;

void DefineCollectives(py::class_<PyClient>& client) {
  DefCall(client, "all_reduce",
          TensorCall<kBlocking, ReadsTensor, OpName>(
              [](Client& c, const TensorView& x, ReduceOp op,
                 const CallOptions& options) {
                return c.AllReduce(x, op, options);
              }),
          arg("x"), arg("dtype"), arg("op"));
  DefCall(
      client, "all_reduce_",
      TensorCall<kBlocking, WritesTensor, OpName>(&Client::AllReduceInPlace),
      arg("x"), arg("dtype"), arg("op"));
  DefCall(
      client, "all_reduce_float",
      OptionsCall<kBlocking, double, OpName>(
          [](Client& c, double value, ReduceOp op, const CallOptions& options) {
            return c.AllReduce(value, op, options);
          }),
      arg("value"), arg("op"));
  DefCall(client, "all_reduce_int",
          OptionsCall<kBlocking, int64_t, OpName>(
              [](Client& c, int64_t value, ReduceOp op,
                 const CallOptions& options) {
                return c.AllReduce(value, op, options);
              }),
          arg("value"), arg("op"));
  DefCall(client, "all_reduce_many",
          ManyCall<kBlocking>(&Client::AllReduceMany), arg("xs"), arg("dtypes"),
          arg("ops"));
  DefCall(client, "all_reduce_many_async",
          ManyCall<kAsync>(&Client::AllReduceManyAsync), arg("xs"),
          arg("dtypes"), arg("ops"));
  DefCall(client, "broadcast_",
          TensorCall<kBlocking, WritesTensor, int>(&Client::BroadcastInPlace),
          arg("x"), arg("dtype"), arg("root"));

  // Blocking, and *_async.
  DefTensorCalls<ReadsTensor>(client, "all_gather", &Client::AllGather,
                              &Client::AllGatherAsync, arg("x"), arg("dtype"));
  DefTensorCalls<ReadsTensorIfGiven, int>(
      client, "broadcast", &Client::Broadcast, &Client::BroadcastAsync,
      arg("x").none(true), arg("dtype"), arg("root"));
  DefTensorCalls<ReadsTensor, OpName>(
      client, "reduce_scatter", &Client::ReduceScatter,
      &Client::ReduceScatterAsync, arg("x"), arg("dtype"), arg("op"));
  DefOptionsCalls<>(client, "barrier", &Client::Barrier, &Client::BarrierAsync);
}

}  // namespace reducer::python
