// Collectives on CUDA device buffers against a real reducerd, with the ranks
// of each job as Clients in this process (one thread each).
//
// DeviceBuffersTest runs everywhere: a device view is refused up front with
// the error this build and machine call for (built without CUDA; no GPU;
// host memory in a device view), takes no place in the call order, and
// leaves host collectives as they were. GpuCollectiveTest and the tests
// after it need a GPU and skip without one: every collective out of place
// and in place, every dtype, sizes from 0 to several chunks, the caller's
// stream ordering, in place unchanged on error. Expected values come from
// tests/closed_form.h.
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "client/reducer_client.h"
#include "core/data_type.h"
#include "core/device.h"
#include "core/tensor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/closed_form.h"
#include "tests/fault_test_base.h"
#include "tests/gpu/gpu_support.h"
#include "tests/process_harness.h"
#include "tests/rank_threads.h"
#include "tests/single_tensor.h"
#include "tests/status_matchers.h"

namespace reducer {
namespace testing {
namespace {

using ::testing::HasSubstr;

constexpr int kWorld = 2;
// Small messages, so that a few thousand elements already span several.
constexpr int64_t kChunkBytes = 4096;

class DeviceBuffersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<ReducerdProcess>> server =
        ReducerdProcess::Start({absl::StrCat("--chunk_bytes=", kChunkBytes)});
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
  }

  // Connects ranks 0..kWorld-1 of `job` (concurrently: Connect returns once
  // all joined). Records a failure and returns fewer clients on error.
  std::vector<std::unique_ptr<Client>> ConnectAll(
      const std::string& job, size_t staging_bytes = size_t{64} << 20) {
    std::vector<std::unique_ptr<Client>> clients(kWorld);
    RunOnEveryRank(kWorld, [&](int rank) {
      ClientOptions options;
      options.target = server_->address();
      options.job = job;
      options.rank = rank;
      options.world_size = kWorld;
      options.timeout = absl::Seconds(20);
      options.cuda_staging_bytes = staging_bytes;
      absl::StatusOr<std::unique_ptr<Client>> c = Client::Connect(options);
      if (!c.ok()) {
        failures_.Add(absl::StrCat("rank ", rank, " Connect: ", c.status().ToString()));
        return;
      }
      clients[rank] = *std::move(c);
    });
    return clients;
  }

  Watchdog watchdog_{"DeviceBuffersTest", absl::Seconds(120)};
  std::unique_ptr<ReducerdProcess> server_;
  RankFailures failures_;
};

// What a CUDA view of host memory gets on this build and machine.
void ExpectDeviceViewOfHostMemoryRefused(const absl::Status& s) {
  if (!BuiltWithCuda()) {
    EXPECT_THAT(s, StatusIs(absl::StatusCode::kFailedPrecondition,
                            HasSubstr("built without CUDA")));
  } else if (CudaDevices() == 0) {
    EXPECT_THAT(s, StatusIs(absl::StatusCode::kFailedPrecondition,
                            HasSubstr("cudaGetDeviceCount")));
  } else {
    EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument,
                            HasSubstr("host memory")));
  }
  EXPECT_THAT(s.message(), HasSubstr("cuda:0")) << s;
}

TEST_F(DeviceBuffersTest, DeviceViewIsRefusedUpFrontAndHostCollectivesStayAsTheyWere) {
  std::vector<std::unique_ptr<Client>> clients = ConnectAll("refused");
  ASSERT_EQ(clients.size(), static_cast<size_t>(kWorld));
  std::vector<std::vector<float>> values(kWorld);
  RunOnEveryRank(kWorld, [&](int rank) {
    Client* client = clients[rank].get();
    std::vector<float>& x = values[rank];
    x.assign(8, static_cast<float>(rank + 1));
    if (rank == 0) {
      // Refused before anything is sent: rank 1 never sees these calls.
      TensorView on_gpu =
          TensorView::OnDevice(Device::Cuda(0), x.data(), DataType::kFloat32, {8});
      ExpectDeviceViewOfHostMemoryRefused(
          client->AllReduce(on_gpu, ReduceOp::kSum).status());
      ExpectDeviceViewOfHostMemoryRefused(client->AllReduceAsync(on_gpu, ReduceOp::kSum)
                                              ->Wait()
                                              .status());
      ExpectDeviceViewOfHostMemoryRefused(client->AllGather(on_gpu).status());
      ExpectDeviceViewOfHostMemoryRefused(client->Broadcast(on_gpu, 0).status());
      ExpectDeviceViewOfHostMemoryRefused(
          client->ReduceScatter(on_gpu, ReduceOp::kSum).status());
      MutableTensorView inout = MutableTensorView::OnDevice(
          Device::Cuda(0), x.data(), DataType::kFloat32, {8});
      ExpectDeviceViewOfHostMemoryRefused(
          client->AllReduceInPlace(inout, ReduceOp::kSum));
      ExpectDeviceViewOfHostMemoryRefused(client->BroadcastInPlace(inout, 0));
      EXPECT_EQ(x, std::vector<float>(8, 1.0f));  // in place: unchanged
      const TensorView two[2] = {TensorView::Of<float>(x), on_gpu};
      const ReduceOp ops[2] = {ReduceOp::kSum, ReduceOp::kSum};
      absl::Status mixed = client->AllReduceMany(two, ops).status();
      EXPECT_THAT(
          mixed,
          StatusIs(absl::StatusCode::kInvalidArgument,
                   HasSubstr("input 1 is on cuda:0 but input 0 is on cpu")));
    }
    // The first collective both ranks make: had a refused call taken a
    // place in the call order, rank 0's would not match rank 1's.
    absl::Status s = client->AllReduceInPlace(
        MutableTensorView::Of<float>(absl::MakeSpan(x)), ReduceOp::kSum);
    if (!s.ok()) failures_.Add(absl::StrCat("rank ", rank, " host all-reduce: ", s.ToString()));
  });
  failures_.ExpectNone();
  for (int r = 0; r < kWorld; ++r) {
    EXPECT_EQ(values[r], std::vector<float>(8, 3.0f)) << "rank " << r;
  }
}

// --- Needs a GPU --------------------------------------------------------

// Device memory holding a copy of `bytes`; freed on destruction.
class DeviceBytes {
 public:
  explicit DeviceBytes(const std::vector<uint8_t>& bytes) : size_(bytes.size()) {
    absl::StatusOr<void*> p = DeviceAlloc(size_);
    EXPECT_TRUE(p.ok()) << p.status();
    if (!p.ok()) return;
    data_ = *p;
    absl::Status s = CopyToDevice(data_, bytes.data(), size_);
    EXPECT_TRUE(s.ok()) << s;
  }
  ~DeviceBytes() { DeviceFree(data_); }
  DeviceBytes(const DeviceBytes&) = delete;
  DeviceBytes& operator=(const DeviceBytes&) = delete;

  void* data() const { return data_; }
  std::vector<uint8_t> Read() const {
    std::vector<uint8_t> out(size_);
    absl::Status s = CopyToHost(out.data(), data_, size_);
    EXPECT_TRUE(s.ok()) << s;
    return out;
  }

 private:
  size_t size_;
  void* data_ = nullptr;
};

// The bytes of a device tensor, read back to the host.
std::vector<uint8_t> ReadTensor(const Tensor& t) {
  std::vector<uint8_t> out(t.num_bytes());
  absl::Status s = CopyToHost(out.data(), t.data(), t.num_bytes());
  EXPECT_TRUE(s.ok()) << s;
  return out;
}

enum class Call {
  kAllReduce,
  kAllReduceInPlace,
  kAllReduceAsync,
  kAllReduceMany,
  kAllGather,
  kBroadcast,
  kBroadcastInPlace,
  kReduceScatter,
};

std::string CallName(Call c) {
  switch (c) {
    case Call::kAllReduce: return "AllReduce";
    case Call::kAllReduceInPlace: return "AllReduceInPlace";
    case Call::kAllReduceAsync: return "AllReduceAsync";
    case Call::kAllReduceMany: return "AllReduceMany";
    case Call::kAllGather: return "AllGather";
    case Call::kBroadcast: return "Broadcast";
    case Call::kBroadcastInPlace: return "BroadcastInPlace";
    case Call::kReduceScatter: return "ReduceScatter";
  }
  return "?";
}

ReduceOp OpFor(DataType dtype) {
  return OpAllowed(ReduceOp::kSum, dtype) ? ReduceOp::kSum : ReduceOp::kMax;
}

// (call, dtype, elements per rank, pinned staging bytes)
using GpuCase = std::tuple<Call, DataType, int64_t, size_t>;

class GpuCollectiveTest : public DeviceBuffersTest,
                          public ::testing::WithParamInterface<GpuCase> {
 protected:
  void SetUp() override {
    if (CudaDevices() == 0) GTEST_SKIP() << NoGpuReason();
    DeviceBuffersTest::SetUp();
  }
};

TEST_P(GpuCollectiveTest, MatchesTheClosedForm) {
  // Named copies, not structured bindings: the rank lambdas capture them.
  const Call call = std::get<0>(GetParam());
  const DataType dtype = std::get<1>(GetParam());
  const int64_t n = std::get<2>(GetParam());
  const size_t staging_bytes = std::get<3>(GetParam());
  const ReduceOp op = OpFor(dtype);
  const uint64_t seed = static_cast<uint64_t>(n) * 31 + static_cast<int>(dtype);
  std::vector<std::unique_ptr<Client>> clients =
      ConnectAll(absl::StrCat("gpu-", CallName(call)), staging_bytes);
  ASSERT_EQ(clients.size(), static_cast<size_t>(kWorld));
  const std::vector<int> ranks = {0, 1};
  const size_t elem = DataTypeSize(dtype);
  RunOnEveryRank(kWorld, [&](int rank) {
    Client* client = clients[rank].get();
    const std::vector<uint8_t> input = ClosedFormInput(op, dtype, rank, n, seed);
    DeviceBytes in(input);
    const Device gpu = Device::Cuda(0);
    TensorView view = TensorView::OnDevice(gpu, in.data(), dtype, {n});
    MutableTensorView inout = MutableTensorView::OnDevice(gpu, in.data(), dtype, {n});
    std::vector<uint8_t> want;
    std::vector<uint8_t> got;
    absl::Status s;
    auto take = [&](absl::StatusOr<Tensor> t) {
      if (!t.ok()) {
        s = t.status();
        return;
      }
      if (t->device() != gpu) s = absl::InternalError("result on " + t->device().ToString());
      got = ReadTensor(*t);
    };
    switch (call) {
      case Call::kAllReduce:
        want = ClosedFormExpected(op, dtype, ranks, n, seed);
        take(client->AllReduce(view, op));
        break;
      case Call::kAllReduceInPlace:
        want = ClosedFormExpected(op, dtype, ranks, n, seed);
        s = client->AllReduceInPlace(inout, op);
        got = in.Read();
        break;
      case Call::kAllReduceAsync:
        want = ClosedFormExpected(op, dtype, ranks, n, seed);
        take(SingleOf(client->AllReduceAsync(view, op)->Wait()));
        break;
      case Call::kAllReduceMany: {
        want = ClosedFormExpected(op, dtype, ranks, n, seed);
        const TensorView views[1] = {view};
        const ReduceOp ops[1] = {op};
        absl::StatusOr<std::vector<Tensor>> r = client->AllReduceMany(views, ops);
        if (r.ok() && r->size() == 1) {
          take(std::move((*r)[0]));
        } else {
          s = r.ok() ? absl::InternalError("not one tensor") : r.status();
        }
        break;
      }
      case Call::kAllGather:
        for (int r : ranks) {
          std::vector<uint8_t> part = ClosedFormInput(op, dtype, r, n, seed);
          want.insert(want.end(), part.begin(), part.end());
        }
        take(client->AllGather(view));
        break;
      case Call::kBroadcast:
        want = ClosedFormInput(op, dtype, 0, n, seed);
        take(client->Broadcast(view, 0));
        break;
      case Call::kBroadcastInPlace:
        want = ClosedFormInput(op, dtype, 0, n, seed);
        s = client->BroadcastInPlace(inout, 0);
        got = in.Read();
        break;
      case Call::kReduceScatter: {
        const std::vector<uint8_t> all = ClosedFormExpected(op, dtype, ranks, n, seed);
        const size_t slice = all.size() / kWorld;
        want.assign(all.begin() + rank * slice, all.begin() + (rank + 1) * slice);
        take(client->ReduceScatter(view, op));
        break;
      }
    }
    const std::string where = absl::StrCat(CallName(call), " ", DataTypeName(dtype),
                                           " [", n, "] rank ", rank);
    if (!s.ok()) {
      failures_.Add(absl::StrCat(where, ": ", s.ToString()));
      return;
    }
    if (got.size() != want.size()) {
      failures_.Add(absl::StrCat(where, ": ", got.size(), " bytes, want ", want.size()));
      return;
    }
    absl::Status same = CompareElements(dtype, got.data(), want.data(),
                                        static_cast<int64_t>(want.size() / elem), where);
    if (!same.ok()) failures_.Add(same.ToString());
  });
  failures_.ExpectNone();
}

std::string CaseName(const ::testing::TestParamInfo<GpuCase>& info) {
  const auto [call, dtype, n, staging_bytes] = info.param;
  return absl::StrCat(CallName(call), "_", DataTypeName(dtype), "_", n,
                      staging_bytes == 0 ? "_unpinned" : "");
}

// Sizes: none, one element, within one message, several messages (n is
// even, so that ReduceScatter divides it by the 2 ranks).
INSTANTIATE_TEST_SUITE_P(
    EveryCall, GpuCollectiveTest,
    ::testing::Combine(
        ::testing::Values(Call::kAllReduce, Call::kAllReduceInPlace,
                          Call::kAllReduceAsync, Call::kAllReduceMany,
                          Call::kAllGather, Call::kBroadcast,
                          Call::kBroadcastInPlace, Call::kReduceScatter),
        ::testing::Values(DataType::kFloat32),
        ::testing::Values(int64_t{0}, int64_t{2}, int64_t{200}, int64_t{5000}),
        ::testing::Values(size_t{64} << 20)),
    CaseName);

INSTANTIATE_TEST_SUITE_P(
    EveryDtype, GpuCollectiveTest,
    ::testing::Combine(
        ::testing::Values(Call::kAllReduce, Call::kAllReduceInPlace),
        ::testing::Values(DataType::kFloat64, DataType::kFloat16,
                          DataType::kBFloat16, DataType::kInt8,
                          DataType::kUInt8, DataType::kInt32,
                          DataType::kInt64, DataType::kBool),
        ::testing::Values(int64_t{2}, int64_t{6000}),
        ::testing::Values(size_t{64} << 20)),
    CaseName);

// Staging larger than the pinned block (or with none) goes through
// ordinary host memory, with the same result.
INSTANTIATE_TEST_SUITE_P(
    Unpinned, GpuCollectiveTest,
    ::testing::Combine(::testing::Values(Call::kAllReduce, Call::kAllGather),
                       ::testing::Values(DataType::kFloat32),
                       ::testing::Values(int64_t{5000}),
                       ::testing::Values(size_t{0}, size_t{1024})),
    CaseName);

class GpuTest : public DeviceBuffersTest {
 protected:
  void SetUp() override {
    if (CudaDevices() == 0) GTEST_SKIP() << NoGpuReason();
    DeviceBuffersTest::SetUp();
  }
};

TEST_F(GpuTest, InputIsReadAfterTheWorkQueuedOnTheCallersStream) {
  std::vector<std::unique_ptr<Client>> clients = ConnectAll("stream-order");
  ASSERT_EQ(clients.size(), static_cast<size_t>(kWorld));
  const int64_t n = 5000;
  const std::vector<int> ranks = {0, 1};
  RunOnEveryRank(kWorld, [&](int rank) {
    const std::vector<uint8_t> values =
        ClosedFormInput(ReduceOp::kSum, DataType::kFloat32, rank, n, 7);
    DeviceBytes source(values);
    DeviceBytes input(std::vector<uint8_t>(values.size(), 0));
    absl::StatusOr<void*> stream = NewStream();
    if (!stream.ok()) {
      failures_.Add(stream.status().ToString());
      return;
    }
    // The kernel writes the input 300 ms after it is queued; the call is
    // made at once and must still see the kernel's values, not zeros.
    absl::Status launched =
        LaunchLateCopy(input.data(), source.data(), values.size(), 300, *stream);
    CallOptions call;
    call.cuda_stream = *stream;
    absl::StatusOr<Tensor> sum = clients[rank]->AllReduce(
        TensorView::OnDevice(Device::Cuda(0), input.data(), DataType::kFloat32, {n}),
        ReduceOp::kSum, call);
    SyncStream(*stream).IgnoreError();
    DestroyStream(*stream);
    if (!launched.ok() || !sum.ok()) {
      failures_.Add(absl::StrCat("rank ", rank, ": ", launched.ToString(), " ",
                        sum.status().ToString()));
      return;
    }
    const std::vector<uint8_t> got = ReadTensor(*sum);
    const std::vector<uint8_t> want =
        ClosedFormExpected(ReduceOp::kSum, DataType::kFloat32, ranks, n, 7);
    absl::Status same = CompareElements(DataType::kFloat32, got.data(), want.data(),
                                        n, absl::StrCat("rank ", rank));
    if (!same.ok()) failures_.Add(same.ToString());
  });
  failures_.ExpectNone();
}

TEST_F(GpuTest, InPlaceLeavesTheDeviceBufferUnchangedOnError) {
  std::vector<std::unique_ptr<Client>> clients = ConnectAll("in-place-error");
  ASSERT_EQ(clients.size(), static_cast<size_t>(kWorld));
  RunOnEveryRank(kWorld, [&](int rank) {
    // Rank 0 sends [5000], rank 1 [5001]: the shapes disagree.
    const int64_t n = 5000 + rank;
    const std::vector<uint8_t> values =
        ClosedFormInput(ReduceOp::kSum, DataType::kFloat32, rank, n, 3);
    DeviceBytes buffer(values);
    absl::Status s = clients[rank]->AllReduceInPlace(
        MutableTensorView::OnDevice(Device::Cuda(0), buffer.data(),
                                    DataType::kFloat32, {n}),
        ReduceOp::kSum);
    if (s.code() != absl::StatusCode::kFailedPrecondition ||
        !absl::StrContains(s.message(), "mismatched shapes")) {
      failures_.Add(absl::StrCat("rank ", rank, ": want FAILED_PRECONDITION mismatched shapes, got ",
                        s.ToString()));
    }
    if (buffer.Read() != values) failures_.Add(absl::StrCat("rank ", rank, ": buffer changed"));
  });
  failures_.ExpectNone();
}

TEST_F(GpuTest, HostMemoryInACudaViewAndDeviceMemoryInACpuViewAreRefused) {
  std::vector<std::unique_ptr<Client>> clients = ConnectAll("placement");
  ASSERT_EQ(clients.size(), static_cast<size_t>(kWorld));
  DeviceBytes on_gpu(std::vector<uint8_t>(16, 1));
  std::vector<float> on_host(4, 1.0f);
  Client* client = clients[0].get();
  // The first device call makes the client check CPU views too.
  absl::Status s = client->AllReduce(
      TensorView::OnDevice(Device::Cuda(0), on_host.data(), DataType::kFloat32, {4}),
      ReduceOp::kSum).status();
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument,
                          HasSubstr("host memory")));
  s = client->AllReduce(TensorView(on_gpu.data(), DataType::kFloat32, {4}),
                        ReduceOp::kSum).status();
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument,
                          HasSubstr("memory of CUDA device 0")));
  s = client->AllReduce(TensorView::OnDevice(Device::Cuda(CudaDevices()), on_gpu.data(),
                                             DataType::kFloat32, {4}),
                        ReduceOp::kSum).status();
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument,
                          HasSubstr("this machine has")));
}

}  // namespace
}  // namespace testing
}  // namespace reducer
