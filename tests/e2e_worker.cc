// e2e_worker: one rank of Reducer's multi-process end-to-end tests.
//
// It connects to reducerd (--target) as --rank of --world_size ranks of
// --job, runs --scenario, and exits 0 when every result was exactly what the
// closed form (tests/closed_form.h) says; 1 with the first mismatch or error
// on stderr; 2 for missing or inconsistent --job, --rank, --world_size. Progress goes to stderr, prefixed by the rank.
//
// Scenarios:
//   all_ops         Every collective in its out-of-place and in-place form:
//                   AllReduce for every allowed op x dtype pair and --sizes
//                   (plus --big_size, several chunks long) with the inputs on
//                   read-only pages, AllReduceInPlace compared bit for bit
//                   with it, disallowed pairs rejected, scalars,
//                   AllReduceMany, AllGather with uneven dim 0, Broadcast and
//                   BroadcastInPlace from every root, ReduceScatter, Reduce,
//                   ReduceInPlace, Gather and Scatter to and from every root,
//                   AllToAll, Barrier and concurrent named collectives. Then
//                   the even and the odd ranks run the suite again, at once,
//                   each in its own group. With --group_split=parity only
//                   the group part runs.
//   determinism     Ranks arrive in --delay_order (--delay_ms apart) at
//                   float32 all-reduces whose bits depend on summation order;
//                   the result must be the left fold in rank order, and its
//                   hash is written to --out for comparison across runs.
//   metric_sync     An Ignite-style Accuracy + loss metric synced with
//                   MetricSync: Reduce leaves the (read-only) states as they
//                   are, ReduceInPlace overwrites them with the global values.
//   async           AllReduceAsync on small inputs and one --big_size input,
//                   and AllReduceInPlaceAsync, all in flight at once with a
//                   blocking all-reduce started after them; waited for in
//                   different orders per rank and from another thread. Then
//                   Ready() (false while a rank is missing, true without
//                   Wait), a handle dropped unwaited, an idle pause, and the
//                   errors a handle reports (bad input, a second Wait).
//   pipeline        Send / Receive along the ranks: rank r receives the
//                   running int64 sum from r - 1, adds its own and sends it
//                   to r + 1; the last sends the total back to rank 0.
//                   Every received value is checked against the closed
//                   form, out of place and in place.
//   duplicate_rank  --role=member ranks connect and wait until the
//                   --role=intruder process, claiming a taken rank, has been
//                   refused with ALREADY_EXISTS; then they check that their
//                   collectives still work. Handshake through files in
//                   --scratch_dir.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "client/reducer_client.h"
#include "core/data_type.h"
#include "core/tensor.h"
#include "tests/closed_form.h"
#include "tests/process_harness.h"
#include "tests/single_tensor.h"
#include "tests/worker_flags.h"

ABSL_FLAG(std::string, scenario, "",
          "all_ops | determinism | metric_sync | async | duplicate_rank");
ABSL_FLAG(std::vector<std::string>, sizes,
          std::vector<std::string>({"0", "1", "7", "1000"}),
          "all_ops: element counts run for every op x dtype pair");
ABSL_FLAG(int64_t, big_size, 786437,
          "all_ops: a size several chunks long (786437 float32 is 3 MiB plus "
          "a partial element tail); 0 for none");
ABSL_FLAG(bool, big_all_pairs, true,
          "all_ops: --big_size for every op x dtype pair; false: for kSum on "
          "every dtype and every op on float32 only");
ABSL_FLAG(int, salt, 0,
          "varies every value, so that concurrent jobs send different data");
ABSL_FLAG(std::string, group_split, "",
          "all_ops: 'parity' runs the suite only in the group of the ranks of "
          "this rank's parity, concurrently with the other group");
ABSL_FLAG(std::string, scratch_dir, "",
          "a directory shared by the ranks, for file handshakes (Barrier "
          "check, duplicate_rank)");
ABSL_FLAG(std::vector<std::string>, delay_order, {},
          "determinism: ranks in the order they should arrive");
ABSL_FLAG(int, delay_ms, 150, "determinism: delay between two arrivals");
ABSL_FLAG(std::string, out, "", "determinism: file for the result hashes");
ABSL_FLAG(bool, check_fold, true,
          "determinism: require the result to be the left fold in rank order");
ABSL_FLAG(std::string, role, "member", "duplicate_rank: member | intruder");

namespace reducer {
namespace testing {
namespace {

// How long file handshakes wait for the other side.
constexpr absl::Duration kHandshakeTimeout = absl::Seconds(30);

// Calls that must fail fast (disallowed op x dtype pairs) get this deadline,
// so that a server that waits for them instead shows up as an error.
constexpr absl::Duration kRejectTimeout = absl::Seconds(20);

// Per rank, how much later each member creates its Barrier file, so that a
// Barrier that returns early is caught.
constexpr absl::Duration kBarrierStagger = absl::Milliseconds(40);

struct SuiteOptions {
  std::vector<int64_t> sizes;
  int64_t big_size = 0;
  bool big_all_pairs = true;
};

// What a suite runs with. The members are the group's global ranks, sorted.
struct Context {
  Client* client = nullptr;  // not owned
  int rank = 0;
  int world_size = 1;
  std::vector<int> members;
  CallOptions call;  // group (empty for the whole job) and timeout
  uint64_t seed = 0;
  std::string job;
  std::string scratch_dir;
  std::string label;  // "world" or "group 0-2-4", for messages and names
  absl::Time start;

  int member_index() const {
    return static_cast<int>(
        std::find(members.begin(), members.end(), rank) - members.begin());
  }
};

void Log(const Context& ctx, absl::string_view message) {
  absl::FPrintF(stderr, "[rank %d %s +%.2fs] %s\n", ctx.rank, ctx.label,
                absl::ToDoubleSeconds(absl::Now() - ctx.start), message);
}

// `status` with `context` in front of its message, same code.
absl::Status Annotate(const absl::Status& status, absl::string_view context) {
  return absl::Status(status.code(),
                      absl::StrCat(context, ": ", status.message()));
}

absl::Status Fail(absl::string_view message) {
  return absl::FailedPreconditionError(message);
}

std::string ShapeText(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ","), "]");
}

int64_t Product(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// The shape a test uses for n elements: two dimensions for some sizes, a
// zero in a 2-D shape for the empty case.
std::vector<int64_t> ShapeFor(int64_t n) {
  if (n == 0) return {4, 0};
  if (n == 1000) return {8, 125};
  return {n};
}

// OK when `got` has `dtype`, `shape` and exactly the bytes at `want`.
absl::Status CheckTensor(const Tensor& got, DataType dtype,
                         const std::vector<int64_t>& shape, const void* want,
                         absl::string_view context) {
  if (got.dtype() != dtype || got.shape() != shape) {
    return Fail(absl::StrCat(context, ": got a ", DataTypeName(got.dtype()),
                             " tensor of shape ", ShapeText(got.shape()),
                             ", want ", DataTypeName(dtype), " ",
                             ShapeText(shape)));
  }
  const int64_t n = Product(shape);
  if (got.num_bytes() != static_cast<size_t>(n) * ElementSize(dtype)) {
    return Fail(absl::StrCat(context, ": result holds ", got.num_bytes(),
                             " bytes for ", n, " elements"));
  }
  return CompareElements(dtype, got.data(), want, n, context);
}

absl::StatusOr<ReadOnlyBuffer> ReadOnlyCopy(const std::vector<uint8_t>& bytes) {
  return ReadOnlyBuffer::Create(bytes.data(), bytes.size());
}

std::string PairText(ReduceOp op, DataType dtype) {
  return absl::StrCat(ReduceOpName(op), " ", DataTypeName(dtype));
}

// ---------------------------------------------------------------------------
// all_ops

// AllReduce out-of-place on read-only input against the closed form, then
// AllReduceInPlace on a writable copy, bit for bit against it.
absl::Status CheckOneReduction(Context& ctx, ReduceOp op, DataType dtype,
                               int64_t n) {
  const uint64_t seed = Mix64(ctx.seed ^ (static_cast<uint64_t>(op) << 8) ^
                              static_cast<uint64_t>(dtype) ^
                              (static_cast<uint64_t>(n) << 16));
  const std::vector<int64_t> shape = ShapeFor(n);
  const std::string context =
      absl::StrCat(ctx.label, " allreduce ", PairText(op, dtype), " shape ",
                   ShapeText(shape));
  const std::vector<uint8_t> input =
      ClosedFormInput(op, dtype, ctx.rank, n, seed);
  const std::vector<uint8_t> want =
      ClosedFormExpected(op, dtype, ctx.members, n, seed);

  absl::StatusOr<ReadOnlyBuffer> readonly = ReadOnlyCopy(input);
  if (!readonly.ok()) return readonly.status();
  absl::StatusOr<Tensor> result = ctx.client->AllReduce(
      TensorView(readonly->data(), dtype, shape), op, ctx.call);
  if (!result.ok()) return Annotate(result.status(), context);
  absl::Status s =
      CheckTensor(*result, dtype, shape, want.data(), context + " out-of-place");
  if (!s.ok()) return s;

  std::vector<uint8_t> inout = input;
  s = ctx.client->AllReduceInPlace(
      MutableTensorView(inout.data(), dtype, shape), op, ctx.call);
  if (!s.ok()) return Annotate(s, context + " in-place");
  return CompareElements(dtype, inout.data(), result->data(), n,
                         context + ": in-place result differs from the "
                                   "out-of-place result");
}

absl::Status RunReductions(Context& ctx, const SuiteOptions& options) {
  std::vector<int64_t> sizes = options.sizes;
  if (options.big_size > 0) sizes.push_back(options.big_size);
  for (DataType dtype : kAllDataTypes) {
    for (ReduceOp op : kAllReduceOps) {
      if (!OpAllowed(op, dtype)) continue;
      for (int64_t n : sizes) {
        if (n == options.big_size && !options.big_all_pairs &&
            op != ReduceOp::kSum && dtype != DataType::kFloat32) {
          continue;
        }
        absl::Status s = CheckOneReduction(ctx, op, dtype, n);
        if (!s.ok()) return s;
      }
    }
    Log(ctx, absl::StrCat("allreduce ", DataTypeName(dtype), " ok"));
  }
  return absl::OkStatus();
}

// Every op x dtype pair the API forbids answers INVALID_ARGUMENT, in both
// forms, and the in-place buffer keeps its bytes.
absl::Status RunDisallowedPairs(Context& ctx) {
  CallOptions call = ctx.call;
  call.timeout = kRejectTimeout;
  for (DataType dtype : kAllDataTypes) {
    for (ReduceOp op : kAllReduceOps) {
      if (OpAllowed(op, dtype)) continue;
      const std::string context =
          absl::StrCat(ctx.label, " allreduce ", PairText(op, dtype));
      std::vector<uint8_t> bytes(3 * ElementSize(dtype));
      for (size_t i = 0; i < bytes.size(); ++i) {
        bytes[i] = static_cast<uint8_t>(0x30 + i);
      }
      absl::StatusOr<Tensor> result =
          ctx.client->AllReduce(TensorView(bytes.data(), dtype, {3}), op, call);
      if (result.status().code() != absl::StatusCode::kInvalidArgument) {
        return Fail(absl::StrCat(context, ": want INVALID_ARGUMENT, got ",
                                 result.status().ToString()));
      }
      const std::vector<uint8_t> before = bytes;
      absl::Status s = ctx.client->AllReduceInPlace(
          MutableTensorView(bytes.data(), dtype, {3}), op, call);
      if (s.code() != absl::StatusCode::kInvalidArgument) {
        return Fail(absl::StrCat(context, " in-place: want INVALID_ARGUMENT, got ",
                                 s.ToString()));
      }
      if (bytes != before) {
        return Fail(absl::StrCat(context, " in-place failed but changed the "
                                          "caller's buffer"));
      }
    }
  }
  Log(ctx, "disallowed op x dtype pairs rejected");
  return absl::OkStatus();
}

absl::Status RunScalars(Context& ctx) {
  const std::string context = absl::StrCat(ctx.label, " scalar allreduce");
  struct DoubleCase {
    ReduceOp op;
    double (*value)(int rank);
  };
  const DoubleCase double_cases[] = {
      {ReduceOp::kSum, [](int r) { return (r + 1) * 0.5; }},
      {ReduceOp::kMax, [](int r) { return r * 1.25 - 3.0; }},
      {ReduceOp::kMin, [](int r) { return 7.0 - r * 0.75; }},
      {ReduceOp::kAvg, [](int r) { return r + 1.0; }},
      {ReduceOp::kProduct, [](int r) { return r % 2 == 0 ? 2.0 : -0.5; }},
  };
  for (const DoubleCase& c : double_cases) {
    double want = c.op == ReduceOp::kProduct ? 1.0 : 0.0;
    bool first = true;
    for (int r : ctx.members) {
      const double v = c.value(r);
      switch (c.op) {
        case ReduceOp::kMax: want = first ? v : std::max(want, v); break;
        case ReduceOp::kMin: want = first ? v : std::min(want, v); break;
        case ReduceOp::kProduct: want *= v; break;
        default: want += v; break;
      }
      first = false;
    }
    if (c.op == ReduceOp::kAvg) want /= static_cast<double>(ctx.members.size());
    const double mine = c.value(ctx.rank);
    absl::StatusOr<double> got = ctx.client->AllReduce(mine, c.op, ctx.call);
    const std::string what =
        absl::StrCat(context, " ", ReduceOpName(c.op), " float64");
    if (!got.ok()) return Annotate(got.status(), what);
    if (std::memcmp(&*got, &want, sizeof(want)) != 0) {
      return Fail(absl::StrFormat("%s: got %.17g, want %.17g", what, *got, want));
    }
    if (mine != c.value(ctx.rank)) return Fail(what + ": input changed");
  }

  struct IntCase {
    ReduceOp op;
    int64_t (*value)(int rank);
  };
  const IntCase int_cases[] = {
      {ReduceOp::kSum, [](int r) { return (r + 1) * int64_t{1000000000000} + r; }},
      // Wraps: the sum of several values near INT64_MAX.
      {ReduceOp::kSum,
       [](int r) { return std::numeric_limits<int64_t>::max() - r; }},
      {ReduceOp::kProduct, [](int r) { return int64_t{r + 2}; }},
      {ReduceOp::kMin, [](int r) { return int64_t{-7} * (r + 1); }},
      {ReduceOp::kMax, [](int r) { return int64_t{-7} * (r + 1); }},
      {ReduceOp::kBitXor,
       [](int r) { return (int64_t{1} << (r % 62)) | (int64_t{r} << 40); }},
      {ReduceOp::kBitAnd, [](int r) { return ~(int64_t{1} << r); }},
      {ReduceOp::kBitOr, [](int r) { return int64_t{1} << (2 * r); }},
  };
  for (const IntCase& c : int_cases) {
    std::vector<int64_t> values;
    for (int r : ctx.members) values.push_back(c.value(r));
    const int64_t want = static_cast<int64_t>(ReduceIntegers(c.op, values));
    const int64_t mine = c.value(ctx.rank);
    absl::StatusOr<int64_t> got = ctx.client->AllReduce(mine, c.op, ctx.call);
    const std::string what =
        absl::StrCat(context, " ", ReduceOpName(c.op), " int64");
    if (!got.ok()) return Annotate(got.status(), what);
    if (*got != want) {
      return Fail(absl::StrCat(what, ": got ", *got, ", want ", want));
    }
  }
  Log(ctx, "scalars ok");
  return absl::OkStatus();
}

absl::Status RunAllReduceMany(Context& ctx) {
  struct Spec {
    ReduceOp op;
    DataType dtype;
    std::vector<int64_t> shape;
  };
  const std::vector<Spec> specs = {
      {ReduceOp::kSum, DataType::kFloat32, {5}},
      {ReduceOp::kMax, DataType::kInt64, {3}},
      {ReduceOp::kSum, DataType::kBFloat16, {0}},
      {ReduceOp::kBitOr, DataType::kBool, {9}},
      {ReduceOp::kAvg, DataType::kFloat64, {}},  // a 0-d tensor
      {ReduceOp::kMin, DataType::kUInt8, {1000}},
      {ReduceOp::kProduct, DataType::kFloat16, {7}},
      {ReduceOp::kBitXor, DataType::kInt32, {2, 3}},
      {ReduceOp::kAvg, DataType::kFloat32, {3, 1, 3}},
  };
  std::vector<ReadOnlyBuffer> buffers;
  std::vector<TensorView> inputs;
  std::vector<ReduceOp> ops;
  std::vector<std::vector<uint8_t>> wants;
  for (size_t k = 0; k < specs.size(); ++k) {
    const Spec& spec = specs[k];
    const int64_t n = Product(spec.shape);
    const uint64_t seed = Mix64(ctx.seed + 1000 + k);
    absl::StatusOr<ReadOnlyBuffer> buffer = ReadOnlyCopy(
        ClosedFormInput(spec.op, spec.dtype, ctx.rank, n, seed));
    if (!buffer.ok()) return buffer.status();
    buffers.push_back(*std::move(buffer));
    inputs.emplace_back(buffers.back().data(), spec.dtype, spec.shape);
    ops.push_back(spec.op);
    wants.push_back(
        ClosedFormExpected(spec.op, spec.dtype, ctx.members, n, seed));
  }
  const std::string context = absl::StrCat(ctx.label, " allreduce_many");
  {
    // A bad input is refused before anything is sent, naming its index.
    std::vector<TensorView> bad = {inputs[0], inputs[1],
                                   TensorView(nullptr, DataType::kFloat32, {4})};
    const std::vector<ReduceOp> bad_ops(bad.size(), ReduceOp::kSum);
    absl::StatusOr<std::vector<Tensor>> refused =
        ctx.client->AllReduceMany(bad, bad_ops, ctx.call);
    if (refused.status().code() != absl::StatusCode::kInvalidArgument ||
        !absl::StrContains(refused.status().message(),
                           "AllReduceMany input 2: data is null")) {
      return Fail(absl::StrCat(context, ": a null input 2 should be refused "
                               "naming it, got ", refused.status().ToString()));
    }
  }
  absl::StatusOr<std::vector<Tensor>> results =
      ctx.client->AllReduceMany(inputs, ops, ctx.call);
  if (!results.ok()) return Annotate(results.status(), context);
  if (results->size() != specs.size()) {
    return Fail(absl::StrCat(context, ": got ", results->size(),
                             " tensors, want ", specs.size()));
  }
  for (size_t k = 0; k < specs.size(); ++k) {
    absl::Status s = CheckTensor(
        (*results)[k], specs[k].dtype, specs[k].shape, wants[k].data(),
        absl::StrCat(context, " tensor ", k, " (",
                     PairText(specs[k].op, specs[k].dtype), ")"));
    if (!s.ok()) return s;
  }
  Log(ctx, "allreduce_many ok");
  return absl::OkStatus();
}

// AllGather of rows(r) x cols from rank r, concatenated in member order.
template <typename T>
absl::Status CheckAllGather(Context& ctx, DataType dtype, int64_t cols,
                            int64_t (*rows)(int rank, int first_member),
                            T (*value)(int rank, int64_t row, int64_t col,
                                       uint64_t seed),
                            absl::string_view what) {
  const int first = ctx.members.front();
  auto make = [&](int r) {
    std::vector<T> v;
    for (int64_t row = 0; row < rows(r, first); ++row) {
      for (int64_t col = 0; col < cols; ++col) {
        v.push_back(value(r, row, col, ctx.seed));
      }
    }
    return v;
  };
  const std::vector<T> mine = make(ctx.rank);
  std::vector<T> want;
  int64_t total_rows = 0;
  for (int r : ctx.members) {
    const std::vector<T> part = make(r);
    want.insert(want.end(), part.begin(), part.end());
    total_rows += rows(r, first);
  }
  absl::StatusOr<ReadOnlyBuffer> buffer =
      ReadOnlyBuffer::Create(mine.data(), mine.size() * sizeof(T));
  if (!buffer.ok()) return buffer.status();
  const std::string context = absl::StrCat(ctx.label, " allgather ", what);
  absl::StatusOr<Tensor> result = ctx.client->AllGather(
      TensorView(buffer->data(), dtype, {rows(ctx.rank, first), cols}),
      ctx.call);
  if (!result.ok()) return Annotate(result.status(), context);
  return CheckTensor(*result, dtype, {total_rows, cols}, want.data(), context);
}

absl::Status RunAllGather(Context& ctx) {
  // Rank r sends r + 1 rows of 3 int32 columns.
  absl::Status s = CheckAllGather<int32_t>(
      ctx, DataType::kInt32, 3,
      [](int r, int) -> int64_t { return r + 1; },
      [](int r, int64_t row, int64_t col, uint64_t seed) {
        return static_cast<int32_t>(r * 1000 + row * 10 + col +
                                    static_cast<int64_t>(seed % 7) * 100000);
      },
      "int32 rows=rank+1");
  if (!s.ok()) return s;
  // The first member sends no rows at all.
  s = CheckAllGather<float>(
      ctx, DataType::kFloat32, 2,
      [](int r, int first) -> int64_t { return r == first ? 0 : r % 3 + 1; },
      [](int r, int64_t row, int64_t col, uint64_t seed) {
        return static_cast<float>(r + 0.5 * row + 0.25 * col +
                                  static_cast<double>(seed % 5));
      },
      "float32 with an empty contribution");
  if (!s.ok()) return s;
  Log(ctx, "allgather ok");
  return absl::OkStatus();
}

absl::Status CheckBroadcast(Context& ctx, int root, DataType dtype,
                            const std::vector<int64_t>& shape,
                            bool non_root_passes_view) {
  const int64_t n = Product(shape);
  const uint64_t seed = Mix64(ctx.seed + 77 + static_cast<uint64_t>(root));
  // Same op and seed for every rank: the data differs only by rank, so a
  // non-root's own view must not leak into the result.
  const std::vector<uint8_t> root_data =
      ClosedFormInput(ReduceOp::kMax, dtype, root, n, seed);
  const std::vector<uint8_t> my_data =
      ClosedFormInput(ReduceOp::kMax, dtype, ctx.rank, n, seed);
  absl::StatusOr<ReadOnlyBuffer> buffer = ReadOnlyCopy(my_data);
  if (!buffer.ok()) return buffer.status();
  TensorView input;  // "no input"
  if (ctx.rank == root || non_root_passes_view) {
    input = TensorView(buffer->data(), dtype, shape);
  }
  const std::string context = absl::StrCat(
      ctx.label, " broadcast from root ", root, " of ", DataTypeName(dtype),
      " ", ShapeText(shape),
      ctx.rank == root           ? ""
      : non_root_passes_view     ? " (non-root passes a matching view)"
                                 : " (non-root passes TensorView())");
  absl::StatusOr<Tensor> result = ctx.client->Broadcast(input, root, ctx.call);
  if (!result.ok()) return Annotate(result.status(), context);
  return CheckTensor(*result, dtype, shape, root_data.data(), context);
}

absl::Status RunBroadcast(Context& ctx, int64_t big_size) {
  for (int root : ctx.members) {
    const DataType dtype = kAllDataTypes[root % std::size(kAllDataTypes)];
    for (bool non_root_passes_view : {false, true}) {
      absl::Status s =
          CheckBroadcast(ctx, root, dtype, {3, 5}, non_root_passes_view);
      if (!s.ok()) return s;
    }
  }
  absl::Status s =
      CheckBroadcast(ctx, ctx.members.front(), DataType::kFloat32, {0, 4}, false);
  if (!s.ok()) return s;
  if (big_size > 0) {
    s = CheckBroadcast(ctx, ctx.members.back(), DataType::kFloat32, {big_size},
                       false);
    if (!s.ok()) return s;
  }
  Log(ctx, "broadcast ok");
  return absl::OkStatus();
}

absl::Status RunBroadcastInPlace(Context& ctx) {
  for (int root : ctx.members) {
    const DataType dtype = kAllDataTypes[(root + 3) % std::size(kAllDataTypes)];
    const std::vector<int64_t> shape = {257};
    const uint64_t seed = Mix64(ctx.seed + 555 + static_cast<uint64_t>(root));
    const std::vector<uint8_t> root_data =
        ClosedFormInput(ReduceOp::kMin, dtype, root, 257, seed);
    std::vector<uint8_t> inout = root_data;
    if (ctx.rank != root) std::fill(inout.begin(), inout.end(), uint8_t{0xab});
    const std::string context =
        absl::StrCat(ctx.label, " broadcast_in_place from root ", root, " of ",
                     DataTypeName(dtype), " ", ShapeText(shape));
    absl::Status s = ctx.client->BroadcastInPlace(
        MutableTensorView(inout.data(), dtype, shape), root, ctx.call);
    if (!s.ok()) return Annotate(s, context);
    s = CompareElements(dtype, inout.data(), root_data.data(), 257, context);
    if (!s.ok()) return s;
  }
  Log(ctx, "broadcast_in_place ok");
  return absl::OkStatus();
}

absl::Status RunReduceScatter(Context& ctx, int64_t big_size) {
  const int64_t group = static_cast<int64_t>(ctx.members.size());
  struct Spec {
    ReduceOp op;
    DataType dtype;
    std::vector<int64_t> shape;  // dim 0 = 2 x group size
  };
  std::vector<Spec> specs = {
      {ReduceOp::kSum, DataType::kFloat32, {2 * group, 3}},
      {ReduceOp::kMax, DataType::kInt64, {2 * group}},
      {ReduceOp::kAvg, DataType::kBFloat16, {2 * group, 4}},
      {ReduceOp::kBitXor, DataType::kUInt8, {2 * group, 5}},
  };
  if (big_size > 0) {
    // Several chunks in all: each rank's slice is 2 x 512 KiB.
    specs.push_back({ReduceOp::kSum, DataType::kFloat32, {2 * group, 131072}});
  }
  const int k = ctx.member_index();
  for (size_t t = 0; t < specs.size(); ++t) {
    const Spec& spec = specs[t];
    const int64_t n = Product(spec.shape);
    const int64_t slice_elements = n / group;
    const size_t element = ElementSize(spec.dtype);
    const uint64_t seed = Mix64(ctx.seed + 9000 + t);
    const std::vector<uint8_t> full =
        ClosedFormExpected(spec.op, spec.dtype, ctx.members, n, seed);
    const uint8_t* want = full.data() + k * slice_elements * element;
    std::vector<int64_t> slice_shape = spec.shape;
    slice_shape[0] = 2;
    absl::StatusOr<ReadOnlyBuffer> buffer = ReadOnlyCopy(
        ClosedFormInput(spec.op, spec.dtype, ctx.rank, n, seed));
    if (!buffer.ok()) return buffer.status();
    const std::string context = absl::StrCat(
        ctx.label, " reduce_scatter ", PairText(spec.op, spec.dtype), " ",
        ShapeText(spec.shape), " (slice ", k, ")");
    absl::StatusOr<Tensor> result = ctx.client->ReduceScatter(
        TensorView(buffer->data(), spec.dtype, spec.shape), spec.op, ctx.call);
    if (!result.ok()) return Annotate(result.status(), context);
    absl::Status s = CheckTensor(*result, spec.dtype, slice_shape, want, context);
    if (!s.ok()) return s;
  }
  Log(ctx, "reduce_scatter ok");
  return absl::OkStatus();
}

// Reduce (out of place and in place), Gather, Scatter to and from every
// member as root, and AllToAll, small tensors. Roots are global ranks of
// the group; a non-root's Reduce and Gather give an empty Tensor(), and its
// ReduceInPlace buffer keeps its bytes.
absl::Status RunRootedKinds(Context& ctx) {
  const int64_t group = static_cast<int64_t>(ctx.members.size());
  const int k = ctx.member_index();
  auto expect_nothing = [&](const Tensor& got, const std::string& context) {
    if (got.num_bytes() == 0 && got.shape() == std::vector<int64_t>{0}) {
      return absl::OkStatus();
    }
    return Fail(absl::StrCat(context, ": a non-root got ",
                             ShapeText(got.shape()),
                             ", want an empty Tensor()"));
  };
  // Roots outside the world or the group are refused before anything is
  // sent, naming the root.
  auto expect_refused = [&](const absl::Status& got, const std::string& want,
                            const std::string& context) {
    if (got.code() == absl::StatusCode::kInvalidArgument &&
        absl::StrContains(got.message(), want)) {
      return absl::OkStatus();
    }
    return Fail(absl::StrCat(context, ": got ", got.ToString(),
                             ", want INVALID_ARGUMENT with \"", want, "\""));
  };
  const float one = 1;
  const TensorView scalar(&one, DataType::kFloat32, {1});
  absl::Status refused = expect_refused(
      ctx.client->Reduce(scalar, ReduceOp::kSum, ctx.world_size, ctx.call)
          .status(),
      absl::StrCat("Reduce: root ", ctx.world_size,
                   " is outside the world of ", ctx.world_size),
      ctx.label + " reduce to a root outside the world");
  if (!refused.ok()) return refused;
  refused = expect_refused(
      ctx.client->Scatter(scalar, ctx.members[0] == ctx.rank && group > 1
                                      ? ctx.members[1]
                                      : ctx.members[0],
                          ctx.call)
          .status(),
      "is not the root",
      ctx.label + " scatter with a tensor on a non-root");
  if (!refused.ok() && !(group == 1)) return refused;
  if (!ctx.call.group.empty() && group < ctx.world_size) {
    int outsider = 0;
    while (std::find(ctx.members.begin(), ctx.members.end(), outsider) !=
           ctx.members.end()) {
      ++outsider;
    }
    refused = expect_refused(
        ctx.client->Gather(scalar, outsider, ctx.call).status(),
        absl::StrCat("Gather: root ", outsider,
                     " is not in CallOptions.group"),
        ctx.label + " gather to a root outside the group");
    if (!refused.ok()) return refused;
  }
  for (int root : ctx.members) {
    const bool is_root = root == ctx.rank;
    const uint64_t seed = Mix64(ctx.seed + 9500 + root);
    // Reduce: float32 sum of [2 x group, 3].
    const std::vector<int64_t> shape = {2 * group, 3};
    const int64_t n = Product(shape);
    const std::vector<uint8_t> input =
        ClosedFormInput(ReduceOp::kSum, DataType::kFloat32, ctx.rank, n, seed);
    const std::vector<uint8_t> sum = ClosedFormExpected(
        ReduceOp::kSum, DataType::kFloat32, ctx.members, n, seed);
    absl::StatusOr<ReadOnlyBuffer> buffer = ReadOnlyCopy(input);
    if (!buffer.ok()) return buffer.status();
    std::string context = absl::StrCat(ctx.label, " reduce root ", root);
    absl::StatusOr<Tensor> result = ctx.client->Reduce(
        TensorView(buffer->data(), DataType::kFloat32, shape), ReduceOp::kSum,
        root, ctx.call);
    if (!result.ok()) return Annotate(result.status(), context);
    absl::Status s =
        is_root ? CheckTensor(*result, DataType::kFloat32, shape, sum.data(),
                              context)
                : expect_nothing(*result, context);
    if (!s.ok()) return s;
    std::vector<uint8_t> inout = input;
    s = ctx.client->ReduceInPlace(
        MutableTensorView(inout.data(), DataType::kFloat32, shape),
        ReduceOp::kSum, root, ctx.call);
    if (!s.ok()) return Annotate(s, context + " in place");
    s = CompareElements(DataType::kFloat32, inout.data(),
                        is_root ? sum.data() : input.data(), n,
                        context + " in place");
    if (!s.ok()) return s;

    // Gather: member i sends i + 1 rows of 2 int32.
    std::vector<uint8_t> gathered;
    for (size_t i = 0; i < ctx.members.size(); ++i) {
      const std::vector<uint8_t> part = ClosedFormInput(
          ReduceOp::kSum, DataType::kInt32, ctx.members[i],
          2 * static_cast<int64_t>(i + 1), seed + 1);
      gathered.insert(gathered.end(), part.begin(), part.end());
    }
    buffer = ReadOnlyCopy(ClosedFormInput(ReduceOp::kSum, DataType::kInt32,
                                          ctx.rank, 2 * (k + 1), seed + 1));
    if (!buffer.ok()) return buffer.status();
    context = absl::StrCat(ctx.label, " gather root ", root);
    result = ctx.client->Gather(
        TensorView(buffer->data(), DataType::kInt32, {k + 1, 2}), root,
        ctx.call);
    if (!result.ok()) return Annotate(result.status(), context);
    s = is_root ? CheckTensor(*result, DataType::kInt32,
                              {group * (group + 1) / 2, 2}, gathered.data(),
                              context)
                : expect_nothing(*result, context);
    if (!s.ok()) return s;

    // Scatter: the root's [3 x group, 2] int64, three rows per member.
    const std::vector<uint8_t> whole = ClosedFormInput(
        ReduceOp::kSum, DataType::kInt64, root, 6 * group, seed + 2);
    buffer = ReadOnlyCopy(whole);
    if (!buffer.ok()) return buffer.status();
    context = absl::StrCat(ctx.label, " scatter root ", root);
    result = ctx.client->Scatter(
        is_root ? TensorView(buffer->data(), DataType::kInt64, {3 * group, 2})
                : TensorView(),
        root, ctx.call);
    if (!result.ok()) return Annotate(result.status(), context);
    s = CheckTensor(*result, DataType::kInt64, {3, 2}, whole.data() + k * 48,
                    context);
    if (!s.ok()) return s;
  }
  // AllToAll: every member sends [2 x group, 3] float64; member j gets
  // rows [2 j, 2 j + 2) of every member, in member order.
  const uint64_t seed = Mix64(ctx.seed + 9600);
  const int64_t n = 6 * group;
  std::vector<uint8_t> exchanged;
  for (int r : ctx.members) {
    const std::vector<uint8_t> theirs =
        ClosedFormInput(ReduceOp::kSum, DataType::kFloat64, r, n, seed);
    exchanged.insert(exchanged.end(), theirs.begin() + k * 48,
                     theirs.begin() + (k + 1) * 48);
  }
  absl::StatusOr<ReadOnlyBuffer> buffer = ReadOnlyCopy(
      ClosedFormInput(ReduceOp::kSum, DataType::kFloat64, ctx.rank, n, seed));
  if (!buffer.ok()) return buffer.status();
  const std::string context = absl::StrCat(ctx.label, " alltoall");
  absl::StatusOr<Tensor> result = ctx.client->AllToAll(
      TensorView(buffer->data(), DataType::kFloat64, {2 * group, 3}),
      ctx.call);
  if (!result.ok()) return Annotate(result.status(), context);
  absl::Status s = CheckTensor(*result, DataType::kFloat64, {2 * group, 3},
                               exchanged.data(), context);
  if (!s.ok()) return s;
  Log(ctx, "reduce, gather, scatter, alltoall ok");
  return absl::OkStatus();
}

bool FileExists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }

absl::Status TouchFile(const std::string& path, absl::string_view contents) {
  std::ofstream out(path, std::ios::trunc);
  out << contents;
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

// Barrier; with --scratch_dir, proves it waited: each member writes a file
// (later members later) before calling it, and after it every member's file
// must exist.
absl::Status RunBarrier(Context& ctx) {
  const std::string context = absl::StrCat(ctx.label, " barrier");
  if (ctx.scratch_dir.empty()) {
    absl::Status s = ctx.client->Barrier(ctx.call);
    if (!s.ok()) return Annotate(s, context);
    Log(ctx, "barrier ok (unchecked: no --scratch_dir)");
    return absl::OkStatus();
  }
  auto path = [&](int r) {
    return absl::StrCat(ctx.scratch_dir, "/barrier.", ctx.job, ".",
                        absl::StrJoin(ctx.members, "-"), ".", r);
  };
  absl::SleepFor(kBarrierStagger * ctx.member_index());
  absl::Status s = TouchFile(path(ctx.rank), "arrived");
  if (!s.ok()) return s;
  s = ctx.client->Barrier(ctx.call);
  if (!s.ok()) return Annotate(s, context);
  for (int r : ctx.members) {
    if (!FileExists(path(r))) {
      return Fail(absl::StrCat(context, ": returned before rank ", r,
                               " arrived (", path(r), " missing)"));
    }
  }
  Log(ctx, "barrier ok");
  return absl::OkStatus();
}

// Two named all-reduces issued from two threads in opposite orders on
// alternate members: only matching by name pairs them up.
absl::Status RunNamed(Context& ctx) {
  absl::Mutex mu;
  std::vector<std::string> failures;  // guarded by mu
  const bool a_first = ctx.member_index() % 2 == 0;
  auto run = [&](absl::string_view name, int32_t scale, bool late) {
    if (late) absl::SleepFor(absl::Milliseconds(100));
    std::vector<int32_t> mine(16);
    std::vector<int32_t> want(16, 0);
    for (int i = 0; i < 16; ++i) {
      mine[i] = scale * (ctx.rank + 1) + i;
      for (int r : ctx.members) want[i] += scale * (r + 1) + i;
    }
    CallOptions call = ctx.call;
    call.name = absl::StrCat(ctx.label, "/", name);
    absl::StatusOr<Tensor> result = ctx.client->AllReduce(
        TensorView::Of<int32_t>(mine), ReduceOp::kSum, call);
    absl::Status s =
        result.ok()
            ? CheckTensor(*result, DataType::kInt32, {16}, want.data(),
                          absl::StrCat(ctx.label, " named allreduce ", name))
            : Annotate(result.status(),
                       absl::StrCat(ctx.label, " named allreduce ", name));
    if (!s.ok()) {
      absl::MutexLock lock(&mu);
      failures.push_back(s.ToString());
    }
  };
  std::thread a([&] { run("a", 1, !a_first); });
  std::thread b([&] { run("b", 100, a_first); });
  a.join();
  b.join();
  if (!failures.empty()) return Fail(absl::StrJoin(failures, "\n"));
  Log(ctx, "named collectives from two threads ok");
  return absl::OkStatus();
}

absl::Status RunSuite(Context& ctx, const SuiteOptions& options) {
  Log(ctx, absl::StrCat("suite starts, members ",
                        absl::StrJoin(ctx.members, ",")));
  absl::Status s = RunReductions(ctx, options);
  if (s.ok()) s = RunDisallowedPairs(ctx);
  if (s.ok()) s = RunScalars(ctx);
  if (s.ok()) s = RunAllReduceMany(ctx);
  if (s.ok()) s = RunAllGather(ctx);
  if (s.ok()) s = RunBroadcast(ctx, options.big_size);
  if (s.ok()) s = RunBroadcastInPlace(ctx);
  if (s.ok()) s = RunReduceScatter(ctx, options.big_size);
  if (s.ok()) s = RunRootedKinds(ctx);
  if (s.ok()) s = RunBarrier(ctx);
  if (s.ok()) s = RunNamed(ctx);
  return s;
}

absl::StatusOr<SuiteOptions> SuiteOptionsFromFlags() {
  SuiteOptions options;
  for (const std::string& text : absl::GetFlag(FLAGS_sizes)) {
    int64_t n;
    if (!absl::SimpleAtoi(text, &n) || n < 0) {
      return absl::InvalidArgumentError(absl::StrCat("bad --sizes entry ", text));
    }
    options.sizes.push_back(n);
  }
  options.big_size = absl::GetFlag(FLAGS_big_size);
  options.big_all_pairs = absl::GetFlag(FLAGS_big_all_pairs);
  return options;
}

std::vector<int> ParityGroup(int rank, int world_size) {
  std::vector<int> group;
  for (int r = rank % 2; r < world_size; r += 2) group.push_back(r);
  return group;
}

absl::Status RunAllOps(Context& world) {
  absl::StatusOr<SuiteOptions> options = SuiteOptionsFromFlags();
  if (!options.ok()) return options.status();
  const std::string split = absl::GetFlag(FLAGS_group_split);
  if (!split.empty() && split != "parity") {
    return absl::InvalidArgumentError("--group_split must be '' or 'parity'");
  }

  if (split.empty()) {
    absl::Status s = RunSuite(world, *options);
    if (!s.ok()) return s;
    if (world.world_size < 2) return absl::OkStatus();
  }

  // The even and the odd ranks, each in its own group, at the same time.
  Context group = world;
  group.members = ParityGroup(world.rank, world.world_size);
  group.call.group = group.members;
  group.label = absl::StrCat("group ", absl::StrJoin(group.members, "-"));
  group.seed = Mix64(world.seed ^ static_cast<uint64_t>(world.rank % 2 + 1));
  SuiteOptions group_options = *options;
  if (split.empty()) {
    // Already covered for the world; keep the group pass short.
    group_options.sizes = {0, 7, 1000};
    group_options.big_all_pairs = false;
  }
  absl::Status s = RunSuite(group, group_options);
  if (!s.ok()) return s;

  if (split.empty()) {
    // The world's call order is unaffected by the groups' collectives.
    s = RunScalars(world);
    if (!s.ok()) return s;
  }
  // No rank leaves while the other group still runs: a session that ends
  // moves the whole job to a new epoch, aborting its pending collectives.
  s = world.client->Barrier(world.call);
  if (!s.ok()) return Annotate(s, "final world barrier");
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// determinism

// A float32 value for (rank, i) spanning magnitudes 1 to 1e8 with both
// signs, so that the order of summation changes the rounded result.
float DeterminismValue(int rank, int64_t i, uint64_t seed) {
  const uint64_t h = Mix64(Mix64(seed ^ (static_cast<uint64_t>(rank) << 32)) ^
                           static_cast<uint64_t>(i));
  static constexpr float kMagnitudes[] = {1.0f, 1e2f, 1e4f, 1e6f, 1e8f};
  const float mantissa = 1.0f + static_cast<float>((h >> 40) & 0xffff) / 65536.0f;
  const float magnitude = kMagnitudes[(h >> 8) % 5];
  return (h & 1) != 0 ? -mantissa * magnitude : mantissa * magnitude;
}

absl::Status RunDeterminism(Context& ctx) {
  const std::vector<std::string> order_text = absl::GetFlag(FLAGS_delay_order);
  int position = -1;
  for (size_t p = 0; p < order_text.size(); ++p) {
    int r;
    if (!absl::SimpleAtoi(order_text[p], &r)) {
      return absl::InvalidArgumentError("bad --delay_order");
    }
    if (r == ctx.rank) position = static_cast<int>(p);
  }
  if (position < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--delay_order does not name rank ", ctx.rank));
  }
  const absl::Duration delay =
      absl::Milliseconds(absl::GetFlag(FLAGS_delay_ms)) * position;
  const std::string out_path = absl::GetFlag(FLAGS_out);
  std::string report;

  // A small tensor (one message) and one several chunks long.
  for (int64_t n : {int64_t{4099}, int64_t{600001}}) {
    const uint64_t seed = Mix64(ctx.seed + static_cast<uint64_t>(n));
    std::vector<float> mine(n);
    for (int64_t i = 0; i < n; ++i) mine[i] = DeterminismValue(ctx.rank, i, seed);
    // What the contract implies: the left fold in group-rank order. The
    // reverse fold must differ somewhere, or the test could not fail.
    std::vector<float> fold(n);
    int64_t order_sensitive = 0;
    for (int64_t i = 0; i < n; ++i) {
      float forward = 0.0f;
      for (int r = 0; r < ctx.world_size; ++r) {
        forward = r == 0 ? DeterminismValue(r, i, seed)
                         : forward + DeterminismValue(r, i, seed);
      }
      float backward = 0.0f;
      for (int r = ctx.world_size - 1; r >= 0; --r) {
        backward = r == ctx.world_size - 1
                       ? DeterminismValue(r, i, seed)
                       : backward + DeterminismValue(r, i, seed);
      }
      fold[i] = forward;
      if (std::memcmp(&forward, &backward, sizeof(float)) != 0) {
        ++order_sensitive;
      }
    }
    if (ctx.world_size >= 3 && order_sensitive == 0) {
      return absl::InternalError("test data does not depend on order");
    }

    absl::Status s = ctx.client->Barrier(ctx.call);
    if (!s.ok()) return Annotate(s, "barrier before the delayed allreduce");
    absl::SleepFor(delay);
    const std::string context =
        absl::StrCat("determinism allreduce float32 n=", n, " arriving at "
                     "position ", position);
    absl::StatusOr<Tensor> result = ctx.client->AllReduce(
        TensorView::Of<float>(mine), ReduceOp::kSum, ctx.call);
    if (!result.ok()) return Annotate(result.status(), context);
    if (result->dtype() != DataType::kFloat32 ||
        result->shape() != std::vector<int64_t>{n}) {
      return Fail(context + ": wrong dtype or shape");
    }
    if (absl::GetFlag(FLAGS_check_fold)) {
      s = CompareElements(DataType::kFloat32, result->data(), fold.data(), n,
                          context + ": result is not the left fold in rank "
                                    "order (" +
                              absl::StrCat(order_sensitive) +
                              " elements depend on order)");
      if (!s.ok()) return s;
    }
    const absl::Span<const float> v = result->values<float>();
    absl::StrAppendFormat(&report, "n=%d fnv1a64=%016x first=%.9g,%.9g,%.9g\n",
                          n, Fnv1a64(result->data(), result->num_bytes()),
                          v[0], v[1], v[2]);
    Log(ctx, absl::StrCat(context, " ok (", order_sensitive,
                          " elements depend on order)"));
  }
  if (!out_path.empty()) {
    absl::Status s = TouchFile(out_path, report);
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// metric_sync

// An Ignite-style Accuracy plus loss tracking, laid out in one block of
// memory so that it can be made read-only as a whole.
struct MetricState {
  int64_t num_correct;
  int64_t num_examples;
  double loss_sum;
  double max_batch_loss;
  int64_t confusion[3][3];
};

// One state of a MetricState as MetricSync sees it: its name, dtype,
// shape, op and memory.
struct MetricField {
  const char* name;
  DataType dtype;
  std::vector<int64_t> shape;
  ReduceOp op;
  void* data;
};

// The states of `s`, in the order they are added to a MetricSync.
std::vector<MetricField> MetricFields(MetricState& s) {
  return {
      {"_num_correct", DataType::kInt64, {1}, ReduceOp::kSum, &s.num_correct},
      {"_num_examples", DataType::kInt64, {1}, ReduceOp::kSum, &s.num_examples},
      {"loss_sum", DataType::kFloat64, {1}, ReduceOp::kSum, &s.loss_sum},
      {"max_batch_loss",
       DataType::kFloat64,
       {1},
       ReduceOp::kMax,
       &s.max_batch_loss},
      {"confusion",
       DataType::kInt64,
       {3, 3},
       ReduceOp::kSum,
       &s.confusion[0][0]},
  };
}

MetricState LocalState(int rank) {
  MetricState s;
  s.num_correct = 50 + 7 * rank;
  s.num_examples = 100 + 10 * rank;
  s.loss_sum = 12.5 + 0.25 * rank * (rank + 1);  // exact in float64
  s.max_batch_loss = 1.5 + 0.5 * ((rank * 3) % 4);
  for (int a = 0; a < 3; ++a) {
    for (int b = 0; b < 3; ++b) {
      s.confusion[a][b] = rank + 3 * a + b + (a == b ? 10 : 0);
    }
  }
  return s;
}

MetricState GlobalState(const std::vector<int>& ranks) {
  MetricState g = LocalState(ranks.front());
  for (size_t k = 1; k < ranks.size(); ++k) {
    const MetricState s = LocalState(ranks[k]);
    g.num_correct += s.num_correct;
    g.num_examples += s.num_examples;
    g.loss_sum += s.loss_sum;
    g.max_batch_loss = std::max(g.max_batch_loss, s.max_batch_loss);
    for (int a = 0; a < 3; ++a) {
      for (int b = 0; b < 3; ++b) g.confusion[a][b] += s.confusion[a][b];
    }
  }
  return g;
}

absl::Status CheckMetricValues(const MetricState& got, const MetricState& want,
                               absl::string_view context) {
  if (std::memcmp(&got, &want, sizeof(MetricState)) == 0) return absl::OkStatus();
  return Fail(absl::StrFormat(
      "%s: got correct=%d examples=%d loss_sum=%.17g max_loss=%.17g "
      "confusion[0][0]=%d, want correct=%d examples=%d loss_sum=%.17g "
      "max_loss=%.17g confusion[0][0]=%d",
      context, got.num_correct, got.num_examples, got.loss_sum,
      got.max_batch_loss, got.confusion[0][0], want.num_correct,
      want.num_examples, want.loss_sum, want.max_batch_loss,
      want.confusion[0][0]));
}

// pipeline: rank r receives the running sum from rank r - 1, adds its own
// int64 contribution (element i: (r + 1)(i + 1)) and sends it on to rank
// r + 1; the last rank sends the total back to rank 0. Rank r must receive
// r(r + 1)/2 (i + 1) (rank 0, from the last: W(W + 1)/2 (i + 1)). Pass p
// uses tag p; pass 1 receives in place.
absl::Status RunPipeline(Context& ctx) {
  const int w = ctx.world_size;
  const int r = ctx.rank;
  if (w < 2) return absl::OkStatus();
  const int next = (r + 1) % w;
  const int prev = (r + w - 1) % w;
  for (int64_t n : {int64_t{1000}, int64_t{300000}}) {
    for (int pass = 0; pass < 2; ++pass) {
      const std::string what = absl::StrCat("pipeline pass ", pass, " of ", n,
                                            " int64 at rank ", r);
      // What rank r holds after adding its own: the sum over ranks 0..r.
      auto partial = [n](int64_t ranks) {
        std::vector<int64_t> v(n);
        for (int64_t i = 0; i < n; ++i) v[i] = ranks * (ranks + 1) / 2 * (i + 1);
        return v;
      };
      std::vector<int64_t> running(n, 0);
      if (r > 0) {
        if (pass == 0) {
          absl::StatusOr<Tensor> got = ctx.client->Receive(prev, pass);
          if (!got.ok()) return Annotate(got.status(), what);
          if (got->dtype() != DataType::kInt64 ||
              got->shape() != std::vector<int64_t>{n}) {
            return absl::InternalError(absl::StrCat(
                what, ": received ", DataTypeName(got->dtype()), " ",
                ShapeToString(got->shape())));
          }
          std::memcpy(running.data(), got->data(), got->num_bytes());
        } else {
          absl::Status s = ctx.client->ReceiveInPlace(
              MutableTensorView::Of<int64_t>(absl::MakeSpan(running)), prev,
              pass);
          if (!s.ok()) return Annotate(s, what);
        }
        const std::vector<int64_t> want = partial(r);
        if (running != want) {
          for (int64_t i = 0; i < n; ++i) {
            if (running[i] != want[i]) {
              return absl::InternalError(absl::StrCat(
                  what, ": element ", i, " is ", running[i], ", want ",
                  want[i]));
            }
          }
        }
      }
      for (int64_t i = 0; i < n; ++i) running[i] += (r + 1) * (i + 1);
      absl::Status s = ctx.client->Send(
          TensorView::Of<int64_t>(absl::MakeConstSpan(running)), next, pass);
      if (!s.ok()) return Annotate(s, what + ": send");
      if (r == 0) {
        // The total comes back from the last rank.
        absl::StatusOr<Tensor> total = ctx.client->Receive(prev, pass);
        if (!total.ok()) return Annotate(total.status(), what + ": total");
        const std::vector<int64_t> want = partial(w);
        if (total->num_bytes() != want.size() * sizeof(int64_t) ||
            std::memcmp(total->data(), want.data(), total->num_bytes()) != 0) {
          return absl::InternalError(
              absl::StrCat(what, ": the total is not W(W+1)/2 (i+1)"));
        }
      }
    }
  }
  Log(ctx, "pipeline passes exact");
  return absl::OkStatus();
}

absl::Status RunMetricSync(Context& ctx) {
  const MetricState local = LocalState(ctx.rank);
  const MetricState global = GlobalState(ctx.members);
  absl::StatusOr<ReadOnlyBuffer> buffer =
      ReadOnlyBuffer::Create(&local, sizeof(local));
  if (!buffer.ok()) return buffer.status();
  MetricState* state = static_cast<MetricState*>(buffer->mutable_data());

  MetricSync sync(ctx.client);
  for (const MetricField& f : MetricFields(*state)) {
    sync.Add(f.name, MutableTensorView(f.data, f.dtype, f.shape), f.op);
  }

  // (a) Out-of-place, with the states on read-only pages: a write faults.
  absl::StatusOr<absl::flat_hash_map<std::string, Tensor>> reduced =
      sync.Reduce(ctx.call);
  if (!reduced.ok()) return Annotate(reduced.status(), "MetricSync::Reduce");
  if (reduced->size() != 5) {
    return Fail(absl::StrCat("MetricSync::Reduce returned ", reduced->size(),
                             " states, want 5"));
  }
  MetricState got;
  for (const MetricField& f : MetricFields(got)) {
    auto it = reduced->find(f.name);
    if (it == reduced->end()) {
      return Fail(absl::StrCat("MetricSync::Reduce: no state named ", f.name));
    }
    if (it->second.dtype() != f.dtype || it->second.shape() != f.shape) {
      return Fail(absl::StrCat("MetricSync::Reduce: ", f.name, " is ",
                               DataTypeName(it->second.dtype()), " ",
                               ShapeText(it->second.shape()), ", want ",
                               DataTypeName(f.dtype), " ", ShapeText(f.shape)));
    }
    std::memcpy(f.data, it->second.data(), it->second.num_bytes());
  }
  absl::Status s = CheckMetricValues(got, global, "MetricSync::Reduce");
  if (!s.ok()) return s;
  const double accuracy =
      static_cast<double>(got.num_correct) / static_cast<double>(got.num_examples);
  const double want_accuracy = static_cast<double>(global.num_correct) /
                               static_cast<double>(global.num_examples);
  if (accuracy != want_accuracy) {
    return Fail(absl::StrFormat("global accuracy %.17g, want %.17g", accuracy,
                                want_accuracy));
  }
  // (b) The local states are byte for byte what they were.
  if (std::memcmp(state, &local, sizeof(local)) != 0) {
    return Fail("MetricSync::Reduce changed the local states");
  }
  Log(ctx, absl::StrFormat("Reduce ok: accuracy %.6f, mean loss %.6f, local "
                           "states unchanged",
                           accuracy, got.loss_sum / got.num_examples));

  // (c) In-place: the states now hold the global values.
  s = buffer->SetWritable(true);
  if (!s.ok()) return s;
  s = sync.ReduceInPlace(ctx.call);
  if (!s.ok()) return Annotate(s, "MetricSync::ReduceInPlace");
  s = CheckMetricValues(*state, global, "MetricSync::ReduceInPlace");
  if (!s.ok()) return s;
  Log(ctx, "ReduceInPlace ok: states hold the global values");
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// async

// One all-reduce started with AllReduceAsync on read-only input.
struct AsyncCase {
  DataType dtype;
  int64_t n;
  uint64_t seed;
  std::vector<uint8_t> want;
  absl::StatusOr<ReadOnlyBuffer> input = absl::UnknownError("not made");
  std::unique_ptr<CollectiveHandle> handle;
};

absl::Status CheckAsync(AsyncCase& c, absl::string_view label) {
  const std::string context = absl::StrCat(label, " ", DataTypeName(c.dtype),
                                           " [", c.n, "]");
  absl::StatusOr<Tensor> result = SingleOf(c.handle->Wait());
  if (!result.ok()) return Annotate(result.status(), context);
  return CheckTensor(*result, c.dtype, {c.n}, c.want.data(), context);
}

absl::Status WaitForFile(const std::string& path);  // see duplicate_rank

absl::Status RunAsync(Context& ctx) {
  // Small tensors (shared stream) and one several chunks long (a stream of
  // its own), all in flight at once.
  std::vector<AsyncCase> cases;
  const std::pair<DataType, int64_t> kinds[] = {
      {DataType::kFloat32, 7}, {DataType::kFloat64, 1000},
      {DataType::kFloat32, absl::GetFlag(FLAGS_big_size)},
      {DataType::kInt32, 1}};
  for (const auto& [dtype, n] : kinds) {
    if (n <= 0) continue;
    AsyncCase c;
    c.dtype = dtype;
    c.n = n;
    c.seed = Mix64(ctx.seed ^ (static_cast<uint64_t>(n) << 8) ^
                   static_cast<uint64_t>(dtype));
    c.want = ClosedFormExpected(ReduceOp::kSum, dtype, ctx.members, n, c.seed);
    c.input = ReadOnlyCopy(
        ClosedFormInput(ReduceOp::kSum, dtype, ctx.rank, n, c.seed));
    if (!c.input.ok()) return c.input.status();
    cases.push_back(std::move(c));
  }
  for (AsyncCase& c : cases) {
    c.handle = ctx.client->AllReduceAsync(
        TensorView(c.input->data(), c.dtype, {c.n}), ReduceOp::kSum, ctx.call);
  }
  // In place, in flight with the others.
  const uint64_t inplace_seed = Mix64(ctx.seed ^ 0xa5);
  std::vector<uint8_t> inout = ClosedFormInput(
      ReduceOp::kMax, DataType::kFloat32, ctx.rank, 100, inplace_seed);
  const std::vector<uint8_t> inout_want = ClosedFormExpected(
      ReduceOp::kMax, DataType::kFloat32, ctx.members, 100, inplace_seed);
  std::unique_ptr<CollectiveHandle> inplace = ctx.client->AllReduceInPlaceAsync(
      MutableTensorView(inout.data(), DataType::kFloat32, {100}),
      ReduceOp::kMax, ctx.call);
  // A blocking call takes its turn after them and returns while they may
  // still be in flight.
  const int64_t group_sum = [&] {
    int64_t s = 0;
    for (int r : ctx.members) s += r + 1;
    return s;
  }();
  absl::StatusOr<int64_t> sum =
      ctx.client->AllReduce(int64_t{ctx.rank + 1}, ReduceOp::kSum, ctx.call);
  if (!sum.ok()) return Annotate(sum.status(), "allreduce amid async ones");
  if (*sum != group_sum) {
    return Fail(absl::StrCat("allreduce amid async ones: got ", *sum,
                             ", want ", group_sum));
  }
  // Waits in different orders on different ranks; the last handle is
  // waited for on another thread.
  std::vector<size_t> order;
  for (size_t i = 0; i + 1 < cases.size(); ++i) order.push_back(i);
  if (ctx.rank % 2 == 1) std::reverse(order.begin(), order.end());
  absl::Status from_thread;
  std::thread waiter([&] {
    from_thread = CheckAsync(cases.back(), "AllReduceAsync (other thread)");
  });
  absl::Status s = inplace->Wait().status();
  if (!s.ok()) return Annotate(s, "AllReduceInPlaceAsync");
  s = CompareElements(DataType::kFloat32, inout.data(), inout_want.data(), 100,
                      "AllReduceInPlaceAsync");
  for (size_t i : order) {
    if (!s.ok()) break;
    s = CheckAsync(cases[i], "AllReduceAsync");
  }
  waiter.join();
  if (!s.ok()) return s;
  if (!from_thread.ok()) return from_thread;
  Log(ctx, absl::StrCat(cases.size(), " async all-reduces in flight at once ok"));

  // Ready() is false while a rank is missing and turns true without Wait():
  // the first member starts only after every other one saw its handle not
  // ready.
  {
    const std::string checked = ctx.scratch_dir + "/async_not_ready.";
    double mine = ctx.rank + 1;
    std::unique_ptr<CollectiveHandle> late;
    if (ctx.member_index() == 0) {
      for (int r : ctx.members) {
        if (r == ctx.rank) continue;
        s = WaitForFile(absl::StrCat(checked, r));
        if (!s.ok()) return s;
      }
      late = ctx.client->AllReduceAsync(
          TensorView(&mine, DataType::kFloat64, {}), ReduceOp::kSum, ctx.call);
    } else {
      late = ctx.client->AllReduceAsync(
          TensorView(&mine, DataType::kFloat64, {}), ReduceOp::kSum, ctx.call);
      if (late->Ready()) {
        return Fail(
            absl::StrCat("CollectiveHandle::Ready() was true before rank ",
                         ctx.members[0], " took part"));
      }
      s = TouchFile(absl::StrCat(checked, ctx.rank), "checked");
      if (!s.ok()) return s;
    }
    const absl::Time give_up = absl::Now() + kHandshakeTimeout;
    while (!late->Ready()) {
      if (absl::Now() > give_up) {
        return Fail("CollectiveHandle::Ready() never turned true");
      }
      absl::SleepFor(absl::Milliseconds(1));
    }
    absl::StatusOr<Tensor> got = SingleOf(late->Wait());
    if (!got.ok()) return Annotate(got.status(), "AllReduceAsync after Ready()");
    if (got->values<double>()[0] != static_cast<double>(group_sum)) {
      return Fail(absl::StrCat("AllReduceAsync after Ready(): got ",
                               got->values<double>()[0], ", want ", group_sum));
    }
  }

  // A handle dropped unwaited waits in its destructor; the order of calls
  // stays the same on every rank.
  std::vector<float> dropped(3, 1.0f);
  ctx.client->AllReduceAsync(TensorView::Of<float>(dropped), ReduceOp::kSum,
                             ctx.call);
  // An idle pause longer than the connection keepalive timeout: the shared
  // stream must still answer (or be reopened) afterwards.
  absl::SleepFor(absl::Seconds(3));
  sum = ctx.client->AllReduce(int64_t{ctx.rank + 1}, ReduceOp::kSum, ctx.call);
  if (!sum.ok()) return Annotate(sum.status(), "allreduce after an idle pause");
  if (*sum != group_sum) {
    return Fail(absl::StrCat("allreduce after an idle pause: got ", *sum,
                             ", want ", group_sum));
  }
  // Input errors come back from Wait(), and a second Wait() is refused.
  std::unique_ptr<CollectiveHandle> bad = ctx.client->AllReduceAsync(
      TensorView(nullptr, DataType::kFloat32, {4}), ReduceOp::kSum, ctx.call);
  absl::StatusOr<std::vector<Tensor>> refused = bad->Wait();
  if (refused.status().code() != absl::StatusCode::kInvalidArgument) {
    return Fail(absl::StrCat("AllReduceAsync with null data: want "
                             "INVALID_ARGUMENT, got ", refused.status().ToString()));
  }
  if (bad->Wait().status().code() != absl::StatusCode::kFailedPrecondition) {
    return Fail("a second CollectiveHandle::Wait was not refused");
  }
  Log(ctx, "async handles: unwaited, after idle, errors ok");
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// duplicate_rank

absl::Status WaitForFile(const std::string& path) {
  const absl::Time deadline = absl::Now() + kHandshakeTimeout;
  while (!FileExists(path)) {
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "waited ", absl::FormatDuration(kHandshakeTimeout), " for ", path));
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  return absl::OkStatus();
}

absl::Status RunDuplicateRankMember(Context& ctx) {
  const std::string ready = ctx.scratch_dir + "/members_ready";
  const std::string intruder_done = ctx.scratch_dir + "/intruder_done";
  if (ctx.rank == 0) {
    absl::Status s = TouchFile(ready, "");
    if (!s.ok()) return s;
  }
  absl::Status s = WaitForFile(intruder_done);
  if (!s.ok()) return s;
  Log(ctx, "intruder has been answered; checking that the job goes on");
  // The job is undisturbed: collectives still work, with exact values.
  int64_t mine = ctx.rank + 1;
  absl::StatusOr<int64_t> sum = ctx.client->AllReduce(mine, ReduceOp::kSum, ctx.call);
  if (!sum.ok()) return Annotate(sum.status(), "allreduce after the intruder");
  const int64_t want = int64_t{ctx.world_size} * (ctx.world_size + 1) / 2;
  if (*sum != want) {
    return Fail(absl::StrCat("allreduce after the intruder: got ", *sum,
                             ", want ", want));
  }
  std::vector<float> grad(1000, static_cast<float>(ctx.rank + 1));
  s = ctx.client->AllReduceInPlace(
      MutableTensorView::Of<float>(absl::MakeSpan(grad)), ReduceOp::kSum,
      ctx.call);
  if (!s.ok()) return Annotate(s, "allreduce_in_place after the intruder");
  for (float v : grad) {
    if (v != static_cast<float>(want)) {
      return Fail(absl::StrCat("allreduce_in_place after the intruder: got ", v,
                               ", want ", want));
    }
  }
  s = ctx.client->Barrier(ctx.call);
  if (!s.ok()) return Annotate(s, "barrier after the intruder");
  Log(ctx, "collectives after the intruder ok");
  return absl::OkStatus();
}

absl::Status RunDuplicateRankIntruder(const ClientOptions& options,
                                      const std::string& scratch_dir) {
  absl::Status s = WaitForFile(scratch_dir + "/members_ready");
  if (!s.ok()) return s;
  ClientOptions intruder = options;
  intruder.timeout = absl::Seconds(10);
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(intruder);
  const std::string outcome =
      client.ok() ? std::string("connected") : client.status().ToString();
  s = TouchFile(scratch_dir + "/intruder_done", outcome);
  if (!s.ok()) return s;
  if (client.ok() ||
      client.status().code() != absl::StatusCode::kAlreadyExists) {
    return Fail(absl::StrCat("a second process claiming rank ", options.rank,
                             " of job ", options.job,
                             ": want ALREADY_EXISTS, got ", outcome));
  }
  absl::FPrintF(stderr, "[intruder rank %d] refused as expected: %s\n",
                options.rank, outcome);
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------

absl::Status Main() {
  const ClientOptions options = WorkerClientOptions();
  const std::string scenario = absl::GetFlag(FLAGS_scenario);
  const std::string scratch_dir = absl::GetFlag(FLAGS_scratch_dir);

  if (scenario == "duplicate_rank" && absl::GetFlag(FLAGS_role) == "intruder") {
    if (scratch_dir.empty()) {
      return absl::InvalidArgumentError("duplicate_rank needs --scratch_dir");
    }
    return RunDuplicateRankIntruder(options, scratch_dir);
  }

  Context ctx;
  ctx.start = absl::Now();
  ctx.rank = options.rank;
  ctx.world_size = options.world_size;
  ctx.job = options.job;
  ctx.scratch_dir = scratch_dir;
  ctx.label = "world";
  ctx.seed = Mix64(static_cast<uint64_t>(absl::GetFlag(FLAGS_salt)) + 1);
  for (int r = 0; r < options.world_size; ++r) ctx.members.push_back(r);

  absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(options);
  if (!client.ok()) {
    return Annotate(client.status(),
                    absl::StrCat("Connect to ", options.target, " as rank ",
                                 options.rank, " of ", options.world_size,
                                 " in job ", options.job));
  }
  ctx.client = client->get();
  Log(ctx, absl::StrCat("connected; scenario ", scenario));

  if (scenario == "all_ops") return RunAllOps(ctx);
  if (scenario == "determinism") return RunDeterminism(ctx);
  if (scenario == "metric_sync") return RunMetricSync(ctx);
  if (scenario == "pipeline") return RunPipeline(ctx);
  if (scenario == "async") return RunAsync(ctx);
  if (scenario == "duplicate_rank") {
    if (scratch_dir.empty()) {
      return absl::InvalidArgumentError("duplicate_rank needs --scratch_dir");
    }
    return RunDuplicateRankMember(ctx);
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown --scenario ", scenario));
}

}  // namespace
}  // namespace testing
}  // namespace reducer

int main(int argc, char** argv) {
  const reducer::ClientOptions options =
      reducer::testing::ParseWorkerFlags(argc, argv, /*default_timeout_s=*/60);
  const int rank = options.rank;
  if (options.job.empty() || rank < 0 || rank >= options.world_size) {
    absl::FPrintF(stderr, "e2e_worker: need --job and 0 <= --rank < "
                          "--world_size\n");
    return 2;
  }
  const absl::Status status = reducer::testing::Main();
  if (!status.ok()) {
    absl::FPrintF(stderr, "e2e_worker rank %d FAILED (%s): %s\n", rank,
                  absl::GetFlag(FLAGS_scenario), status.ToString());
    return 1;
  }
  absl::FPrintF(stderr, "e2e_worker rank %d: scenario %s passed\n", rank,
                absl::GetFlag(FLAGS_scenario));
  return 0;
}
