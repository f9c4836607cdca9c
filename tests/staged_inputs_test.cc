// Device staging's overlap with the network, held to every transport: a
// contribution whose inputs are still being copied to host memory (chunk by
// chunk, behind an InputGate) is sent only as its bytes arrive, whichever
// way it travels: the shared Collectives stream, a Collective stream of its
// own in many messages, the same-host shared-memory path, or two reducerd
// shards (an all-reduce cut into partitions, a reduce-scatter gathered).
//
// The GPU is stood in for by host memory (FakeGpuStaging, given to
// ClientSession::Open), so this runs on every machine. Its staged bytes
// start as 0xA5 garbage and a copier thread fills them a chunk at a time
// with pauses between chunks: a transport that read a byte before its gate
// covered it would send garbage, and the result would differ from the
// closed form (tests/closed_form.h). A copy that fails half way fails the
// rank's call with the copy's own error.
#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/internal/client_session.h"
#include "client/staging/copy_progress.h"
#include "client/staging/device_staging.h"
#include "client/staging/fake_device_tensor.h"
#include "core/data_type.h"
#include "core/device.h"
#include "core/fingerprint.h"
#include "core/payload_layout.h"
#include "core/tensor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/closed_form.h"
#include "tests/fault_test_base.h"
#include "tests/process_harness.h"
#include "tests/rank_threads.h"
#include "tests/status_matchers.h"

namespace reducer {
namespace testing {
namespace {

using ::testing::HasSubstr;

constexpr int kWorld = 2;
// reducerd's message size: a 3 MiB payload is 48 messages.
constexpr size_t kMessageBytes = 64 << 10;
// The fake's copy chunk, smaller than a message, so that a message waits
// for several chunks, and even the small payload spans two.
constexpr size_t kCopyChunkBytes = 4 << 10;
// Large enough for the shared stream to refuse it (more than one message)
// and for two shards to cut it (more than 64 KiB a partition).
constexpr int64_t kLargeElements = 768 << 10;  // float32: 3 MiB
constexpr int64_t kSmallElements = 2048;       // float32: 8 KiB
constexpr char kGarbage = static_cast<char>(0xA5);

// The host copy of one contribution, filled by a thread of its own a chunk
// at a time; fails at `fail_at` bytes when that is set.
class SlowCopy final : public StagedInputs {
 public:
  SlowCopy(const Contribution& c, std::optional<size_t> fail_at)
      : host_(c.payload_bytes(), kGarbage), progress_(c.payload_bytes()) {
    for (size_t i = 0; i < c.inputs.size(); ++i) {
      inputs_.push_back(host_.data() + c.layout.offsets[i]);
    }
    copier_ = std::thread([this, layout = c.layout, from = c.inputs, fail_at] {
      const size_t total = host_.size();
      for (size_t begin = 0; begin < total; begin += kCopyChunkBytes) {
        absl::SleepFor(absl::Microseconds(300));
        const size_t end = std::min(begin + kCopyChunkBytes, total);
        if (fail_at.has_value() && end > *fail_at) {
          progress_.Fail(absl::InternalError(absl::StrCat(
              "fake copy failed at byte ", *fail_at)));
          return;
        }
        ForEachTensorPiece(layout, begin, end, [&](size_t i, size_t a, size_t b) {
          std::memcpy(host_.data() + a,
                      static_cast<const char*>(from[i]) + (a - layout.offsets[i]),
                      b - a);
        });
        progress_.Advance(end);
      }
    });
  }
  ~SlowCopy() override { copier_.join(); }

  const std::vector<const void*>& inputs() const override { return inputs_; }
  const InputGate* gate() const override { return &progress_; }

 private:
  std::vector<char> host_;
  std::vector<const void*> inputs_;
  CopyProgress progress_;
  std::thread copier_;  // last: starts once the rest exists
};

// A GPU stood in for by host memory: every input is staged through a
// SlowCopy; results become fake device tensors.
class FakeGpuStaging final : public DeviceStaging {
 public:
  explicit FakeGpuStaging(std::optional<size_t> fail_at) : fail_at_(fail_at) {}

  absl::Status CheckMemory(Device, absl::Span<const void* const>,
                           absl::string_view) override {
    return absl::OkStatus();
  }
  absl::StatusOr<std::unique_ptr<StagedInputs>> ToHost(
      const Contribution& c) override {
    ++staged_;
    return std::make_unique<SlowCopy>(c, fail_at_);
  }
  absl::StatusOr<Tensor> ToDevice(const Tensor& host, Device device,
                                  void*) override {
    return FakeDeviceTensor(host, device);
  }
  absl::Status CopyInto(const Tensor& result, const MutableTensorView& inout,
                        void*) override {
    std::memcpy(inout.data(), result.data(), result.num_bytes());
    return absl::OkStatus();
  }

  int staged() const { return staged_.load(); }

 private:
  const std::optional<size_t> fail_at_;
  std::atomic<int> staged_{0};
};

// How the ranks reach reducerd.
struct Route {
  std::string name;
  int shards = 1;
  SharedMemory shared_memory = SharedMemory::kOff;
};

void PrintTo(const Route& route, std::ostream* out) { *out << route.name; }

// A `kind` call summing the float32 [n] `input`, which sits on CUDA device 0.
CollectiveRequestSpec DeviceSumSpec(CollectiveKind kind, int64_t n,
                                    const std::vector<uint8_t>& input) {
  CollectiveRequestSpec spec;
  spec.kind = kind;
  spec.tensors = {{DataType::kFloat32, {n}, ReduceOp::kSum}};
  spec.inputs = {input.data()};
  spec.device = Device::Cuda(0);
  return spec;
}

class StagedInputsTest : public ::testing::TestWithParam<Route> {
 protected:
  void SetUp() override {
    for (int s = 0; s < GetParam().shards; ++s) {
      absl::StatusOr<std::unique_ptr<ReducerdProcess>> shard =
          ReducerdProcess::Start({absl::StrCat("--chunk_bytes=", kMessageBytes)});
      ASSERT_TRUE(shard.ok()) << shard.status();
      addresses_.push_back((*shard)->address());
      shards_.push_back(*std::move(shard));
    }
  }

  // Opens every rank of `job` (concurrently: Open returns once all joined),
  // rank r staging through stagings[r].
  std::vector<std::unique_ptr<ClientSession>> OpenAll(
      const std::string& job, std::vector<std::unique_ptr<FakeGpuStaging>> stagings,
      absl::Duration timeout = absl::Seconds(20)) {
    std::vector<std::unique_ptr<ClientSession>> sessions(kWorld);
    RunOnEveryRank(kWorld, [&](int rank) {
      ClientOptions options;
      options.target = absl::StrJoin(addresses_, ",");
      options.job = job;
      options.rank = rank;
      options.world_size = kWorld;
      options.timeout = timeout;
      options.shared_memory = GetParam().shared_memory;
      absl::StatusOr<std::unique_ptr<ClientSession>> s =
          ClientSession::Open(options, std::move(stagings[rank]));
      if (!s.ok()) {
        failures_.Add(absl::StrCat("rank ", rank, " Open: ", s.status().ToString()));
        return;
      }
      sessions[rank] = *std::move(s);
    });
    return sessions;
  }

  static std::vector<std::unique_ptr<FakeGpuStaging>> Stagings(
      std::optional<size_t> rank0_fails_at = std::nullopt) {
    std::vector<std::unique_ptr<FakeGpuStaging>> stagings;
    for (int r = 0; r < kWorld; ++r) {
      stagings.push_back(std::make_unique<FakeGpuStaging>(
          r == 0 ? rank0_fails_at : std::nullopt));
    }
    return stagings;
  }

  // Compares result `got` with `want` (n elements of dtype); records a
  // failure naming `what` when they differ.
  void Check(const Tensor& got, DataType dtype, const std::vector<uint8_t>& want,
             int64_t n, const std::string& what) {
    if (got.num_bytes() != want.size()) {
      failures_.Add(absl::StrCat(what, ": ", got.num_bytes(), " bytes, want ", want.size()));
      return;
    }
    absl::Status same = CompareElements(dtype, got.data(), want.data(), n, what);
    if (!same.ok()) failures_.Add(std::string(same.message()));
  }

  Watchdog watchdog_{"StagedInputsTest", absl::Seconds(150)};
  std::vector<std::unique_ptr<ReducerdProcess>> shards_;
  std::vector<std::string> addresses_;
  RankFailures failures_;
};

// An all-reduce of two tensors (float32 [n], int32 [n/2 + 1]: the second
// starts after padding) from "device" memory.
TEST_P(StagedInputsTest, AllReduceSendsEachByteOnlyOnceItsCopyLanded) {
  for (const int64_t n : {kSmallElements, kLargeElements}) {
    SCOPED_TRACE(absl::StrCat("n=", n));
    std::vector<std::unique_ptr<FakeGpuStaging>> stagings = Stagings();
    std::vector<FakeGpuStaging*> watched = {stagings[0].get(), stagings[1].get()};
    std::vector<std::unique_ptr<ClientSession>> sessions =
        OpenAll(absl::StrCat("allreduce-", n), std::move(stagings));
    ASSERT_EQ(sessions.size(), static_cast<size_t>(kWorld));
    const int64_t m = n / 2 + 1;
    RunOnEveryRank(kWorld, [&](int rank) {
      if (sessions[rank] == nullptr) return;
      const std::vector<uint8_t> a =
          ClosedFormInput(ReduceOp::kSum, DataType::kFloat32, rank, n, 1);
      const std::vector<uint8_t> b =
          ClosedFormInput(ReduceOp::kMax, DataType::kInt32, rank, m, 2);
      CollectiveRequestSpec spec;
      spec.kind = CollectiveKind::kAllReduce;
      spec.tensors = {{DataType::kFloat32, {n}, ReduceOp::kSum},
                      {DataType::kInt32, {m}, ReduceOp::kMax}};
      spec.inputs = {a.data(), b.data()};
      spec.device = Device::Cuda(0);
      absl::StatusOr<std::vector<Tensor>> out = sessions[rank]->Run(spec, {});
      if (!out.ok() || out->size() != 2) {
        failures_.Add(absl::StrCat("rank ", rank, ": ", out.status().ToString()));
        return;
      }
      Check((*out)[0], DataType::kFloat32,
            ClosedFormExpected(ReduceOp::kSum, DataType::kFloat32, {0, 1}, n, 1),
            n, absl::StrCat("rank ", rank, " float32 sum"));
      Check((*out)[1], DataType::kInt32,
            ClosedFormExpected(ReduceOp::kMax, DataType::kInt32, {0, 1}, m, 2), m,
            absl::StrCat("rank ", rank, " int32 max"));
      if ((*out)[0].device() != Device::Cuda(0)) {
        failures_.Add(absl::StrCat("rank ", rank, ": result on ", (*out)[0].device().ToString()));
      }
    });
    failures_.ExpectNone();
    for (FakeGpuStaging* staging : watched) EXPECT_EQ(staging->staged(), 1);
  }
}

// A reduce-scatter: with two shards it is cut into partitions, whose pieces
// are gathered from the inputs before they are sent.
TEST_P(StagedInputsTest, ReduceScatterReadsItsInputOnlyOnceCopied) {
  const int64_t n = kLargeElements;  // kWorld divides it
  std::vector<std::unique_ptr<ClientSession>> sessions =
      OpenAll("reduce-scatter", Stagings());
  ASSERT_EQ(sessions.size(), static_cast<size_t>(kWorld));
  const std::vector<uint8_t> whole =
      ClosedFormExpected(ReduceOp::kSum, DataType::kFloat32, {0, 1}, n, 3);
  RunOnEveryRank(kWorld, [&](int rank) {
    if (sessions[rank] == nullptr) return;
    const std::vector<uint8_t> x =
        ClosedFormInput(ReduceOp::kSum, DataType::kFloat32, rank, n, 3);
    absl::StatusOr<std::vector<Tensor>> out = sessions[rank]->Run(
        DeviceSumSpec(CollectiveKind::kReduceScatter, n, x), {});
    if (!out.ok() || out->size() != 1) {
      failures_.Add(absl::StrCat("rank ", rank, ": ", out.status().ToString()));
      return;
    }
    const size_t slice = n / kWorld * sizeof(float);
    const std::vector<uint8_t> want(whole.begin() + rank * slice,
                                    whole.begin() + (rank + 1) * slice);
    Check((*out)[0], DataType::kFloat32, want, n / kWorld,
          absl::StrCat("rank ", rank, " slice"));
  });
  failures_.ExpectNone();
}

// Rank 0's copy fails half way: its call fails with the copy's error (the
// large one after some of its messages were sent), and rank 1's call ends
// too (it does not hang).
TEST_P(StagedInputsTest, ACopyThatFailsHalfWayFailsTheCallWithItsError) {
  for (const int64_t n : {kSmallElements, kLargeElements}) {
    SCOPED_TRACE(absl::StrCat("n=", n));
    const size_t fail_at = n * sizeof(float) / 2;
    std::vector<std::unique_ptr<ClientSession>> sessions = OpenAll(
        absl::StrCat("fails-", n), Stagings(fail_at), absl::Seconds(5));
    ASSERT_EQ(sessions.size(), static_cast<size_t>(kWorld));
    std::vector<absl::Status> outcome(kWorld);
    RunOnEveryRank(kWorld, [&](int rank) {
      if (sessions[rank] == nullptr) return;
      const std::vector<uint8_t> x =
          ClosedFormInput(ReduceOp::kSum, DataType::kFloat32, rank, n, 4);
      outcome[rank] =
          sessions[rank]
              ->Run(DeviceSumSpec(CollectiveKind::kAllReduce, n, x), {})
              .status();
    });
    failures_.ExpectNone();
    EXPECT_THAT(outcome[0],
                StatusIs(absl::StatusCode::kInternal,
                         HasSubstr(absl::StrCat("fake copy failed at byte ",
                                                fail_at))));
    EXPECT_FALSE(outcome[1].ok());
  }
}

INSTANTIATE_TEST_SUITE_P(
    Transports, StagedInputsTest,
    ::testing::Values(Route{"grpc", 1, SharedMemory::kOff},
                      Route{"shared_memory", 1, SharedMemory::kRequired},
                      Route{"two_shards", 2, SharedMemory::kOff}),
    [](const ::testing::TestParamInfo<Route>& info) { return info.param.name; });

}  // namespace
}  // namespace testing
}  // namespace reducer
