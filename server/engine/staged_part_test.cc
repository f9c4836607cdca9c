// StagedPart and ReduceStagedParts (staged_part.h): parts held in pieces cut
// anywhere (inside elements, at odd addresses) reduce to what an element by
// element sum of the ranks' values gives, computed here in plain loops.
#include "server/engine/staged_part.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "core/data_type.h"
#include "core/fingerprint.h"
#include "core/payload_layout.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/matchers.h"

namespace reducer {
namespace {

// Storage holding `bytes` from `shift` bytes past an 8-byte boundary.
class ShiftedOwner final : public ByteOwner {
 public:
  ShiftedOwner(const std::string& bytes, size_t shift)
      : words_((bytes.size() + shift + 7) / 8 + 1), shift_(shift) {
    std::memcpy(data(), bytes.data(), bytes.size());
  }
  char* data() { return reinterpret_cast<char*>(words_.data()) + shift_; }

 private:
  std::vector<uint64_t> words_;
  size_t shift_;
};

TensorSpec Spec(DataType dtype, int64_t n, ReduceOp op) {
  TensorSpec t;
  t.dtype = dtype;
  t.shape = {n};
  t.op = op;
  return t;
}

// Three tensors over four 8 KiB tiles and a rest: float32 sum, float64 max
// and int32 sum, padding between them.
std::vector<TensorSpec> Tensors() {
  return {Spec(DataType::kFloat32, 3001, ReduceOp::kSum),
          Spec(DataType::kFloat64, 1503, ReduceOp::kMax),
          Spec(DataType::kInt32, 2999, ReduceOp::kSum)};
}

// Rank r's packed payload: element i of tensor t is a small integer of r,
// t and i, so every sum is exact in every dtype.
std::string RankPayload(const PayloadLayout& layout, int r) {
  std::string bytes(layout.total_bytes, '\0');
  for (size_t i = 0; i < layout.sizes[0] / 4; ++i) {
    const float v = static_cast<float>((r + 1) * (i % 97));
    std::memcpy(&bytes[layout.offsets[0] + 4 * i], &v, 4);
  }
  for (size_t i = 0; i < layout.sizes[1] / 8; ++i) {
    const double v = static_cast<double>((r * 31 + i * 7) % 101);
    std::memcpy(&bytes[layout.offsets[1] + 8 * i], &v, 8);
  }
  for (size_t i = 0; i < layout.sizes[2] / 4; ++i) {
    const int32_t v = static_cast<int32_t>(i) - 1000 * r;
    std::memcpy(&bytes[layout.offsets[2] + 4 * i], &v, 4);
  }
  return bytes;
}

// Tensor `t` of the result, element by element: `combine` over the ranks'
// elements of type T, from `init`.
template <typename T, typename Combine>
void ReduceTensor(const PayloadLayout& layout,
                  const std::vector<std::string>& payloads, int t, T init,
                  Combine combine, std::string& out) {
  for (size_t i = 0; i < layout.sizes[t] / sizeof(T); ++i) {
    T acc = init;
    for (const std::string& p : payloads) {
      T v;
      std::memcpy(&v, &p[layout.offsets[t] + sizeof(T) * i], sizeof(T));
      acc = combine(acc, v);
    }
    std::memcpy(&out[layout.offsets[t] + sizeof(T) * i], &acc, sizeof(T));
  }
}

// The result computed element by element from the ranks' payloads: a
// float32 sum, a float64 max and an int32 sum.
std::string Expected(const PayloadLayout& layout,
                     const std::vector<std::string>& payloads) {
  std::string out(layout.total_bytes, '\0');
  ReduceTensor<float>(layout, payloads, 0, 0, std::plus<float>(), out);
  ReduceTensor<double>(
      layout, payloads, 1, -1, [](double a, double b) { return b > a ? b : a; },
      out);
  ReduceTensor<int32_t>(layout, payloads, 2, 0, std::plus<int32_t>(), out);
  return out;
}

// Bytes [begin, end) of `bytes` as a part in pieces cut at `cuts` (offsets
// within the range), held in storage `shift` bytes off alignment.
StagedPart PartOf(const std::string& bytes, size_t begin, size_t end,
                  const std::vector<size_t>& cuts, size_t shift) {
  auto owner = std::make_shared<ShiftedOwner>(bytes.substr(begin, end - begin),
                                              shift);
  Payload data;
  size_t from = 0;
  for (size_t cut : cuts) {
    data.Append(SharedBytes(owner, owner->data() + from, cut - from));
    from = cut;
  }
  data.Append(SharedBytes(owner, owner->data() + from, end - begin - from));
  StagedPart part;
  part.Append(data, 0, data.size());
  return part;
}

// Sorted random cut offsets in (0, n), `count` of them.
std::vector<size_t> RandomCuts(std::mt19937& rng, size_t n, int count) {
  std::uniform_int_distribution<size_t> at(1, n - 1);
  std::vector<size_t> cuts;
  for (int i = 0; i < count; ++i) cuts.push_back(at(rng));
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  return cuts;
}

class StagedPartTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tensors_ = Tensors();
    layout_ = *ComputePayloadLayout(tensors_);
    ASSERT_GT(layout_.total_bytes, 4 * kStagedTileBytes);
    for (int r = 0; r < 3; ++r) payloads_.push_back(RankPayload(layout_, r));
    expected_ = Expected(layout_, payloads_);
  }

  // Reduces bytes [begin, end) of every rank's parts; checks them against
  // expected_.
  void ExpectReduces(const std::vector<StagedPart>& parts, size_t begin,
                     size_t end) {
    std::vector<const StagedPart*> pointers;
    for (const StagedPart& p : parts) pointers.push_back(&p);
    std::vector<uint64_t> out((end - begin + 7) / 8);
    char* out_bytes = reinterpret_cast<char*>(out.data());
    ASSERT_TRUE(ReduceStagedParts(layout_, tensors_, pointers, begin, end,
                                  out_bytes)
                    .ok());
    EXPECT_TRUE(std::memcmp(out_bytes, expected_.data() + begin,
                            end - begin) == 0);
  }

  std::vector<TensorSpec> tensors_;
  PayloadLayout layout_;
  std::vector<std::string> payloads_;
  std::string expected_;
};

TEST_F(StagedPartTest, AppendKeepsTheRangeAcrossPieces) {
  auto owner = std::make_shared<ShiftedOwner>("abcdefghij", 0);
  Payload data;
  data.Append(SharedBytes(owner, owner->data(), 3));
  data.Append(SharedBytes(owner, owner->data() + 3, 4));
  data.Append(SharedBytes(owner, owner->data() + 7, 3));
  StagedPart part;
  EXPECT_FALSE(part);
  part.Append(data, 2, 6);  // "cdefgh": the rest of a piece, one whole, one started
  ASSERT_EQ(part.pieces().size(), 3u);
  EXPECT_EQ(part.size(), 6u);
  std::string seen;
  for (const SharedBytes& piece : part.pieces()) {
    seen.append(piece.data(), piece.size());
  }
  EXPECT_EQ(seen, "cdefgh");
  EXPECT_EQ(part.contiguous(), nullptr);  // several pieces
}

TEST_F(StagedPartTest, AlignedWholePartsAreContiguous) {
  std::vector<StagedPart> parts;
  for (int r = 0; r < 3; ++r) {
    parts.push_back(PartOf(payloads_[r], 0, layout_.total_bytes, {}, 0));
    EXPECT_NE(parts.back().contiguous(), nullptr);
  }
  ExpectReduces(parts, 0, layout_.total_bytes);
}

TEST_F(StagedPartTest, PiecesCutAnywhereReduceExactly) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 50; ++trial) {
    // The whole payload, or a range from a tile boundary to its end.
    const size_t begin = trial % 2 == 0 ? 0 : kStagedTileBytes;
    const size_t end = layout_.total_bytes;
    std::vector<StagedPart> parts;
    for (int r = 0; r < 3; ++r) {
      // Rank 0 sometimes in one aligned piece, read where it is; the others
      // in many pieces at odd addresses, gathered.
      const bool whole = r == 0 && trial % 3 == 0;
      parts.push_back(PartOf(payloads_[r], begin, end,
                             whole ? std::vector<size_t>{}
                                   : RandomCuts(rng, end - begin, 1 + trial),
                             whole ? 0 : (trial + r) % 8));
    }
    SCOPED_TRACE(::testing::Message() << "trial " << trial);
    ExpectReduces(parts, begin, end);
  }
}

TEST_F(StagedPartTest, PiecesCutAtTileBoundariesReduceExactly) {
  // Cut at every tile boundary, aligned: every tile is read where it is.
  std::vector<size_t> cuts;
  for (size_t at = kStagedTileBytes; at < layout_.total_bytes;
       at += kStagedTileBytes) {
    cuts.push_back(at);
  }
  std::vector<StagedPart> parts;
  for (int r = 0; r < 3; ++r) {
    parts.push_back(PartOf(payloads_[r], 0, layout_.total_bytes, cuts, 0));
  }
  ExpectReduces(parts, 0, layout_.total_bytes);
}

TEST_F(StagedPartTest, APartOfTheWrongSizeIsAnError) {
  std::vector<StagedPart> parts;
  parts.push_back(PartOf(payloads_[0], 0, layout_.total_bytes, {100}, 1));
  parts.push_back(PartOf(payloads_[1], 0, layout_.total_bytes - 8, {}, 0));
  std::vector<const StagedPart*> pointers = {&parts[0], &parts[1]};
  std::vector<uint64_t> out(layout_.total_bytes / 8 + 1);
  EXPECT_THAT(
      ReduceStagedParts(layout_, tensors_, pointers, 0, layout_.total_bytes,
                        reinterpret_cast<char*>(out.data())),
      StatusIs(absl::StatusCode::kInternal, HasSubstr("staged part 1 holds")));
}

}  // namespace
}  // namespace reducer
