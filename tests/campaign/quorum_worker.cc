// One rank of a quorum job in the robustness campaign
// (tests/campaign/campaign.h): a training loop of quorum steps
// (Client::AllReduceQuorum, in and out of place by turns) that survives its
// peers' faults, appending one history line per operation to --log
// (tests/campaign/history.h; tests/campaign/quorum_check.h holds the lines
// to the contract).
//
// Each step all-reduces (SUM) --max_elements float32 values: element 0 is 1
// on a rank that has seen --stop_file, element i > 0 is
// Base(i) x 4^rank, so the result names its contributors exactly (a
// contribution missing or counted twice shows); the worker checks it
// against the contributors the step lists. The rank also keeps a
// replicated state, folded from each step's result; a step that lists
// joined ranks is followed by a "handoff": a Broadcast of the state from
// the first contributor to the contributors and the joined ranks (named
// after the step), after which the joined ranks hold it too. Every line
// of a step or a handoff carries the rank's state after it.
//
// Lifecycle: Connect (retried until it works or the campaign ends), then
// steps. A step that fails (left out, session lost, timed out) makes the
// rank destroy its Client and Connect again, which admits it into the
// running job: the others may have finished that step, so its state would
// miss it. The ranks stop together after the first
// step whose element 0 is not 0; a rank not connected stops as soon as
// --stop_file exists. Exit 0 then, or 3 at --give_up_unix_s.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/reducer_client.h"
#include "tests/campaign/history.h"
#include "tests/campaign/rank_flags.h"

ABSL_FLAG(int, world_size, 3, "ranks in the job");
ABSL_FLAG(int64_t, max_elements, 640 << 10, "float32 elements of every step");
ABSL_FLAG(int, min_ranks, 2, "QuorumOptions::min_ranks");
ABSL_FLAG(int, grace_ms, 3000, "QuorumOptions::grace");
ABSL_FLAG(int, step_pause_ms, 20, "the 'compute' between two steps");

namespace reducer {
namespace testing {
namespace {

float Base(int64_t i) { return static_cast<float>((i * 7 + 3) % 11 + 1); }

float Weight(int rank) { return static_cast<float>(int64_t{1} << (2 * rank)); }

// Rank `rank`'s input of `n` elements.
std::vector<float> StepInput(int64_t n, int rank, bool stop) {
  std::vector<float> in(n);
  in[0] = stop ? 1.0f : 0.0f;
  for (int64_t i = 1; i < n; ++i) in[i] = Base(i) * Weight(rank);
  return in;
}

// "ok" when `got` is the sum over `contributors`; else "bad: ...".
std::string CheckSum(const float* got, int64_t n, const std::vector<int>& contributors) {
  float weights = 0;
  for (int c : contributors) weights += Weight(c);
  if (got[0] < 0 || got[0] > static_cast<float>(contributors.size())) {
    return absl::StrFormat("bad: element 0 (stop votes) is %g with %d contributors", got[0],
                           contributors.size());
  }
  for (int64_t i = 1; i < n; ++i) {
    if (got[i] != Base(i) * weights) {
      return absl::StrFormat("bad: element %d is %g, want %g (the sum over the contributors)", i,
                             got[i], Base(i) * weights);
    }
  }
  return "ok";
}

class QuorumRank {
 public:
  QuorumRank()
      : log_fd_(OpenHistoryLog()),
        n_(std::max<int64_t>(absl::GetFlag(FLAGS_max_elements), 2)),
        options_(CampaignClientOptions(absl::GetFlag(FLAGS_world_size))) {
    quorum_.min_ranks = absl::GetFlag(FLAGS_min_ranks);
    quorum_.grace = absl::Milliseconds(absl::GetFlag(FLAGS_grace_ms));
  }

  int Run() {
    const absl::Time give_up = GiveUpTime();
    while (absl::Now() < give_up) {
      if (client_ == nullptr) {
        if (StopFileExists()) return 0;
        if (!Connect()) absl::SleepFor(absl::Milliseconds(200));
        continue;
      }
      absl::SleepFor(absl::Milliseconds(absl::GetFlag(FLAGS_step_pause_ms)));
      absl::StatusOr<bool> stop = Step();
      if (stop.ok() && *stop) {
        client_.reset();
        return 0;
      }
    }
    return 3;
  }

 private:
  bool Connect() {
    Operation op = NewOperation("connect", -1, 0);
    absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(options_);
    Finish(&op, client.status());
    if (!client.ok()) return false;
    client_ = *std::move(client);
    ++generation_;
    has_state_ = false;
    return true;
  }

  // One step, and the handoff after it; true when the ranks agreed to stop.
  absl::StatusOr<bool> Step() {
    const bool in_place = steps_run_++ % 2 == 1;
    Operation op =
        NewOperation(in_place ? "quorum_inplace" : "quorum", Operation::kUnknownStep, n_);
    const std::vector<float> before = StepInput(n_, options_.rank, StopFileExists());
    std::vector<float> buffer = before;
    CallOptions call;
    call.timeout = absl::Milliseconds(absl::GetFlag(FLAGS_timeout_ms));
    absl::StatusOr<QuorumResult> result =
        in_place ? client_->AllReduceQuorumInPlace(
                       MutableTensorView(buffer.data(), DataType::kFloat32, {n_}), ReduceOp::kSum,
                       quorum_, call)
                 : client_->AllReduceQuorum(TensorView(before.data(), DataType::kFloat32, {n_}),
                                            ReduceOp::kSum, quorum_, call);
    if (!result.ok()) {
      op.check =
          !in_place || buffer == before ? "ok" : "bad: failed in-place step changed the buffer";
      Finish(&op, result.status());
      // Whatever the failure, the others may have finished the step: this
      // rank's state would miss it, so it joins again for the state.
      client_.reset();
      return result.status();
    }
    op.step = static_cast<int64_t>(result->step);
    op.contributors = result->contributors;
    op.joined = result->joined;
    if (!in_place && (result->tensor.dtype() != DataType::kFloat32 ||
                      result->tensor.shape() != std::vector<int64_t>{n_})) {
      op.check = "bad: result dtype or shape";
      Finish(&op, absl::OkStatus());
      client_.reset();  // its state cannot follow: join again
      return false;
    }
    const float* sum = in_place ? buffer.data() : static_cast<const float*>(result->tensor.data());
    op.check = CheckSum(sum, n_, result->contributors);
    const bool joined = std::count(result->joined.begin(), result->joined.end(), options_.rank);
    if (!joined) {
      // A contributor without a state is in a job started afresh, where
      // every rank is.
      if (!has_state_) state_[0] = state_[1] = state_[2] = 0;
      has_state_ = true;
      Fold(*result, sum);
    } else {
      has_state_ = false;
    }
    op.state = StateName();
    const bool stop = sum[0] != 0;
    Finish(&op, absl::OkStatus());
    if (!result->joined.empty()) Handoff(*result);
    return stop;
  }

  // The state after a step: folded from its number, its contributors and
  // its result (uint64 arithmetic wraps).
  void Fold(const QuorumResult& result, const float* sum) {
    uint64_t total = 0;
    for (int64_t i = 1; i < n_; ++i) total += static_cast<uint64_t>(sum[i]);
    state_[0] = state_[0] * 1000003u + result.step;
    state_[1] = state_[1] * 31u + total;
    for (int c : result.contributors) state_[2] = state_[2] * 7u + static_cast<uint64_t>(c) + 1;
  }

  std::string StateName() const {
    return has_state_ ? absl::StrFormat("%016x-%016x-%016x", state_[0], state_[1], state_[2]) : "";
  }

  // The first contributor's state to every rank of the step.
  void Handoff(const QuorumResult& result) {
    Operation op = NewOperation("handoff", static_cast<int64_t>(result.step), 3);
    op.named = true;
    CallOptions call;
    call.timeout = absl::Milliseconds(absl::GetFlag(FLAGS_timeout_ms));
    call.name = absl::StrCat("handoff ", result.step);
    call.group = result.contributors;
    call.group.insert(call.group.end(), result.joined.begin(), result.joined.end());
    std::sort(call.group.begin(), call.group.end());
    int64_t state[3];
    std::copy(state_, state_ + 3, reinterpret_cast<uint64_t*>(state));
    const absl::Status sent = client_->BroadcastInPlace(
        MutableTensorView(state, DataType::kInt64, {3}), result.contributors[0], call);
    if (sent.ok()) {
      std::copy(state, state + 3, reinterpret_cast<int64_t*>(state_));
      has_state_ = true;
      op.state = StateName();
    }
    Finish(&op, sent);
    // A joined rank without the state cannot go on: it joins again. A
    // contributor keeps its session (the next step says whether it lives).
    if (!sent.ok() && !has_state_) client_.reset();
  }

  Operation NewOperation(absl::string_view kind, int64_t step, int64_t elements) const {
    Operation op;
    op.job = options_.job;
    op.rank = options_.rank;
    op.gen = generation_;
    op.step = step;
    op.kind = std::string(kind);
    op.elements = elements;
    op.timeout_ms = absl::GetFlag(FLAGS_timeout_ms);
    op.check = "none";
    op.start = absl::Now();
    return op;
  }

  // Ends `op` now with `status` and appends its line.
  void Finish(Operation* op, const absl::Status& status) {
    op->end = absl::Now();
    op->code = absl::StatusCodeToString(status.code());
    op->message = std::string(status.message());
    AppendHistoryLine(log_fd_, *op);
  }

  const int log_fd_;
  const int64_t n_;
  ClientOptions options_;
  QuorumOptions quorum_;
  std::unique_ptr<Client> client_;
  int generation_ = 0;
  int64_t steps_run_ = 0;
  bool has_state_ = false;  // since the last Connect
  uint64_t state_[3] = {0, 0, 0};
};

}  // namespace
}  // namespace testing
}  // namespace reducer

int main(int argc, char** argv) {
  return reducer::testing::CampaignRankMain<reducer::testing::QuorumRank>(argc,
                                                                          argv);
}
