#include "core/tensor.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/matchers.h"

namespace reducer {
namespace {

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

bool IsAligned64(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 64 == 0;
}

TEST(NumElementsTest, ScalarHasOneElement) {
  absl::StatusOr<int64_t> n = NumElements({});
  ASSERT_THAT(n, IsOk());
  EXPECT_EQ(*n, 1);
}

TEST(NumElementsTest, IsTheProductOfTheDimensions) {
  EXPECT_EQ(*NumElements({4, 3}), 12);
  EXPECT_EQ(*NumElements({2, 3, 5, 7}), 210);
}

TEST(NumElementsTest, AZeroDimensionGivesZeroEvenWithHugeOthers) {
  EXPECT_EQ(*NumElements({0}), 0);
  EXPECT_EQ(*NumElements({kInt64Max, 0, kInt64Max}), 0);
}

TEST(NumElementsTest, NegativeDimensionIsInvalidAndNamed) {
  EXPECT_THAT(NumElements({2, -3}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "negative dimension -3 in shape [2,-3]"));
}

TEST(NumElementsTest, NegativeDimensionWinsOverZero) {
  EXPECT_THAT(NumElements({0, -1}),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(NumElementsTest, OverflowIsInvalid) {
  EXPECT_THAT(NumElements({int64_t{1} << 32, int64_t{1} << 31}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("overflows int64")));
  EXPECT_THAT(NumElements({int64_t{1} << 31, int64_t{1} << 31}), IsOk());
}

TEST(NumBytesTest, MultipliesByElementSize) {
  EXPECT_EQ(*NumBytes(DataType::kFloat64, {4, 3}), 96);
  EXPECT_EQ(*NumBytes(DataType::kBFloat16, {5}), 10);
  EXPECT_EQ(*NumBytes(DataType::kBool, {}), 1);
  EXPECT_EQ(*NumBytes(DataType::kInt64, {0, 9}), 0);
}

TEST(NumBytesTest, ByteOverflowIsInvalidEvenWhenElementCountFits) {
  const int64_t elements = kInt64Max / 4;  // fits; x8 does not
  ASSERT_THAT(NumElements({elements}), IsOk());
  EXPECT_THAT(NumBytes(DataType::kFloat64, {elements}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("float64 overflows int64")));
  EXPECT_THAT(NumBytes(DataType::kInt8, {elements}), IsOk());
}

TEST(NumBytesTest, NegativeDimensionIsInvalid) {
  EXPECT_THAT(NumBytes(DataType::kInt8, {-1}),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(ShapeToStringTest, FormatsWithoutSpaces) {
  EXPECT_EQ(ShapeToString({}), "[]");
  EXPECT_EQ(ShapeToString({4}), "[4]");
  EXPECT_EQ(ShapeToString({4, 3}), "[4,3]");
}

TEST(TensorViewTest, DefaultIsTheEmptyInput) {
  TensorView v;
  EXPECT_TRUE(v.is_empty_input());
  EXPECT_EQ(v.data(), nullptr);
  EXPECT_TRUE(v.shape().empty());
}

TEST(TensorViewTest, OfSpanIsOneDimensional) {
  std::vector<double> values = {1, 2, 3};
  TensorView v = TensorView::Of<double>(values);
  EXPECT_FALSE(v.is_empty_input());
  EXPECT_EQ(v.dtype(), DataType::kFloat64);
  EXPECT_THAT(v.shape(), ElementsAre(3));
  EXPECT_EQ(v.num_elements(), 3);
  EXPECT_EQ(v.num_bytes(), 24u);
  EXPECT_EQ(v.data(), values.data());
}

TEST(TensorViewTest, ZeroElementViewIsNotTheEmptyInput) {
  TensorView v(nullptr, DataType::kInt32, {0, 5});
  EXPECT_FALSE(v.is_empty_input());
  EXPECT_EQ(v.num_elements(), 0);
  EXPECT_EQ(v.num_bytes(), 0u);
}

TEST(TensorViewTest, ScalarHasOneElement) {
  int64_t x = 7;
  TensorView v(&x, DataType::kInt64, {});
  EXPECT_EQ(v.num_elements(), 1);
  EXPECT_EQ(v.num_bytes(), 8u);
}

TEST(TensorViewTest, InvalidShapeReportsZeroRatherThanGarbage) {
  TensorView v(nullptr, DataType::kInt32, {2, -3});
  EXPECT_EQ(v.num_elements(), 0);
  EXPECT_EQ(v.num_bytes(), 0u);
}

TEST(MutableTensorViewTest, OfSpanAndViewShareMemory) {
  std::vector<int32_t> values = {1, 2, 3, 4};
  MutableTensorView m = MutableTensorView::Of<int32_t>(absl::MakeSpan(values));
  EXPECT_EQ(m.dtype(), DataType::kInt32);
  EXPECT_EQ(m.num_bytes(), 16u);
  static_cast<int32_t*>(m.data())[2] = 30;
  EXPECT_EQ(values[2], 30);
  TensorView v = m.view();
  EXPECT_EQ(v.data(), values.data());
  EXPECT_THAT(v.shape(), ElementsAre(4));
}

TEST(TensorTest, DefaultIsEmptyFloat32) {
  Tensor t;
  EXPECT_EQ(t.dtype(), DataType::kFloat32);
  EXPECT_THAT(t.shape(), ElementsAre(0));
  EXPECT_EQ(t.num_elements(), 0);
  EXPECT_EQ(t.num_bytes(), 0u);
  EXPECT_NE(t.data(), nullptr);
}

TEST(TensorTest, BufferIsAlignedAndZeroed) {
  for (DataType dtype : {DataType::kFloat32, DataType::kBFloat16,
                         DataType::kInt8, DataType::kFloat64}) {
    for (int64_t n : {1, 3, 63, 64, 65, 1000}) {
      Tensor t(dtype, {n});
      EXPECT_TRUE(IsAligned64(t.data())) << n;
      EXPECT_EQ(t.num_bytes(), static_cast<size_t>(n) * DataTypeSize(dtype));
      std::vector<char> zeros(t.num_bytes(), 0);
      EXPECT_EQ(std::memcmp(t.data(), zeros.data(), t.num_bytes()), 0);
    }
  }
}

TEST(TensorTest, ZeroBytesStillHasAnAlignedBuffer) {
  Tensor t(DataType::kInt64, {3, 0});
  EXPECT_EQ(t.num_bytes(), 0u);
  EXPECT_EQ(t.num_elements(), 0);
  ASSERT_NE(t.data(), nullptr);
  EXPECT_TRUE(IsAligned64(t.data()));
  EXPECT_TRUE(t.values<int64_t>().empty());
}

TEST(TensorTest, ScalarHoldsOneElement) {
  Tensor t(DataType::kFloat64, {});
  EXPECT_EQ(t.num_elements(), 1);
  t.mutable_values<double>()[0] = 2.5;
  EXPECT_THAT(t.values<double>(), ElementsAre(2.5));
}

TEST(TensorTest, CopyIsDeep) {
  Tensor a(DataType::kInt32, {2, 2});
  a.mutable_values<int32_t>()[3] = 42;
  Tensor b(a);
  EXPECT_NE(b.data(), a.data());
  EXPECT_TRUE(IsAligned64(b.data()));
  EXPECT_THAT(b.shape(), ElementsAre(2, 2));
  EXPECT_THAT(b.values<int32_t>(), ElementsAre(0, 0, 0, 42));
  a.mutable_values<int32_t>()[3] = 1;
  EXPECT_EQ(b.values<int32_t>()[3], 42);
}

TEST(TensorTest, CopyAssignmentReplacesContents) {
  Tensor a(DataType::kUInt8, {3});
  a.mutable_values<uint8_t>()[0] = 9;
  Tensor b(DataType::kFloat64, {100});
  b = a;
  EXPECT_EQ(b.dtype(), DataType::kUInt8);
  EXPECT_EQ(b.num_bytes(), 3u);
  EXPECT_THAT(b.values<uint8_t>(), ElementsAre(9, 0, 0));
  const Tensor& self = b;
  b = self;
  EXPECT_THAT(b.values<uint8_t>(), ElementsAre(9, 0, 0));
}

TEST(TensorTest, MoveTransfersTheBuffer) {
  Tensor a(DataType::kFloat32, {4});
  const void* buffer = a.data();
  Tensor b(std::move(a));
  EXPECT_EQ(b.data(), buffer);
  Tensor c;
  c = std::move(b);
  EXPECT_EQ(c.data(), buffer);
  EXPECT_EQ(c.num_bytes(), 16u);
}

TEST(TensorTest, CopyOfCopiesTheViewBytes) {
  std::vector<float> values = {1.5f, -2.0f, 3.25f};
  Tensor t = Tensor::CopyOf(TensorView::Of<float>(values));
  EXPECT_NE(t.data(), values.data());
  EXPECT_EQ(t.dtype(), DataType::kFloat32);
  EXPECT_THAT(t.values<float>(), ElementsAre(1.5f, -2.0f, 3.25f));
  values[0] = 0;
  EXPECT_EQ(t.values<float>()[0], 1.5f);
}

TEST(TensorTest, CopyOfAnEmptyTensorViewWithNullData) {
  Tensor t = Tensor::CopyOf(TensorView(nullptr, DataType::kBool, {0}));
  EXPECT_EQ(t.dtype(), DataType::kBool);
  EXPECT_EQ(t.num_bytes(), 0u);
}

TEST(TensorTest, LentTensorViewsTheLendersMemoryUntilDropped) {
  std::vector<float> memory = {1.0f, 2.0f, 3.0f, 4.0f};
  auto lender = std::make_shared<int>(0);
  std::weak_ptr<int> watch = lender;
  {
    Tensor t = Tensor::Lent(DataType::kFloat32, {2, 2}, memory.data(),
                            std::move(lender));
    EXPECT_EQ(t.data(), memory.data());
    EXPECT_EQ(t.device(), Device::Cpu());
    EXPECT_EQ(t.num_bytes(), 16u);
    memory[3] = 9.0f;  // a view, not a copy
    EXPECT_THAT(t.values<float>(), ElementsAre(1.0f, 2.0f, 3.0f, 9.0f));
    // A copy owns its bytes and holds no reference to the lender.
    Tensor copy(t);
    EXPECT_NE(copy.data(), memory.data());
    EXPECT_THAT(copy.values<float>(), ElementsAre(1.0f, 2.0f, 3.0f, 9.0f));
    EXPECT_EQ(watch.use_count(), 1);
    // Moving keeps the one reference.
    Tensor moved(std::move(t));
    EXPECT_EQ(moved.data(), memory.data());
    EXPECT_FALSE(watch.expired());
    Tensor assigned;
    assigned = std::move(moved);
    EXPECT_EQ(watch.use_count(), 1);
  }
  EXPECT_TRUE(watch.expired());  // dropping the tensor hands the memory back
  EXPECT_THAT(memory, ElementsAre(1.0f, 2.0f, 3.0f, 9.0f));  // never freed
}

TEST(TensorTest, LentTensorReplacedByAssignmentHandsTheMemoryBack) {
  float memory[1] = {5.0f};
  auto lender = std::make_shared<int>(0);
  std::weak_ptr<int> watch = lender;
  Tensor t = Tensor::Lent(DataType::kFloat32, {1}, memory, std::move(lender));
  t = Tensor(DataType::kFloat32, {3});
  EXPECT_TRUE(watch.expired());
  EXPECT_EQ(t.num_bytes(), 12u);
}

TEST(TensorTest, ViewsSeeTheTensorBytes) {
  Tensor t(DataType::kInt64, {2});
  t.mutable_values<int64_t>()[1] = -5;
  TensorView v = t.view();
  EXPECT_EQ(v.data(), t.data());
  EXPECT_EQ(v.num_bytes(), 16u);
  MutableTensorView m = t.mutable_view();
  static_cast<int64_t*>(m.data())[0] = 8;
  EXPECT_THAT(t.values<int64_t>(), ElementsAre(8, -5));
}

TEST(TensorDeviceTest, ConstructorsAndOfMeanTheCpu) {
  std::vector<float> v = {1, 2};
  EXPECT_EQ(TensorView().device(), Device::Cpu());
  EXPECT_EQ(TensorView::Of<float>(v).device(), Device::Cpu());
  EXPECT_EQ(MutableTensorView::Of<float>(absl::MakeSpan(v)).device(),
            Device::Cpu());
  Tensor t(DataType::kFloat32, {2});
  EXPECT_EQ(t.device(), Device::Cpu());
  EXPECT_EQ(t.view().device(), Device::Cpu());
  EXPECT_EQ(Tensor::CopyOf(TensorView::Of<float>(v)).device(), Device::Cpu());
}

TEST(TensorDeviceTest, OnDeviceViewsCarryTheirDeviceThroughView) {
  int32_t x[3] = {0, 0, 0};
  TensorView in = TensorView::OnDevice(Device::Cuda(1), x, DataType::kInt32, {3});
  EXPECT_EQ(in.device(), Device::Cuda(1));
  EXPECT_EQ(in.data(), x);
  EXPECT_EQ(in.num_bytes(), 12u);
  EXPECT_FALSE(in.is_empty_input());
  MutableTensorView io =
      MutableTensorView::OnDevice(Device::Cuda(2), x, DataType::kInt32, {1, 3});
  EXPECT_EQ(io.device(), Device::Cuda(2));
  EXPECT_EQ(io.view().device(), Device::Cuda(2));
  EXPECT_THAT(io.view().shape(), ElementsAre(1, 3));
}

// A stand-in for device memory: host memory whose frees and copies are
// counted, so that the test sees Tensor go through ForeignMemory.
int g_frees = 0;
int g_clones = 0;
void CountingFree(void* p) {
  ++g_frees;
  std::free(p);
}
void* CountingClone(const void* p, size_t bytes) {
  ++g_clones;
  void* q = std::malloc(bytes == 0 ? 1 : bytes);
  std::memcpy(q, p, bytes);
  return q;
}
constexpr ForeignMemory kCountingMemory = {&CountingFree, &CountingClone};

TEST(TensorDeviceTest, OnDeviceTensorCopiesAndFreesThroughItsForeignMemory) {
  g_frees = 0;
  g_clones = 0;
  {
    void* p = std::malloc(8);
    const int32_t values[2] = {7, -9};
    std::memcpy(p, values, 8);
    Tensor t = Tensor::OnDevice(Device::Cuda(0), DataType::kInt32, {2},
                                Buffer(p, BufferDeleter{nullptr, 8, &kCountingMemory}));
    EXPECT_EQ(t.device(), Device::Cuda(0));
    EXPECT_EQ(t.data(), p);
    EXPECT_EQ(t.num_bytes(), 8u);
    EXPECT_EQ(t.view().device(), Device::Cuda(0));
    EXPECT_EQ(t.mutable_view().device(), Device::Cuda(0));
    Tensor copy = t;
    EXPECT_EQ(g_clones, 1);
    EXPECT_EQ(copy.device(), Device::Cuda(0));
    EXPECT_NE(copy.data(), t.data());
    EXPECT_EQ(std::memcmp(copy.data(), values, 8), 0);
    Tensor moved = std::move(t);
    EXPECT_EQ(moved.data(), p);
    EXPECT_EQ(g_frees, 0);
  }
  EXPECT_EQ(g_frees, 2);  // the original (moved) and its copy
}

}  // namespace
}  // namespace reducer
