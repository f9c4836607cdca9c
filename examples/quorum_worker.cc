// quorum_worker: one rank of a training loop that survives a lost rank.
// Every step is a quorum step (Client::AllReduceQuorum): it ends over the
// ranks that arrived in time, so the others go on when one dies or stalls,
// and the lost rank, started again (or connecting again after it was left
// out), joins a later step and takes the parameters from a survivor by
// Broadcast. Try it: start 4 ranks, kill one, start it again.
//
//   bazel-bin/server/reducerd &
//   REDUCER_JOB=demo examples/run_example.sh quorum_worker 4 --step_ms=500 &
//   pkill -9 -f 'quorum_worker.*--rank=3'     # the others go on
//   bazel-bin/examples/quorum_worker --job=demo --rank=3 --world_size=4
//       --step_ms=500          # (one command line) joins a later step
//
// tests/quorum_steps_test drives it with real kills and stops.
//
// The model is --params float64 values, p[i] = i / 2 at the start. Step s
// sums, over its contributors r, the gradient g_r(s)[i] = (r + 1) * (s + 1)
// + i % 7 (kSum: exact in float64) and every rank subtracts the sum. When
// a step lists ranks as joined, its first contributor hands the
// parameters to them with a Broadcast named "state <s>" over the ranks
// taking part. The loop runs steps up to --steps - 1 and reports on stdout
// (lines flushed):
//
//   JOINED <first step>          (after a Connect into a running job)
//   PAUSE <s>                    (--pause_at: before step s, then sleeps
//                                 --pause_ms, for the test to kill or stop
//                                 it)
//   STEP <s> contributors=<0,1,2> joined=<3> ms=<elapsed of the step>
//   LEFT_OUT <s> <message>       (its call was refused: it connects again)
//   FINAL <p[0]>,<p[1]>,...      (%.17g each)
//   ERROR <message>              (then exits 1)
//
// A rank that connects into a running job contributes the identity at its
// first step (AllReduceQuorum does that) and takes the parameters from the
// Broadcast that follows it.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/reducer_client.h"
#include "core/tensor.h"
#include "examples/example_flags.h"

// --target, --job (default quorum-example), --rank, --world_size:
// examples/example_flags.h.
ABSL_FLAG(int, timeout_s, 60, "ClientOptions::timeout, in seconds");
ABSL_FLAG(int, steps, 40, "Quorum steps in the whole run.");
ABSL_FLAG(int, params, 64, "float64 parameters of the model.");
ABSL_FLAG(int, min_ranks, 1, "QuorumOptions::min_ranks.");
ABSL_FLAG(int, grace_ms, 2000, "QuorumOptions::grace.");
ABSL_FLAG(int, step_ms, 50, "How long each step's computation sleeps.");
ABSL_FLAG(int, pause_at, -1, "Before this step, print PAUSE and sleep.");
ABSL_FLAG(int, pause_ms, 1000, "How long the pause sleeps.");

namespace reducer {
namespace {

void Say(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

int Fail(const absl::Status& status) {
  Say(absl::StrCat("ERROR ", status.ToString()));
  return 1;
}

Tensor Gradient(int rank, int step, int n) {
  Tensor g(DataType::kFloat64, {n});
  for (int i = 0; i < n; ++i) {
    g.mutable_values<double>()[i] = (rank + 1.0) * (step + 1) + i % 7;
  }
  return g;
}

int Run() {
  ClientOptions options = examples::ExampleClientOptions();
  options.timeout = absl::Seconds(absl::GetFlag(FLAGS_timeout_s));
  const int n = absl::GetFlag(FLAGS_params);
  QuorumOptions quorum;
  quorum.min_ranks = absl::GetFlag(FLAGS_min_ranks);
  quorum.grace = absl::Milliseconds(absl::GetFlag(FLAGS_grace_ms));

  absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(options);
  if (!client.ok()) return Fail(client.status());
  Tensor params(DataType::kFloat64, {n});
  for (int i = 0; i < n; ++i) params.mutable_values<double>()[i] = i / 2.0;

  // This rank's next step: known from its first result on (a process that
  // connects into a running job starts at a later step than 0).
  int step = 0;
  bool knows_step = false;
  for (;;) {
    if (knows_step && step >= absl::GetFlag(FLAGS_steps)) break;
    if (knows_step && step == absl::GetFlag(FLAGS_pause_at)) {
      Say(absl::StrCat("PAUSE ", step));
      absl::SleepFor(absl::Milliseconds(absl::GetFlag(FLAGS_pause_ms)));
    }
    absl::SleepFor(absl::Milliseconds(absl::GetFlag(FLAGS_step_ms)));
    const Tensor grad = Gradient(options.rank, step, n);
    const absl::Time start = absl::Now();
    absl::StatusOr<QuorumResult> result =
        (*client)->AllReduceQuorum(grad.view(), ReduceOp::kSum, quorum);
    const absl::Duration elapsed = absl::Now() - start;
    if (result.status().code() == absl::StatusCode::kFailedPrecondition) {
      // Left out: connect again, into the running job.
      Say(absl::StrCat("LEFT_OUT ", step, " ", result.status().message()));
      client->reset();
      client = Client::Connect(options);
      if (!client.ok()) return Fail(client.status());
      knows_step = false;
      continue;
    }
    if (!result.ok()) return Fail(result.status());
    step = static_cast<int>(result->step);
    if (std::count(result->joined.begin(), result->joined.end(),
                   options.rank)) {
      Say(absl::StrCat("JOINED ", step));
    }
    knows_step = true;
    Say(absl::StrCat("STEP ", step,
                     " contributors=", absl::StrJoin(result->contributors, ","),
                     " joined=", absl::StrJoin(result->joined, ","),
                     " ms=", absl::ToInt64Milliseconds(elapsed)));
    for (int i = 0; i < n; ++i) {
      params.mutable_values<double>()[i] -= result->tensor.values<double>()[i];
    }
    if (!result->joined.empty()) {
      std::vector<int> group = result->contributors;
      group.insert(group.end(), result->joined.begin(), result->joined.end());
      std::sort(group.begin(), group.end());
      CallOptions call;
      call.name = absl::StrCat("state ", step);
      call.group = group;
      absl::Status state = (*client)->BroadcastInPlace(
          params.mutable_view(), result->contributors[0], call);
      if (!state.ok()) return Fail(state);
    }
    ++step;
  }
  std::vector<std::string> values;
  for (double v : params.values<double>())
    values.push_back(absl::StrFormat("%.17g", v));
  Say(absl::StrCat("FINAL ", absl::StrJoin(values, ",")));
  return 0;
}

}  // namespace
}  // namespace reducer

int main(int argc, char** argv) {
  reducer::examples::ParseExampleFlags(argc, argv, "quorum-example");
  return reducer::Run();
}
