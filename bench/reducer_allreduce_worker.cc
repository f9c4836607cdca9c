// One rank of the side-by-side all-reduce benchmark (bench/run_bench.py runs
// W of these against a reducerd, next to Gloo and MPI). For each size it
// runs float32 SUM all-reduces back to back, timing each one; rank 0 prints
// one JSON line per size:
//   {"system":"reducer","world_size":4,"size_bytes":4096,"latencies_us":[...]}
// With --metric_sync it instead all-reduces 2 float64 values --iters times
// (the metric-sync pattern) and prints "pattern":"metric_sync". With
// --fused_tensors=K (K > 1) each step is one AllReduceMany of K tensors of
// the given size ("pattern":"fused","tensors":K). With --split=K each step
// is K AllReduceAsync calls on 1/K of the tensor, all in flight at once (a
// probe of what several chunks in flight would gain). Rank r contributes
// 1 + r in every element; the plain out-of-place form checks every element
// of each size's last result against the closed form W + W(W-1)/2 and
// exits 1 naming the first wrong one. Every record also carries
// "cpu_us_per_call": the process's CPU time (every thread, user and system)
// over that size's calls, warm-up included, divided by their number.
//
// --shared_memory=off|auto|required sets ClientOptions::shared_memory (default
// off: the gRPC path). With required the worker also checks, after Connect,
// that its process maps a memfd (the same-host path's segments appear in
// /proc/self/maps as "/memfd:..."); when Connect refuses with
// FAILED_PRECONDITION or no segment is mapped, it prints why on stderr and
// exits 77, which bench/run_bench.py reads as "the same-host path is not
// available here" (a skip, not a failure). Every record carries
// "shared_memory":"<mode>".
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "client/reducer_client.h"

ABSL_FLAG(std::string, target, "127.0.0.1:50051", "reducerd address");
ABSL_FLAG(std::string, job, "bench", "job name, same on every rank");
ABSL_FLAG(int, rank, 0, "this process's rank");
ABSL_FLAG(int, local_world_size, 0,
          "ranks of the job on this host, for a relay (reducerd --upstream) "
          "as --target (ClientOptions::local_world_size; 0: not given)");
ABSL_FLAG(int, world_size, 1, "number of ranks");
ABSL_FLAG(std::string, sizes, "4,4096,4194304", "comma-separated byte sizes");
ABSL_FLAG(int, iters, 20, "timed iterations per size");
ABSL_FLAG(int, warmup, 3, "untimed iterations per size");
ABSL_FLAG(bool, metric_sync, false, "run the metric-sync pattern instead");
ABSL_FLAG(bool, in_place, false, "use AllReduceInPlace");
ABSL_FLAG(bool, async, false,
          "start each call with the async form (AllReduceAsync, or with "
          "--in_place AllReduceInPlaceAsync) and wait for it at once, as "
          "the torch backend does");
ABSL_FLAG(int, split, 1,
          "K > 1: each step is K AllReduceAsync calls on 1/K of the tensor "
          "each, all in flight, then K waits");
ABSL_FLAG(int, fused_tensors, 1,
          "K > 1: each step is one AllReduceMany of K tensors of each size");
ABSL_FLAG(std::string, shared_memory, "off",
          "ClientOptions::shared_memory: off (gRPC alone), auto or required");
ABSL_FLAG(std::string, tls_ca_file, "",
          "connect over TLS, trusting this PEM CA (ClientOptions::tls); "
          "empty: plaintext");

namespace {

using Clock = std::chrono::steady_clock;

// The exit status for "the same-host path cannot run here".
constexpr int kSharedMemoryUnavailable = 77;

absl::StatusOr<reducer::SharedMemory> ParseSharedMemory(absl::string_view text) {
  if (text == "off") return reducer::SharedMemory::kOff;
  if (text == "auto") return reducer::SharedMemory::kAuto;
  if (text == "required") return reducer::SharedMemory::kRequired;
  return absl::InvalidArgumentError(
      absl::StrCat("--shared_memory must be off, auto or required, not '",
                   text, "'"));
}

// Whether this process maps any memfd, as the same-host path's segments are.
bool MapsMemfd() {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    if (line.find("/memfd:") != std::string::npos) return true;
  }
  return false;
}

int Unavailable(const std::string& why) {
  std::fprintf(stderr, "rank %d: shared memory unavailable: %s\n",
               absl::GetFlag(FLAGS_rank), why.c_str());
  return kSharedMemoryUnavailable;
}

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "rank %d: %s\n", absl::GetFlag(FLAGS_rank),
               status.ToString().c_str());
  return 1;
}

// The CPU time this process has used so far, every thread, in microseconds.
double ProcessCpuMicros() {
  timespec now;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now);
  return now.tv_sec * 1e6 + now.tv_nsec / 1e3;
}

void Report(int world_size, size_t size_bytes, const char* pattern,
            double cpu_us_per_call, const std::vector<double>& latencies_us) {
  std::printf(
      "{\"system\":\"reducer\",\"world_size\":%d,\"size_bytes\":%zu,%s"
      "\"shared_memory\":\"%s\",\"cpu_us_per_call\":%.3f,"
      "\"latencies_us\":[%s]}\n",
      world_size, size_bytes, pattern,
      absl::GetFlag(FLAGS_shared_memory).c_str(), cpu_us_per_call,
      absl::StrJoin(latencies_us, ",", [](std::string* out, double v) {
        out->append(std::to_string(v));
      }).c_str());
  std::fflush(stdout);
}

// OK when every element of `result` is the sum over W ranks of 1 + rank.
absl::Status CheckSum(const reducer::Tensor& result, int world_size) {
  const float expected =
      static_cast<float>(world_size + world_size * (world_size - 1) / 2);
  absl::Span<const float> values = result.values<float>();
  for (size_t i = 0; i < values.size(); ++i) {
    if (values[i] != expected) {
      return absl::InternalError(absl::StrCat(
          "wrong all-reduce result: element ", i, " of ", values.size(),
          " is ", values[i], ", expected ", expected));
    }
  }
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  reducer::ClientOptions options;
  options.target = absl::GetFlag(FLAGS_target);
  options.job = absl::GetFlag(FLAGS_job);
  options.rank = absl::GetFlag(FLAGS_rank);
  options.world_size = absl::GetFlag(FLAGS_world_size);
  options.local_world_size = absl::GetFlag(FLAGS_local_world_size);
  options.timeout = absl::Minutes(2);
  if (!absl::GetFlag(FLAGS_tls_ca_file).empty()) {
    options.tls = reducer::TlsOptions{absl::GetFlag(FLAGS_tls_ca_file)};
  }
  absl::StatusOr<reducer::SharedMemory> shared_memory =
      ParseSharedMemory(absl::GetFlag(FLAGS_shared_memory));
  if (!shared_memory.ok()) return Fail(shared_memory.status());
  options.shared_memory = *shared_memory;
  const bool required = *shared_memory == reducer::SharedMemory::kRequired;
  auto client = reducer::Client::Connect(options);
  if (required && absl::IsFailedPrecondition(client.status())) {
    return Unavailable(client.status().ToString());
  }
  if (!client.ok()) return Fail(client.status());
  if (required && !MapsMemfd()) {
    return Unavailable(
        "Connect with shared_memory=required succeeded, but this process "
        "maps no memfd segment (the client does not take the same-host path)");
  }
  const int iters = absl::GetFlag(FLAGS_iters);
  const int warmup = absl::GetFlag(FLAGS_warmup);
  const bool print = options.rank == 0;

  if (absl::GetFlag(FLAGS_metric_sync)) {
    double state[2] = {1.0 * options.rank, 2.0};
    std::vector<double> latencies;
    const double cpu_start = ProcessCpuMicros();
    for (int i = 0; i < warmup + iters; ++i) {
      auto start = Clock::now();
      auto result = (*client)->AllReduce(
          reducer::TensorView(state, reducer::DataType::kFloat64, {2}),
          reducer::ReduceOp::kSum);
      if (!result.ok()) return Fail(result.status());
      std::chrono::duration<double, std::micro> took = Clock::now() - start;
      if (i >= warmup) latencies.push_back(took.count());
    }
    const double cpu_per_call =
        (ProcessCpuMicros() - cpu_start) / (warmup + iters);
    if (print) {
      Report(options.world_size, 16, "\"pattern\":\"metric_sync\",",
             cpu_per_call, latencies);
    }
    return 0;
  }

  for (absl::string_view size_text :
       absl::StrSplit(absl::GetFlag(FLAGS_sizes), ',', absl::SkipEmpty())) {
    size_t size_bytes = 0;
    if (!absl::SimpleAtoi(size_text, &size_bytes)) {
      return Fail(absl::InvalidArgumentError("bad --sizes"));
    }
    std::vector<float> data(size_bytes / sizeof(float), 1.0f + options.rank);
    const int fused = absl::GetFlag(FLAGS_fused_tensors);
    const std::vector<reducer::TensorView> many(
        fused, reducer::TensorView::Of<float>(data));
    const std::vector<reducer::ReduceOp> ops(fused, reducer::ReduceOp::kSum);
    std::vector<double> latencies;
    std::optional<reducer::Tensor> last;  // the plain form's last result
    const double cpu_start = ProcessCpuMicros();
    for (int i = 0; i < warmup + iters; ++i) {
      auto start = Clock::now();
      absl::Status status;
      const int split = absl::GetFlag(FLAGS_split);
      if (split > 1) {
        const size_t part = (data.size() + split - 1) / split;
        std::vector<std::unique_ptr<reducer::CollectiveHandle>> handles;
        for (size_t begin = 0; begin < data.size(); begin += part) {
          const size_t n = std::min(part, data.size() - begin);
          handles.push_back((*client)->AllReduceAsync(
              reducer::TensorView::Of<float>(
                  absl::MakeConstSpan(data).subspan(begin, n)),
              reducer::ReduceOp::kSum));
        }
        for (auto& h : handles) {
          if (status.ok()) status = h->Wait().status();
        }
      } else if (fused > 1) {
        status = (*client)->AllReduceMany(many, ops).status();
      } else if (absl::GetFlag(FLAGS_async) && absl::GetFlag(FLAGS_in_place)) {
        status =
            (*client)
                ->AllReduceInPlaceAsync(
                    reducer::MutableTensorView::Of<float>(absl::MakeSpan(data)),
                    reducer::ReduceOp::kSum)
                ->Wait()
                .status();
      } else if (absl::GetFlag(FLAGS_async)) {
        absl::StatusOr<std::vector<reducer::Tensor>> result =
            (*client)
                ->AllReduceAsync(reducer::TensorView::Of<float>(data),
                                 reducer::ReduceOp::kSum)
                ->Wait();
        status = result.status();
        if (status.ok() && i + 1 == warmup + iters) {
          last = std::move(result->at(0));
        }
      } else if (absl::GetFlag(FLAGS_in_place)) {
        status = (*client)->AllReduceInPlace(
            reducer::MutableTensorView::Of<float>(absl::MakeSpan(data)),
            reducer::ReduceOp::kSum);
      } else {
        absl::StatusOr<reducer::Tensor> result = (*client)->AllReduce(
            reducer::TensorView::Of<float>(data), reducer::ReduceOp::kSum);
        status = result.status();
        if (status.ok() && i + 1 == warmup + iters) last = *std::move(result);
      }
      if (!status.ok()) return Fail(status);
      std::chrono::duration<double, std::micro> took = Clock::now() - start;
      if (i >= warmup) latencies.push_back(took.count());
    }
    const double cpu_per_call =
        (ProcessCpuMicros() - cpu_start) / (warmup + iters);
    if (last.has_value()) {
      if (absl::Status checked = CheckSum(*last, options.world_size);
          !checked.ok()) {
        return Fail(checked);
      }
    }
    const std::string pattern =
        fused > 1 ? absl::StrCat("\"pattern\":\"fused\",\"tensors\":", fused, ",")
                  : std::string();
    if (print) {
      Report(options.world_size, size_bytes, pattern.c_str(), cpu_per_call,
             latencies);
    }
  }
  return 0;
}
