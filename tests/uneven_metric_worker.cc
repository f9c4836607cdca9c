// uneven_metric_worker: one rank of an Ignite-style metric over uneven
// data, for tests/uneven_done_test. Rank r holds --batches batches; batch
// b has (7 r + 3 b) mod 11 correct answers out of 10. Each batch, the
// ranks that still have one sum their counts (AllReduce, kSum) and add the
// sums to their running totals; a rank out of batches calls Done(), which
// returns once every rank has. Then every rank takes the largest running
// totals (AllReduce, kMax: the longest rank saw every batch of every rank)
// and prints
//
//   FINAL <correct> <total> <ms waited in Done>
//
// or `ERROR <status>` (exit 1).
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/reducer_client.h"
#include "core/tensor.h"
#include "tests/worker_flags.h"

ABSL_FLAG(int, batches, 1, "Batches this rank holds.");

namespace reducer::testing {
namespace {

int Fail(const absl::Status& status) {
  std::printf("ERROR %s\n", status.ToString().c_str());
  return 1;
}

int Run() {
  const ClientOptions options = WorkerClientOptions();
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(options);
  if (!client.ok()) return Fail(client.status());
  int64_t running[2] = {0, 0};  // correct, total
  for (int b = 0; b < absl::GetFlag(FLAGS_batches); ++b) {
    const int64_t counts[2] = {(7 * options.rank + 3 * b) % 11, 10};
    absl::StatusOr<Tensor> sum =
        (*client)->AllReduce(TensorView::Of<int64_t>(counts), ReduceOp::kSum);
    if (!sum.ok()) return Fail(sum.status());
    running[0] += sum->values<int64_t>()[0];
    running[1] += sum->values<int64_t>()[1];
  }
  const absl::Time start = absl::Now();
  if (absl::Status done = (*client)->Done(); !done.ok()) return Fail(done);
  const absl::Duration waited = absl::Now() - start;
  absl::StatusOr<Tensor> final_counts =
      (*client)->AllReduce(TensorView::Of<int64_t>(running), ReduceOp::kMax);
  if (!final_counts.ok()) return Fail(final_counts.status());
  std::printf("FINAL %lld %lld %lld\n",
              static_cast<long long>(final_counts->values<int64_t>()[0]),
              static_cast<long long>(final_counts->values<int64_t>()[1]),
              static_cast<long long>(absl::ToInt64Milliseconds(waited)));
  return 0;
}

}  // namespace
}  // namespace reducer::testing

int main(int argc, char** argv) {
  reducer::testing::ParseWorkerFlags(argc, argv, /*default_timeout_s=*/60);
  return reducer::testing::Run();
}
