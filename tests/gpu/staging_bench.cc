// staging_bench: the figures of CUDA device staging, on a machine with a
// GPU. Prints, for N = 64 MiB of float32:
//   cudaMemcpy device to pinned host: the peak (GB/s);
//   all-reduce W=2 from host memory and from device memory: the median of
//   5 calls (ms) against one reducerd on loopback, and the staging cost
//   (device minus host) as GB/s of the 2N bytes staged per rank.
// Exits 0 having printed "no GPU ..." where there is none.
//
//   bazel run //tests/gpu:staging_bench
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/reducer_client.h"
#include "tests/gpu/gpu_support.h"
#include "tests/process_harness.h"

namespace reducer {
namespace testing {
namespace {

constexpr int kWorld = 2;
constexpr int64_t kElements = int64_t{16} << 20;  // 64 MiB of float32
constexpr int kRepeats = 5;

// Median milliseconds of kRepeats all-reduces, every rank in a thread, each
// rank's input made by make_view(rank); -1 on error (printed).
double MedianAllReduceMs(std::vector<std::unique_ptr<Client>>& clients,
                         const std::vector<TensorView>& views) {
  std::vector<double> ms;
  for (int i = 0; i <= kRepeats; ++i) {  // the first call warms up
    std::vector<bool> ok(kWorld, false);
    const absl::Time start = absl::Now();
    std::vector<std::thread> threads;
    for (int r = 0; r < kWorld; ++r) {
      threads.emplace_back([&, r] {
        absl::StatusOr<Tensor> sum = clients[r]->AllReduce(views[r], ReduceOp::kSum);
        ok[r] = sum.ok();
        if (!sum.ok()) std::fprintf(stderr, "rank %d: %s\n", r, sum.status().ToString().c_str());
      });
    }
    for (std::thread& t : threads) t.join();
    if (!ok[0] || !ok[1]) return -1;
    if (i > 0) ms.push_back(absl::ToDoubleMilliseconds(absl::Now() - start));
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

int Main() {
  if (CudaDevices() == 0) {
    std::printf("%s\n", NoGpuReason().c_str());
    return 0;
  }
  const size_t bytes = kElements * sizeof(float);
  absl::StatusOr<double> peak = PinnedCopyGBps(bytes);
  if (!peak.ok()) {
    std::fprintf(stderr, "%s\n", peak.status().ToString().c_str());
    return 1;
  }
  std::printf("cudaMemcpy device to pinned host, 64 MiB: %.2f GB/s\n", *peak);

  absl::StatusOr<std::unique_ptr<ReducerdProcess>> server = ReducerdProcess::Start();
  if (!server.ok()) {
    std::fprintf(stderr, "%s\n", server.status().ToString().c_str());
    return 1;
  }
  std::vector<std::unique_ptr<Client>> clients(kWorld);
  std::vector<std::thread> threads;
  for (int r = 0; r < kWorld; ++r) {
    threads.emplace_back([&, r] {
      ClientOptions options;
      options.target = (*server)->address();
      options.job = "staging-bench";
      options.rank = r;
      options.world_size = kWorld;
      options.cuda_staging_bytes = bytes;
      absl::StatusOr<std::unique_ptr<Client>> c = Client::Connect(options);
      if (c.ok()) clients[r] = *std::move(c);
    });
  }
  for (std::thread& t : threads) t.join();
  if (!clients[0] || !clients[1]) {
    std::fprintf(stderr, "Connect failed\n");
    return 1;
  }
  std::vector<std::vector<float>> host(kWorld, std::vector<float>(kElements, 1.0f));
  std::vector<TensorView> host_views, device_views;
  std::vector<void*> device(kWorld, nullptr);
  for (int r = 0; r < kWorld; ++r) {
    host_views.push_back(TensorView::Of<float>(host[r]));
    absl::StatusOr<void*> d = DeviceAlloc(bytes);
    if (!d.ok() || !CopyToDevice(*d, host[r].data(), bytes).ok()) {
      std::fprintf(stderr, "device buffer: %s\n", d.status().ToString().c_str());
      return 1;
    }
    device[r] = *d;
    device_views.push_back(TensorView::OnDevice(Device::Cuda(0), *d,
                                                DataType::kFloat32, {kElements}));
  }
  const double host_ms = MedianAllReduceMs(clients, host_views);
  const double device_ms = MedianAllReduceMs(clients, device_views);
  std::printf("all-reduce 64 MiB float32 W=2, host memory:   %.1f ms (median of %d)\n",
              host_ms, kRepeats);
  std::printf("all-reduce 64 MiB float32 W=2, device memory: %.1f ms (median of %d)\n",
              device_ms, kRepeats);
  if (host_ms > 0 && device_ms > host_ms) {
    std::printf("staging: %.1f ms per call, %.2f GB/s of the 128 MiB staged per rank "
                "(%.0f %% of cudaMemcpy's peak)\n",
                device_ms - host_ms, 2.0 * bytes / ((device_ms - host_ms) / 1e3) / 1e9,
                100.0 * 2.0 * bytes / ((device_ms - host_ms) / 1e3) / 1e9 / *peak);
  }
  clients.clear();
  for (void* d : device) DeviceFree(d);
  return host_ms > 0 && device_ms > 0 ? 0 : 1;
}

}  // namespace
}  // namespace testing
}  // namespace reducer

int main() { return reducer::testing::Main(); }
