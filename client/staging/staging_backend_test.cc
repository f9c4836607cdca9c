#include "client/staging/staging_backend.h"

#include <cstdint>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/internal/settled_attempt.h"
#include "client/staging/fake_device_tensor.h"
#include "core/buffer_cache.h"
#include "core/data_type.h"
#include "core/device.h"
#include "core/fingerprint.h"
#include "core/payload_layout.h"
#include "core/tensor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/matchers.h"

namespace reducer {
namespace {

class FakeStagedInputs final : public StagedInputs {
 public:
  const std::vector<const void*>& inputs() const override { return pointers; }
  std::vector<std::vector<char>> copies;
  std::vector<const void*> pointers;
};

// Copies "device" inputs to fresh host vectors and results back into fresh
// "device" buffers, recording what it was asked; fails where told to.
class FakeStaging final : public DeviceStaging {
 public:
  absl::Status CheckMemory(Device, absl::Span<const void* const>,
                           absl::string_view) override {
    return absl::OkStatus();
  }
  absl::StatusOr<std::unique_ptr<StagedInputs>> ToHost(
      const Contribution& c) override {
    ++to_host_calls;
    if (!to_host_error.ok()) return to_host_error;
    auto staged = std::make_unique<FakeStagedInputs>();
    for (size_t i = 0; i < c.inputs.size(); ++i) {
      const char* p = static_cast<const char*>(c.inputs[i]);
      staged->copies.emplace_back(p, p + c.layout.sizes[i]);
    }
    for (const auto& copy : staged->copies) staged->pointers.push_back(copy.data());
    return staged;
  }
  absl::StatusOr<Tensor> ToDevice(const Tensor& host, Device device,
                                  void* stream) override {
    to_device.push_back({device, stream});
    if (!to_device_error.ok()) return to_device_error;
    return FakeDeviceTensor(host, device);
  }
  absl::Status CopyInto(const Tensor&, const MutableTensorView&, void*) override {
    return absl::OkStatus();
  }

  int to_host_calls = 0;
  absl::Status to_host_error;
  absl::Status to_device_error;
  std::vector<std::pair<Device, void*>> to_device;
};

// Answers every attempt with `result`, recording what it was sent (the
// bytes of each input, read while the attempt runs, as a transport would).
class RecordingHostBackend final : public CollectiveBackend {
 public:
  std::unique_ptr<CollectiveAttempt> Start(const Contribution& c) override {
    started.push_back(&c);
    devices.push_back(c.device);
    std::vector<std::vector<char>> bytes;
    for (size_t i = 0; i < c.inputs.size(); ++i) {
      const char* p = static_cast<const char*>(c.inputs[i]);
      bytes.emplace_back(p, p + c.layout.sizes[i]);
    }
    sent.push_back(std::move(bytes));
    inputs.push_back(c.inputs);
    return std::make_unique<SettledAttempt>(result, /*received_any=*/true);
  }
  std::vector<const Contribution*> started;
  std::vector<Device> devices;
  std::vector<std::vector<const void*>> inputs;
  std::vector<std::vector<std::vector<char>>> sent;
  absl::StatusOr<std::vector<Tensor>> result = std::vector<Tensor>{};
};

Contribution Int32sOn(Device device, const std::vector<int32_t>& values) {
  Contribution c;
  const TensorSpec spec{DataType::kInt32, {static_cast<int64_t>(values.size())},
                        ReduceOp::kSum};
  c.layout = *ComputePayloadLayout({spec});
  c.inputs.push_back(values.data());
  c.device = device;
  return c;
}

Tensor HostInt32s(const std::vector<int32_t>& values) {
  return Tensor::CopyOf(TensorView::Of<int32_t>(values));
}

class StagingBackendTest : public ::testing::Test {
 protected:
  FakeStaging staging_;
  RecordingHostBackend host_;
  StagingBackend backend_{&host_, &staging_};
};

TEST_F(StagingBackendTest, CpuContributionGoesStraightToTheHostBackend) {
  const std::vector<int32_t> values = {1, 2, 3};
  const Contribution c = Int32sOn(Device::Cpu(), values);
  host_.result = std::vector<Tensor>{HostInt32s({4, 5, 6})};
  absl::StatusOr<std::vector<Tensor>> result = backend_.Start(c)->Wait();
  ASSERT_THAT(result, IsOk());
  ASSERT_EQ(host_.started.size(), 1u);
  EXPECT_EQ(host_.started[0], &c);  // the very contribution, not a copy
  EXPECT_EQ(staging_.to_host_calls, 0);
  EXPECT_TRUE(staging_.to_device.empty());
  ASSERT_EQ(result->size(), 1u);
  EXPECT_EQ((*result)[0].device(), Device::Cpu());
  EXPECT_THAT((*result)[0].values<int32_t>(), ElementsAre(4, 5, 6));
}

TEST_F(StagingBackendTest, DeviceContributionTravelsAsHostCopiesAndReturnsOnItsDevice) {
  const std::vector<int32_t> values = {7, -8, 9};
  Contribution c = Int32sOn(Device::Cuda(1), values);
  int stream_token = 0;
  c.cuda_stream = &stream_token;
  c.header.set_job("j1");
  host_.result = std::vector<Tensor>{HostInt32s({14, -16, 18})};
  absl::StatusOr<std::vector<Tensor>> result = backend_.Start(c)->Wait();
  ASSERT_THAT(result, IsOk());
  EXPECT_EQ(staging_.to_host_calls, 1);
  ASSERT_EQ(host_.started.size(), 1u);
  EXPECT_NE(host_.started[0], &c);
  EXPECT_EQ(host_.devices[0], Device::Cpu());
  EXPECT_NE(host_.inputs[0][0], values.data());  // the staged copy was sent
  std::vector<char> expected(reinterpret_cast<const char*>(values.data()),
                             reinterpret_cast<const char*>(values.data()) + 12);
  EXPECT_EQ(host_.sent[0][0], expected);
  ASSERT_EQ(staging_.to_device.size(), 1u);
  EXPECT_EQ(staging_.to_device[0].first, Device::Cuda(1));
  EXPECT_EQ(staging_.to_device[0].second, &stream_token);
  ASSERT_EQ(result->size(), 1u);
  const Tensor& out = (*result)[0];
  EXPECT_EQ(out.device(), Device::Cuda(1));
  EXPECT_THAT(out.shape(), ElementsAre(3));
  int32_t got[3];
  std::memcpy(got, out.data(), 12);
  EXPECT_THAT(got, ElementsAre(14, -16, 18));
}

TEST_F(StagingBackendTest, FailedStagingSendsNothingAndIsTheAttemptsOutcome) {
  const std::vector<int32_t> values = {1};
  const Contribution c = Int32sOn(Device::Cuda(0), values);
  staging_.to_host_error = absl::InternalError("cudaMemcpyAsync (device to host) failed: x");
  std::unique_ptr<CollectiveAttempt> attempt = backend_.Start(c);
  EXPECT_TRUE(attempt->Ready());
  absl::StatusOr<std::vector<Tensor>> result = attempt->Wait();
  EXPECT_THAT(result, StatusIs(absl::StatusCode::kInternal,
                               HasSubstr("cudaMemcpyAsync")));
  EXPECT_FALSE(attempt->received_any());
  EXPECT_TRUE(host_.started.empty());
}

TEST_F(StagingBackendTest, HostErrorIsReturnedWithoutCopyingBack) {
  const std::vector<int32_t> values = {1};
  const Contribution c = Int32sOn(Device::Cuda(0), values);
  host_.result = absl::FailedPreconditionError("mismatched shapes");
  absl::StatusOr<std::vector<Tensor>> result = backend_.Start(c)->Wait();
  EXPECT_THAT(result, StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_TRUE(staging_.to_device.empty());
}

TEST_F(StagingBackendTest, FailedCopyBackIsTheOutcome) {
  const std::vector<int32_t> values = {1};
  const Contribution c = Int32sOn(Device::Cuda(0), values);
  host_.result = std::vector<Tensor>{HostInt32s({2})};
  staging_.to_device_error = absl::InternalError("cudaMalloc failed: out of memory");
  absl::StatusOr<std::vector<Tensor>> result = backend_.Start(c)->Wait();
  EXPECT_THAT(result,
              StatusIs(absl::StatusCode::kInternal, HasSubstr("cudaMalloc")));
}

}  // namespace
}  // namespace reducer
