// conformance_worker: one rank of the conformance suite's result checks
// (tests/conformance_test.cc). It takes fault_worker's command line
// (--target, --job, --rank, --world_size, --scratch_dir, --steps) and
// reports in its format, so that FaultTest drives and judges both:
//
//   BEGIN <i> <verb>
//   RESULT <i> <verb> code=<CODE> ms=<elapsed> check=<ok|none|bad> msg=<text>
//   DIGEST <i> <16 hex digits>         (after an OK step's RESULT)
//
// The digest is a hash of every result of the step (the bytes of each
// tensor and scalar, in call order): runs of one script that must give
// bit-identical results (say over one reducerd and over several shards)
// print the same digests.
//
// Each step is one contract check made of many collectives of one kind at
// one payload size (`bytes`, per rank, before rounding up to whole
// elements): code=OK check=ok when every result was bit-identical to the
// closed form (tests/closed_form.h) on every call; check=bad with the first
// difference named (call, dtype, op, element); a collective that failed
// reports its status, prefixed by the call it was. Out-of-place inputs sit
// on read-only pages (a write kills the worker with SIGSEGV).
//
//   allreduce:bytes=B      every allowed op x dtype pair, out of place and
//                          in place, plus the scalar forms (with dtype=D
//                          or op=O: only the pairs of that dtype or op,
//                          and no scalars)
//   many:bytes=B           AllReduceMany of five tensors (mixed dtypes and
//                          ops), B bytes in all
//   allgather:bytes=B      rank r sends rows0 + r rows (rank 0: B bytes):
//                          uneven dim 0, several dtypes
//   broadcast:bytes=B      from every root: non-roots pass TensorView(),
//                          then views of the right shape, then in place
//   reducescatter:bytes=B  dim 0 a multiple of the world size, several
//                          op x dtype pairs
//   metricsync:bytes=B     MetricSync::Reduce on read-only states, then
//                          ReduceInPlace
//   sendreceive:bytes=B    ring point to point (r to r + 1): sends before
//                          receives, then both orders, interleaved tags,
//                          ReceiveInPlace, SendAsync and ReceiveAsync
//   barrier                rank r creates a file r x 40 ms late, then
//                          Barrier; every rank's file must exist after it
//   reduce:bytes=B         to every root, several op x dtype pairs, out
//                          of place and in place (non-roots: an empty
//                          Tensor(), and their buffer left as it was)
//   gather:bytes=B         to every root, rank r sends rows0 + r rows
//   scatter:bytes=B        from every root, dim 0 a multiple of the world
//                          size; non-roots pass TensorView()
//   alltoall:bytes=B       dim 0 a multiple of the world size, several
//                          dtypes
//   alltoallv:bytes=B      uneven all-to-all over groups of 2, 3 and every
//                          rank, rows of zero for a quarter of the pairs
//                          (B = 0: nothing at all), blocking, with the
//                          expected rows, and asynchronous; then an
//                          exchange of no row on every rank
//   receiveany:bytes=B     one rank (the step's seed modulo the world
//                          size) receives from every other with
//                          ReceiveAny: each message once, from its source,
//                          in its source's order; ReceiveAny then Receive
//                          from the source it named; ReceiveAnyAsync and
//                          a ReceiveAsync started while they are
//                          unanswered, waited for in reverse order
//   asynckinds:bytes=B     every other kind's asynchronous form (with
//                          ReduceAsync, GatherAsync, ScatterAsync and
//                          AllToAllAsync in a second round, and
//                          BroadcastInPlaceAsync, ReduceInPlaceAsync and
//                          ReceiveInPlaceAsync in a third)
//   async:bytes=B          AllReduceAsync of three tensors (float32 sum of
//                          B bytes, int64 max of B / 2, float64 sum of 5
//                          elements) and AllReduceInPlaceAsync of bfloat16
//                          avg (B bytes), all in flight at once, waited
//                          for in the reverse order
//
// allgather, broadcast and reducescatter take dtype=D too (only that
// dtype of their list). With name=N every call of the step is named
// (CallOptions::name "N.<k>" for its k-th call) rather than matched by
// call order.
//
// Exits 0 once the script ran (whatever the results), 2 for a script it
// cannot parse; stops early (exit 0) when Connect fails.
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <initializer_list>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/reducer_client.h"
#include "core/data_type.h"
#include "core/status_macros.h"
#include "core/tensor.h"
#include "tests/closed_form.h"
#include "tests/process_harness.h"
#include "tests/single_tensor.h"
#include "tests/worker_flags.h"
#include "tests/worker_script.h"

ABSL_FLAG(std::string, steps, "", "the script; see the file comment");
ABSL_FLAG(std::string, scratch_dir, "", "a directory the ranks share");

namespace reducer {
namespace testing {
namespace {

// How much later rank r creates its barrier file than rank r - 1, so that a
// Barrier that returns before the last rank called it is caught.
constexpr absl::Duration kBarrierStagger = absl::Milliseconds(40);

std::string ShapeText(const std::vector<int64_t>& shape) {
  return ShapeToString(shape);
}

int64_t Elements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// Elements of `dtype` that hold `bytes` bytes, rounded up to a whole element.
int64_t ElementsFor(int64_t bytes, DataType dtype) {
  const int64_t size = static_cast<int64_t>(ElementSize(dtype));
  return (bytes + size - 1) / size;
}

// A shape of n elements: 2-D where n is even (and at least 4), [3,0] for
// none, else 1-D.
std::vector<int64_t> ShapeFor(int64_t n) {
  if (n == 0) return {3, 0};
  if (n >= 4 && n % 2 == 0) return {2, n / 2};
  return {n};
}

// Closed-form bytes for a tensor that is only moved (gathered, broadcast),
// different for every rank and seed (bool: 0 or 1).
std::vector<uint8_t> MovedBytes(DataType dtype, int rank, int64_t n,
                                uint64_t seed) {
  return ClosedFormInput(ReduceOp::kSum, dtype, rank, n, seed);
}

absl::Status Annotate(const absl::Status& status, absl::string_view context) {
  return absl::Status(status.code(),
                      absl::StrCat(context, ": ", status.message()));
}

// OK when `got` has `dtype`, `shape` and the bytes at `want`.
absl::Status CheckTensor(const Tensor& got, DataType dtype,
                         const std::vector<int64_t>& shape, const void* want,
                         absl::string_view context) {
  if (got.dtype() != dtype || got.shape() != shape) {
    return absl::FailedPreconditionError(absl::StrCat(
        context, ": got ", DataTypeName(got.dtype()), " ",
        ShapeText(got.shape()), ", want ", DataTypeName(dtype), " ",
        ShapeText(shape)));
  }
  return CompareElements(dtype, got.data(), want, Elements(shape), context);
}

// A reduction op and the dtype it reduces.
struct OpDtype {
  ReduceOp op;
  DataType dtype;
};

// How one check went: a failed collective (status), or a wrong result
// (mismatch, with status OK).
struct Outcome {
  absl::Status status;
  std::string mismatch;
};

class Checks {
 public:
  Checks(Client* client, int rank, int world_size, std::string scratch_dir)
      : client_(client),
        rank_(rank),
        world_size_(world_size),
        scratch_dir_(std::move(scratch_dir)) {
    for (int r = 0; r < world_size; ++r) all_.push_back(r);
  }

  // The hash of every result recorded so far (see the file comment).
  uint64_t digest() const { return digest_; }

  // Runs check `verb` with payload `bytes`; `seed` varies its values.
  // `step` gives the optional keys (dtype, op, name).
  Outcome Run(const std::string& verb, int64_t bytes, uint64_t seed,
              const Step& step) {
    dtype_filter_ = step.Get("dtype", "");
    op_filter_ = step.Get("op", "");
    name_ = step.Get("name", "");
    absl::Status s;
    const auto it = Verbs().find(verb);
    if (it == Verbs().end()) {
      s = absl::InvalidArgumentError(
          absl::StrCat("conformance_worker: unknown verb ", verb));
    } else {
      s = (this->*(it->second))(bytes, seed);
    }
    if (s.ok() && calls_ == 0) {
      s = absl::InvalidArgumentError(absl::StrCat(
          "conformance_worker: step ", verb, " made no call (do dtype=",
          dtype_filter_, " and op=", op_filter_, " match nothing?)"));
    }
    Outcome out;
    if (s.ok()) return out;
    // A wrong result (marked by Wrong) is reported as check=bad; a failed
    // call as its status.
    if (wrong_result_) {
      out.mismatch = std::string(s.message());
    } else {
      out.status = s;
    }
    return out;
  }

 private:
  // One check: the step's payload size and seed in, its verdict out.
  using Check = absl::Status (Checks::*)(int64_t bytes, uint64_t seed);

  // The checks by verb (see the file comment).
  static const std::map<std::string, Check>& Verbs() {
    static const auto* const verbs = new std::map<std::string, Check>{
        {"allreduce", &Checks::AllReduce},
        {"many", &Checks::Many},
        {"allgather", &Checks::AllGather},
        {"broadcast", &Checks::Broadcast},
        {"reducescatter", &Checks::ReduceScatter},
        {"metricsync", &Checks::MetricSyncCheck},
        {"barrier", &Checks::BarrierCheck},
        {"async", &Checks::Async},
        {"asynckinds", &Checks::AllAsyncKinds},
        {"reduce", &Checks::Reduce},
        {"gather", &Checks::Gather},
        {"scatter", &Checks::Scatter},
        {"alltoall", &Checks::AllToAll},
        {"sendreceive", &Checks::SendReceiveCheck},
        {"alltoallv", &Checks::AllToAllV},
        {"receiveany", &Checks::ReceiveAnyCheck},
    };
    return *verbs;
  }

  // The three rounds of asynchronous kinds, the next only when the last
  // passed.
  absl::Status AllAsyncKinds(int64_t bytes, uint64_t seed) {
    REDUCER_RETURN_IF_ERROR(AsyncKinds(bytes, seed));
    REDUCER_RETURN_IF_ERROR(AsyncRootedKinds(bytes, seed));
    return AsyncInPlaceKinds(bytes, seed);
  }

  // A wrong result: remembered so that Run reports it as check=bad.
  absl::Status Wrong(absl::Status s) {
    if (!s.ok()) wrong_result_ = true;
    return s;
  }

  // The options of the step's next call: named "<name>.<k>" when the step
  // has a name, else matched by call order.
  CallOptions Call() {
    CallOptions call;
    if (!name_.empty()) call.name = absl::StrCat(name_, ".", calls_);
    ++calls_;
    return call;
  }

  // Adds `size` result bytes to the step's digest.
  void Record(const void* data, size_t size) {
    digest_ = Mix64(digest_ * 0x100000001b3ULL + Fnv1a64(data, size) + size);
  }

  // Records `got` and checks it (CheckTensor).
  absl::Status Checked(const Tensor& got, DataType dtype,
                       const std::vector<int64_t>& shape, const void* want,
                       absl::string_view context) {
    Record(got.data(), got.num_bytes());
    return CheckTensor(got, dtype, shape, want, context);
  }

  // Records n elements at `got` and compares them with `want`.
  absl::Status CheckedElements(DataType dtype, const void* got,
                               const void* want, int64_t n,
                               absl::string_view context) {
    Record(got, static_cast<size_t>(n) * ElementSize(dtype));
    return CompareElements(dtype, got, want, n, context);
  }

  // One call's result checked: the call's failure annotated with `what`, or
  // what Checked says of its tensor (a wrong one marked by Wrong).
  absl::Status CheckCall(const absl::StatusOr<Tensor>& got, DataType dtype,
                         const std::vector<int64_t>& shape, const void* want,
                         absl::string_view what) {
    if (!got.ok()) return Annotate(got.status(), what);
    return Wrong(Checked(*got, dtype, shape, want, what));
  }

  // One in-place call's result checked: the call's failure annotated with
  // `what`, or what CheckedElements says of the n elements at `got` (a wrong
  // one marked by Wrong).
  absl::Status CheckInPlace(const absl::Status& call, DataType dtype,
                            const void* got, const void* want, int64_t n,
                            absl::string_view what) {
    if (!call.ok()) return Annotate(call, what);
    return Wrong(CheckedElements(dtype, got, want, n, what));
  }

  // False when the step's dtype= or op= leaves this pair out.
  bool Wanted(DataType dtype) const {
    return dtype_filter_.empty() || dtype_filter_ == DataTypeName(dtype);
  }
  bool Wanted(ReduceOp op) const {
    return op_filter_.empty() || op_filter_ == ReduceOpName(op);
  }

  // Those of `dtypes` that the step's dtype= leaves in, in their order.
  std::vector<DataType> WantedOf(std::initializer_list<DataType> dtypes) const {
    std::vector<DataType> out;
    for (DataType dtype : dtypes) {
      if (Wanted(dtype)) out.push_back(dtype);
    }
    return out;
  }

  absl::StatusOr<ReadOnlyBuffer> ReadOnly(const std::vector<uint8_t>& bytes) {
    return ReadOnlyBuffer::Create(bytes.data(), bytes.size());
  }

  // A point-to-point call's options: never named (Send and Receive refuse
  // names), counted as a call of the step.
  CallOptions P2pCall() {
    ++calls_;
    return CallOptions();
  }

  // Point to point around the ring: rank r sends to r + 1 and receives from
  // r - 1. Message k of rank r is MovedBytes(dtype, r, n, seed of k), so
  // that a receive matched to the wrong send (or rank) is caught.
  //  0  every rank sends, then receives (tag 0): only a buffered Send lets
  //     every rank send before any receives;
  //  1  odd ranks receive first, even ranks send first (tag 0);
  //  2-4  tags interleaved: sends with tags 2, 1, 2, receives with tags
  //     1, 2, 2, each matching its own tag's sends in call order;
  //  5  ReceiveInPlace into a buffer of the right spec (tag 0);
  //  6  SendAsync and ReceiveAsync (tag 3), waited for in reverse order.
  absl::Status SendReceiveCheck(int64_t bytes, uint64_t seed) {
    const int next = (rank_ + 1) % world_size_;
    const int prev = (rank_ + world_size_ - 1) % world_size_;
    for (DataType dtype : WantedOf({DataType::kFloat32, DataType::kInt64})) {
      const int64_t n = ElementsFor(bytes, dtype);
      const std::vector<int64_t> shape = ShapeFor(n);
      auto message = [&](int from, int k) {
        return MovedBytes(dtype, from, n,
                          Mix64(seed * 61 + static_cast<uint64_t>(dtype) * 11 +
                                static_cast<uint64_t>(k)));
      };
      std::vector<ReadOnlyBuffer> mine;
      for (int k = 0; k < 7; ++k) {
        absl::StatusOr<ReadOnlyBuffer> in = ReadOnly(message(rank_, k));
        if (!in.ok()) return in.status();
        mine.push_back(*std::move(in));
      }
      auto view = [&](int k) { return TensorView(mine[k].data(), dtype, shape); };
      const std::string what = absl::StrCat(
          "sendreceive ", DataTypeName(dtype), " ", ShapeText(shape), " ", rank_,
          ">", next, " and ", prev, ">", rank_);
      auto send = [&](int k, int tag) {
        return Annotate(client_->Send(view(k), next, tag, P2pCall()),
                        absl::StrCat(what, ": send ", k, " tag ", tag));
      };
      auto receive = [&](int k, int tag) -> absl::Status {
        const std::string context =
            absl::StrCat(what, ": receive ", k, " tag ", tag);
        absl::StatusOr<Tensor> got = client_->Receive(prev, tag, P2pCall());
        if (!got.ok()) return Annotate(got.status(), context);
        return Wrong(Checked(*got, dtype, shape, message(prev, k).data(),
                             context));
      };
      absl::Status s = send(0, 0);
      if (s.ok()) s = receive(0, 0);
      if (s.ok() && rank_ % 2 == 1) {
        s = receive(1, 0);
        if (s.ok()) s = send(1, 0);
      } else if (s.ok()) {
        s = send(1, 0);
        if (s.ok()) s = receive(1, 0);
      }
      if (s.ok()) s = send(2, 2);
      if (s.ok()) s = send(3, 1);
      if (s.ok()) s = send(4, 2);
      if (s.ok()) s = receive(3, 1);
      if (s.ok()) s = receive(2, 2);
      if (s.ok()) s = receive(4, 2);
      if (s.ok()) s = send(5, 0);
      if (!s.ok()) return s;
      std::vector<uint8_t> inout = MovedBytes(dtype, rank_ + 100, n, seed);
      absl::Status ip = client_->ReceiveInPlace(
          MutableTensorView(inout.data(), dtype, shape), prev, 0, P2pCall());
      if (!ip.ok()) return Annotate(ip, what + ": receive 5 in place");
      s = CheckedElements(dtype, inout.data(), message(prev, 5).data(), n,
                          what + ": receive 5 in place");
      if (!s.ok()) return Wrong(s);
      std::unique_ptr<CollectiveHandle> sent =
          client_->SendAsync(view(6), next, 3, P2pCall());
      std::unique_ptr<CollectiveHandle> received =
          client_->ReceiveAsync(prev, 3, P2pCall());
      absl::StatusOr<std::vector<Tensor>> got = received->Wait();
      if (!got.ok()) return Annotate(got.status(), what + ": receive 6 async");
      if (got->size() != 1) {
        return Wrong(absl::InternalError(absl::StrCat(
            what, ": receive 6 async gave ", got->size(), " tensors")));
      }
      s = Checked((*got)[0], dtype, shape, message(prev, 6).data(),
                  what + ": receive 6 async");
      if (!s.ok()) return Wrong(s);
      absl::StatusOr<std::vector<Tensor>> none = sent->Wait();
      if (!none.ok()) return Annotate(none.status(), what + ": send 6 async");
      if (!none->empty()) {
        return Wrong(absl::InternalError(absl::StrCat(
            what, ": send 6 async gave ", none->size(), " tensors, want none")));
      }
    }
    return absl::OkStatus();
  }

  absl::Status AllReduce(int64_t bytes, uint64_t seed) {
    for (DataType dtype : kAllDataTypes) {
      for (ReduceOp op : kAllReduceOps) {
        if (!OpAllowed(op, dtype) || !Wanted(dtype) || !Wanted(op)) continue;
        const int64_t n = ElementsFor(bytes, dtype);
        const std::vector<int64_t> shape = ShapeFor(n);
        const uint64_t s = Mix64(seed * 131 + static_cast<uint64_t>(dtype) * 17 +
                                 static_cast<uint64_t>(op));
        const std::string what =
            absl::StrCat("allreduce ", ReduceOpName(op), " ",
                         DataTypeName(dtype), " ", ShapeText(shape));
        const std::vector<uint8_t> input = ClosedFormInput(op, dtype, rank_, n, s);
        const std::vector<uint8_t> want = ClosedFormExpected(op, dtype, all_, n, s);
        absl::StatusOr<ReadOnlyBuffer> in = ReadOnly(input);
        if (!in.ok()) return in.status();
        REDUCER_RETURN_IF_ERROR(
            CheckCall(client_->AllReduce(TensorView(in->data(), dtype, shape),
                                         op, Call()),
                      dtype, shape, want.data(), what + " out of place"));
        std::vector<uint8_t> inout = input;
        REDUCER_RETURN_IF_ERROR(CheckInPlace(
            client_->AllReduceInPlace(
                MutableTensorView(inout.data(), dtype, shape), op, Call()),
            dtype, inout.data(), want.data(), n, what + " in place"));
      }
    }
    if (!dtype_filter_.empty() || !op_filter_.empty()) return absl::OkStatus();
    return Scalars(seed);
  }

  absl::Status Scalars(uint64_t seed) {
    const double d = static_cast<double>(rank_ + 1) * 0.25 + (seed % 8);
    double want_sum = 0, want_max = 0;
    for (int r : all_) {
      const double v = static_cast<double>(r + 1) * 0.25 + (seed % 8);
      want_sum += v;
      want_max = r == 0 ? v : std::max(want_max, v);
    }
    REDUCER_RETURN_IF_ERROR(
        CheckScalar(d, ReduceOp::kSum, want_sum, "scalar float64 sum"));
    REDUCER_RETURN_IF_ERROR(
        CheckScalar(d, ReduceOp::kMax, want_max, "scalar float64 max"));
    // One-hot bits: a contribution counted twice or missed shows.
    const int64_t bit = int64_t{1} << (rank_ % 63);
    int64_t want_bits = 0;
    for (int r : all_) want_bits += int64_t{1} << (r % 63);
    return CheckScalar(bit, ReduceOp::kSum, want_bits, "scalar int64 sum");
  }

  // One scalar AllReduce of `value` checked: its failure annotated with
  // `what`, or a result other than `want` (marked by Wrong).
  template <typename T>
  absl::Status CheckScalar(T value, ReduceOp op, T want,
                           absl::string_view what) {
    absl::StatusOr<T> got = client_->AllReduce(value, op, Call());
    if (!got.ok()) return Annotate(got.status(), what);
    Record(&*got, sizeof(T));
    if (*got != want) {
      return Wrong(absl::FailedPreconditionError(
          absl::StrCat(what, ": got ", *got, ", want ", want)));
    }
    return absl::OkStatus();
  }

  absl::Status Many(int64_t bytes, uint64_t seed) {
    const OpDtype specs[] = {{ReduceOp::kSum, DataType::kFloat32},
                             {ReduceOp::kMax, DataType::kInt64},
                             {ReduceOp::kBitOr, DataType::kBool},
                             {ReduceOp::kAvg, DataType::kBFloat16},
                             {ReduceOp::kProduct, DataType::kInt8}};
    const int64_t per_tensor = bytes / 5 + (bytes % 5 != 0 ? 1 : 0);
    std::vector<ReadOnlyBuffer> buffers;
    std::vector<TensorView> views;
    std::vector<ReduceOp> ops;
    std::vector<std::vector<uint8_t>> wants;
    std::vector<std::vector<int64_t>> shapes;
    for (size_t k = 0; k < 5; ++k) {
      const OpDtype& spec = specs[k];
      const int64_t n = ElementsFor(per_tensor, spec.dtype);
      const uint64_t s = Mix64(seed * 7 + k);
      absl::StatusOr<ReadOnlyBuffer> b =
          ReadOnly(ClosedFormInput(spec.op, spec.dtype, rank_, n, s));
      if (!b.ok()) return b.status();
      buffers.push_back(*std::move(b));
      shapes.push_back(ShapeFor(n));
      views.emplace_back(buffers.back().data(), spec.dtype, shapes.back());
      ops.push_back(spec.op);
      wants.push_back(ClosedFormExpected(spec.op, spec.dtype, all_, n, s));
    }
    absl::StatusOr<std::vector<Tensor>> got = client_->AllReduceMany(views, ops, Call());
    if (!got.ok()) return Annotate(got.status(), "allreduce_many");
    if (got->size() != 5) {
      return Wrong(absl::FailedPreconditionError(
          absl::StrCat("allreduce_many: got ", got->size(), " tensors, want 5")));
    }
    for (size_t k = 0; k < 5; ++k) {
      absl::Status c =
          Checked((*got)[k], specs[k].dtype, shapes[k], wants[k].data(),
                      absl::StrCat("allreduce_many tensor ", k, " ",
                                   ReduceOpName(specs[k].op), " ",
                                   DataTypeName(specs[k].dtype)));
      if (!c.ok()) return Wrong(c);
    }
    return absl::OkStatus();
  }

  absl::Status AllGather(int64_t bytes, uint64_t seed) {
    for (DataType dtype : WantedOf({DataType::kFloat32, DataType::kInt8,
                                    DataType::kFloat64, DataType::kBool})) {
      constexpr int64_t kCols = 3;
      const uint64_t s = Mix64(seed * 31 + static_cast<uint64_t>(dtype));
      const Stacked stacked =
          Stack(dtype, RowsFor(bytes, dtype, kCols), kCols, s);
      absl::StatusOr<ReadOnlyBuffer> in = ReadOnly(stacked.mine);
      if (!in.ok()) return in.status();
      const std::string what = absl::StrCat("allgather ", DataTypeName(dtype),
                                            " ", ShapeText(stacked.shape));
      REDUCER_RETURN_IF_ERROR(
          CheckCall(client_->AllGather(
                        TensorView(in->data(), dtype, stacked.shape), Call()),
                    dtype, stacked.all_shape, stacked.all.data(), what));
    }
    return absl::OkStatus();
  }

  absl::Status Broadcast(int64_t bytes, uint64_t seed) {
    for (DataType dtype : WantedOf({DataType::kFloat32, DataType::kInt64,
                                    DataType::kBFloat16, DataType::kBool})) {
      const int64_t n = ElementsFor(bytes, dtype);
      const std::vector<int64_t> shape = ShapeFor(n);
      for (int root = 0; root < world_size_; ++root) {
        const uint64_t s =
            Mix64(seed * 53 + static_cast<uint64_t>(dtype) * 7 + root);
        const std::vector<uint8_t> want = MovedBytes(dtype, root, n, s);
        // What a non-root holds before: other bytes of the same shape.
        const std::vector<uint8_t> mine =
            rank_ == root ? want : MovedBytes(dtype, rank_ + 100, n, s);
        absl::StatusOr<ReadOnlyBuffer> in = ReadOnly(mine);
        if (!in.ok()) return in.status();
        const std::string what = absl::StrCat(
            "broadcast ", DataTypeName(dtype), " ", ShapeText(shape), " root ", root);
        // Non-roots without a view, then with one.
        for (bool with_view : {false, true}) {
          const TensorView view = rank_ == root || with_view
                                      ? TensorView(in->data(), dtype, shape)
                                      : TensorView();
          const std::string form = with_view ? " (views everywhere)"
                                             : " (empty views on non-roots)";
          REDUCER_RETURN_IF_ERROR(
              CheckCall(client_->Broadcast(view, root, Call()), dtype, shape,
                        want.data(), what + form));
        }
        std::vector<uint8_t> inout = mine;
        REDUCER_RETURN_IF_ERROR(CheckInPlace(
            client_->BroadcastInPlace(
                MutableTensorView(inout.data(), dtype, shape), root, Call()),
            dtype, inout.data(), want.data(), n, what + " in place"));
      }
    }
    return absl::OkStatus();
  }

  absl::Status ReduceScatter(int64_t bytes, uint64_t seed) {
    for (OpDtype p : {OpDtype{ReduceOp::kSum, DataType::kFloat32},
                      OpDtype{ReduceOp::kMax, DataType::kInt32},
                      OpDtype{ReduceOp::kAvg, DataType::kFloat16},
                      OpDtype{ReduceOp::kBitXor, DataType::kUInt8}}) {
      if (!Wanted(p.dtype)) continue;
      const std::vector<int64_t> shape = CutShape(bytes, p.dtype, 2);
      const int64_t n = Elements(shape);
      const uint64_t s = Mix64(seed * 71 + static_cast<uint64_t>(p.op) * 11 +
                               static_cast<uint64_t>(p.dtype));
      const std::vector<int64_t> slice_shape = PartShape(shape);
      const std::string what =
          absl::StrCat("reducescatter ", ReduceOpName(p.op), " ",
                       DataTypeName(p.dtype), " ", ShapeText(shape));
      absl::StatusOr<ReadOnlyBuffer> in =
          ReadOnly(ClosedFormInput(p.op, p.dtype, rank_, n, s));
      if (!in.ok()) return in.status();
      const std::vector<uint8_t> want =
          Part(ClosedFormExpected(p.op, p.dtype, all_, n, s), rank_);
      REDUCER_RETURN_IF_ERROR(
          CheckCall(client_->ReduceScatter(
                        TensorView(in->data(), p.dtype, shape), p.op, Call()),
                    p.dtype, slice_shape, want.data(), what));
    }
    return absl::OkStatus();
  }

  absl::Status MetricSyncCheck(int64_t bytes, uint64_t seed) {
    struct State {
      std::string name;
      ReduceOp op;
      DataType dtype;
    };
    const std::vector<State> states = {
        {"correct", ReduceOp::kSum, DataType::kInt64},
        {"loss", ReduceOp::kAvg, DataType::kFloat64},
        {"worst", ReduceOp::kMax, DataType::kFloat32},
        {"seen", ReduceOp::kBitOr, DataType::kBool}};
    const int64_t per_state = bytes / 4 + (bytes % 4 != 0 ? 1 : 0);
    std::vector<ReadOnlyBuffer> readonly;
    std::vector<std::vector<uint8_t>> writable, wants, inputs;
    std::vector<std::vector<int64_t>> shapes;
    for (size_t k = 0; k < states.size(); ++k) {
      const int64_t n = ElementsFor(per_state, states[k].dtype);
      const uint64_t s = Mix64(seed * 13 + k);
      inputs.push_back(ClosedFormInput(states[k].op, states[k].dtype, rank_, n, s));
      wants.push_back(
          ClosedFormExpected(states[k].op, states[k].dtype, all_, n, s));
      shapes.push_back(ShapeFor(n));
      absl::StatusOr<ReadOnlyBuffer> b = ReadOnly(inputs.back());
      if (!b.ok()) return b.status();
      readonly.push_back(*std::move(b));
      writable.push_back(inputs.back());
    }
    // Out of place, states on read-only pages.
    MetricSync sync(client_);
    for (size_t k = 0; k < states.size(); ++k) {
      sync.Add(states[k].name,
               MutableTensorView(readonly[k].mutable_data(), states[k].dtype,
                                 shapes[k]),
               states[k].op);
    }
    absl::StatusOr<absl::flat_hash_map<std::string, Tensor>> got = sync.Reduce(Call());
    if (!got.ok()) return Annotate(got.status(), "metricsync Reduce");
    for (size_t k = 0; k < states.size(); ++k) {
      auto it = got->find(states[k].name);
      const std::string what = absl::StrCat("metricsync Reduce state ",
                                            states[k].name);
      if (it == got->end()) {
        return Wrong(absl::FailedPreconditionError(what + ": missing"));
      }
      absl::Status c = Checked(it->second, states[k].dtype, shapes[k],
                               wants[k].data(), what);
      if (!c.ok()) return Wrong(c);
    }
    // In place.
    MetricSync in_place(client_);
    for (size_t k = 0; k < states.size(); ++k) {
      in_place.Add(states[k].name,
                   MutableTensorView(writable[k].data(), states[k].dtype, shapes[k]),
                   states[k].op);
    }
    absl::Status ip = in_place.ReduceInPlace(Call());
    if (!ip.ok()) return Annotate(ip, "metricsync ReduceInPlace");
    for (size_t k = 0; k < states.size(); ++k) {
      absl::Status c = CheckedElements(
          states[k].dtype, writable[k].data(), wants[k].data(),
          Elements(shapes[k]),
          absl::StrCat("metricsync ReduceInPlace state ", states[k].name));
      if (!c.ok()) return Wrong(c);
    }
    return absl::OkStatus();
  }

  absl::Status BarrierCheck(int64_t /*bytes*/, uint64_t seed) {
    auto file = [&](int r) {
      return absl::StrCat(scratch_dir_, "/barrier.", seed, ".", r);
    };
    absl::SleepFor(kBarrierStagger * rank_);
    std::ofstream(file(rank_)) << rank_;
    absl::Status s = client_->Barrier(Call());
    if (!s.ok()) return Annotate(s, "barrier");
    for (int r : all_) {
      if (access(file(r).c_str(), F_OK) != 0) {
        return Wrong(absl::FailedPreconditionError(absl::StrCat(
            "barrier returned before rank ", r, " called it (no ", file(r), ")")));
      }
    }
    return absl::OkStatus();
  }

  absl::Status Async(int64_t bytes, uint64_t seed) {
    struct Spec {
      ReduceOp op;
      DataType dtype;
      int64_t n;
      bool in_place;
    };
    const Spec specs[] = {
        {ReduceOp::kSum, DataType::kFloat32,
         ElementsFor(bytes, DataType::kFloat32), false},
        {ReduceOp::kMax, DataType::kInt64,
         ElementsFor(bytes / 2, DataType::kInt64), false},
        {ReduceOp::kAvg, DataType::kBFloat16,
         ElementsFor(bytes, DataType::kBFloat16), true},
        {ReduceOp::kSum, DataType::kFloat64, 5, false}};
    constexpr size_t kCount = sizeof(specs) / sizeof(specs[0]);
    std::vector<ReadOnlyBuffer> inputs;
    std::vector<std::vector<uint8_t>> inouts(kCount), wants(kCount);
    std::vector<std::vector<int64_t>> shapes(kCount);
    std::vector<std::unique_ptr<CollectiveHandle>> handles(kCount);
    std::vector<std::unique_ptr<CollectiveHandle>> in_place(kCount);
    std::vector<std::string> whats(kCount);
    for (size_t k = 0; k < kCount; ++k) {
      const Spec& spec = specs[k];
      const uint64_t s = Mix64(seed * 97 + k);
      std::vector<uint8_t> input =
          ClosedFormInput(spec.op, spec.dtype, rank_, spec.n, s);
      wants[k] = ClosedFormExpected(spec.op, spec.dtype, all_, spec.n, s);
      shapes[k] = ShapeFor(spec.n);
      whats[k] = absl::StrCat("async allreduce ", k, " ", ReduceOpName(spec.op),
                              " ", DataTypeName(spec.dtype), " ",
                              ShapeText(shapes[k]),
                              spec.in_place ? " in place" : " out of place");
      if (spec.in_place) {
        inouts[k] = std::move(input);
        in_place[k] = client_->AllReduceInPlaceAsync(
            MutableTensorView(inouts[k].data(), spec.dtype, shapes[k]), spec.op,
            Call());
      } else {
        absl::StatusOr<ReadOnlyBuffer> in = ReadOnly(input);
        if (!in.ok()) return in.status();
        inputs.push_back(*std::move(in));
        handles[k] = client_->AllReduceAsync(
            TensorView(inputs.back().data(), spec.dtype, shapes[k]), spec.op,
            Call());
      }
    }
    absl::Status first_error;
    std::vector<absl::Status> checks(kCount);
    for (size_t i = kCount; i-- > 0;) {
      const Spec& spec = specs[i];
      if (spec.in_place) {
        absl::Status s = in_place[i]->Wait().status();
        if (!s.ok()) {
          if (first_error.ok()) first_error = Annotate(s, whats[i]);
          continue;
        }
        checks[i] = CheckedElements(spec.dtype, inouts[i].data(),
                                    wants[i].data(), spec.n, whats[i]);
      } else {
        absl::StatusOr<Tensor> got = SingleOf(handles[i]->Wait());
        if (!got.ok()) {
          if (first_error.ok()) first_error = Annotate(got.status(), whats[i]);
          continue;
        }
        checks[i] = Checked(*got, spec.dtype, shapes[i], wants[i].data(), whats[i]);
      }
    }
    if (!first_error.ok()) return first_error;
    for (const absl::Status& c : checks) {
      if (!c.ok()) return Wrong(c);
    }
    return absl::OkStatus();
  }

  // Waits for `handles` in the reverse of the order they started, into
  // `got`; the first failure in start order, annotated with its whats[i].
  static absl::Status WaitInReverse(
      std::vector<std::unique_ptr<CollectiveHandle>>& handles,
      const char* const whats[],
      std::vector<absl::StatusOr<std::vector<Tensor>>>& got) {
    got.resize(handles.size());
    for (size_t i = handles.size(); i-- > 0;) got[i] = handles[i]->Wait();
    for (size_t i = 0; i < got.size(); ++i) {
      if (!got[i].ok()) return Annotate(got[i].status(), whats[i]);
    }
    return absl::OkStatus();
  }

  // The asynchronous form of every kind but AllReduce (which Async
  // checks): all started before any is waited for, then waited for in
  // reverse order, each result against its closed form.
  absl::Status AsyncKinds(int64_t bytes, uint64_t seed) {
    const DataType dtype = DataType::kFloat32;
    const int64_t n = ElementsFor(bytes, dtype);
    const uint64_t s = Mix64(seed * 89 + 1);
    const int root = static_cast<int>(seed % static_cast<uint64_t>(world_size_));
    // AllReduceMany: a float32 sum and an int64 max.
    const int64_t many_n = ElementsFor(bytes / 2 + 8, DataType::kInt64);
    absl::StatusOr<ReadOnlyBuffer> many_a =
        ReadOnly(ClosedFormInput(ReduceOp::kSum, dtype, rank_, n, s));
    absl::StatusOr<ReadOnlyBuffer> many_b = ReadOnly(
        ClosedFormInput(ReduceOp::kMax, DataType::kInt64, rank_, many_n, s + 1));
    // AllGather: rank r sends r + 1 rows of 3.
    const Stacked gathered = Stack(dtype, 1, 3, s + 2);
    absl::StatusOr<ReadOnlyBuffer> gather = ReadOnly(gathered.mine);
    // Broadcast from `root`; the others pass no view.
    absl::StatusOr<ReadOnlyBuffer> broadcast =
        ReadOnly(MovedBytes(dtype, root, n, s + 3));
    // ReduceScatter: world_size rows of n elements.
    const std::vector<int64_t> scatter_shape = {world_size_, n};
    absl::StatusOr<ReadOnlyBuffer> scatter = ReadOnly(ClosedFormInput(
        ReduceOp::kSum, dtype, rank_, world_size_ * n, s + 4));
    for (const absl::StatusOr<ReadOnlyBuffer>* b :
         {&many_a, &many_b, &gather, &broadcast, &scatter}) {
      if (!b->ok()) return b->status();
    }
    const std::vector<TensorView> many_inputs = {
        TensorView(many_a->data(), dtype, ShapeFor(n)),
        TensorView(many_b->data(), DataType::kInt64, ShapeFor(many_n))};
    const std::vector<ReduceOp> many_ops = {ReduceOp::kSum, ReduceOp::kMax};
    std::vector<std::unique_ptr<CollectiveHandle>> handles;
    handles.push_back(client_->AllReduceManyAsync(many_inputs, many_ops, Call()));
    handles.push_back(client_->AllGatherAsync(
        TensorView(gather->data(), dtype, gathered.shape), Call()));
    handles.push_back(client_->BroadcastAsync(
        rank_ == root ? TensorView(broadcast->data(), dtype, ShapeFor(n))
                      : TensorView(),
        root, Call()));
    handles.push_back(client_->ReduceScatterAsync(
        TensorView(scatter->data(), dtype, scatter_shape), ReduceOp::kSum,
        Call()));
    handles.push_back(client_->BarrierAsync(Call()));
    const char* const whats[] = {"async allreducemany", "async allgather",
                                 "async broadcast", "async reducescatter",
                                 "async barrier"};
    std::vector<absl::StatusOr<std::vector<Tensor>>> got;
    absl::Status waited = WaitInReverse(handles, whats, got);
    if (!waited.ok()) return waited;
    // Expected values, computed from the closed forms.
    const std::vector<uint8_t> my_slice = Part(
        ClosedFormExpected(ReduceOp::kSum, dtype, all_, world_size_ * n, s + 4),
        rank_);
    struct Expect {
      const Tensor* got;
      DataType dtype;
      std::vector<int64_t> shape;
      std::vector<uint8_t> want;
      std::string what;
    };
    if (got[0]->size() != 2 || got[1]->size() != 1 || got[2]->size() != 1 ||
        got[3]->size() != 1 || !got[4]->empty()) {
      return Wrong(absl::InternalError(absl::StrCat(
          "async results: want 2, 1, 1, 1, 0 tensors, got ", got[0]->size(),
          ", ", got[1]->size(), ", ", got[2]->size(), ", ", got[3]->size(),
          ", ", got[4]->size())));
    }
    const Expect expects[] = {
        {&(*got[0])[0], dtype, ShapeFor(n),
         ClosedFormExpected(ReduceOp::kSum, dtype, all_, n, s), whats[0]},
        {&(*got[0])[1], DataType::kInt64, ShapeFor(many_n),
         ClosedFormExpected(ReduceOp::kMax, DataType::kInt64, all_, many_n,
                            s + 1),
         whats[0]},
        {&(*got[1])[0], dtype, gathered.all_shape, gathered.all, whats[1]},
        {&(*got[2])[0], dtype, ShapeFor(n), MovedBytes(dtype, root, n, s + 3),
         whats[2]},
        {&(*got[3])[0], dtype, {1, n}, my_slice, whats[3]}};
    for (const Expect& e : expects) {
      absl::Status c = Checked(*e.got, e.dtype, e.shape, e.want.data(), e.what);
      if (!c.ok()) return Wrong(c);
    }
    return absl::OkStatus();
  }

  // The shape [rows, cols] of a kind that cuts dim 0 in world-size parts:
  // rows of `cols` elements of `dtype` for about `bytes` bytes, rounded up
  // to a multiple of the world size.
  std::vector<int64_t> CutShape(int64_t bytes, DataType dtype,
                                int64_t cols) const {
    const int64_t rows = RowsFor(bytes, dtype, cols);
    return {(rows + world_size_ - 1) / world_size_ * world_size_, cols};
  }

  // The shape of one of the world-size parts of `shape` (a CutShape).
  std::vector<int64_t> PartShape(const std::vector<int64_t>& shape) const {
    return {shape[0] / world_size_, shape[1]};
  }

  // Rows of `cols` elements of `dtype` for about `bytes` bytes, rounded up
  // to a whole row.
  static int64_t RowsFor(int64_t bytes, DataType dtype, int64_t cols) {
    const int64_t row_bytes = cols * static_cast<int64_t>(ElementSize(dtype));
    return (bytes + row_bytes - 1) / row_bytes;
  }

  // Part `index` of `all` cut in world-size parts of equal size.
  std::vector<uint8_t> Part(const std::vector<uint8_t>& all, int index) const {
    const size_t part = all.size() / static_cast<size_t>(world_size_);
    return std::vector<uint8_t>(all.begin() + index * part,
                                all.begin() + (index + 1) * part);
  }

  // What an all-to-all gives this rank when every rank r sends
  // MovedBytes(dtype, r, n, seed): its part of each, in rank order.
  std::vector<uint8_t> Exchanged(DataType dtype, int64_t n,
                                 uint64_t seed) const {
    std::vector<uint8_t> out;
    for (int r : all_) {
      const std::vector<uint8_t> part =
          Part(MovedBytes(dtype, r, n, seed), rank_);
      out.insert(out.end(), part.begin(), part.end());
    }
    return out;
  }

  // The inputs of a kind that stacks every rank's rows (gather): rank r
  // sends rows0 + r rows of `cols` elements, MovedBytes(dtype, r, ..., seed).
  struct Stacked {
    std::vector<int64_t> shape;      // this rank's input
    std::vector<uint8_t> mine;       // its bytes
    std::vector<int64_t> all_shape;  // every rank's rows, in rank order
    std::vector<uint8_t> all;        // their bytes
  };
  Stacked Stack(DataType dtype, int64_t rows0, int64_t cols,
                uint64_t seed) const {
    Stacked out;
    out.shape = {rows0 + rank_, cols};
    out.mine = MovedBytes(dtype, rank_, Elements(out.shape), seed);
    int64_t total_rows = 0;
    for (int r : all_) {
      const std::vector<uint8_t> part =
          MovedBytes(dtype, r, (rows0 + r) * cols, seed);
      out.all.insert(out.all.end(), part.begin(), part.end());
      total_rows += rows0 + r;
    }
    out.all_shape = {total_rows, cols};
    return out;
  }

  // A rooted call's result checked: the call's failure annotated with
  // `what`; else the root's tensor as CheckCall does, and on the others an
  // empty Tensor() (a wrong one marked by Wrong).
  absl::Status CheckRooted(const absl::StatusOr<Tensor>& got, int root,
                           DataType dtype, const std::vector<int64_t>& shape,
                           const void* want, absl::string_view what) {
    if (!got.ok()) return Annotate(got.status(), what);
    return Wrong(rank_ == root ? Checked(*got, dtype, shape, want, what)
                               : CheckNoResult(*got, what));
  }

  // OK when a rank that gets no result got an empty Tensor().
  absl::Status CheckNoResult(const Tensor& got, absl::string_view what) {
    if (got.num_bytes() == 0 && got.shape() == std::vector<int64_t>{0}) {
      return absl::OkStatus();
    }
    return absl::FailedPreconditionError(absl::StrCat(
        what, ": rank ", rank_, " is not the root and got ",
        DataTypeName(got.dtype()), " ", ShapeText(got.shape()),
        ", want an empty Tensor()"));
  }

  // Reduce from every root: out of place (the input on read-only pages),
  // then in place (a non-root's buffer must keep its bytes).
  absl::Status Reduce(int64_t bytes, uint64_t seed) {
    for (OpDtype p : {OpDtype{ReduceOp::kSum, DataType::kFloat32},
                      OpDtype{ReduceOp::kMax, DataType::kInt64},
                      OpDtype{ReduceOp::kAvg, DataType::kBFloat16},
                      OpDtype{ReduceOp::kBitOr, DataType::kBool}}) {
      if (!Wanted(p.dtype) || !Wanted(p.op)) continue;
      const int64_t n = ElementsFor(bytes, p.dtype);
      const std::vector<int64_t> shape = ShapeFor(n);
      for (int root = 0; root < world_size_; ++root) {
        const uint64_t s = Mix64(seed * 61 + static_cast<uint64_t>(p.op) * 13 +
                                 static_cast<uint64_t>(p.dtype) * 5 + root);
        const std::string what = absl::StrCat(
            "reduce ", ReduceOpName(p.op), " ", DataTypeName(p.dtype), " ",
            ShapeText(shape), " root ", root);
        const std::vector<uint8_t> input =
            ClosedFormInput(p.op, p.dtype, rank_, n, s);
        const std::vector<uint8_t> want =
            ClosedFormExpected(p.op, p.dtype, all_, n, s);
        absl::StatusOr<ReadOnlyBuffer> in = ReadOnly(input);
        if (!in.ok()) return in.status();
        REDUCER_RETURN_IF_ERROR(CheckRooted(
            client_->Reduce(TensorView(in->data(), p.dtype, shape), p.op, root,
                            Call()),
            root, p.dtype, shape, want.data(), what + " out of place"));
        std::vector<uint8_t> inout = input;
        absl::Status ip = client_->ReduceInPlace(
            MutableTensorView(inout.data(), p.dtype, shape), p.op, root,
            Call());
        if (!ip.ok()) return Annotate(ip, what + " in place");
        REDUCER_RETURN_IF_ERROR(Wrong(CheckedElements(
            p.dtype, inout.data(), rank_ == root ? want.data() : input.data(),
            n,
            what + (rank_ == root ? " in place"
                                  : " in place (a non-root's buffer)"))));
      }
    }
    return absl::OkStatus();
  }

  // Gather to every root: rank r sends rows0 + r rows (uneven dim 0).
  absl::Status Gather(int64_t bytes, uint64_t seed) {
    for (DataType dtype :
         WantedOf({DataType::kFloat32, DataType::kInt8, DataType::kFloat64})) {
      constexpr int64_t kCols = 3;
      const int64_t rows0 = RowsFor(bytes, dtype, kCols);
      for (int root = 0; root < world_size_; ++root) {
        const uint64_t s =
            Mix64(seed * 37 + static_cast<uint64_t>(dtype) * 3 + root);
        const Stacked stacked = Stack(dtype, rows0, kCols, s);
        absl::StatusOr<ReadOnlyBuffer> in = ReadOnly(stacked.mine);
        if (!in.ok()) return in.status();
        const std::string what =
            absl::StrCat("gather ", DataTypeName(dtype), " ",
                         ShapeText(stacked.shape), " root ", root);
        REDUCER_RETURN_IF_ERROR(CheckRooted(
            client_->Gather(TensorView(in->data(), dtype, stacked.shape), root,
                            Call()),
            root, dtype, stacked.all_shape, stacked.all.data(), what));
      }
    }
    return absl::OkStatus();
  }

  // Scatter from every root: the root's [rows, 2] (rows a multiple of the
  // world size, about `bytes` in all) cut in world-size parts; non-roots
  // pass TensorView().
  absl::Status Scatter(int64_t bytes, uint64_t seed) {
    for (DataType dtype :
         WantedOf({DataType::kFloat32, DataType::kInt64, DataType::kBool})) {
      const std::vector<int64_t> shape = CutShape(bytes, dtype, 2);
      const std::vector<int64_t> part_shape = PartShape(shape);
      for (int root = 0; root < world_size_; ++root) {
        const uint64_t s =
            Mix64(seed * 43 + static_cast<uint64_t>(dtype) * 3 + root);
        const std::vector<uint8_t> all =
            MovedBytes(dtype, root, Elements(shape), s);
        const std::vector<uint8_t> want = Part(all, rank_);
        absl::StatusOr<ReadOnlyBuffer> in = ReadOnly(all);
        if (!in.ok()) return in.status();
        const std::string what =
            absl::StrCat("scatter ", DataTypeName(dtype), " ", ShapeText(shape),
                         " root ", root);
        REDUCER_RETURN_IF_ERROR(CheckCall(
            client_->Scatter(rank_ == root
                                 ? TensorView(in->data(), dtype, shape)
                                 : TensorView(),
                             root, Call()),
            dtype, part_shape, want.data(), what));
      }
    }
    return absl::OkStatus();
  }

  // AllToAll: every rank sends [rows, 3] (rows a multiple of the world
  // size); rank j gets part j of every rank, in rank order.
  absl::Status AllToAll(int64_t bytes, uint64_t seed) {
    for (DataType dtype :
         WantedOf({DataType::kFloat32, DataType::kInt8, DataType::kFloat16})) {
      const std::vector<int64_t> shape = CutShape(bytes, dtype, 3);
      const uint64_t s = Mix64(seed * 47 + static_cast<uint64_t>(dtype));
      absl::StatusOr<ReadOnlyBuffer> in =
          ReadOnly(MovedBytes(dtype, rank_, Elements(shape), s));
      if (!in.ok()) return in.status();
      const std::vector<uint8_t> want = Exchanged(dtype, Elements(shape), s);
      const std::string what =
          absl::StrCat("alltoall ", DataTypeName(dtype), " ", ShapeText(shape));
      REDUCER_RETURN_IF_ERROR(CheckCall(
          client_->AllToAll(TensorView(in->data(), dtype, shape), Call()),
          dtype, shape, want.data(), what));
    }
    return absl::OkStatus();
  }

  // AllToAllV over groups of g = 2, 3 and every rank (ranks 0..g-1 when g
  // is even, the last g ranks when odd; the others sit it out): group rank
  // i sends Rows(i, j) = p(i, j) x unit rows of [rows, 3] to group rank j,
  // p(i, j) = (7i + 3j + seed + g) % 4, so that a quarter of the pairs send
  // no row, and unit sized for about `bytes` per rank (0 for no bytes). Each
  // group runs the blocking form, the form with recv_rows (what each rank
  // sends this one: the pairwise check passes), and the asynchronous form,
  // in float32 and int8; then every rank exchanges no row at all. What rank
  // j must get is cut here, row by row, from every sender's closed-form
  // input.
  absl::Status AllToAllV(int64_t bytes, uint64_t seed) {
    constexpr int64_t kCols = 3;
    std::vector<int> sizes;
    for (int g : {2, 3, world_size_}) {
      if (g <= world_size_ && std::find(sizes.begin(), sizes.end(), g) ==
                                  sizes.end()) {
        sizes.push_back(g);
      }
    }
    for (int g : sizes) {
      std::vector<int> group;
      for (int k = 0; k < g; ++k) {
        group.push_back(g % 2 == 0 ? k : world_size_ - g + k);
      }
      const auto at = std::find(group.begin(), group.end(), rank_);
      const int me = at == group.end() ? -1 : static_cast<int>(at - group.begin());
      for (DataType dtype : WantedOf({DataType::kFloat32, DataType::kInt8})) {
        const int64_t row_bytes = kCols * static_cast<int64_t>(ElementSize(dtype));
        const int64_t unit = (bytes + row_bytes * g - 1) / (row_bytes * g);
        auto rows = [&](int i, int j) {
          return static_cast<int64_t>((7 * i + 3 * j + seed + g) % 4) * unit;
        };
        const uint64_t s = Mix64(seed * 89 + static_cast<uint64_t>(dtype) * 7 +
                                 static_cast<uint64_t>(g));
        auto input_of = [&](int i) {
          int64_t n = 0;
          for (int j = 0; j < g; ++j) n += rows(i, j);
          return MovedBytes(dtype, group[i], n * kCols, s);
        };
        // Three calls of the step for every rank, members or not, so that
        // named steps name them alike.
        CallOptions calls[3] = {Call(), Call(), Call()};
        if (me < 0) continue;
        for (CallOptions& call : calls) {
          if (g != world_size_) call.group = group;
        }
        std::vector<int64_t> send, recv;
        int64_t total = 0;
        for (int k = 0; k < g; ++k) {
          send.push_back(rows(me, k));
          recv.push_back(rows(k, me));
          total += rows(k, me);
        }
        std::vector<uint8_t> want;
        const size_t esize = ElementSize(dtype);
        for (int i = 0; i < g; ++i) {
          int64_t before = 0;
          for (int k = 0; k < me; ++k) before += rows(i, k);
          const std::vector<uint8_t> theirs = input_of(i);
          want.insert(want.end(), theirs.begin() + before * kCols * esize,
                      theirs.begin() + (before + rows(i, me)) * kCols * esize);
        }
        const std::vector<uint8_t> mine = input_of(me);
        absl::StatusOr<ReadOnlyBuffer> in = ReadOnly(mine);
        if (!in.ok()) return in.status();
        const std::vector<int64_t> in_shape = {
            static_cast<int64_t>(mine.size() / (kCols * esize)), kCols};
        const TensorView view(in->data(), dtype, in_shape);
        const std::string what =
            absl::StrCat("alltoallv ", DataTypeName(dtype), " group [",
                         absl::StrJoin(group, ","), "] sending [",
                         absl::StrJoin(send, ","), "]");
        const char* const forms[] = {"", " with recv_rows", " async"};
        for (int form = 0; form < 3; ++form) {
          absl::StatusOr<Tensor> got;
          if (form == 0) {
            got = client_->AllToAllV(view, send, calls[form]);
          } else if (form == 1) {
            got = client_->AllToAllV(view, send, recv, calls[form]);
          } else {
            got = SingleOf(client_->AllToAllVAsync(view, send, calls[form])->Wait());
          }
          const std::string context = what + forms[form];
          if (!got.ok()) return Annotate(got.status(), context);
          absl::Status c = Checked(*got, dtype, {total, kCols}, want.data(), context);
          if (!c.ok()) return Wrong(c);
        }
      }
    }
    const std::vector<int64_t> none(world_size_, 0);
    absl::StatusOr<Tensor> got = client_->AllToAllV(
        TensorView(nullptr, DataType::kFloat32, {0, kCols}), none, Call());
    if (!got.ok()) return Annotate(got.status(), "alltoallv of no row");
    return Wrong(Checked(*got, DataType::kFloat32, {0, kCols}, nullptr,
                         "alltoallv of no row"));
  }

  // ReceiveAny: rank d = seed % world size receives, every other rank
  // sends. Message k of source s with tag t is float32 [n + 2]: s, k, then
  // n closed-form values of (s, t, k), so the receiver knows which it got
  // and checks all of it.
  //  tag 11  every source sends 2; d calls ReceiveAny 2 (W - 1) times: each
  //          names its sender as *source, and a source's messages come in
  //          their order, each once;
  //  tag 12  every source sends 3; d calls ReceiveAny (from s0), then
  //          Receive(s0), which must be s0's next message, then ReceiveAny
  //          again, then Receives from every source for the rest, in order;
  //  tag 13  every source sends 1, and the one after d 3; d starts two
  //          ReceiveAnyAsync, then ReceiveAsync from that source (while the
  //          two are unanswered, so reducerd matches it too: it gets that
  //          source's first message the two did not take), then
  //          ReceiveAnyAsync for the rest, and waits in reverse order:
  //          every message once, each source's in the order of the calls,
  //          ReceiveAnyAsync's source() its sender's.
  // Received messages go into the digest in (tag, source, k) order, the
  // same whatever order they came in.
  absl::Status ReceiveAnyCheck(int64_t bytes, uint64_t seed) {
    const int d = static_cast<int>(seed % static_cast<uint64_t>(world_size_));
    const int first = (d + 1) % world_size_;
    const int64_t n = ElementsFor(bytes, DataType::kFloat32);
    auto message = [&](int source, int tag, int k) {
      std::vector<uint8_t> out(2 * sizeof(float));
      const float head[2] = {static_cast<float>(source), static_cast<float>(k)};
      std::memcpy(out.data(), head, sizeof(head));
      const std::vector<uint8_t> body = MovedBytes(
          DataType::kFloat32, source, n,
          Mix64(seed * 97 + static_cast<uint64_t>(tag) * 13 + k));
      out.insert(out.end(), body.begin(), body.end());
      return out;
    };
    const std::vector<int64_t> shape = {n + 2};
    if (rank_ != d) {
      const int counts[][2] = {{11, 2}, {12, 3}, {13, rank_ == first ? 3 : 1}};
      for (const auto& [tag, count] : counts) {
        for (int k = 0; k < count; ++k) {
          absl::StatusOr<ReadOnlyBuffer> in = ReadOnly(message(rank_, tag, k));
          if (!in.ok()) return in.status();
          absl::Status sent = client_->Send(
              TensorView(in->data(), DataType::kFloat32, shape), d, tag,
              P2pCall());
          if (!sent.ok()) {
            return Annotate(sent, absl::StrCat("send ", k, " tag ", tag, " to ", d));
          }
        }
      }
      return absl::OkStatus();
    }
    // Received messages by (tag, source, k), for the digest.
    std::map<std::tuple<int, int, int>, Tensor> received;
    // Identifies a received message: its source and k, checked against
    // `source` (the one reported or asked for) and its whole closed form.
    auto identify = [&](const Tensor& got, int tag, int source,
                        const std::string& what) -> absl::StatusOr<int> {
      if (got.dtype() != DataType::kFloat32 || got.shape() != shape) {
        return Wrong(absl::FailedPreconditionError(absl::StrCat(
            what, ": got ", DataTypeName(got.dtype()), " ",
            ShapeText(got.shape()), ", want float32 ", ShapeText(shape))));
      }
      const float* head = got.values<float>().data();
      const int s = static_cast<int>(head[0]);
      const int k = static_cast<int>(head[1]);
      if (s != source || k < 0 || k > 2) {
        return Wrong(absl::FailedPreconditionError(absl::StrCat(
            what, ": got message ", k, " of rank ", s, " as rank ", source,
            "'s")));
      }
      const std::vector<uint8_t> want = message(s, tag, k);
      absl::Status c = CompareElements(DataType::kFloat32, got.data(),
                                       want.data(), n + 2, what);
      if (!c.ok()) return Wrong(c);
      if (!received.emplace(std::make_tuple(tag, s, k), got).second) {
        return Wrong(absl::FailedPreconditionError(absl::StrCat(
            what, ": message ", k, " of rank ", s, " with tag ", tag,
            " came twice")));
      }
      return k;
    };
    std::vector<int> next(world_size_, 0);  // per source, its next message
    auto in_order = [&](int tag, int source, int k,
                        const std::string& what) -> absl::Status {
      if (k != next[source]) {
        return Wrong(absl::FailedPreconditionError(absl::StrCat(
            what, ": got message ", k, " of rank ", source, " with tag ", tag,
            ", but its message ", next[source], " was not received yet")));
      }
      ++next[source];
      return absl::OkStatus();
    };
    auto receive_any = [&](int tag, const std::string& what)
        -> absl::StatusOr<int> {
      int source = -1;
      absl::StatusOr<Tensor> got = client_->ReceiveAny(tag, &source, P2pCall());
      if (!got.ok()) return Annotate(got.status(), what);
      if (source < 0 || source >= world_size_ || source == d) {
        return Wrong(absl::FailedPreconditionError(
            absl::StrCat(what, ": its source is ", source)));
      }
      absl::StatusOr<int> k = identify(*got, tag, source, what);
      if (!k.ok()) return k.status();
      REDUCER_RETURN_IF_ERROR(in_order(tag, source, *k, what));
      return source;
    };
    auto receive = [&](int tag, int source, const std::string& what) -> absl::Status {
      absl::StatusOr<Tensor> got = client_->Receive(source, tag, P2pCall());
      if (!got.ok()) return Annotate(got.status(), what);
      absl::StatusOr<int> k = identify(*got, tag, source, what);
      if (!k.ok()) return k.status();
      return in_order(tag, source, *k, what);
    };
    // Tag 11.
    for (int i = 0; i < 2 * (world_size_ - 1); ++i) {
      absl::StatusOr<int> s = receive_any(11, absl::StrCat("tag 11 receive any ", i));
      if (!s.ok()) return s.status();
    }
    for (int r = 0; r < world_size_; ++r) {
      if (r != d && next[r] != 2) {
        return Wrong(absl::FailedPreconditionError(absl::StrCat(
            "tag 11: ", next[r], " messages of rank ", r, " came, want 2")));
      }
    }
    // Tag 12.
    std::fill(next.begin(), next.end(), 0);
    absl::StatusOr<int> s0 = receive_any(12, "tag 12 receive any 0");
    if (!s0.ok()) return s0.status();
    REDUCER_RETURN_IF_ERROR(receive(12, *s0, absl::StrCat(
        "tag 12 receive from rank ", *s0, " after receive any named it")));
    absl::StatusOr<int> s1 = receive_any(12, "tag 12 receive any 1");
    if (!s1.ok()) return s1.status();
    for (int r = 0; r < world_size_; ++r) {
      while (r != d && next[r] < 3) {
        REDUCER_RETURN_IF_ERROR(receive(
            12, r, absl::StrCat("tag 12 receive ", next[r], " from rank ", r)));
      }
    }
    // Tag 13: world size + 1 messages in all.
    std::fill(next.begin(), next.end(), 0);
    std::vector<std::unique_ptr<CollectiveHandle>> handles;
    handles.push_back(client_->ReceiveAnyAsync(13, P2pCall()));
    handles.push_back(client_->ReceiveAnyAsync(13, P2pCall()));
    handles.push_back(client_->ReceiveAsync(first, 13, P2pCall()));
    while (static_cast<int>(handles.size()) < world_size_ + 1) {
      handles.push_back(client_->ReceiveAnyAsync(13, P2pCall()));
    }
    std::vector<absl::StatusOr<Tensor>> got(handles.size());
    for (size_t i = handles.size(); i-- > 0;) got[i] = SingleOf(handles[i]->Wait());
    for (size_t i = 0; i < handles.size(); ++i) {
      const std::string what = absl::StrCat("tag 13 async receive ", i);
      if (!got[i].ok()) return Annotate(got[i].status(), what);
      const int source = i == 2 ? first : handles[i]->source();
      if (i == 2 && handles[i]->source() != -1) {
        return Wrong(absl::FailedPreconditionError(absl::StrCat(
            what, ": a Receive's handle says source ", handles[i]->source())));
      }
      if (source < 0 || source >= world_size_ || source == d) {
        return Wrong(absl::FailedPreconditionError(
            absl::StrCat(what, ": its source is ", source)));
      }
      absl::StatusOr<int> k = identify(*got[i], 13, source, what);
      if (!k.ok()) return k.status();
      REDUCER_RETURN_IF_ERROR(in_order(13, source, *k, what));
    }
    for (const auto& [key, tensor] : received) {
      Record(tensor.data(), tensor.num_bytes());
    }
    return absl::OkStatus();
  }

  // BroadcastInPlaceAsync, ReduceInPlaceAsync and ReceiveInPlaceAsync (of
  // a SendAsync around the ring) all in flight at once, waited for in
  // reverse order; each buffer then holds the closed form of its result,
  // a non-root's ReduceInPlace buffer its own input, unwritten.
  absl::Status AsyncInPlaceKinds(int64_t bytes, uint64_t seed) {
    const DataType dtype = DataType::kFloat32;
    const int64_t n = ElementsFor(bytes, dtype);
    const uint64_t s = Mix64(seed * 79 + 3);
    const int broadcast_root =
        static_cast<int>(seed % static_cast<uint64_t>(world_size_));
    const int reduce_root =
        static_cast<int>((seed + 1) % static_cast<uint64_t>(world_size_));
    const bool ring = world_size_ > 1;
    const int next = (rank_ + 1) % world_size_;
    const int prev = (rank_ + world_size_ - 1) % world_size_;
    // Every buffer starts as this rank's own bytes, which only the root's
    // broadcast, the reduction and the received message may replace.
    std::vector<uint8_t> broadcast = MovedBytes(dtype, rank_, n, s);
    std::vector<uint8_t> reduce =
        ClosedFormInput(ReduceOp::kSum, dtype, rank_, n, s + 1);
    const std::vector<uint8_t> reduce_input = reduce;
    std::vector<uint8_t> received = MovedBytes(dtype, rank_, n, s + 3);
    absl::StatusOr<ReadOnlyBuffer> message =
        ReadOnly(MovedBytes(dtype, rank_, n, s + 2));
    if (!message.ok()) return message.status();
    std::vector<std::unique_ptr<CollectiveHandle>> handles;
    handles.push_back(client_->BroadcastInPlaceAsync(
        MutableTensorView(broadcast.data(), dtype, ShapeFor(n)), broadcast_root,
        Call()));
    handles.push_back(client_->ReduceInPlaceAsync(
        MutableTensorView(reduce.data(), dtype, ShapeFor(n)), ReduceOp::kSum,
        reduce_root, Call()));
    if (ring) {
      handles.push_back(
          client_->SendAsync(TensorView(message->data(), dtype, ShapeFor(n)),
                             next, 21, P2pCall()));
      handles.push_back(client_->ReceiveInPlaceAsync(
          MutableTensorView(received.data(), dtype, ShapeFor(n)), prev, 21,
          P2pCall()));
    }
    const char* const whats[] = {"async broadcast in place",
                                 "async reduce in place", "async send",
                                 "async receive in place"};
    std::vector<absl::StatusOr<std::vector<Tensor>>> got;
    absl::Status waited = WaitInReverse(handles, whats, got);
    if (!waited.ok()) return waited;
    for (size_t i = 0; i < got.size(); ++i) {
      if (!got[i]->empty()) {
        return Wrong(absl::InternalError(
            absl::StrCat(whats[i], ": Wait() gave ", got[i]->size(),
                         " tensors, want none")));
      }
    }
    absl::Status c = CheckedElements(
        dtype, broadcast.data(), MovedBytes(dtype, broadcast_root, n, s).data(),
        n, whats[0]);
    if (!c.ok()) return Wrong(c);
    const std::vector<uint8_t> reduced =
        rank_ == reduce_root
            ? ClosedFormExpected(ReduceOp::kSum, dtype, all_, n, s + 1)
            : reduce_input;
    c = CheckedElements(dtype, reduce.data(), reduced.data(), n, whats[1]);
    if (!c.ok()) return Wrong(c);
    if (!ring) return absl::OkStatus();
    c = CheckedElements(dtype, received.data(),
                        MovedBytes(dtype, prev, n, s + 2).data(), n, whats[3]);
    return Wrong(c);
  }

  // ReduceAsync, GatherAsync, ScatterAsync and AllToAllAsync all in flight
  // at once, waited for in reverse order: a non-root's Reduce and Gather
  // handles yield no tensor.
  absl::Status AsyncRootedKinds(int64_t bytes, uint64_t seed) {
    const DataType dtype = DataType::kFloat32;
    const int64_t n = ElementsFor(bytes, dtype);
    const uint64_t s = Mix64(seed * 83 + 5);
    const int root =
        static_cast<int>((seed + 1) % static_cast<uint64_t>(world_size_));
    const bool is_root = rank_ == root;
    const std::vector<int64_t> cut_shape = CutShape(bytes, dtype, 1);
    const int64_t rows = cut_shape[0];
    absl::StatusOr<ReadOnlyBuffer> reduce =
        ReadOnly(ClosedFormInput(ReduceOp::kSum, dtype, rank_, n, s));
    const Stacked gathered = Stack(dtype, 1, 2, s + 1);
    absl::StatusOr<ReadOnlyBuffer> gather = ReadOnly(gathered.mine);
    absl::StatusOr<ReadOnlyBuffer> scatter =
        ReadOnly(MovedBytes(dtype, root, rows, s + 2));
    absl::StatusOr<ReadOnlyBuffer> alltoall =
        ReadOnly(MovedBytes(dtype, rank_, rows, s + 3));
    for (const absl::StatusOr<ReadOnlyBuffer>* b :
         {&reduce, &gather, &scatter, &alltoall}) {
      if (!b->ok()) return b->status();
    }
    std::vector<std::unique_ptr<CollectiveHandle>> handles;
    handles.push_back(client_->ReduceAsync(
        TensorView(reduce->data(), dtype, ShapeFor(n)), ReduceOp::kSum, root,
        Call()));
    handles.push_back(client_->GatherAsync(
        TensorView(gather->data(), dtype, gathered.shape), root, Call()));
    handles.push_back(client_->ScatterAsync(
        is_root ? TensorView(scatter->data(), dtype, cut_shape) : TensorView(),
        root, Call()));
    handles.push_back(client_->AllToAllAsync(
        TensorView(alltoall->data(), dtype, cut_shape), Call()));
    const char* const whats[] = {"async reduce", "async gather",
                                 "async scatter", "async alltoall"};
    std::vector<absl::StatusOr<std::vector<Tensor>>> got;
    absl::Status waited = WaitInReverse(handles, whats, got);
    if (!waited.ok()) return waited;
    const size_t rooted = is_root ? 1 : 0;
    if (got[0]->size() != rooted || got[1]->size() != rooted ||
        got[2]->size() != 1 || got[3]->size() != 1) {
      return Wrong(absl::InternalError(absl::StrCat(
          "async rooted results on rank ", rank_, " (root ", root, "): want ",
          rooted, ", ", rooted, ", 1, 1 tensors, got ", got[0]->size(), ", ",
          got[1]->size(), ", ", got[2]->size(), ", ", got[3]->size())));
    }
    absl::Status c = Checked(
        (*got[2])[0], dtype, PartShape(cut_shape),
        Part(MovedBytes(dtype, root, rows, s + 2), rank_).data(), whats[2]);
    if (!c.ok()) return Wrong(c);
    c = Checked((*got[3])[0], dtype, cut_shape,
                Exchanged(dtype, rows, s + 3).data(), whats[3]);
    if (!c.ok()) return Wrong(c);
    if (!is_root) return absl::OkStatus();
    c = Checked((*got[0])[0], dtype, ShapeFor(n),
                ClosedFormExpected(ReduceOp::kSum, dtype, all_, n, s).data(),
                whats[0]);
    if (!c.ok()) return Wrong(c);
    return Wrong(Checked((*got[1])[0], dtype, gathered.all_shape,
                         gathered.all.data(), whats[1]));
  }

  Client* const client_;  // not owned
  const int rank_;
  const int world_size_;
  const std::string scratch_dir_;
  std::vector<int> all_;
  bool wrong_result_ = false;
  std::string dtype_filter_;  // the step's dtype=, op=, name=
  std::string op_filter_;
  std::string name_;
  int calls_ = 0;             // calls the step has made so far
  uint64_t digest_ = 0;
};

void Emit(const std::string& line) {
  std::fprintf(stdout, "%s\n", line.c_str());
  std::fflush(stdout);
}

void Report(const std::string& index, const std::string& verb,
            absl::Time start, const absl::Status& status,
            const std::string& check, const std::string& detail) {
  std::string msg = check == "bad"
                        ? absl::StrCat(status.message(), " | CHECK: ", detail)
                        : std::string(status.message());
  absl::StrReplaceAll({{"\n", " "}}, &msg);
  Emit(absl::StrCat("RESULT ", index, " ", verb,
                    " code=", absl::StatusCodeToString(status.code()),
                    " ms=", absl::ToInt64Milliseconds(absl::Now() - start),
                    " check=", check, " msg=", msg));
  if (check == "bad") {
    std::fprintf(stderr, "step %s %s: CHECK FAILED: %s\n", index.c_str(),
                 verb.c_str(), detail.c_str());
  }
}

int Run(const ClientOptions& options, const std::string& scratch_dir,
        const std::vector<Step>& steps) {
  Emit("BEGIN 0 connect");
  absl::Time start = absl::Now();
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(options);
  Report("0", "connect", start, client.status(), "none", "");
  if (!client.ok()) return 0;
  for (size_t i = 0; i < steps.size(); ++i) {
    const Step& step = steps[i];
    const std::string index = absl::StrCat(i + 1);
    int64_t bytes = 0;
    auto it = step.args.find("bytes");
    if (it != step.args.end() && !absl::SimpleAtoi(it->second, &bytes)) {
      std::fprintf(stderr, "conformance_worker: bytes=%s is not an integer\n",
                   it->second.c_str());
      return 2;
    }
    Emit(absl::StrCat("BEGIN ", index, " ", step.verb));
    start = absl::Now();
    Checks checks(client->get(), options.rank, options.world_size, scratch_dir);
    const Outcome out = checks.Run(step.verb, bytes, i + 1, step);
    if (!out.mismatch.empty()) {
      Report(index, step.verb, start, absl::OkStatus(), "bad", out.mismatch);
    } else {
      Report(index, step.verb, start, out.status, out.status.ok() ? "ok" : "none",
             "");
      if (out.status.ok()) {
        Emit(absl::StrFormat("DIGEST %s %016x", index, checks.digest()));
      }
    }
  }
  return 0;
}

}  // namespace
}  // namespace testing
}  // namespace reducer

int main(int argc, char** argv) {
  const reducer::ClientOptions options =
      reducer::testing::ParseWorkerFlags(argc, argv, /*default_timeout_s=*/30);
  const std::optional<std::vector<reducer::testing::Step>> steps =
      reducer::testing::MainScript("conformance_worker", options.job,
                                   absl::GetFlag(FLAGS_steps));
  if (!steps.has_value()) return 2;
  return reducer::testing::Run(options, absl::GetFlag(FLAGS_scratch_dir),
                               *steps);
}
