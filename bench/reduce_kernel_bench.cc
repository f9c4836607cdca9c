// Reduction kernel bandwidth against memcpy of the same input bytes.
//
// Run (about 3 minutes; the medians of the repetitions are the figures):
//   bazel run //bench:reduce_kernel_bench -- --benchmark_repetitions=5
//       --benchmark_enable_random_interleaving=true   (one command line)
//
// Every benchmark reports bytes_per_second counting each byte read and each
// byte written once, so the figures compare directly:
// - BM_ReduceSum/W:w: w inputs of 16 MiB reduced into one 16 MiB output,
//   (w + 1) x 16 MiB per iteration.
// - BM_Memcpy/W:w: the same w inputs of 16 MiB each copied to w outputs,
//   2 x w x 16 MiB per iteration. W:1 is a plain 16 MiB memcpy.
// Before each timed iteration the caches are filled with unrelated clean
// lines, so every run starts from memory, whatever the size of the L3.
// The design's target: float32 sum at >= 80 % of memcpy.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "core/data_type.h"
#include "core/reduce.h"

namespace reducer {
namespace {

// 16 MiB per buffer: larger than the L2 of any core, so these measure memory
// bandwidth, as a reduction of large tensors in reducerd does.
constexpr size_t kBufferBytes = size_t{16} << 20;

// A page-touched, 64-byte aligned buffer that is freed with it. Not
// thread-safe.
class Buffer {
 public:
  explicit Buffer(uint8_t fill)
      : data_(static_cast<uint8_t*>(std::aligned_alloc(64, kBufferBytes))) {
    std::memset(data_, fill, kBufferBytes);
  }
  ~Buffer() { std::free(data_); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  uint8_t* data() const { return data_; }

 private:
  uint8_t* data_;
};

std::vector<std::unique_ptr<Buffer>> MakeBuffers(int count, uint8_t fill) {
  std::vector<std::unique_ptr<Buffer>> buffers;
  for (int k = 0; k < count; ++k)
    buffers.push_back(std::make_unique<Buffer>(fill));
  return buffers;
}

// Reads enough unrelated memory to push every buffer of the benchmark out of
// the caches, leaving clean lines (nothing to write back in the timed part).
// Not thread-safe.
class CacheEvicter {
 public:
  CacheEvicter() : lines_(kEvictBytes / sizeof(uint64_t), 1) {}
  void Evict(benchmark::State& state) {
    state.PauseTiming();
    uint64_t sum = 0;
    for (size_t i = 0; i < lines_.size(); i += 8) sum += lines_[i];
    benchmark::DoNotOptimize(sum);
    state.ResumeTiming();
  }

 private:
  // Four times the 32 MiB L3 that one core of this machine kind (an AMD
  // EPYC CCD) can fill, and more than the L3 of most server sockets.
  static constexpr size_t kEvictBytes = size_t{128} << 20;
  std::vector<uint64_t> lines_;
};

// state.range(0): the number of 16 MiB buffers copied.
void BM_Memcpy(benchmark::State& state) {
  const int world = static_cast<int>(state.range(0));
  // 0x3f bytes are small finite numbers in every floating type.
  const auto src = MakeBuffers(world, 0x3f);
  const auto dst = MakeBuffers(world, 0);
  CacheEvicter evicter;
  for (auto _ : state) {
    evicter.Evict(state);
    for (int k = 0; k < world; ++k) {
      std::memcpy(dst[k]->data(), src[k]->data(), kBufferBytes);
      benchmark::DoNotOptimize(dst[k]->data());
    }
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * 2 * world *
                          static_cast<int64_t>(kBufferBytes));
}
BENCHMARK(BM_Memcpy)
    ->ArgName("W")
    ->Arg(1)
    ->Arg(2)
    ->Arg(4)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// state.range(0): the number of inputs W; state.range(1): the DataType.
void BM_ReduceSum(benchmark::State& state) {
  const int world = static_cast<int>(state.range(0));
  const DataType dtype = static_cast<DataType>(state.range(1));
  const auto inputs = MakeBuffers(world, 0x3f);
  Buffer out(0);
  std::vector<const void*> pointers;
  for (const auto& in : inputs) pointers.push_back(in->data());
  const size_t n = kBufferBytes / DataTypeSize(dtype);
  CacheEvicter evicter;
  for (auto _ : state) {
    evicter.Evict(state);
    absl::Status s = Reduce(ReduceOp::kSum, dtype, pointers, n, out.data());
    if (!s.ok()) {
      state.SkipWithError(std::string(s.message()).c_str());
      break;
    }
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) *
                          (world + 1) * static_cast<int64_t>(kBufferBytes));
  state.SetLabel(std::string(DataTypeName(dtype)));
}
BENCHMARK(BM_ReduceSum)
    ->ArgNames({"W", "dtype"})
    ->Args({2, static_cast<int>(DataType::kFloat32)})
    ->Args({4, static_cast<int>(DataType::kFloat32)})
    ->Args({2, static_cast<int>(DataType::kBFloat16)})
    ->Args({2, static_cast<int>(DataType::kFloat16)})
    ->Args({2, static_cast<int>(DataType::kInt32)})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace reducer
