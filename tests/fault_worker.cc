// fault_worker: one rank of Reducer's fault tests, driven by a script.
//
// It connects to reducerd (--target) as --rank of --world_size ranks of
// --job, then runs the steps of --steps in order and reports each on stdout,
// so that the test that started it can judge codes, messages and timings:
//
//   BEGIN <i> <verb>                                  (before step i starts)
//   RESULT <i> <verb> code=<CODE> ms=<elapsed> check=<ok|none|bad> msg=<text>
//
// Step 0 is the initial Connect (verb "connect"); the script's steps are
// numbered from 1. <CODE> is absl's name for the status code ("OK",
// "FAILED_PRECONDITION", ...). For calls that succeeded, check=ok means the
// result was exactly the closed form (tests/closed_form.h), check=bad that
// it was not (msg then says how); check=none that nothing was checked. For
// in-place calls that failed, check=bad means the caller's buffer changed.
// Out-of-place inputs live on read-only pages, so any write to them kills
// the worker with SIGSEGV. Lines are flushed as they are written. The
// worker exits 0 once the script ran (whatever the results), 2 for a
// script it cannot parse, and stops early (exit 0) if Connect fails.
// --tls_ca_file, --tls_cert_file, --tls_key_file, --tls_server_name (any of
// them turns ClientOptions::tls on) and --token set the security options;
// --shared_memory (auto, off, required; REDUCER_SHARED_MEMORY still wins)
// and --shared_memory_bytes the same-host path's.
//
// A script is steps separated by ';', each `verb` or `verb:key=value,...`:
//
//   allreduce, allreduce_inplace, many, allgather, broadcast,
//   broadcast_inplace, reducescatter, barrier, reduce, reduce_inplace,
//   gather, alltoall
//       Collectives. Keys: dtype (float32, float64, int32, int64, ...;
//       default float32), shape (4x3; "scalar" for []; default 8), op (sum,
//       max, ...; default sum), fill (closed: the closed form for op, dtype,
//       rank and seed; onehot: int64, element i is `scale` where i == rank),
//       scale, seed, name, group (ranks joined by '+': 0+2), timeout_ms
//       (CallOptions::timeout; default: the client's), count (many: number
//       of tensors), root (broadcast, reduce, gather; reduce, gather and
//       alltoall results are not checked), noinput=1 (broadcast: pass
//       TensorView() on a non-root), check=0 (do not check the values),
//       async=1 (an *_inplace verb: its asynchronous form, waited for at
//       once; a failed call must leave the buffer as it was either way).
//   send:to=D, receive:from=S, receive_inplace:from=S
//       A point-to-point message (Send, Receive, ReceiveInPlace) with keys
//       tag (default 0), dtype, shape, seed, timeout_ms; the receiver checks
//       the source's closed form (in place: a failed call left its buffer
//       as it was; async=1: ReceiveInPlaceAsync, waited for at once).
//   receive_any
//       ReceiveAny with keys tag, dtype, shape, seed, timeout_ms, group,
//       name: checks the closed form of the source it names (and, with
//       from=S, that it is S); msg ends "source=<s>".
//   alltoallv:send=A+B+...,recv=A+B+...
//       AllToAllV of rows of `cols` (default 2) `dtype` elements, sending
//       A rows to group rank 0, B to 1, ...; recv: the rows expected from
//       each (optional); rows=N: an input of N rows instead of the sum.
//       Results unchecked.
//   async_<collective>
//       Starts the collective on a thread of its own and goes on at once;
//       its RESULT line comes when it ends. `join` waits for all of them.
//   sleep:ms=N            Sleeps.
//   wait_file:path=P      Waits (up to timeout_ms, default 30000) for file P
//                         (relative to --scratch_dir) to exist.
//   touch:path=P          Creates file P in --scratch_dir.
//   hang                  Sleeps until killed.
//   disconnect            Destroys the client (a graceful Leave).
//   reconnect:timeout_ms=N,attempts=K
//                         Destroys the client and connects again; retries
//                         up to K times (default 1) while Connect answers
//                         UNAVAILABLE (reducerd restarting).
//   soak:iters=N,mismatch_every=M,seed=S,timeout_ms=T,reconnects=R,mark_at=K
//                         N iterations of a mix of small collectives with
//                         exact checks (see RunSoak). One RESULT line for
//                         the whole run.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "client/reducer_client.h"
#include "core/data_type.h"
#include "core/tensor.h"
#include "tests/closed_form.h"
#include "tests/worker_script.h"
#include "tests/process_harness.h"
#include "tests/worker_flags.h"

ABSL_FLAG(std::string, steps, "", "the script; see the file comment");
ABSL_FLAG(std::string, scratch_dir, "",
          "a directory shared with the test, for file handshakes");
ABSL_FLAG(std::string, tls_ca_file, "",
          "ClientOptions::tls.ca_file; any --tls_* flag set turns TLS on");
ABSL_FLAG(std::string, tls_cert_file, "", "ClientOptions::tls.cert_file");
ABSL_FLAG(std::string, tls_key_file, "", "ClientOptions::tls.key_file");
ABSL_FLAG(std::string, tls_server_name, "", "ClientOptions::tls.server_name");
ABSL_FLAG(std::string, token, "", "ClientOptions::token");
ABSL_FLAG(std::string, shared_memory, "auto",
          "ClientOptions::shared_memory: auto, off or required");
ABSL_FLAG(uint64_t, shared_memory_bytes, size_t{256} << 20,
          "ClientOptions::shared_memory_bytes");

namespace reducer {
namespace testing {
namespace {

// How long wait_file waits unless the step says otherwise.
constexpr absl::Duration kDefaultWaitFileTimeout = absl::Seconds(30);

// Pause between Connect attempts while reducerd restarts.
constexpr absl::Duration kReconnectBackoff = absl::Milliseconds(200);

absl::StatusOr<DataType> ParseDataType(const std::string& name) {
  for (DataType d : kAllDataTypes) {
    if (DataTypeName(d) == name) return d;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown dtype ", name));
}

absl::StatusOr<ReduceOp> ParseOp(const std::string& name) {
  for (ReduceOp op : kAllReduceOps) {
    if (ReduceOpName(op) == name) return op;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown op ", name));
}

absl::StatusOr<std::vector<int64_t>> ParseShape(const std::string& text) {
  std::vector<int64_t> shape;
  if (text == "scalar") return shape;
  for (absl::string_view d : absl::StrSplit(text, 'x')) {
    int64_t v;
    if (!absl::SimpleAtoi(d, &v)) {
      return absl::InvalidArgumentError(absl::StrCat("bad shape ", text));
    }
    shape.push_back(v);
  }
  return shape;
}

absl::StatusOr<std::vector<int>> ParseGroup(const std::string& text) {
  std::vector<int> group;
  for (absl::string_view r : absl::StrSplit(text, '+', absl::SkipEmpty())) {
    int v;
    if (!absl::SimpleAtoi(r, &v)) {
      return absl::InvalidArgumentError(absl::StrCat("bad group ", text));
    }
    group.push_back(v);
  }
  return group;
}

int64_t Elements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// What a step reports.
struct Outcome {
  absl::Status status;
  // How long the call itself took, when the step prepared data first (the
  // RESULT line reports this rather than the whole step).
  absl::Duration call_elapsed = -absl::InfiniteDuration();
  std::string check = "none";  // ok | none | bad
  std::string detail;          // for check=bad
  std::string note;            // appended to the RESULT line's msg
};

class Worker {
 public:
  Worker(ClientOptions options, std::string scratch_dir)
      : options_(std::move(options)), scratch_dir_(std::move(scratch_dir)) {
    for (int r = 0; r < options_.world_size; ++r) all_ranks_.push_back(r);
  }

  // Runs the script; returns 0 (see the file comment).
  int Run(const std::vector<Step>& steps) {
    Emit(absl::StrCat("BEGIN 0 connect"));
    const absl::Time start = absl::Now();
    absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(options_);
    Outcome connected;
    connected.status = client.status();
    Report("0", "connect", start, connected);
    if (!client.ok()) return 0;
    client_ = *std::move(client);
    for (size_t i = 0; i < steps.size(); ++i) {
      RunStep(absl::StrCat(i + 1), steps[i]);
    }
    JoinAll();
    return 0;
  }

 private:
  void Emit(const std::string& line) {
    absl::MutexLock lock(&output_mu_);
    std::fprintf(stdout, "%s\n", line.c_str());
    std::fflush(stdout);
  }

  void Report(const std::string& index, const std::string& verb,
              absl::Time start, const Outcome& outcome) {
    std::string msg = outcome.check == "bad"
                          ? absl::StrCat(outcome.status.message(), " | CHECK: ",
                                         outcome.detail)
                          : std::string(outcome.status.message());
    if (!outcome.note.empty()) {
      absl::StrAppend(&msg, msg.empty() ? "" : " ", outcome.note);
    }
    absl::StrReplaceAll({{"\n", " "}}, &msg);
    Emit(absl::StrCat("RESULT ", index, " ", verb,
                      " code=", absl::StatusCodeToString(outcome.status.code()),
                      " ms=",
                      absl::ToInt64Milliseconds(
                          outcome.call_elapsed >= absl::ZeroDuration()
                              ? outcome.call_elapsed
                              : absl::Now() - start),
                      " check=", outcome.check, " msg=", msg));
    if (outcome.check == "bad") {
      std::fprintf(stderr, "rank %d step %s %s: CHECK FAILED: %s\n",
                   options_.rank, index.c_str(), verb.c_str(),
                   outcome.detail.c_str());
    }
  }

  void RunStep(const std::string& index, const Step& step) {
    if (step.verb.rfind("async_", 0) == 0) {
      Step inner = step;
      inner.verb = step.verb.substr(6);
      absl::MutexLock lock(&threads_mu_);
      threads_.emplace_back([this, index, inner] { RunStep(index, inner); });
      return;
    }
    if (step.verb == "join") {
      JoinAll();
      return;
    }
    Emit(absl::StrCat("BEGIN ", index, " ", step.verb));
    const absl::Time start = absl::Now();
    Outcome outcome = Execute(step);
    Report(index, step.verb, start, outcome);
  }

  void JoinAll() {
    std::vector<std::thread> threads;
    {
      absl::MutexLock lock(&threads_mu_);
      threads.swap(threads_);
    }
    for (std::thread& t : threads) t.join();
  }

  absl::StatusOr<CallOptions> CallOptionsOf(const Step& step) {
    CallOptions call;
    call.name = step.Get("name", "");
    absl::StatusOr<std::vector<int>> group = ParseGroup(step.Get("group", ""));
    if (!group.ok()) return group.status();
    call.group = *group;
    call.timeout = absl::Milliseconds(step.GetInt("timeout_ms", 0));
    return call;
  }

  std::vector<int> Members(const CallOptions& call) const {
    if (call.group.empty()) return all_ranks_;
    std::vector<int> m = call.group;
    std::sort(m.begin(), m.end());
    return m;
  }

  Outcome Execute(const Step& step) {
    Outcome out;
    const std::string& verb = step.verb;
    if (verb == "sleep") {
      absl::SleepFor(absl::Milliseconds(step.GetInt("ms", 0)));
      return out;
    }
    if (verb == "hang") {
      for (;;) absl::SleepFor(absl::Seconds(1));
    }
    if (verb == "touch") {
      std::ofstream(absl::StrCat(scratch_dir_, "/", step.Get("path", "")))
          << options_.rank;
      return out;
    }
    if (verb == "wait_file") {
      const std::string path =
          absl::StrCat(scratch_dir_, "/", step.Get("path", ""));
      const absl::Time deadline =
          absl::Now() + absl::Milliseconds(step.GetInt(
                            "timeout_ms", absl::ToInt64Milliseconds(
                                              kDefaultWaitFileTimeout)));
      while (access(path.c_str(), F_OK) != 0) {
        if (absl::Now() > deadline) {
          out.status = absl::DeadlineExceededError(
              absl::StrCat("file ", path, " did not appear"));
          return out;
        }
        absl::SleepFor(absl::Milliseconds(10));
      }
      return out;
    }
    if (verb == "disconnect") {
      client_.reset();
      return out;
    }
    if (verb == "reconnect") {
      client_.reset();
      ClientOptions options = options_;
      options.timeout = absl::Milliseconds(step.GetInt(
          "timeout_ms", absl::ToInt64Milliseconds(options_.timeout)));
      const int attempts = static_cast<int>(step.GetInt("attempts", 1));
      absl::StatusOr<std::unique_ptr<Client>> client;
      for (int a = 1; a <= attempts; ++a) {
        client = Client::Connect(options);
        if (client.ok() || client.status().code() != absl::StatusCode::kUnavailable) {
          break;
        }
        absl::SleepFor(kReconnectBackoff);
      }
      out.status = client.status();
      if (client.ok()) client_ = *std::move(client);
      return out;
    }
    if (client_ == nullptr) {
      out.status = absl::FailedPreconditionError("no client (disconnected)");
      return out;
    }
    if (verb == "soak") return RunSoak(step);
    absl::StatusOr<CallOptions> call = CallOptionsOf(step);
    if (!call.ok()) {
      out.status = call.status();
      return out;
    }
    if (verb == "barrier") {
      out.status = client_->Barrier(*call);
      return out;
    }
    if (verb == "send" || verb == "receive" || verb == "receive_inplace") {
      return RunPointToPoint(step, *call);
    }
    if (verb == "receive_any") return RunReceiveAny(step, *call);
    if (verb == "alltoallv") return RunAllToAllV(step, *call);
    return RunTensorCollective(step, *call);
  }

  // A step's message: its `dtype` (default float32), `shape` (default 8),
  // `tag` (default 0) and the seed of its closed form (1000 x `seed`,
  // default 1).
  struct MessageSpec {
    DataType dtype;
    std::vector<int64_t> shape;
    int tag;
    uint64_t seed;
  };
  static absl::StatusOr<MessageSpec> ParseMessageSpec(const Step& step) {
    absl::StatusOr<DataType> dtype =
        ParseDataType(step.Get("dtype", "float32"));
    if (!dtype.ok()) return dtype.status();
    absl::StatusOr<std::vector<int64_t>> shape =
        ParseShape(step.Get("shape", "8"));
    if (!shape.ok()) return shape.status();
    return MessageSpec{*dtype, *std::move(shape),
                       static_cast<int>(step.GetInt("tag", 0)),
                       static_cast<uint64_t>(step.GetInt("seed", 1)) * 1000};
  }

  // True when `got` has the dtype and shape of `spec` and the bytes `want`.
  static bool IsMessage(const Tensor& got, const MessageSpec& spec,
                        const std::vector<uint8_t>& want) {
    return got.dtype() == spec.dtype && got.shape() == spec.shape &&
           got.num_bytes() == want.size() &&
           std::memcmp(got.data(), want.data(), want.size()) == 0;
  }

  // check=bad: a received message that is not the closed form of `rank`.
  static void NotClosedFormOf(const Tensor& got, int rank, Outcome& out) {
    out.check = "bad";
    out.detail = absl::StrCat("received ", DataTypeName(got.dtype()), " ",
                              ShapeToString(got.shape()),
                              ", not the closed form of rank ", rank);
  }

  // receive_any: ReceiveAny with `tag` (default 0) of a `dtype` and `shape`
  // message; its content must be the closed form of the source it names
  // (as send makes it with the same seed), and that source `from`, if
  // given. RESULT's msg then ends " source=<s>".
  Outcome RunReceiveAny(const Step& step, const CallOptions& call) {
    absl::StatusOr<MessageSpec> spec = ParseMessageSpec(step);
    if (!spec.ok()) return Outcome{spec.status()};
    int source = -1;
    absl::StatusOr<Tensor> got = client_->ReceiveAny(spec->tag, &source, call);
    Outcome out{got.status()};
    if (!got.ok()) return out;
    const int from = static_cast<int>(step.GetInt("from", -1));
    const int global = call.group.empty() ? source : Members(call)[source];
    const std::vector<uint8_t> want = ClosedFormInput(
        ReduceOp::kSum, spec->dtype, global, Elements(spec->shape), spec->seed);
    if (from >= 0 && source != from) {
      out.check = "bad";
      out.detail = absl::StrCat("the message came from rank ", source,
                                ", not from rank ", from);
    } else if (!IsMessage(*got, *spec, want)) {
      NotClosedFormOf(*got, global, out);
    } else {
      out.check = "ok";
    }
    out.note = absl::StrCat("source=", source);
    return out;
  }

  // alltoallv: AllToAllV of `dtype` rows of `cols` (default 2) elements,
  // send=a+b+... rows to each group rank (recv=... the rows it expects, if
  // given); the input is this rank's closed form (results unchecked: the
  // step is for failures).
  Outcome RunAllToAllV(const Step& step, const CallOptions& call) {
    Outcome out;
    absl::StatusOr<DataType> dtype = ParseDataType(step.Get("dtype", "float32"));
    if (!dtype.ok()) {
      out.status = dtype.status();
      return out;
    }
    auto rows_of = [](const std::string& text) {
      std::vector<int64_t> rows;
      for (absl::string_view r : absl::StrSplit(text, '+', absl::SkipEmpty())) {
        int64_t v = 0;
        if (absl::SimpleAtoi(r, &v)) rows.push_back(v);
      }
      return rows;
    };
    const std::vector<int64_t> send = rows_of(step.Get("send", ""));
    const std::vector<int64_t> recv = rows_of(step.Get("recv", ""));
    const int64_t cols = step.GetInt("cols", 2);
    int64_t total = 0;
    for (int64_t r : send) total += std::max<int64_t>(r, 0);
    total = step.GetInt("rows", total);
    const std::vector<int64_t> shape = {total, cols};
    const std::vector<uint8_t> input =
        ClosedFormInput(ReduceOp::kSum, *dtype, options_.rank, total * cols,
                        static_cast<uint64_t>(step.GetInt("seed", 1)) * 1000);
    absl::StatusOr<Tensor> got = client_->AllToAllV(
        TensorView(input.data(), *dtype, shape), send, recv, call);
    out.status = got.status();
    return out;
  }

  // send (to=D) and receive (from=S): a point-to-point message with `tag`
  // (default 0) of `dtype` and `shape`; the source's tensor is the closed
  // form (sum) of its rank and `seed`, which the receiver checks exactly.
  Outcome RunPointToPoint(const Step& step, const CallOptions& call) {
    absl::StatusOr<MessageSpec> spec = ParseMessageSpec(step);
    if (!spec.ok()) return Outcome{spec.status()};
    Outcome out;
    const DataType dtype = spec->dtype;
    const std::vector<int64_t>& shape = spec->shape;
    const int64_t n = Elements(shape);
    const uint64_t seed = spec->seed;
    const int tag = spec->tag;
    if (step.verb == "send") {
      const std::vector<uint8_t> input =
          ClosedFormInput(ReduceOp::kSum, dtype, options_.rank, n, seed);
      out.status =
          client_->Send(TensorView(input.data(), dtype, shape),
                        static_cast<int>(step.GetInt("to", -1)), tag, call);
      return out;
    }
    const int source = static_cast<int>(step.GetInt("from", -1));
    const std::vector<uint8_t> want =
        ClosedFormInput(ReduceOp::kSum, dtype, source, n, seed);
    if (step.verb == "receive_inplace") {
      // The buffer starts as this rank's own closed form: on failure it
      // must still hold exactly that.
      const std::vector<uint8_t> before =
          ClosedFormInput(ReduceOp::kSum, dtype, options_.rank, n, seed + 1);
      std::vector<uint8_t> buffer = before;
      const MutableTensorView view(buffer.data(), dtype, shape);
      out.status = step.GetInt("async", 0) != 0
                       ? client_->ReceiveInPlaceAsync(view, source, tag, call)
                             ->Wait()
                             .status()
                       : client_->ReceiveInPlace(view, source, tag, call);
      const std::vector<uint8_t>& expected = out.status.ok() ? want : before;
      out.check = buffer == expected ? "ok" : "bad";
      if (out.check == "bad") {
        out.detail = out.status.ok()
                         ? "the buffer does not hold the source's closed form"
                         : "the buffer changed although the call failed";
      }
      return out;
    }
    absl::StatusOr<Tensor> got = client_->Receive(source, tag, call);
    out.status = got.status();
    if (!got.ok()) return out;
    if (!IsMessage(*got, *spec, want)) {
      NotClosedFormOf(*got, source, out);
      return out;
    }
    out.check = "ok";
    return out;
  }

  // The input this rank contributes for `step`, and (when it can be known)
  // the result it must get.
  struct Prepared {
    DataType dtype = DataType::kFloat32;
    std::vector<int64_t> shape;
    ReduceOp op = ReduceOp::kSum;
    std::vector<uint8_t> input;
    bool checkable = false;
    std::vector<int64_t> want_shape;
    std::vector<uint8_t> want;
    // When set, computes `want` (only needed once a call succeeded, and
    // costly for large tensors).
    std::function<std::vector<uint8_t>()> make_want;
  };

  absl::StatusOr<Prepared> Prepare(const Step& step, const CallOptions& call,
                                   int tensor_index) {
    Prepared p;
    absl::StatusOr<MessageSpec> spec = ParseMessageSpec(step);
    if (!spec.ok()) return spec.status();
    absl::StatusOr<ReduceOp> op = ParseOp(step.Get("op", "sum"));
    if (!op.ok()) return op.status();
    p.dtype = spec->dtype;
    p.shape = spec->shape;
    p.op = *op;
    const std::string& verb = step.verb;
    const bool reduces = verb == "allreduce" || verb == "allreduce_inplace" ||
                         verb == "reduce_inplace" || verb == "many" ||
                         verb == "reducescatter";
    const int64_t n = Elements(p.shape);
    if (n < 0) {  // a negative dimension: send it as it is, no bytes
      return p;
    }
    const uint64_t seed =
        static_cast<uint64_t>(step.GetInt("seed", 1)) * 1000 + tensor_index;
    const std::vector<int> members = Members(call);
    const ReduceOp fill_op = reduces ? p.op : ReduceOp::kSum;
    const bool check = step.GetInt("check", 1) != 0;
    if (step.Get("fill", "closed") == "onehot") {
      const int64_t scale = step.GetInt("scale", 1);
      p.dtype = DataType::kInt64;
      std::vector<int64_t> mine(n, 0), want(n, 0);
      if (options_.rank < n) mine[options_.rank] = scale;
      for (int r : members) {
        if (r < n) want[r] += scale;
      }
      p.input.assign(reinterpret_cast<uint8_t*>(mine.data()),
                     reinterpret_cast<uint8_t*>(mine.data() + n));
      p.want.assign(reinterpret_cast<uint8_t*>(want.data()),
                    reinterpret_cast<uint8_t*>(want.data() + n));
      p.want_shape = p.shape;
      p.checkable = check && verb != "reducescatter" && p.op == ReduceOp::kSum;
      return p;
    }
    if (!OpAllowed(fill_op, p.dtype)) {  // a call meant to be rejected
      p.input.assign(static_cast<size_t>(n) * ElementSize(p.dtype), 0);
      return p;
    }
    p.input = ClosedFormInput(fill_op, p.dtype, options_.rank, n, seed);
    p.checkable = check;
    const DataType dtype_value = p.dtype;
    const ReduceOp op_value = p.op;
    if (reduces) {
      p.want_shape = p.shape;
      if (verb == "reducescatter") {
        const int64_t g = static_cast<int64_t>(members.size());
        if (p.shape.empty() || p.shape[0] % g != 0) {
          p.checkable = false;
          return p;
        }
        const int64_t index =
            std::find(members.begin(), members.end(), options_.rank) -
            members.begin();
        p.want_shape[0] /= g;
        p.make_want = [=] {
          std::vector<uint8_t> all =
              ClosedFormExpected(op_value, dtype_value, members, n, seed);
          const size_t slice = all.size() / static_cast<size_t>(g);
          return std::vector<uint8_t>(all.begin() + index * slice,
                                      all.begin() + (index + 1) * slice);
        };
      } else {
        p.make_want = [=] {
          return ClosedFormExpected(op_value, dtype_value, members, n, seed);
        };
      }
    } else if (verb == "allgather") {
      p.want_shape = p.shape;
      if (!p.want_shape.empty()) {
        p.want_shape[0] *= static_cast<int64_t>(members.size());
      }
      p.make_want = [=] {
        std::vector<uint8_t> want;
        for (int r : members) {
          std::vector<uint8_t> part =
              ClosedFormInput(fill_op, dtype_value, r, n, seed);
          want.insert(want.end(), part.begin(), part.end());
        }
        return want;
      };
    } else if (verb == "broadcast" || verb == "broadcast_inplace") {
      const int root = static_cast<int>(step.GetInt("root", 0));
      p.input = ClosedFormInput(fill_op, p.dtype, root, n, seed);
      p.want = p.input;
      p.want_shape = p.shape;
    }
    return p;
  }

  static std::string CompareTensor(const Tensor& got, Prepared& p) {
    if (p.make_want) {
      p.want = p.make_want();
      p.make_want = nullptr;
    }
    if (got.dtype() != p.dtype || got.shape() != p.want_shape) {
      return absl::StrCat("got ", DataTypeName(got.dtype()), " ",
                          ShapeToString(got.shape()), ", want ",
                          DataTypeName(p.dtype), " ",
                          ShapeToString(p.want_shape));
    }
    absl::Status s = CompareElements(p.dtype, got.data(), p.want.data(),
                                     Elements(p.want_shape), "result");
    return s.ok() ? "" : std::string(s.message());
  }

  Outcome RunTensorCollective(const Step& step, const CallOptions& call) {
    Outcome out;
    const std::string& verb = step.verb;
    const int count =
        verb == "many" ? static_cast<int>(step.GetInt("count", 2)) : 1;
    std::vector<Prepared> prepared;
    for (int t = 0; t < count; ++t) {
      absl::StatusOr<Prepared> p = Prepare(step, call, t);
      if (!p.ok()) {
        out.status = p.status();
        return out;
      }
      prepared.push_back(*std::move(p));
    }
    Prepared& p = prepared[0];
    const bool inplace = verb == "allreduce_inplace" ||
                         verb == "broadcast_inplace" ||
                         verb == "reduce_inplace";
    if (inplace) {
      std::vector<uint8_t> buffer = p.input;
      const std::vector<uint8_t> before = buffer;
      MutableTensorView view(buffer.data(), p.dtype, p.shape);
      const absl::Time call_start = absl::Now();
      const int root = static_cast<int>(step.GetInt("root", 0));
      const bool async = step.GetInt("async", 0) != 0;
      if (verb == "allreduce_inplace") {
        out.status = async ? client_->AllReduceInPlaceAsync(view, p.op, call)
                                 ->Wait()
                                 .status()
                           : client_->AllReduceInPlace(view, p.op, call);
      } else if (verb == "broadcast_inplace") {
        out.status = async ? client_->BroadcastInPlaceAsync(view, root, call)
                                 ->Wait()
                                 .status()
                           : client_->BroadcastInPlace(view, root, call);
      } else {
        out.status = async ? client_->ReduceInPlaceAsync(view, p.op, root, call)
                                 ->Wait()
                                 .status()
                           : client_->ReduceInPlace(view, p.op, root, call);
      }
      out.call_elapsed = absl::Now() - call_start;
      if (!out.status.ok()) {
        if (buffer != before) {
          out.check = "bad";
          out.detail = "the in-place call failed but changed the buffer";
        }
        return out;
      }
      if (verb == "reduce_inplace" && root != options_.rank) {
        // A non-root's buffer is only read.
        out.check = buffer == before ? "ok" : "bad";
        if (buffer != before) out.detail = "a non-root's buffer was written";
        return out;
      }
      if (p.checkable) {
        Tensor got(p.dtype, p.want_shape);
        if (got.num_bytes() == buffer.size()) {
          std::memcpy(got.mutable_data(), buffer.data(), buffer.size());
        }
        out.detail = CompareTensor(got, p);
        out.check = out.detail.empty() ? "ok" : "bad";
      }
      return out;
    }

    // Out-of-place: inputs on read-only pages.
    std::vector<ReadOnlyBuffer> buffers;
    std::vector<TensorView> views;
    for (const Prepared& q : prepared) {
      absl::StatusOr<ReadOnlyBuffer> b =
          ReadOnlyBuffer::Create(q.input.data(), q.input.size());
      if (!b.ok()) {
        out.status = b.status();
        return out;
      }
      buffers.push_back(*std::move(b));
    }
    for (size_t t = 0; t < prepared.size(); ++t) {
      views.emplace_back(buffers[t].data(), prepared[t].dtype, prepared[t].shape);
    }
    std::vector<Tensor> results;
    const absl::Time call_start = absl::Now();
    if (verb == "allreduce" || verb == "reducescatter" || verb == "allgather" ||
        verb == "broadcast") {
      absl::StatusOr<Tensor> r;
      if (verb == "allreduce") {
        r = client_->AllReduce(views[0], p.op, call);
      } else if (verb == "reducescatter") {
        r = client_->ReduceScatter(views[0], p.op, call);
      } else if (verb == "allgather") {
        r = client_->AllGather(views[0], call);
      } else {
        const int root = static_cast<int>(step.GetInt("root", 0));
        const bool noinput =
            step.GetInt("noinput", 0) != 0 && root != options_.rank;
        r = client_->Broadcast(noinput ? TensorView() : views[0], root, call);
      }
      out.status = r.status();
      if (r.ok()) results.push_back(*std::move(r));
    } else if (verb == "reduce" || verb == "gather" || verb == "alltoall") {
      // Results unchecked (check=none): these steps are for failures.
      const int root = static_cast<int>(step.GetInt("root", 0));
      absl::StatusOr<Tensor> r =
          verb == "reduce"   ? client_->Reduce(views[0], p.op, root, call)
          : verb == "gather" ? client_->Gather(views[0], root, call)
                             : client_->AllToAll(views[0], call);
      out.status = r.status();
      if (r.ok()) results.push_back(*std::move(r));
      for (Prepared& q : prepared) q.checkable = false;
    } else if (verb == "many") {
      std::vector<ReduceOp> ops(prepared.size(), p.op);
      absl::StatusOr<std::vector<Tensor>> r =
          client_->AllReduceMany(views, ops, call);
      out.status = r.status();
      if (r.ok()) results = *std::move(r);
    } else {
      out.status = absl::InvalidArgumentError(
          absl::StrCat("fault_worker: unknown verb ", verb));
      return out;
    }
    out.call_elapsed = absl::Now() - call_start;
    if (!out.status.ok()) return out;
    if (results.size() != prepared.size()) {
      out.check = "bad";
      out.detail = absl::StrCat("got ", results.size(), " tensors, want ",
                                prepared.size());
      return out;
    }
    bool all_checkable = true;
    for (size_t t = 0; t < prepared.size(); ++t) {
      if (!prepared[t].checkable) {
        all_checkable = false;
        continue;
      }
      std::string diff = CompareTensor(results[t], prepared[t]);
      if (!diff.empty()) {
        out.check = "bad";
        out.detail = absl::StrCat("tensor ", t, ": ", diff);
        return out;
      }
    }
    out.check = all_checkable ? "ok" : "none";
    return out;
  }

  // The soak: iteration k runs one of a few small collectives (chosen by k)
  // with values that depend on k, and checks the result exactly. Every
  // `mismatch_every`-th iteration rank world_size-1 sends a wrong shape and
  // every rank must get FAILED_PRECONDITION. On ABORTED or UNAVAILABLE (a
  // peer was killed, the job's epoch ended) the worker connects again, up to
  // `reconnects` times, and starts over at iteration 0 of the new epoch, as
  // its restarted peer does; it prints "SOAKLOST ..." when that happens. The
  // RESULT line says OK once all N iterations of one epoch passed; a line
  // "SOAK ..." before it tells how many iterations and reconnects it took.
  // With `mark_at` K (0 < K < N), it prints "SOAKMARK iteration=K" as each
  // epoch reaches iteration K: a test kills it after that line, while it
  // is surely mid-soak however fast the iterations go.
  Outcome RunSoak(const Step& step) {
    Outcome out;
    const int64_t iters = step.GetInt("iters", 100);
    const int64_t mismatch_every = step.GetInt("mismatch_every", 0);
    const uint64_t seed = static_cast<uint64_t>(step.GetInt("seed", 1));
    const int64_t max_reconnects = step.GetInt("reconnects", 0);
    const int64_t mark_at = step.GetInt("mark_at", 0);
    CallOptions call;
    call.timeout = absl::Milliseconds(step.GetInt("timeout_ms", 20000));
    int64_t done = 0, total = 0, mismatches = 0, reconnects = 0;
    const int last = options_.world_size - 1;
    while (done <= iters) {
      const int64_t k = done;
      if (k == iters) {
        // Nobody leaves before everyone is done (a peer still calling would
        // see this rank gone).
        const absl::Status s = client_->Barrier(call);
        if (s.ok()) break;
        if ((absl::IsAborted(s) || absl::IsUnavailable(s)) &&
            reconnects < max_reconnects) {
          ++reconnects;
          Emit(absl::StrCat("SOAKLOST iteration=", k, " final barrier"));
          client_.reset();
          absl::StatusOr<std::unique_ptr<Client>> client =
              Client::Connect(options_);
          if (!client.ok()) {
            out.status = client.status();
            return out;
          }
          client_ = *std::move(client);
          done = 0;
          continue;
        }
        out.status = absl::Status(
            s.code(), absl::StrCat("final barrier: ", s.message()));
        return out;
      }
      ++total;
      if (mark_at > 0 && k == mark_at) {
        Emit(absl::StrCat("SOAKMARK iteration=", k));
      }
      // Never on the last iteration: the ranks that see the failure first
      // would finish and leave while the others still call.
      const bool inject = mismatch_every > 0 &&
                          k % mismatch_every == mismatch_every - 1 &&
                          k != iters - 1;
      absl::Status s;
      std::string bad;
      const int64_t n = 1 + (k * 37 + seed) % 300;
      const uint64_t iter_seed = Mix64(seed * 1000003 + k);
      switch (inject ? -1 : k % 4) {
        case -1: {
          const int64_t rows = options_.rank == last ? n + 1 : n;
          std::vector<float> v(rows, 1.0f);
          absl::StatusOr<Tensor> r =
              client_->AllReduce(TensorView::Of<float>(v), ReduceOp::kSum, call);
          if (r.status().code() != absl::StatusCode::kFailedPrecondition ||
              !absl::StrContains(r.status().message(), "mismatched shapes")) {
            bad = absl::StrCat("iteration ", k, ": injected mismatch: want ",
                               "FAILED_PRECONDITION mismatched shapes, got ",
                               r.status().ToString());
          }
          s = absl::OkStatus();
          if (absl::IsAborted(r.status()) || absl::IsUnavailable(r.status())) {
            s = r.status();
            bad.clear();
          }
          ++mismatches;
          break;
        }
        case 0:
        case 1: {
          const DataType dtype = k % 2 == 0 ? DataType::kFloat32 : DataType::kInt64;
          std::vector<uint8_t> in =
              ClosedFormInput(ReduceOp::kSum, dtype, options_.rank, n, iter_seed);
          std::vector<uint8_t> want =
              ClosedFormExpected(ReduceOp::kSum, dtype, all_ranks_, n, iter_seed);
          absl::StatusOr<Tensor> r = client_->AllReduce(
              TensorView(in.data(), dtype, {n}), ReduceOp::kSum, call);
          s = r.status();
          if (r.ok()) {
            absl::Status c = CompareElements(dtype, r->data(), want.data(), n,
                                             absl::StrCat("iteration ", k));
            if (!c.ok() || r->shape() != std::vector<int64_t>{n}) {
              bad = std::string(c.message());
            }
          }
          break;
        }
        case 2: {
          std::vector<uint8_t> in = ClosedFormInput(
              ReduceOp::kSum, DataType::kInt32, options_.rank, n, iter_seed);
          absl::StatusOr<Tensor> r = client_->AllGather(
              TensorView(in.data(), DataType::kInt32, {n}), call);
          s = r.status();
          if (r.ok()) {
            std::vector<uint8_t> want;
            for (int rr : all_ranks_) {
              std::vector<uint8_t> part = ClosedFormInput(
                  ReduceOp::kSum, DataType::kInt32, rr, n, iter_seed);
              want.insert(want.end(), part.begin(), part.end());
            }
            absl::Status c =
                CompareElements(DataType::kInt32, r->data(), want.data(),
                                n * options_.world_size,
                                absl::StrCat("iteration ", k, " allgather"));
            if (!c.ok()) bad = std::string(c.message());
          }
          break;
        }
        default: {
          const int root = static_cast<int>(k % options_.world_size);
          std::vector<uint8_t> in =
              ClosedFormInput(ReduceOp::kSum, DataType::kFloat64, root, n, iter_seed);
          absl::StatusOr<Tensor> r = client_->Broadcast(
              options_.rank == root ? TensorView(in.data(), DataType::kFloat64, {n})
                                    : TensorView(),
              root, call);
          s = r.status();
          if (r.ok()) {
            absl::Status c =
                CompareElements(DataType::kFloat64, r->data(), in.data(), n,
                                absl::StrCat("iteration ", k, " broadcast"));
            if (!c.ok()) bad = std::string(c.message());
          }
          break;
        }
      }
      if (!bad.empty()) {
        out.check = "bad";
        out.detail = bad;
        out.status = s;
        return out;
      }
      if (s.ok()) {
        ++done;
        continue;
      }
      if ((absl::IsAborted(s) || absl::IsUnavailable(s)) &&
          reconnects < max_reconnects) {
        ++reconnects;
        std::string lost = s.ToString();
        absl::StrReplaceAll({{"\n", " "}}, &lost);
        Emit(absl::StrCat("SOAKLOST iteration=", k, " ", lost));
        client_.reset();
        absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(options_);
        if (!client.ok()) {
          out.status = absl::Status(client.status().code(),
                                    absl::StrCat("reconnect after iteration ", k,
                                                 ": ", client.status().message()));
          return out;
        }
        client_ = *std::move(client);
        done = 0;  // the new epoch starts over, as the restarted peer does
        continue;
      }
      out.status = absl::Status(
          s.code(), absl::StrCat("iteration ", k, ": ", s.message()));
      return out;
    }
    out.check = "ok";
    out.status = absl::OkStatus();
    out.detail.clear();
    Emit(absl::StrCat("SOAK iterations=", total, " mismatches=", mismatches,
                      " reconnects=", reconnects));
    return out;
  }

  const ClientOptions options_;
  const std::string scratch_dir_;
  std::vector<int> all_ranks_;
  std::unique_ptr<Client> client_;  // thread-safe; replaced only by the script thread

  absl::Mutex output_mu_;
  absl::Mutex threads_mu_;
  std::vector<std::thread> threads_ ABSL_GUARDED_BY(threads_mu_);
};

}  // namespace
}  // namespace testing
}  // namespace reducer

int main(int argc, char** argv) {
  reducer::ClientOptions options =
      reducer::testing::ParseWorkerFlags(argc, argv, /*default_timeout_s=*/30);
  reducer::TlsOptions tls;
  tls.ca_file = absl::GetFlag(FLAGS_tls_ca_file);
  tls.cert_file = absl::GetFlag(FLAGS_tls_cert_file);
  tls.key_file = absl::GetFlag(FLAGS_tls_key_file);
  tls.server_name = absl::GetFlag(FLAGS_tls_server_name);
  if (!tls.ca_file.empty() || !tls.cert_file.empty() ||
      !tls.server_name.empty()) {
    options.tls = tls;
  }
  options.token = absl::GetFlag(FLAGS_token);
  const std::string shared_memory = absl::GetFlag(FLAGS_shared_memory);
  if (shared_memory == "off") {
    options.shared_memory = reducer::SharedMemory::kOff;
  } else if (shared_memory == "required") {
    options.shared_memory = reducer::SharedMemory::kRequired;
  } else if (shared_memory != "auto") {
    std::fprintf(stderr, "--shared_memory must be auto, off or required\n");
    return 2;
  }
  options.shared_memory_bytes = absl::GetFlag(FLAGS_shared_memory_bytes);
  const std::optional<std::vector<reducer::testing::Step>> steps =
      reducer::testing::MainScript("fault_worker", options.job,
                                   absl::GetFlag(FLAGS_steps));
  if (!steps.has_value()) return 2;
  reducer::testing::Worker worker(options, absl::GetFlag(FLAGS_scratch_dir));
  return worker.Run(*steps);
}
