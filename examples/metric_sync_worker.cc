// metric_sync_worker: one rank of an evaluation job that tracks accuracy and
// loss over its shard of fake batches, and syncs them across ranks once per
// epoch with MetricSync, the way PyTorch-Ignite's Accuracy and Loss metrics
// call sync_all_reduce in compute().
//
//   bazel-bin/server/reducerd &
//   examples/run_example.sh metric_sync_worker 4
//
// or by hand, one process per rank:
//
//   bazel-bin/examples/metric_sync_worker --job=eval --rank=0 --world_size=2 &
//   bazel-bin/examples/metric_sync_worker --job=eval --rank=1 --world_size=2
//
// Against a reducerd with --job_tokens_file, --token_file names a file
// holding the job's token (deploy/k8s/overlays/worker-job mounts it from a
// Secret).
//
// Reduce() is out-of-place: the local counters keep this rank's values, so
// each rank can still report its own accuracy next to the global one.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "absl/types/span.h"
#include "client/reducer_client.h"
#include "core/data_type.h"
#include "core/tensor.h"
#include "examples/example_flags.h"

// --target, --job (default metric-sync-example), --rank, --world_size:
// examples/example_flags.h.
ABSL_FLAG(int, epochs, 3, "evaluation epochs");
ABSL_FLAG(int, batches, 20, "batches per epoch on each rank");
ABSL_FLAG(int, batch_size, 32, "samples per batch");
ABSL_FLAG(std::string, token_file, "",
          "file holding the job's token (whitespace around it trimmed), for "
          "reducerd with --job_tokens_file; empty: no token sent");

namespace {

// A fixed hash, so that every run sees the same fake data.
uint64_t Mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// What a model would report for one sample: whether the arg-max matched the
// label, and the cross-entropy of the label's probability. The fake model
// gets better with each epoch.
struct Prediction {
  bool correct;
  double loss;
};

Prediction FakePrediction(int rank, int epoch, int batch, int sample) {
  const uint64_t h = Mix64(Mix64(Mix64(rank) ^ epoch) ^ (batch * 1000 + sample));
  const double p_label = 0.3 + 0.2 * epoch + 0.1 * ((h >> 8) % 4) / 4.0;
  const double u = static_cast<double>(h >> 11) / 9007199254740992.0;  // [0,1)
  return {u < p_label, -std::log(std::min(0.99, p_label * (0.8 + 0.4 * u)))};
}

// Ignite's Accuracy keeps _num_correct and _num_examples; Loss keeps a sum.
struct EvalState {
  int64_t num_correct = 0;
  int64_t num_examples = 0;
  double loss_sum = 0.0;
};

// The token in --token_file; empty without one. INVALID_ARGUMENT naming the
// flag when the file cannot be read or holds nothing.
absl::StatusOr<std::string> TokenFromFlag() {
  const std::string path = absl::GetFlag(FLAGS_token_file);
  if (path.empty()) return std::string();
  std::ifstream in(path);
  if (!in.is_open()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--token_file=", path, ": cannot read the file"));
  }
  std::stringstream text;
  text << in.rdbuf();
  std::string token(absl::StripAsciiWhitespace(text.str()));
  if (token.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--token_file=", path, ": the file is empty"));
  }
  return token;
}

absl::Status Run(const reducer::ClientOptions& rank_options) {
  reducer::ClientOptions options = rank_options;
  absl::StatusOr<std::string> token = TokenFromFlag();
  if (!token.ok()) return token.status();
  options.token = *std::move(token);
  absl::StatusOr<std::unique_ptr<reducer::Client>> client =
      reducer::Client::Connect(options);
  if (!client.ok()) return client.status();

  EvalState state;
  reducer::MetricSync sync(client->get());
  sync.Add("_num_correct",
           reducer::MutableTensorView::Of<int64_t>(
               absl::MakeSpan(&state.num_correct, 1)),
           reducer::ReduceOp::kSum);
  sync.Add("_num_examples",
           reducer::MutableTensorView::Of<int64_t>(
               absl::MakeSpan(&state.num_examples, 1)),
           reducer::ReduceOp::kSum);
  sync.Add("loss_sum",
           reducer::MutableTensorView::Of<double>(
               absl::MakeSpan(&state.loss_sum, 1)),
           reducer::ReduceOp::kSum);

  for (int epoch = 0; epoch < absl::GetFlag(FLAGS_epochs); ++epoch) {
    state = EvalState();  // Metric.reset() at the start of each epoch
    for (int batch = 0; batch < absl::GetFlag(FLAGS_batches); ++batch) {
      for (int sample = 0; sample < absl::GetFlag(FLAGS_batch_size); ++sample) {
        const Prediction p = FakePrediction(options.rank, epoch, batch, sample);
        state.num_correct += p.correct ? 1 : 0;
        state.num_examples += 1;
        state.loss_sum += p.loss;
      }
    }

    // Metric.compute(): one round trip for every state.
    absl::StatusOr<absl::flat_hash_map<std::string, reducer::Tensor>> global =
        sync.Reduce();
    if (!global.ok()) return global.status();
    const int64_t correct = (*global)["_num_correct"].values<int64_t>()[0];
    const int64_t examples = (*global)["_num_examples"].values<int64_t>()[0];
    const double loss_sum = (*global)["loss_sum"].values<double>()[0];
    const double local_accuracy = static_cast<double>(state.num_correct) /
                                  static_cast<double>(state.num_examples);
    absl::PrintF("rank %d epoch %d: local accuracy %.4f over %d examples\n",
                 options.rank, epoch, local_accuracy, state.num_examples);
    if (options.rank == 0) {
      absl::PrintF(
          "epoch %d: global accuracy %.4f over %d examples, mean loss %.4f\n",
          epoch, static_cast<double>(correct) / static_cast<double>(examples),
          examples, loss_sum / static_cast<double>(examples));
    }
    std::fflush(stdout);
  }
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  return reducer::examples::ExampleMain(argc, argv, "metric-sync-example", Run);
}
