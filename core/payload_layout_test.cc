#include "core/payload_layout.h"

#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "core/data_type.h"
#include "core/fingerprint.h"
#include "core/fingerprint_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace reducer {
namespace {

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

// ComputePayloadLayout --------------------------------------------------------

TEST(ComputePayloadLayoutTest, AlignsEveryTensorToEightBytes) {
  absl::StatusOr<PayloadLayout> layout = ComputePayloadLayout(
      {Spec(DataType::kInt8, {3}), Spec(DataType::kFloat64, {2}),
       Spec(DataType::kBool, {0}), Spec(DataType::kFloat16, {5}),
       Spec(DataType::kInt32, {})});
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_THAT(layout->offsets, ElementsAre(0, 8, 24, 24, 40));
  EXPECT_THAT(layout->sizes, ElementsAre(3, 16, 0, 10, 4));
  EXPECT_EQ(layout->total_bytes, 44u);
}

TEST(ComputePayloadLayoutTest, NoTensorsIsAnEmptyPayload) {
  absl::StatusOr<PayloadLayout> layout = ComputePayloadLayout({});
  ASSERT_TRUE(layout.ok());
  EXPECT_TRUE(layout->offsets.empty());
  EXPECT_EQ(layout->total_bytes, 0u);
}

TEST(ComputePayloadLayoutTest, NegativeDimensionNamesTheTensor) {
  ExpectInvalid(ComputePayloadLayout({Spec(DataType::kInt8, {1}),
                                      Spec(DataType::kFloat32, {2, -3})})
                    .status(),
                "tensor 1: negative dimension -3 in shape [2,-3]");
}

TEST(ComputePayloadLayoutTest, ElementCountOverflowNamesTheTensor) {
  ExpectInvalid(
      ComputePayloadLayout(
          {Spec(DataType::kInt8, {int64_t{1} << 40, int64_t{1} << 40})})
          .status(),
      "tensor 0: element count of shape [1099511627776,1099511627776] "
      "overflows int64");
}

TEST(ComputePayloadLayoutTest, ByteSizeOverflowNamesTheTensor) {
  ExpectInvalid(
      ComputePayloadLayout({Spec(DataType::kFloat64, {kInt64Max / 4})})
          .status(),
      "tensor 0: byte size of shape");
}

TEST(ComputePayloadLayoutTest, TotalPayloadOverflowIsInvalid) {
  const int64_t half = kInt64Max / 2 + 1;
  ExpectInvalid(ComputePayloadLayout({Spec(DataType::kInt8, {half}),
                                      Spec(DataType::kInt8, {half})})
                    .status(),
                "tensor 1: payload size overflows int64");
}

TEST(ComputePayloadLayoutTest, UnknownDtypeIsInvalid) {
  ExpectInvalid(
      ComputePayloadLayout({Spec(static_cast<DataType>(9), {1})}).status(),
      "tensor 0: unknown dtype 9");
}

// Pieces as (tensor, from, to) triples.
std::vector<std::vector<size_t>> Pieces(const PayloadLayout& layout,
                                        size_t begin, size_t end) {
  std::vector<std::vector<size_t>> pieces;
  ForEachTensorPiece(layout, begin, end, [&](size_t i, size_t from, size_t to) {
    pieces.push_back({i, from, to});
  });
  return pieces;
}

TEST(ForEachTensorPieceTest, CutsARangeIntoTheTensorsItCoversSkippingPadding) {
  // float32 [3] at 0..12, empty at 16, int8 [5] at 16..21, float64 [2] at 24..40.
  absl::StatusOr<PayloadLayout> layout = ComputePayloadLayout(
      {Spec(DataType::kFloat32, {3}), Spec(DataType::kFloat32, {0}),
       Spec(DataType::kInt8, {5}), Spec(DataType::kFloat64, {2})});
  ASSERT_TRUE(layout.ok()) << layout.status();
  using P = std::vector<size_t>;
  EXPECT_THAT(Pieces(*layout, 0, 40),
              ElementsAre(P{0, 0, 12}, P{2, 16, 21}, P{3, 24, 40}));
  // Starting inside a tensor, ending inside padding.
  EXPECT_THAT(Pieces(*layout, 4, 23), ElementsAre(P{0, 4, 12}, P{2, 16, 21}));
  // Padding alone, and an empty range.
  EXPECT_THAT(Pieces(*layout, 12, 16), ElementsAre());
  EXPECT_THAT(Pieces(*layout, 30, 30), ElementsAre());
  // Starting where the empty tensor and the next one share an offset.
  EXPECT_THAT(Pieces(*layout, 16, 32), ElementsAre(P{2, 16, 21}, P{3, 24, 32}));
}

}  // namespace
}  // namespace reducer
