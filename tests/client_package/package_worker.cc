// package_worker: one rank of a job, built outside the Bazel workspace
// against the installed client (CMake's Reducer::client or pkg-config's
// reducer). It runs an out-of-place and an in-place all-reduce, a scalar
// all-reduce and a metric sync (out-of-place, then in place), and checks
// every result against its closed form: rank r contributes values scaled by
// r + 1, so a sum over W ranks is W(W+1)/2 times the base value.
//
//   package_worker TARGET JOB RANK WORLD_SIZE
//
// Prints "package_worker rank R: OK" and exits 0 when every check passed;
// otherwise prints each failed check and exits 1.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "client/reducer_client.h"

namespace {

int failures = 0;

void Check(bool ok, const std::string& what) {
  if (!ok) {
    std::fprintf(stderr, "CHECK FAILED: %s\n", what.c_str());
    ++failures;
  }
}

bool CheckOk(const absl::Status& status, const char* call) {
  if (!status.ok()) {
    std::fprintf(stderr, "CHECK FAILED: %s: %s\n", call, status.ToString().c_str());
    ++failures;
  }
  return status.ok();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s TARGET JOB RANK WORLD_SIZE\n", argv[0]);
    return 2;
  }
  reducer::ClientOptions options;
  options.target = argv[1];
  options.job = argv[2];
  options.rank = std::atoi(argv[3]);
  options.world_size = std::atoi(argv[4]);
  options.timeout = absl::Seconds(30);
  const int r = options.rank;
  const int64_t w = options.world_size;
  const int64_t triangle = w * (w + 1) / 2;  // sum over ranks of (r + 1)

  absl::StatusOr<std::unique_ptr<reducer::Client>> client =
      reducer::Client::Connect(options);
  if (!CheckOk(client.status(), "Connect")) return 1;

  // Out-of-place float32 sum: element i is (r + 1) * (i + 1) on rank r, so
  // the sum is W(W+1)/2 * (i + 1), exact in float32 at this size.
  constexpr int kElements = 1000;
  std::vector<float> grad(kElements);
  for (int i = 0; i < kElements; ++i) grad[i] = float((r + 1) * (i + 1));
  const std::vector<float> grad_before = grad;
  absl::StatusOr<reducer::Tensor> sum = (*client)->AllReduce(
      reducer::TensorView::Of<float>(grad), reducer::ReduceOp::kSum);
  if (CheckOk(sum.status(), "AllReduce(float32, sum)")) {
    Check(sum->dtype() == reducer::DataType::kFloat32, "sum dtype float32");
    Check(sum->shape() == std::vector<int64_t>{kElements}, "sum shape [1000]");
    absl::Span<const float> v = sum->values<float>();
    int wrong = 0;
    for (int i = 0; i < kElements; ++i) {
      if (v[i] != float(triangle * (i + 1))) ++wrong;
    }
    Check(wrong == 0, std::to_string(wrong) + " of 1000 sums differ from W(W+1)/2*(i+1)");
    Check(grad == grad_before, "out-of-place AllReduce left its input as it was");
  }

  // In-place int64 max: element i is i * (r + 1), so the max is i * W.
  std::vector<int64_t> counts(64);
  for (int i = 0; i < 64; ++i) counts[i] = int64_t{i} * (r + 1);
  if (CheckOk((*client)->AllReduceInPlace(
                  reducer::MutableTensorView::Of<int64_t>(absl::MakeSpan(counts)),
                  reducer::ReduceOp::kMax),
              "AllReduceInPlace(int64, max)")) {
    int wrong = 0;
    for (int i = 0; i < 64; ++i) {
      if (counts[i] != int64_t{i} * w) ++wrong;
    }
    Check(wrong == 0, std::to_string(wrong) + " of 64 maxima differ from i*W");
  }

  // Scalar: sum of (r + 1).
  absl::StatusOr<double> scalar =
      (*client)->AllReduce(double(r + 1), reducer::ReduceOp::kSum);
  if (CheckOk(scalar.status(), "AllReduce(double, sum)")) {
    Check(*scalar == double(triangle), "scalar sum is W(W+1)/2");
  }

  // Metric sync, as Ignite's Accuracy and Loss: correct = 10 (r + 1) and
  // total = 100 on every rank (sums), loss = (r + 1) / 2 (average).
  int64_t correct = 10 * (r + 1);
  int64_t total = 100;
  double loss = (r + 1) / 2.0;
  reducer::MetricSync sync(client->get());
  sync.Add("correct", reducer::MutableTensorView::Of<int64_t>(absl::MakeSpan(&correct, 1)),
           reducer::ReduceOp::kSum);
  sync.Add("total", reducer::MutableTensorView::Of<int64_t>(absl::MakeSpan(&total, 1)),
           reducer::ReduceOp::kSum);
  sync.Add("loss", reducer::MutableTensorView::Of<double>(absl::MakeSpan(&loss, 1)),
           reducer::ReduceOp::kAvg);
  const int64_t want_correct = 10 * triangle;
  const int64_t want_total = 100 * w;
  const double want_loss = double(triangle) / 2.0 / double(w);
  absl::StatusOr<absl::flat_hash_map<std::string, reducer::Tensor>> global =
      sync.Reduce();
  if (CheckOk(global.status(), "MetricSync::Reduce")) {
    Check(global->size() == 3, "MetricSync::Reduce returned 3 states");
    Check(global->at("correct").values<int64_t>()[0] == want_correct, "correct is 10*W(W+1)/2");
    Check(global->at("total").values<int64_t>()[0] == want_total, "total is 100*W");
    Check(global->at("loss").values<double>()[0] == want_loss, "loss is the mean of (r+1)/2");
    Check(correct == 10 * (r + 1) && total == 100 && loss == (r + 1) / 2.0,
          "MetricSync::Reduce left the local states as they were");
  }
  if (CheckOk(sync.ReduceInPlace(), "MetricSync::ReduceInPlace")) {
    Check(correct == want_correct && total == want_total && loss == want_loss,
          "MetricSync::ReduceInPlace wrote the global values into the states");
  }

  if (failures > 0) {
    std::fprintf(stderr, "package_worker rank %d: %d check(s) failed\n", r, failures);
    return 1;
  }
  std::printf("package_worker rank %d: OK\n", r);
  return 0;
}
