// One rank of bench/quorum_bench.py: a loop of float32 SUM all-reduces of
// --size_bytes, either plain (Client::AllReduce, --mode=plain) or quorum
// steps (Client::AllReduceQuorum with --min_ranks and --grace_ms,
// --mode=quorum), timing each call. Rank r contributes 1 + r in every
// element; a result is checked against the closed form, the sum of 1 + r
// over its contributors (all W ranks for a plain call), for the last call
// and, in quorum mode, for the first call of every new set of
// contributors; a wrong element exits 1 naming it.
//
// With --pause_at=K (quorum mode) this rank, before its call K, prints
//   PAUSE <K> <pid>
// (flushed) and sleeps --pause_ms, so that the driver can SIGKILL it at a
// known point of the loop. Had it not been killed, it goes on.
//
// Every rank that finishes prints one JSON line on stdout:
//   {"system":"reducer","mode":"quorum","rank":0,"world_size":4,
//    "size_bytes":67108864,"shared_memory":"off","latencies_us":[...],
//    "end_s":[...],"steps":[...],"contributors":["0,1,2,3",...]}
// latencies_us: the timed calls (after --warmup); end_s: when each timed
// call returned, CLOCK_MONOTONIC seconds (the clock of Python's
// time.monotonic); steps and contributors: each timed quorum step's
// QuorumResult::step and contributors (empty for plain calls). Exits 1,
// with the error on stderr, when a call fails.
//
// --shared_memory=off|auto|required sets ClientOptions::shared_memory
// (default off: the gRPC path).
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/reducer_client.h"

ABSL_FLAG(std::string, target, "127.0.0.1:50051", "reducerd address");
ABSL_FLAG(std::string, job, "quorum-bench", "job name, same on every rank");
ABSL_FLAG(int, rank, 0, "this process's rank");
ABSL_FLAG(int, world_size, 1, "number of ranks");
ABSL_FLAG(std::string, mode, "quorum",
          "plain (AllReduce) or quorum (AllReduceQuorum)");
ABSL_FLAG(int64_t, size_bytes, 64 << 20, "tensor size, a multiple of 4");
ABSL_FLAG(int, iters, 10, "timed calls");
ABSL_FLAG(int, warmup, 2, "untimed calls before them");
ABSL_FLAG(int, min_ranks, 0, "QuorumOptions::min_ranks (0: all)");
ABSL_FLAG(int, grace_ms, 2000, "QuorumOptions::grace in milliseconds");
ABSL_FLAG(int, pause_at, -1,
          "quorum mode: before call K (counting warm-up), print PAUSE and "
          "sleep --pause_ms");
ABSL_FLAG(int, pause_ms, 60000, "how long the pause sleeps");
ABSL_FLAG(int, timeout_s, 120, "ClientOptions::timeout in seconds");
ABSL_FLAG(std::string, shared_memory, "off",
          "ClientOptions::shared_memory: off (gRPC alone), auto or required");

namespace reducer {
namespace {

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "rank %d: %s\n", absl::GetFlag(FLAGS_rank),
               status.ToString().c_str());
  return 1;
}

absl::StatusOr<SharedMemory> ParseSharedMemory(absl::string_view text) {
  if (text == "off") return SharedMemory::kOff;
  if (text == "auto") return SharedMemory::kAuto;
  if (text == "required") return SharedMemory::kRequired;
  return absl::InvalidArgumentError(absl::StrCat(
      "--shared_memory must be off, auto or required, not '", text, "'"));
}

// CLOCK_MONOTONIC now, in seconds.
double MonotonicSeconds() {
  timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return now.tv_sec + now.tv_nsec * 1e-9;
}

// OK when every element of `result` is the sum of 1 + r over `contributors`.
absl::Status CheckSum(const Tensor& result,
                      const std::vector<int>& contributors) {
  float expected = 0;
  for (int r : contributors) expected += 1.0f + r;
  absl::Span<const float> values = result.values<float>();
  for (size_t i = 0; i < values.size(); ++i) {
    if (values[i] != expected) {
      return absl::InternalError(absl::StrCat(
          "wrong result over contributors ", absl::StrJoin(contributors, ","),
          ": element ", i, " of ", values.size(), " is ", values[i],
          ", expected ", expected));
    }
  }
  return absl::OkStatus();
}

// The timed calls' figures, printed as one JSON line.
struct Record {
  std::vector<double> latencies_us;
  std::vector<double> end_s;
  std::vector<uint64_t> steps;
  std::vector<std::string> contributors;
};

void Print(const ClientOptions& options, const Record& r) {
  auto fixed = [](int digits) {
    return [digits](std::string* out, double v) {
      char text[32];
      std::snprintf(text, sizeof(text), "%.*f", digits, v);
      out->append(text);
    };
  };
  std::printf(
      "{\"system\":\"reducer\",\"mode\":\"%s\",\"rank\":%d,\"world_size\":%d,"
      "\"size_bytes\":%lld,\"shared_memory\":\"%s\",\"latencies_us\":[%s],"
      "\"end_s\":[%s],\"steps\":[%s],\"contributors\":[%s]}\n",
      absl::GetFlag(FLAGS_mode).c_str(), options.rank, options.world_size,
      static_cast<long long>(absl::GetFlag(FLAGS_size_bytes)),
      absl::GetFlag(FLAGS_shared_memory).c_str(),
      absl::StrJoin(r.latencies_us, ",", fixed(1)).c_str(),
      absl::StrJoin(r.end_s, ",", fixed(6)).c_str(),
      absl::StrJoin(r.steps, ",").c_str(),
      absl::StrJoin(r.contributors, ",",
                    [](std::string* out, const std::string& c) {
                      absl::StrAppend(out, "\"", c, "\"");
                    })
          .c_str());
  std::fflush(stdout);
}

int Run() {
  ClientOptions options;
  options.target = absl::GetFlag(FLAGS_target);
  options.job = absl::GetFlag(FLAGS_job);
  options.rank = absl::GetFlag(FLAGS_rank);
  options.world_size = absl::GetFlag(FLAGS_world_size);
  options.timeout = absl::Seconds(absl::GetFlag(FLAGS_timeout_s));
  absl::StatusOr<SharedMemory> shared_memory =
      ParseSharedMemory(absl::GetFlag(FLAGS_shared_memory));
  if (!shared_memory.ok()) return Fail(shared_memory.status());
  options.shared_memory = *shared_memory;
  const std::string mode = absl::GetFlag(FLAGS_mode);
  const bool quorum = mode == "quorum";
  const int64_t size_bytes = absl::GetFlag(FLAGS_size_bytes);
  if ((!quorum && mode != "plain") || size_bytes <= 0 || size_bytes % 4) {
    return Fail(absl::InvalidArgumentError(
        "--mode must be plain or quorum and --size_bytes a positive multiple "
        "of 4"));
  }
  QuorumOptions quorum_options;
  quorum_options.min_ranks = absl::GetFlag(FLAGS_min_ranks);
  quorum_options.grace = absl::Milliseconds(absl::GetFlag(FLAGS_grace_ms));

  absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(options);
  if (!client.ok()) return Fail(client.status());
  const std::vector<float> data(size_bytes / sizeof(float),
                                1.0f + options.rank);
  std::vector<int> everyone;
  for (int r = 0; r < options.world_size; ++r) everyone.push_back(r);

  const int warmup = absl::GetFlag(FLAGS_warmup);
  const int calls = warmup + absl::GetFlag(FLAGS_iters);
  Record record;
  std::set<std::vector<int>> checked;  // contributor sets already checked
  for (int i = 0; i < calls; ++i) {
    if (quorum && i == absl::GetFlag(FLAGS_pause_at)) {
      std::printf("PAUSE %d %d\n", i, static_cast<int>(getpid()));
      std::fflush(stdout);
      absl::SleepFor(absl::Milliseconds(absl::GetFlag(FLAGS_pause_ms)));
    }
    const auto start = std::chrono::steady_clock::now();
    std::optional<Tensor> result;
    std::vector<int> contributors = everyone;
    uint64_t step = 0;
    if (quorum) {
      absl::StatusOr<QuorumResult> got = (*client)->AllReduceQuorum(
          TensorView::Of<float>(data), ReduceOp::kSum, quorum_options);
      if (!got.ok()) return Fail(got.status());
      result = std::move(got->tensor);
      contributors = std::move(got->contributors);
      step = got->step;
    } else {
      absl::StatusOr<Tensor> got =
          (*client)->AllReduce(TensorView::Of<float>(data), ReduceOp::kSum);
      if (!got.ok()) return Fail(got.status());
      result = *std::move(got);
    }
    const std::chrono::duration<double, std::micro> took =
        std::chrono::steady_clock::now() - start;
    const double end_s = MonotonicSeconds();
    const bool last = i + 1 == calls;
    if (last || (quorum && checked.insert(contributors).second)) {
      if (absl::Status s = CheckSum(*result, contributors); !s.ok()) {
        return Fail(s);
      }
    }
    if (i < warmup) continue;
    record.latencies_us.push_back(took.count());
    record.end_s.push_back(end_s);
    if (quorum) {
      record.steps.push_back(step);
      record.contributors.push_back(absl::StrJoin(contributors, ","));
    }
  }
  Print(options, record);
  return 0;
}

}  // namespace
}  // namespace reducer

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return reducer::Run();
}
