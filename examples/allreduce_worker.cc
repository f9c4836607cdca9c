// allreduce_worker: one rank of a data-parallel training loop. Each step it
// computes fake gradients for its shard, averages them across ranks in place
// with AllReduceInPlace(kAvg), the way Horovod's allreduce_ or
// torch.distributed's all_reduce do, and applies an SGD update. Rank 0 prints
// each step's gradient checksum; at the end every rank checks that all ranks
// hold the same parameters.
//
//   bazel-bin/server/reducerd &
//   examples/run_example.sh allreduce_worker 4
//
// or by hand: bazel-bin/examples/allreduce_worker --job=train --rank=R
// --world_size=W for R = 0 .. W-1.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "client/reducer_client.h"
#include "core/data_type.h"
#include "core/tensor.h"
#include "examples/example_flags.h"

// --target, --job (default allreduce-example), --rank, --world_size:
// examples/example_flags.h.
ABSL_FLAG(int, steps, 5, "training steps");
ABSL_FLAG(int64_t, parameters, 1 << 20,
          "model size in float32 parameters (1 << 20 is 4 MiB: several chunks)");
ABSL_FLAG(double, learning_rate, 0.01, "SGD step size");

namespace {

uint64_t Fnv1a64(const void* data, size_t size) {
  const uint8_t* bytes = static_cast<const uint8_t*>(data);
  uint64_t h = 0xcbf29ce484222325ULL;
  for (size_t i = 0; i < size; ++i) {
    h ^= bytes[i];
    h *= 0x100000001b3ULL;
  }
  return h;
}

// This rank's gradient for parameter i at `step`: a smooth function of the
// parameter plus a rank-dependent part, as if each rank saw other data.
void FakeGradients(int rank, int step, absl::Span<const float> params,
                   absl::Span<float> grad) {
  for (size_t i = 0; i < grad.size(); ++i) {
    grad[i] = 0.5f * params[i] +
              0.001f * static_cast<float>((i * 31 + rank * 17 + step) % 97) -
              0.048f;
  }
}

absl::Status Run(const reducer::ClientOptions& options) {
  absl::StatusOr<std::unique_ptr<reducer::Client>> client =
      reducer::Client::Connect(options);
  if (!client.ok()) return client.status();

  const int64_t n = absl::GetFlag(FLAGS_parameters);
  const float lr = static_cast<float>(absl::GetFlag(FLAGS_learning_rate));
  std::vector<float> params(n, 1.0f);
  std::vector<float> grad(n);

  // Every rank starts from rank 0's parameters, as training scripts do.
  absl::Status s = (*client)->BroadcastInPlace(
      reducer::MutableTensorView::Of<float>(absl::MakeSpan(params)), /*root=*/0);
  if (!s.ok()) return s;

  for (int step = 0; step < absl::GetFlag(FLAGS_steps); ++step) {
    FakeGradients(options.rank, step, params, absl::MakeSpan(grad));
    const absl::Time start = absl::Now();
    s = (*client)->AllReduceInPlace(
        reducer::MutableTensorView::Of<float>(absl::MakeSpan(grad)),
        reducer::ReduceOp::kAvg);
    if (!s.ok()) return s;
    const absl::Duration took = absl::Now() - start;
    for (int64_t i = 0; i < n; ++i) params[i] -= lr * grad[i];
    if (options.rank == 0) {
      double sum = 0.0;
      for (float g : grad) sum += g;
      absl::PrintF("step %d: mean-gradient sum %.6f, checksum %016x, "
                   "all-reduce of %d floats took %s\n",
                   step, sum, Fnv1a64(grad.data(), grad.size() * sizeof(float)),
                   n, absl::FormatDuration(took));
      std::fflush(stdout);
    }
  }

  // All ranks must now hold the same parameters: the smallest and the largest
  // parameter hash across ranks agree only if they do.
  const int64_t hash =
      static_cast<int64_t>(Fnv1a64(params.data(), params.size() * sizeof(float)));
  absl::StatusOr<int64_t> low = (*client)->AllReduce(hash, reducer::ReduceOp::kMin);
  if (!low.ok()) return low.status();
  absl::StatusOr<int64_t> high = (*client)->AllReduce(hash, reducer::ReduceOp::kMax);
  if (!high.ok()) return high.status();
  if (*low != *high) {
    return absl::InternalError("ranks ended with different parameters");
  }
  if (options.rank == 0) {
    absl::PrintF("parameters identical on all %d ranks (checksum %016x)\n",
                 options.world_size, static_cast<uint64_t>(hash));
  }
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  return reducer::examples::ExampleMain(argc, argv, "allreduce-example", Run);
}
