// The Reducer client library: every collective of a job, out-of-place and
// in-place, against a reducerd daemon.
//
//   reducer::ClientOptions options;
//   options.target = "127.0.0.1:50051";
//   options.job = "train-42";
//   options.rank = rank;
//   options.world_size = 4;
//   absl::StatusOr<std::unique_ptr<reducer::Client>> client =
//       reducer::Client::Connect(options);        // waits for all 4 ranks
//   if (!client.ok()) return client.status();
//
//   // Out-of-place: `grad` is left as it is; the sum comes back new.
//   absl::StatusOr<reducer::Tensor> sum = (*client)->AllReduce(
//       reducer::TensorView::Of<float>(grad), reducer::ReduceOp::kSum);
//
//   // In-place: `grad` holds the average on success, its old bytes on error.
//   absl::Status s = (*client)->AllReduceInPlace(
//       reducer::MutableTensorView::Of<float>(absl::MakeSpan(grad)),
//       reducer::ReduceOp::kAvg);
//
// Matching: collectives of one group are matched across ranks by call order
// (every rank must call them in the same order) or by CallOptions::name.
// Every call has a deadline (CallOptions::timeout, else ClientOptions::timeout)
// and returns an error rather than wait past it.
//
// Errors (absl::Status codes): INVALID_ARGUMENT for a malformed call;
// FAILED_PRECONDITION when ranks disagree (kind, op, dtype, shape, root,
// group); DEADLINE_EXCEEDED naming the ranks that never arrived; ABORTED when
// a rank of the job was lost (Connect again); ALREADY_EXISTS when another
// process holds this rank; RESOURCE_EXHAUSTED for a server limit; UNAVAILABLE
// when reducerd cannot be reached or is shutting down. Security (TlsOptions,
// ClientOptions::token): UNAUTHENTICATED when reducerd wants a token and got
// none or an unknown one; PERMISSION_DENIED for another job's token;
// FAILED_PRECONDITION from Connect when TLS settings and reducerd disagree
// (plaintext against TLS, TLS against plaintext, an untrusted or misnamed
// server certificate, a client certificate refused), the message saying which.
//
// Asynchronous calls (Horovod's allreduce_async + synchronize,
// torch.distributed's async_op=True + wait()): every collective has a form
// that returns a CollectiveHandle (client/collective_handle.h) at once;
// start several, then wait.
//
//   std::unique_ptr<reducer::CollectiveHandle> a = (*client)->AllReduceAsync(
//       reducer::TensorView::Of<float>(grad_a), reducer::ReduceOp::kSum);
//   std::unique_ptr<reducer::CollectiveHandle> b = (*client)->AllReduceAsync(
//       reducer::TensorView::Of<float>(grad_b), reducer::ReduceOp::kSum);
//   absl::StatusOr<std::vector<reducer::Tensor>> sum_a = a->Wait();  // grad_a,
//   absl::StatusOr<std::vector<reducer::Tensor>> sum_b = b->Wait();  // grad_b
//                                  // stay unchanged until their Wait() returns
//
// CUDA device buffers (docs/api.md, "CUDA device buffers"): a view made with
// OnDevice(Device::Cuda(i), ...) runs the collective on GPU memory. The
// input is read after the work queued on CallOptions::cuda_stream; an
// out-of-place result is a new Tensor on the same device; in place writes
// the buffer only once the whole result arrived. All inputs of one call are
// on one device. A device pointer in a CPU view (or the reverse) is
// INVALID_ARGUMENT; a CUDA view in a library built without CUDA, or on a
// machine without a usable GPU, is FAILED_PRECONDITION saying which.
//
// Thread safety: a Client is thread-safe. Collectives issued concurrently from
// several threads must be named (CallOptions::name), since call order is then
// not defined. MetricSync is not thread-safe.
#ifndef REDUCER_CLIENT_REDUCER_CLIENT_H_
#define REDUCER_CLIENT_REDUCER_CLIENT_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "client/client_options.h"
#include "client/collective_handle.h"
#include "client/metric_sync.h"
#include "core/data_type.h"
#include "core/tensor.h"

namespace reducer {

// When a quorum step (Client::AllReduceQuorum) may end.
struct QuorumOptions {
  int min_ranks = 0;                        // at least this many must contribute; 0: all
  absl::Duration grace = absl::Seconds(2);  // how long past the first arrival to wait for the rest
};

// A quorum step's outcome.
struct QuorumResult {
  Tensor tensor;                  // reduced over `contributors` only; kAvg divides by their count
  std::vector<int> contributors;  // ranks whose input is in the result, ascending
  // Ranks that connected again since the previous step and took part in
  // this one without contributing (their input counted as the op's
  // identity), ascending: hand them the state (see AllReduceQuorum).
  std::vector<int> joined;
  uint64_t step = 0;              // the job's number for this step, the same on every rank
};

class Client {
 public:
  // Joins the job; returns once all world_size ranks have joined, or with an
  // error after ClientOptions::timeout. The session stays open until the
  // Client is destroyed; destroying it tells the server this rank has left.
  static absl::StatusOr<std::unique_ptr<Client>> Connect(const ClientOptions&);

  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Out-of-place all-reduce: returns a new tensor; `input` is only read.
  absl::StatusOr<Tensor> AllReduce(const TensorView& input, ReduceOp op,
                                   const CallOptions& = {});
  // In-place all-reduce: on success `inout` holds the result; on error it
  // holds exactly what it held before.
  absl::Status AllReduceInPlace(const MutableTensorView& inout, ReduceOp op,
                                const CallOptions& = {});
  // Asynchronous forms (see CollectiveHandle): each checks its input,
  // takes its place in the group's call order and sends its contribution,
  // then returns at once; Wait() gives the one result tensor, or for the
  // in-place form none, `inout` then holding the result (on error, what it
  // held before). Handles take their place in the group's call order in
  // the order they are started, so every rank must start them in the same
  // order (or name them).
  std::unique_ptr<CollectiveHandle> AllReduceAsync(const TensorView& input,
                                                   ReduceOp op,
                                                   const CallOptions& = {});
  std::unique_ptr<CollectiveHandle> AllReduceInPlaceAsync(
      const MutableTensorView& inout, ReduceOp op, const CallOptions& = {});
  // Asynchronous forms of the collectives below, for overlapping them with
  // computation (torch's async_op=True, DDP's gradient buckets): each
  // checks its input, takes its place in the group's call order and sends
  // its contribution, then returns at once; CollectiveHandle::Wait() gives
  // what the blocking form returns. Started in the same order on every rank
  // (or named), as AllReduceAsync.
  std::unique_ptr<CollectiveHandle> AllReduceManyAsync(
      absl::Span<const TensorView> inputs, absl::Span<const ReduceOp> ops,
      const CallOptions& = {});
  std::unique_ptr<CollectiveHandle> AllGatherAsync(const TensorView& input,
                                                   const CallOptions& = {});
  std::unique_ptr<CollectiveHandle> BroadcastAsync(const TensorView& input,
                                                   int root,
                                                   const CallOptions& = {});
  // The in-place forms: Wait() gives no tensor; on success the buffer
  // holds the result, on error exactly what it held before (as
  // BroadcastInPlace, ReduceInPlace and ReceiveInPlace; a non-root's
  // ReduceInPlace buffer is only read).
  std::unique_ptr<CollectiveHandle> BroadcastInPlaceAsync(
      const MutableTensorView& inout, int root, const CallOptions& = {});
  std::unique_ptr<CollectiveHandle> ReduceInPlaceAsync(
      const MutableTensorView& inout, ReduceOp op, int root,
      const CallOptions& = {});
  std::unique_ptr<CollectiveHandle> ReduceScatterAsync(const TensorView& input,
                                                       ReduceOp op,
                                                       const CallOptions& = {});
  std::unique_ptr<CollectiveHandle> BarrierAsync(const CallOptions& = {});
  // A non-root's Reduce and Gather handles yield zero tensors.
  std::unique_ptr<CollectiveHandle> ReduceAsync(const TensorView& input,
                                                ReduceOp op, int root,
                                                const CallOptions& = {});
  std::unique_ptr<CollectiveHandle> GatherAsync(const TensorView& input,
                                                int root,
                                                const CallOptions& = {});
  std::unique_ptr<CollectiveHandle> ScatterAsync(const TensorView& input,
                                                 int root,
                                                 const CallOptions& = {});
  std::unique_ptr<CollectiveHandle> AllToAllAsync(const TensorView& input,
                                                  const CallOptions& = {});
  std::unique_ptr<CollectiveHandle> AllToAllVAsync(
      const TensorView& input, absl::Span<const int64_t> send_rows,
      const CallOptions& = {});
  std::unique_ptr<CollectiveHandle> AllToAllVAsync(
      const TensorView& input, absl::Span<const int64_t> send_rows,
      absl::Span<const int64_t> recv_rows, const CallOptions& = {});
  // Scalars: a new value; float64 and int64 on the wire.
  absl::StatusOr<double> AllReduce(double value, ReduceOp op,
                                   const CallOptions& = {});
  absl::StatusOr<int64_t> AllReduce(int64_t value, ReduceOp op,
                                    const CallOptions& = {});
  // Many tensors, ops[i] for inputs[i], in one round trip (fusion of small
  // tensors). inputs.size() must equal ops.size() and be at least one.
  absl::StatusOr<std::vector<Tensor>> AllReduceMany(
      absl::Span<const TensorView> inputs, absl::Span<const ReduceOp> ops,
      const CallOptions& = {});
  // Concatenates along dim 0 in group-rank order; dim 0 may differ between
  // ranks (no padding); the other dimensions and the dtype must agree.
  absl::StatusOr<Tensor> AllGather(const TensorView& input,
                                   const CallOptions& = {});
  // Returns the root's tensor on every rank. Non-root ranks may pass
  // TensorView() when they don't know dtype or shape; if they pass a view, it
  // must match the root's dtype and shape.
  absl::StatusOr<Tensor> Broadcast(const TensorView& input, int root,
                                   const CallOptions& = {});
  // The root's tensor written into `inout` on every rank (all-or-nothing);
  // dtype and shape must match the root's.
  absl::Status BroadcastInPlace(const MutableTensorView& inout, int root,
                                const CallOptions& = {});
  // Reduces across ranks, then rank i of the group gets slice i along dim 0.
  // dim 0 must divide by the group size.
  absl::StatusOr<Tensor> ReduceScatter(const TensorView& input, ReduceOp op,
                                       const CallOptions& = {});
  // Returns once every rank of the group has called Barrier.
  absl::Status Barrier(const CallOptions& = {});

  // In Reduce, Gather and Scatter `root` is a global rank that must be in the
  // call's group (CallOptions.group); otherwise INVALID_ARGUMENT, before
  // anything is sent.
  //
  // Reduces across ranks; the root gets the reduction, the others an empty
  // Tensor() (they only send, and return once reducerd has their input).
  // Ops and dtypes as AllReduce.
  absl::StatusOr<Tensor> Reduce(const TensorView& input, ReduceOp op, int root,
                                const CallOptions& = {});
  // The root's `inout` holds the reduction on success (all or nothing, as
  // AllReduceInPlace); the other ranks' buffers are only read, never written.
  absl::Status ReduceInPlace(const MutableTensorView& inout, ReduceOp op,
                             int root, const CallOptions& = {});
  // The root gets the concatenation along dim 0 in group-rank order (dim 0
  // may differ between ranks, as AllGather); the others an empty Tensor().
  absl::StatusOr<Tensor> Gather(const TensorView& input, int root,
                                const CallOptions& = {});
  // The root's input, dim 0 divisible by the group size, is cut along dim 0
  // in group-rank order; the rank at position i of the group gets part i.
  // Non-roots pass TensorView().
  absl::StatusOr<Tensor> Scatter(const TensorView& input, int root,
                                 const CallOptions& = {});
  // dim 0 divisible by the group size, dtype and shape the same on every
  // rank: part j of rank i goes to rank j; each rank gets the concatenation
  // of the parts sent to it, in group-rank order (the shape of its input).
  absl::StatusOr<Tensor> AllToAll(const TensorView& input,
                                  const CallOptions& = {});
  // Uneven all-to-all (torch's all_to_all_single with split sizes): rank i
  // sends send_rows[j] rows (dim 0) of its input to group rank j and gets
  // the rows sent to it, concatenated in group-rank order; reducerd checks
  // the sizes pairwise (a mismatch fails every rank, naming both).
  //
  // send_rows has one entry per rank of the group (the job, or
  // CallOptions.group; group rank j is the j-th of its sorted ranks), none
  // negative, summing to input's dim 0: the first send_rows[0] rows go to
  // group rank 0, the next send_rows[1] to group rank 1, and so on; else
  // INVALID_ARGUMENT before anything is sent, naming the value. Rows of 0
  // are allowed, in any place. The input needs a dimension; its other
  // dimensions and its dtype must be every rank's (else
  // FAILED_PRECONDITION naming the ranks). The result has as many rows as
  // the ranks send this one, after those dimensions. With recv_rows (one
  // entry per group rank, none negative) this rank also says what it
  // expects from each: reducerd checks recv_rows[i] of rank j against
  // send_rows[j] of rank i for every pair where one was given, and fails
  // every rank with FAILED_PRECONDITION naming both ranks and both numbers
  // ("rank 0 sends 3 rows to rank 2, but rank 2 expects 4 from rank 0").
  // Done() ranks: as AllToAll (FAILED_PRECONDITION). With several shards,
  // the whole call goes to one shard.
  absl::StatusOr<Tensor> AllToAllV(const TensorView& input,
                                   absl::Span<const int64_t> send_rows,
                                   const CallOptions& = {});
  absl::StatusOr<Tensor> AllToAllV(const TensorView& input,
                                   absl::Span<const int64_t> send_rows,
                                   absl::Span<const int64_t> recv_rows,
                                   const CallOptions& = {});

  // Point to point through reducerd, matched by (source, destination, tag)
  // in call order: this rank's k-th Send to `destination` with `tag` meets
  // that rank's k-th Receive from this rank with `tag` (counted per epoch).
  // Send is buffered: it returns OK once reducerd holds the whole of
  // `input` (reserved from --memory_budget_bytes and the job's share, else
  // RESOURCE_EXHAUSTED naming the flag), whether or not the destination has
  // called Receive yet; a message whose Receive never comes is dropped at
  // its deadline, after the Send returned OK. Receive returns the sent
  // tensor, or DEADLINE_EXCEEDED naming the source when no Send came in
  // time; ABORTED when a rank of the job was lost before the whole message
  // was held. ReceiveInPlace writes it into `out` (all or nothing), whose
  // dtype and shape must be the sent tensor's (else FAILED_PRECONDITION
  // naming both ranks). INVALID_ARGUMENT, before anything is sent, for a
  // destination or source that is this rank or outside the world, a
  // negative tag, or CallOptions.name or CallOptions.group set (the
  // message's group is its two ranks, its name reserved).
  absl::Status Send(const TensorView& input, int destination, int tag = 0,
                    const CallOptions& = {});
  absl::StatusOr<Tensor> Receive(int source, int tag = 0,
                                 const CallOptions& = {});
  absl::Status ReceiveInPlace(const MutableTensorView& out, int source,
                              int tag = 0, const CallOptions& = {});
  // Asynchronous forms (torch's isend / irecv): Wait() gives no tensor for
  // SendAsync (once reducerd holds it all), the received one for
  // ReceiveAsync. Contract as CollectiveHandle's.
  std::unique_ptr<CollectiveHandle> SendAsync(const TensorView& input,
                                              int destination, int tag = 0,
                                              const CallOptions& = {});
  std::unique_ptr<CollectiveHandle> ReceiveAsync(int source, int tag = 0,
                                                 const CallOptions& = {});
  // ReceiveInPlace's: Wait() gives no tensor, `out` holding the message.
  std::unique_ptr<CollectiveHandle> ReceiveInPlaceAsync(
      const MutableTensorView& out, int source, int tag = 0,
      const CallOptions& = {});
  // The first Send to this rank with `tag`, from any rank; *source gets the
  // sender's group rank (torch's recv with src=None, MPI_ANY_SOURCE).
  //
  // Which message: reducerd picks, among the messages to this rank with
  // `tag` that it holds and that are the next of their source (a source's
  // messages are taken in its order), the one that arrived first; if none
  // is held, the first to arrive. A Receive(src, tag) after it gets src's
  // next message (one ReceiveAny took counts in src's order, as a Receive
  // would). A Receive of the same tag started while a ReceiveAny of it is
  // still unanswered is matched by reducerd too, in call order: it gets
  // src's next message not taken by the ReceiveAny. The sources are the
  // other ranks of the job, or of CallOptions.group, which must contain
  // this rank and another; *source is then the sender's position in that
  // group (its global rank is group[*source], sorted). CallOptions.name
  // must be empty; a negative tag is INVALID_ARGUMENT, before anything is
  // sent. The message comes in two steps (reducerd names it, then sends it),
  // so a ReceiveAny costs a round trip more than a Receive.
  //
  // DEADLINE_EXCEEDED when no message came in time, naming what it waited
  // for ("no rank sent to rank 1 with tag 7 within 5s"); ABORTED, naming the
  // lost rank, when a rank of the job was lost while it waited. With
  // several shards, every message to one rank with one tag goes to the same
  // shard. `source` may be null.
  absl::StatusOr<Tensor> ReceiveAny(int tag, int* source,
                                    const CallOptions& = {});
  // Its asynchronous form: Wait() gives the message; the handle's source()
  // the sender's group rank once Wait() returned it.
  std::unique_ptr<CollectiveHandle> ReceiveAnyAsync(int tag,
                                                    const CallOptions& = {});
  // Fault-tolerant steps. A quorum step ends over the ranks that
  // contributed within `options.grace` of the first arrival, or as soon as
  // every rank not known dead has arrived, provided at least
  // `options.min_ranks` did; the result names its contributors and is the
  // same bits on each of them (reduced in rank order over the
  // contributors, whatever the order of arrival). The first quorum step
  // puts the job in quorum mode: from then on a lost rank (its process
  // died, its connection dropped) does not end the job's epoch. Steps are
  // counted by the job: every rank calls AllReduceQuorum in the same order.
  //
  // A rank left out of a step (dead, or later than the grace) gets
  // FAILED_PRECONDITION on its late call, naming the step; it must
  // destroy its Client and Connect again, which admits it into the running
  // job at once. Its first step after that lists it in `joined` on every
  // rank: its input counts as the op's identity and its result is the
  // contributors'. A survivor then hands it the state, for instance with a
  // Broadcast whose CallOptions.name derives from `step` (the plain
  // collectives of a job in quorum mode must be named: a rank that joined
  // again does not share the others' count of unnamed calls).
  //
  // CallOptions.group must be empty (a step is over the whole job);
  // CallOptions.name, if set, names the step instead of its number (every
  // rank must then use the same name, and a rank that joins again must
  // know it). INVALID_ARGUMENT for a bad min_ranks or grace, before
  // anything is sent. FAILED_PRECONDITION when too few ranks are left to
  // reach min_ranks, naming the dead. With several shards, the first one
  // decides every step.
  absl::StatusOr<QuorumResult> AllReduceQuorum(const TensorView& input,
                                               ReduceOp op,
                                               const QuorumOptions& options,
                                               const CallOptions& = {});
  // In place: on success `inout` holds the result (all or nothing, as
  // AllReduceInPlace); the returned QuorumResult's tensor is empty.
  absl::StatusOr<QuorumResult> AllReduceQuorumInPlace(
      const MutableTensorView& inout, ReduceOp op, const QuorumOptions& options,
      const CallOptions& = {});

  // Uneven inputs (Horovod's join, torch's Join): this rank has no more
  // data. From now on the job's collectives that include it go on without
  // it, so its peers never wait for it: an all-reduce reduces the others'
  // inputs (kAvg divides by their count), an all-gather gives it an empty
  // part, a barrier counts it as arrived, and a broadcast, reduce or
  // gather to another root goes on without it; a collective that cannot
  // (a reduce-scatter, scatter or all-to-all, a root that is done) fails
  // with FAILED_PRECONDITION saying so. Returns OK once every rank of the
  // job has called Done(); from then on every rank takes part again, and
  // unnamed collectives match as before (the ones a rank was left out of
  // count in its call order). Every rank calls it the same number of
  // times. CallOptions.group must be empty; CallOptions.timeout bounds the
  // wait for the others (DEADLINE_EXCEEDED naming the ranks not done).
  // Over several shards, unnamed collectives of a subgroup that a done rank
  // was left out of are not caught up: name those.
  absl::Status Done(const CallOptions& = {});

  // This rank and the job's world size, as given to Connect.
  int rank() const;
  int world_size() const;

 private:
  friend class MetricSync;
  class Impl;  // the session and the counts of quorum steps; internal
  explicit Client(std::unique_ptr<Impl> impl);
  const std::unique_ptr<Impl> impl_;
};

}  // namespace reducer

#endif  // REDUCER_CLIENT_REDUCER_CLIENT_H_
