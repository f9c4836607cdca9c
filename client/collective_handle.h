// CollectiveHandle: what every asynchronous call of reducer::Client returns
// (AllReduceAsync, AllReduceInPlaceAsync, BroadcastAsync, SendAsync, ...;
// client/reducer_client.h). Horovod's allreduce_async + synchronize,
// torch.distributed's async_op=True + wait(): start several, then wait.
//
//   std::unique_ptr<reducer::CollectiveHandle> a = client->AllReduceAsync(
//       reducer::TensorView::Of<float>(grad_a), reducer::ReduceOp::kSum);
//   std::unique_ptr<reducer::CollectiveHandle> b = client->AllReduceInPlaceAsync(
//       reducer::MutableTensorView::Of<float>(absl::MakeSpan(grad_b)),
//       reducer::ReduceOp::kSum);
//   absl::StatusOr<std::vector<reducer::Tensor>> sum_a = a->Wait();  // {sum}
//   absl::Status in_b = b->Wait().status();  // grad_b holds the sum
#ifndef REDUCER_CLIENT_COLLECTIVE_HANDLE_H_
#define REDUCER_CLIENT_COLLECTIVE_HANDLE_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "core/tensor.h"

namespace reducer {

class Client;

// A collective started by one of Client's *Async methods. It took its place
// in the group's call order, and its contribution was sent, when it
// started; Wait() blocks for the outcome. Errors found before anything was
// sent (a malformed input, a bad group) are returned by Wait().
//
// Contract: the inputs' memory (an in-place call's buffer included) stays
// valid and unchanged until Wait() returns, and the Client outlives the
// handle. Destroying a handle that was not waited for waits first (its
// inputs are in use until then). Not thread-safe: one thread waits on a
// handle; different handles may be waited on from different threads, in
// any order.
class CollectiveHandle {
 public:
  ~CollectiveHandle();
  CollectiveHandle(const CollectiveHandle&) = delete;
  CollectiveHandle& operator=(const CollectiveHandle&) = delete;

  // The results, or the collective's error: what the blocking form
  // returns, as a vector (one tensor for AllReduce, AllGather, Broadcast,
  // ReduceScatter, Scatter, AllToAll, AllToAllV, Receive, ReceiveAny, and
  // for the root of Reduce and Gather; one per input for AllReduceMany;
  // none for Barrier, Send and for the non-roots of Reduce and Gather,
  // whose blocking forms return an empty Tensor()). The in-place forms
  // (AllReduceInPlaceAsync, BroadcastInPlaceAsync, ReduceInPlaceAsync,
  // ReceiveInPlaceAsync) return none: on success their buffer holds the
  // result; on error it holds exactly what it held before, as their
  // blocking forms.
  // Call once; a second call returns FAILED_PRECONDITION.
  absl::StatusOr<std::vector<Tensor>> Wait();

  // Never blocks: true once the outcome is known, so that Wait() returns
  // without waiting for other ranks (Horovod's poll, torch's
  // is_completed). A transport failure that Wait() may still retry counts
  // as known.
  bool Ready();

  // ReceiveAnyAsync: the sender's group rank (as ReceiveAny's *source) once
  // Wait() returned its message; -1 before that, after an error, and for
  // every other collective.
  int source() const;

 private:
  friend class Client;
  class Impl;  // the started collective; internal
  explicit CollectiveHandle(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace reducer

#endif  // REDUCER_CLIENT_COLLECTIVE_HANDLE_H_
