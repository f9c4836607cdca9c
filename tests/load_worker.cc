// load_worker: ranks of several jobs in one process, a thread per rank,
// each with its own Client, for the load test (tests/load_test.cc) and the
// load benchmark (bench/load_bench.py).
//
// For each job of --jobs it runs ranks [--first_rank, --first_rank +
// --num_ranks) of --world_size. Every rank runs the same plan of
// --collectives calls (PlanStep): small and medium all-reduces, all-gathers
// with uneven dim 0, broadcasts with empty non-root views, barriers and
// scalar all-reduces, some matched by call order and some by name. Every
// value rank r contributes is a closed form of (job seed, r, step k,
// element i), and every result is compared with the value computed here
// from all ranks' closed forms; integer all-reduces use one-hot bits (rank
// r sets bit (r + i + k) mod 64), so a contribution counted twice or lost
// changes the result.
//
// Output on stdout, one line per rank once it is done:
//   LOAD job=<job> rank=<r> ok=<n> failed=<n> wrong=<n> planned=<n>
// and, for the first few problems of each rank,
//   LOADFAIL job=<job> rank=<r> step=<k> kind=<kind> <status or difference>
// With --latency_out, every call's latency in microseconds, one line per
// call: "<kind> <usec>". Exits 0 when every rank of every job had ok ==
// planned; 1 otherwise; 2 for bad flags.
#include <algorithm>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "client/reducer_client.h"
#include "core/data_type.h"
#include "core/tensor.h"
#include "tests/closed_form.h"

ABSL_FLAG(std::string, target, "127.0.0.1:50051", "reducerd address");
ABSL_FLAG(std::vector<std::string>, jobs, {}, "jobs whose ranks run here");
ABSL_FLAG(int, world_size, 4, "ranks per job");
ABSL_FLAG(int, first_rank, 0, "first rank run here, in every job");
ABSL_FLAG(int, num_ranks, -1, "ranks run here per job; -1: all");
ABSL_FLAG(int, collectives, 1000, "calls per rank (the plan's length)");
ABSL_FLAG(int64_t, medium_elements, 16384,
          "float32 elements of a medium all-reduce (16384: 64 KiB)");
ABSL_FLAG(int, timeout_s, 120, "ClientOptions::timeout, seconds");
ABSL_FLAG(std::string, latency_out, "", "file for per-call latencies");

namespace reducer {
namespace testing {
namespace {

// Problems each rank reports in detail; the counts cover the rest.
constexpr int kMaxReportedFailures = 3;

enum class Kind {
  kSmallInt,     // int64 one-hot sum, 1..32 elements
  kSmallFloat,   // float32 sum, 64..127 elements
  kMedium,       // float32 sum, --medium_elements
  kAllGather,    // int32, 1..3 rows of 4 per rank
  kBroadcast,    // float64, 16 elements, empty non-root views
  kBarrier,
  kScalar,       // int64 one-hot sum of one value
};

const char* KindName(Kind kind) {
  switch (kind) {
    case Kind::kSmallInt: return "allreduce_small_int64";
    case Kind::kSmallFloat: return "allreduce_small_float32";
    case Kind::kMedium: return "allreduce_medium_float32";
    case Kind::kAllGather: return "allgather";
    case Kind::kBroadcast: return "broadcast";
    case Kind::kBarrier: return "barrier";
    case Kind::kScalar: return "allreduce_scalar";
  }
  return "?";
}

// Step k of the plan, the same on every rank of a job. Out of 20 steps:
// 8 small integer, 4 small float, 2 medium, 2 all-gather, 2 broadcast,
// 1 barrier, 1 scalar; every third step is named.
struct PlanStep {
  Kind kind;
  bool named;
};

PlanStep StepOf(int k) {
  static constexpr Kind kCycle[20] = {
      Kind::kSmallInt,   Kind::kSmallFloat, Kind::kSmallInt,  Kind::kAllGather,
      Kind::kSmallInt,   Kind::kMedium,     Kind::kSmallInt,  Kind::kBroadcast,
      Kind::kSmallFloat, Kind::kSmallInt,   Kind::kBarrier,   Kind::kSmallInt,
      Kind::kSmallFloat, Kind::kAllGather,  Kind::kSmallInt,  Kind::kMedium,
      Kind::kSmallInt,   Kind::kBroadcast,  Kind::kSmallFloat, Kind::kScalar};
  return PlanStep{kCycle[k % 20], k % 3 == 0};
}

// Rank r's float contribution at step k, element i: a small integer, so that
// sums of up to 64 ranks are exact in float32 whatever the order.
float FloatValue(uint64_t seed, int r, int k, int64_t i) {
  return static_cast<float>(
      static_cast<int64_t>((seed + r * 7 + i * 3 + k) % 16) - 4);
}

uint64_t OneHot(int r, int k, int64_t i) {
  return uint64_t{1} << ((r + i + k) % 64);
}

int32_t GatherValue(uint64_t seed, int r, int k, int64_t i) {
  return static_cast<int32_t>(Mix64(seed ^ (uint64_t(r) << 40) ^
                                    (uint64_t(k) << 8) ^ uint64_t(i)));
}

int64_t GatherRows(int r, int k) { return 1 + (r + k) % 3; }

struct RankReport {
  int ok = 0;
  int failed = 0;
  int wrong = 0;
  std::vector<std::string> problems;
  std::vector<std::pair<Kind, int64_t>> latencies;  // usec
};

class Rank {
 public:
  Rank(ClientOptions options, int collectives, int64_t medium_elements,
       bool record_latency)
      : options_(std::move(options)),
        collectives_(collectives),
        medium_elements_(medium_elements),
        record_latency_(record_latency),
        seed_(Fnv1a64(options_.job.data(), options_.job.size())) {}

  RankReport Run() {
    absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(options_);
    if (!client.ok()) {
      report_.failed = collectives_;
      Problem(-1, "connect", client.status().ToString());
      return std::move(report_);
    }
    client_ = *std::move(client);
    if (record_latency_) report_.latencies.reserve(collectives_);
    for (int k = 0; k < collectives_; ++k) {
      const PlanStep step = StepOf(k);
      CallOptions call;
      if (step.named) call.name = absl::StrCat("load-", k);
      const absl::Time start = absl::Now();
      std::string wrong;
      const absl::Status s = RunStep(step.kind, k, call, &wrong);
      const int64_t usec = absl::ToInt64Microseconds(absl::Now() - start);
      if (!s.ok()) {
        // The ranks' call orders may no longer agree: stop here.
        ++report_.failed;
        Problem(k, KindName(step.kind), s.ToString());
        break;
      } else if (!wrong.empty()) {
        ++report_.wrong;
        Problem(k, KindName(step.kind), wrong);
      } else {
        ++report_.ok;
        if (record_latency_) report_.latencies.emplace_back(step.kind, usec);
      }
    }
    if (report_.failed > 0) return std::move(report_);
    // Nobody leaves while a peer may still call.
    CallOptions last;
    last.name = "load-done";
    const absl::Status done = client_->Barrier(last);
    if (!done.ok()) Problem(collectives_, "final barrier", done.ToString());
    client_.reset();
    return std::move(report_);
  }

 private:
  void Problem(int k, const std::string& kind, std::string what) {
    if (static_cast<int>(report_.problems.size()) >= kMaxReportedFailures) return;
    absl::StrReplaceAll({{"\n", " "}}, &what);
    report_.problems.push_back(absl::StrCat("LOADFAIL job=", options_.job,
                                            " rank=", options_.rank, " step=", k,
                                            " kind=", kind, " ", what));
  }

  absl::Status RunStep(Kind kind, int k, const CallOptions& call,
                       std::string* wrong) {
    const int r = options_.rank;
    const int w = options_.world_size;
    switch (kind) {
      case Kind::kSmallInt:
      case Kind::kScalar: {
        const int64_t n = kind == Kind::kScalar ? 1 : 1 + (k * 7) % 32;
        // The sum over ranks depends on (i + k) mod 64 only.
        uint64_t sums[64];
        for (int j = 0; j < 64; ++j) {
          sums[j] = 0;
          for (int q = 0; q < w; ++q) sums[j] += OneHot(q, 0, j);
        }
        std::vector<int64_t> in(n), want(n, 0);
        for (int64_t i = 0; i < n; ++i) {
          in[i] = static_cast<int64_t>(OneHot(r, k, i));
          want[i] = static_cast<int64_t>(sums[(i + k) % 64]);
        }
        if (kind == Kind::kScalar) {
          absl::StatusOr<int64_t> got = client_->AllReduce(in[0], ReduceOp::kSum, call);
          if (!got.ok()) return got.status();
          if (*got != want[0]) {
            *wrong = absl::StrCat("got ", *got, ", want ", want[0]);
          }
          return absl::OkStatus();
        }
        absl::StatusOr<Tensor> got = client_->AllReduce(
            TensorView::Of<int64_t>(in), ReduceOp::kSum, call);
        if (!got.ok()) return got.status();
        return Compare(*got, DataType::kInt64, {n}, want.data(), wrong);
      }
      case Kind::kSmallFloat:
      case Kind::kMedium: {
        const int64_t n =
            kind == Kind::kMedium ? medium_elements_ : 64 + k % 64;
        // The sum over ranks depends on (seed + 3i + k) mod 16 only.
        float sums[16];
        for (int j = 0; j < 16; ++j) {
          double sum = 0;
          for (int q = 0; q < w; ++q) sum += FloatValue(j, q, 0, 0);
          sums[j] = static_cast<float>(sum);
        }
        std::vector<float> in(n), want(n, 0.0f);
        for (int64_t i = 0; i < n; ++i) {
          in[i] = FloatValue(seed_, r, k, i);
          want[i] = sums[(seed_ + 3 * i + k) % 16];
        }
        absl::StatusOr<Tensor> got =
            client_->AllReduce(TensorView::Of<float>(in), ReduceOp::kSum, call);
        if (!got.ok()) return got.status();
        return Compare(*got, DataType::kFloat32, {n}, want.data(), wrong);
      }
      case Kind::kAllGather: {
        constexpr int64_t kCols = 4;
        const int64_t rows = GatherRows(r, k);
        std::vector<int32_t> in(rows * kCols);
        for (int64_t i = 0; i < rows * kCols; ++i) {
          in[i] = GatherValue(seed_, r, k, i);
        }
        std::vector<int32_t> want;
        int64_t total_rows = 0;
        for (int q = 0; q < w; ++q) {
          for (int64_t i = 0; i < GatherRows(q, k) * kCols; ++i) {
            want.push_back(GatherValue(seed_, q, k, i));
          }
          total_rows += GatherRows(q, k);
        }
        absl::StatusOr<Tensor> got = client_->AllGather(
            TensorView(in.data(), DataType::kInt32, {rows, kCols}), call);
        if (!got.ok()) return got.status();
        return Compare(*got, DataType::kInt32, {total_rows, kCols}, want.data(),
                       wrong);
      }
      case Kind::kBroadcast: {
        constexpr int64_t kN = 16;
        const int root = k % w;
        std::vector<double> want(kN);
        for (int64_t i = 0; i < kN; ++i) {
          want[i] = FloatValue(seed_, root, k, i) * 0.5 + root;
        }
        absl::StatusOr<Tensor> got = client_->Broadcast(
            r == root ? TensorView::Of<double>(want) : TensorView(), root, call);
        if (!got.ok()) return got.status();
        return Compare(*got, DataType::kFloat64, {kN}, want.data(), wrong);
      }
      case Kind::kBarrier:
        return client_->Barrier(call);
    }
    return absl::InternalError("unknown kind");
  }

  // Sets *wrong when `got` is not `dtype`, `shape` and the bytes at `want`.
  static absl::Status Compare(const Tensor& got, DataType dtype,
                              const std::vector<int64_t>& shape,
                              const void* want, std::string* wrong) {
    if (got.dtype() != dtype || got.shape() != shape) {
      *wrong = absl::StrCat("got ", DataTypeName(got.dtype()), " ",
                            ShapeToString(got.shape()), ", want ",
                            DataTypeName(dtype), " ", ShapeToString(shape));
      return absl::OkStatus();
    }
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    absl::Status c = CompareElements(dtype, got.data(), want, n, "result");
    if (!c.ok()) *wrong = std::string(c.message());
    return absl::OkStatus();
  }

  const ClientOptions options_;
  const int collectives_;
  const int64_t medium_elements_;
  const bool record_latency_;
  const uint64_t seed_;
  std::unique_ptr<Client> client_;
  RankReport report_;
};

int Main() {
  const std::vector<std::string> jobs = absl::GetFlag(FLAGS_jobs);
  const int world_size = absl::GetFlag(FLAGS_world_size);
  const int first = absl::GetFlag(FLAGS_first_rank);
  int count = absl::GetFlag(FLAGS_num_ranks);
  if (count < 0) count = world_size - first;
  const int collectives = absl::GetFlag(FLAGS_collectives);
  if (jobs.empty() || world_size < 1 || first < 0 || count < 1 ||
      first + count > world_size || collectives < 0) {
    std::fprintf(stderr,
                 "load_worker: need --jobs, and 0 <= --first_rank < "
                 "--first_rank + --num_ranks <= --world_size\n");
    return 2;
  }
  const std::string latency_out = absl::GetFlag(FLAGS_latency_out);

  struct Slot {
    std::string job;
    int rank;
    RankReport report;
  };
  std::vector<Slot> slots;
  for (const std::string& job : jobs) {
    for (int r = first; r < first + count; ++r) slots.push_back({job, r, {}});
  }
  std::vector<std::thread> threads;
  threads.reserve(slots.size());
  for (Slot& slot : slots) {
    threads.emplace_back([&slot, world_size, collectives, &latency_out] {
      ClientOptions options;
      options.target = absl::GetFlag(FLAGS_target);
      options.job = slot.job;
      options.rank = slot.rank;
      options.world_size = world_size;
      options.timeout = absl::Seconds(absl::GetFlag(FLAGS_timeout_s));
      Rank rank(options, collectives, absl::GetFlag(FLAGS_medium_elements),
                !latency_out.empty());
      slot.report = rank.Run();
    });
  }
  for (std::thread& t : threads) t.join();

  bool all_ok = true;
  for (const Slot& slot : slots) {
    for (const std::string& p : slot.report.problems) {
      std::printf("%s\n", p.c_str());
    }
    std::printf("LOAD job=%s rank=%d ok=%d failed=%d wrong=%d planned=%d\n",
                slot.job.c_str(), slot.rank, slot.report.ok,
                slot.report.failed, slot.report.wrong, collectives);
    all_ok = all_ok && slot.report.ok == collectives &&
             slot.report.problems.empty();
  }
  std::fflush(stdout);
  if (!latency_out.empty()) {
    std::ofstream out(latency_out);
    for (const Slot& slot : slots) {
      for (const auto& [kind, usec] : slot.report.latencies) {
        out << KindName(kind) << ' ' << usec << '\n';
      }
    }
    if (!out) {
      std::fprintf(stderr, "load_worker: cannot write %s\n", latency_out.c_str());
      return 1;
    }
  }
  return all_ok ? 0 : 1;
}

}  // namespace
}  // namespace testing
}  // namespace reducer

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return reducer::testing::Main();
}
