// One healthy tenant of bench/tenants_bench.py: a job of --world_size ranks,
// each a thread with a Client of its own (the gRPC path, the tenant's
// --token), running --warmup + --iters float32 SUM all-reduces of
// --size_bytes back to back. Rank r contributes 1 + r in every element;
// each result is checked against W + W(W-1)/2.
//
// A call that fails (a refusal, a timeout, an abort) is counted and the
// loop goes on, so that the report says how many calls reducerd refused
// this tenant while another one was hostile; a rank stops early after
// --max_failures. Connect failing counts as one refusal of every rank.
// Prints one JSON line, then exits 0 (1 only for bad flags):
//   {"job":"...","world_size":2,"size_bytes":65536,"calls":400,
//    "refused":0,"wrong":0,"first_refusal":"","latencies_us":[...]}
// latencies_us: every rank's timed calls that succeeded, pooled.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/reducer_client.h"

ABSL_FLAG(std::string, target, "127.0.0.1:50051", "reducerd address");
ABSL_FLAG(std::string, job, "healthy", "the tenant's job name");
ABSL_FLAG(std::string, token, "", "the tenant's bearer token");
ABSL_FLAG(int, world_size, 2, "ranks of the job (threads of this process)");
ABSL_FLAG(int, size_bytes, 64 << 10, "bytes per all-reduce (multiple of 4)");
ABSL_FLAG(int, iters, 200, "timed calls per rank");
ABSL_FLAG(int, warmup, 10, "untimed calls per rank first");
ABSL_FLAG(int, max_failures, 20, "a rank stops after this many failed calls");
ABSL_FLAG(int, timeout_s, 20, "ClientOptions::timeout: Connect and each call");

namespace {

using Clock = std::chrono::steady_clock;

// What the ranks found, shared between their threads.
struct Outcome {
  absl::Mutex mu;
  int calls ABSL_GUARDED_BY(mu) = 0;
  int refused ABSL_GUARDED_BY(mu) = 0;
  int wrong ABSL_GUARDED_BY(mu) = 0;
  std::string first_refusal ABSL_GUARDED_BY(mu);
  std::vector<double> latencies_us ABSL_GUARDED_BY(mu);

  void Refused(const absl::Status& status) {
    absl::MutexLock lock(&mu);
    ++refused;
    if (first_refusal.empty()) first_refusal = status.ToString();
  }
};

// JSON string literal of `s` (quotes, backslashes and control bytes escaped).
std::string Quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(c);
    } else if (static_cast<unsigned char>(c) < 0x20) {
      absl::StrAppend(&out, " ");
    } else {
      out.push_back(c);
    }
  }
  return out + "\"";
}

void RunRank(int rank, Outcome* outcome) {
  const int world_size = absl::GetFlag(FLAGS_world_size);
  reducer::ClientOptions options;
  options.target = absl::GetFlag(FLAGS_target);
  options.job = absl::GetFlag(FLAGS_job);
  options.rank = rank;
  options.world_size = world_size;
  options.token = absl::GetFlag(FLAGS_token);
  options.timeout = absl::Seconds(absl::GetFlag(FLAGS_timeout_s));
  options.shared_memory = reducer::SharedMemory::kOff;
  auto client = reducer::Client::Connect(options);
  if (!client.ok()) {
    outcome->Refused(client.status());
    return;
  }
  const float expected =
      static_cast<float>(world_size + world_size * (world_size - 1) / 2);
  const std::vector<float> data(absl::GetFlag(FLAGS_size_bytes) / 4,
                                1.0f + rank);
  const int warmup = absl::GetFlag(FLAGS_warmup);
  const int total = warmup + absl::GetFlag(FLAGS_iters);
  int failures = 0;
  std::vector<double> latencies;
  for (int i = 0; i < total && failures < absl::GetFlag(FLAGS_max_failures);
       ++i) {
    const auto start = Clock::now();
    absl::StatusOr<reducer::Tensor> result = (*client)->AllReduce(
        reducer::TensorView::Of<float>(data), reducer::ReduceOp::kSum);
    const std::chrono::duration<double, std::micro> took = Clock::now() - start;
    {
      absl::MutexLock lock(&outcome->mu);
      ++outcome->calls;
    }
    if (!result.ok()) {
      ++failures;
      outcome->Refused(result.status());
      continue;
    }
    bool right = true;
    for (float v : result->values<float>()) right = right && v == expected;
    if (!right) {
      absl::MutexLock lock(&outcome->mu);
      ++outcome->wrong;
    }
    if (i >= warmup) latencies.push_back(took.count());
  }
  absl::MutexLock lock(&outcome->mu);
  outcome->latencies_us.insert(outcome->latencies_us.end(), latencies.begin(),
                               latencies.end());
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const int world_size = absl::GetFlag(FLAGS_world_size);
  const int size_bytes = absl::GetFlag(FLAGS_size_bytes);
  if (world_size < 1 || size_bytes <= 0 || size_bytes % 4 != 0) {
    std::fprintf(stderr,
                 "healthy_tenant: --world_size must be at least 1 and "
                 "--size_bytes a positive multiple of 4\n");
    return 1;
  }
  Outcome outcome;
  std::vector<std::thread> ranks;
  for (int r = 0; r < world_size; ++r) {
    ranks.emplace_back([r, &outcome] { RunRank(r, &outcome); });
  }
  for (std::thread& t : ranks) t.join();
  absl::MutexLock lock(&outcome.mu);
  std::printf(
      "{\"job\":%s,\"world_size\":%d,\"size_bytes\":%d,\"calls\":%d,"
      "\"refused\":%d,\"wrong\":%d,\"first_refusal\":%s,\"latencies_us\":[%s]}"
      "\n",
      Quoted(absl::GetFlag(FLAGS_job)).c_str(), world_size, size_bytes,
      outcome.calls, outcome.refused, outcome.wrong,
      Quoted(outcome.first_refusal).c_str(),
      absl::StrJoin(outcome.latencies_us, ",", [](std::string* out, double v) {
        absl::StrAppend(out, absl::SixDigits(v));
      }).c_str());
  return 0;
}
