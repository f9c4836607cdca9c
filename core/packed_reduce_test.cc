#include "core/packed_reduce.h"

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "core/data_type.h"
#include "core/fingerprint.h"
#include "core/fingerprint_testing.h"
#include "core/payload_layout.h"
#include "core/reduce.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace reducer {
namespace {

// ReducePackedRange -----------------------------------------------------------

// Several tensors of different dtypes and ops, with padding between them.
std::vector<TensorSpec> MixedTensors() {
  return {
      Spec(DataType::kFloat16, {7}, ReduceOp::kAvg),     // 14 B
      Spec(DataType::kInt32, {3}, ReduceOp::kProduct),   // 12 B
      Spec(DataType::kBool, {5}, ReduceOp::kBitXor),     // 5 B
      Spec(DataType::kFloat32, {2, 9}, ReduceOp::kMax),  // 72 B
      Spec(DataType::kFloat64, {0}, ReduceOp::kSum),     // empty
      Spec(DataType::kFloat64, {11}, ReduceOp::kSum),    // 88 B
      Spec(DataType::kUInt8, {13}, ReduceOp::kMin),      // 13 B
      Spec(DataType::kInt8, {9}, ReduceOp::kBitAnd),     // 9 B
      Spec(DataType::kBFloat16, {3}, ReduceOp::kSum),    // 6 B
  };
}

class PackedRangeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tensors_ = MixedTensors();
    absl::StatusOr<PayloadLayout> layout = ComputePayloadLayout(tensors_);
    ASSERT_TRUE(layout.ok()) << layout.status();
    layout_ = *layout;
    ASSERT_NE(layout_.total_bytes % kPayloadAlignment, 0u)
        << "the test wants a total that is not a multiple of the alignment";
    std::mt19937_64 rng(5);
    for (int r = 0; r < kWorld; ++r) {
      // Random bytes everywhere, padding included: padding in the output
      // must come out zero whatever the inputs hold there.
      std::vector<uint8_t> payload(layout_.total_bytes);
      for (uint8_t& b : payload) b = static_cast<uint8_t>(rng());
      payloads_.push_back(payload);
    }
    // Small finite values for the floating tensors so that sums and
    // averages are ordinary numbers.
    for (int r = 0; r < kWorld; ++r) {
      uint8_t* p = payloads_[r].data();
      for (size_t i = 0; i < 7; ++i) {
        const uint16_t h = static_cast<uint16_t>(0x3c00 + 97 * i + 31 * r);
        std::memcpy(p + layout_.offsets[0] + 2 * i, &h, 2);
      }
      for (size_t i = 0; i < 18; ++i) {
        const float f = static_cast<float>(i) * 0.5f - static_cast<float>(r);
        std::memcpy(p + layout_.offsets[3] + 4 * i, &f, 4);
      }
      for (size_t i = 0; i < 11; ++i) {
        const double d = 0.1 * static_cast<double>(i + 1) * (r + 1);
        std::memcpy(p + layout_.offsets[5] + 8 * i, &d, 8);
      }
    }
    // The expectation: every tensor reduced whole, padding zero.
    expected_.assign(layout_.total_bytes, 0);
    for (size_t t = 0; t < tensors_.size(); ++t) {
      std::vector<const void*> inputs;
      for (const auto& payload : payloads_) {
        inputs.push_back(payload.data() + layout_.offsets[t]);
      }
      ASSERT_TRUE(Reduce(tensors_[t].op, tensors_[t].dtype, inputs,
                         layout_.sizes[t] / DataTypeSize(tensors_[t].dtype),
                         expected_.data() + layout_.offsets[t])
                      .ok());
    }
  }

  // Reduces [0, total) in the ranges between consecutive `cuts`.
  std::vector<uint8_t> ReduceInRanges(const std::vector<size_t>& cuts) {
    std::vector<uint8_t> out(layout_.total_bytes, 0xcd);
    for (size_t c = 0; c + 1 < cuts.size(); ++c) {
      const size_t begin = cuts[c], end = cuts[c + 1];
      std::vector<const void*> inputs;
      for (const auto& payload : payloads_)
        inputs.push_back(payload.data() + begin);
      absl::Status s = ReducePackedRange(layout_, tensors_, inputs, begin, end,
                                         out.data() + begin);
      EXPECT_TRUE(s.ok()) << "[" << begin << "," << end << "): " << s;
    }
    return out;
  }

  static constexpr int kWorld = 3;
  std::vector<TensorSpec> tensors_;
  PayloadLayout layout_;
  std::vector<std::vector<uint8_t>> payloads_;
  std::vector<uint8_t> expected_;
};

TEST_F(PackedRangeTest, WholePayloadInOneRangeEqualsReducingEachTensor) {
  EXPECT_EQ(ReduceInRanges({0, layout_.total_bytes}), expected_);
}

TEST_F(PackedRangeTest, EveryFixedChunkSizeEqualsReducingEachTensor) {
  for (size_t chunk = kPayloadAlignment; chunk <= layout_.total_bytes + 8;
       chunk += kPayloadAlignment) {
    std::vector<size_t> cuts;
    for (size_t c = 0; c < layout_.total_bytes; c += chunk) cuts.push_back(c);
    cuts.push_back(layout_.total_bytes);
    EXPECT_EQ(ReduceInRanges(cuts), expected_) << "chunk " << chunk;
  }
}

TEST_F(PackedRangeTest, EverySingleAlignedCutEqualsReducingEachTensor) {
  for (size_t cut = 0; cut <= layout_.total_bytes; cut += kPayloadAlignment) {
    EXPECT_EQ(ReduceInRanges({0, cut, layout_.total_bytes}), expected_)
        << "cut " << cut;
  }
}

TEST_F(PackedRangeTest, RandomAlignedCutsEqualReducingEachTensor) {
  std::mt19937_64 rng(9);
  const size_t slots = layout_.total_bytes / kPayloadAlignment;
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<size_t> cuts = {0};
    for (size_t s = 1; s <= slots; ++s) {
      if (rng() % 3 == 0) cuts.push_back(s * kPayloadAlignment);
    }
    if (cuts.back() != layout_.total_bytes) cuts.push_back(layout_.total_bytes);
    EXPECT_EQ(ReduceInRanges(cuts), expected_) << "trial " << trial;
  }
}

TEST_F(PackedRangeTest, PaddingInTheRangeIsWrittenAsZero) {
  // [8, 16) holds the end of tensor 0 (bytes 8..13) and padding (14..15).
  std::vector<uint8_t> out(8, 0xcd);
  std::vector<const void*> inputs;
  for (const auto& payload : payloads_) inputs.push_back(payload.data() + 8);
  ASSERT_TRUE(
      ReducePackedRange(layout_, tensors_, inputs, 8, 16, out.data()).ok());
  EXPECT_EQ(out[6], 0);
  EXPECT_EQ(out[7], 0);
  EXPECT_EQ(
      std::vector<uint8_t>(out.begin(), out.begin() + 6),
      std::vector<uint8_t>(expected_.begin() + 8, expected_.begin() + 14));
}

TEST_F(PackedRangeTest, EmptyRangeWritesNothing) {
  uint8_t out = 0xcd;
  std::vector<const void*> inputs(kWorld, payloads_[0].data() + 16);
  EXPECT_TRUE(ReducePackedRange(layout_, tensors_, inputs, 16, 16, &out).ok());
  EXPECT_EQ(out, 0xcd);
}

TEST_F(PackedRangeTest, MisalignedOrOutOfBoundsRangesAreInvalid) {
  std::vector<uint8_t> out(layout_.total_bytes + 16, 0xcd);
  std::vector<const void*> inputs(kWorld, payloads_[0].data());
  const size_t total = layout_.total_bytes;
  ExpectInvalid(ReducePackedRange(layout_, tensors_, inputs, 4, 16, out.data()),
                "not aligned to 8 bytes");
  ExpectInvalid(ReducePackedRange(layout_, tensors_, inputs, 0, 12, out.data()),
                "not aligned to 8 bytes");
  ExpectInvalid(
      ReducePackedRange(layout_, tensors_, inputs, 0, total + 8, out.data()),
      "is not inside the payload");
  ExpectInvalid(ReducePackedRange(layout_, tensors_, inputs, 16, 8, out.data()),
                "is not inside the payload");
  ExpectInvalid(ReducePackedRange(layout_, tensors_, {}, 0, 8, out.data()),
                "needs inputs");
  ExpectInvalid(
      ReducePackedRange(layout_, absl::MakeConstSpan(tensors_).subspan(1),
                        inputs, 0, 8, out.data()),
      "for 8 tensors");
  EXPECT_EQ(out, std::vector<uint8_t>(total + 16, 0xcd));
}

TEST_F(PackedRangeTest, NullPointersAreInvalidAndNothingIsWritten) {
  std::vector<uint8_t> out(layout_.total_bytes, 0xcd);
  std::vector<const void*> inputs = {payloads_[0].data(), nullptr,
                                     payloads_[2].data()};
  ExpectInvalid(ReducePackedRange(layout_, tensors_, inputs, 0,
                                  layout_.total_bytes, out.data()),
                "input 1 is null");
  EXPECT_EQ(out, std::vector<uint8_t>(layout_.total_bytes, 0xcd));
  inputs[1] = payloads_[1].data();
  ExpectInvalid(ReducePackedRange(layout_, tensors_, inputs, 0,
                                  layout_.total_bytes, nullptr),
                "out is null");
}

TEST_F(PackedRangeTest, UnsupportedOpIsInvalidAndLeavesOutUntouched) {
  tensors_[1].op = ReduceOp::kAvg;  // int32
  std::vector<uint8_t> out(layout_.total_bytes, 0xcd);
  std::vector<const void*> inputs;
  for (const auto& payload : payloads_) inputs.push_back(payload.data());
  ExpectInvalid(ReducePackedRange(layout_, tensors_, inputs, 0,
                                  layout_.total_bytes, out.data()),
                "tensor 1: avg is defined for floating-point dtypes only");
  EXPECT_EQ(out, std::vector<uint8_t>(layout_.total_bytes, 0xcd));
  // A range that does not touch tensor 1 still works.
  EXPECT_TRUE(
      ReducePackedRange(layout_, tensors_, inputs, 0, 8, out.data()).ok());
}

}  // namespace
}  // namespace reducer
