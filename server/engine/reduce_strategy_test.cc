// ReduceStrategy's staging (reduce_strategy.h): a rank's part of a chunk is
// held in the storage it arrived in, however many pieces and whatever their
// alignment, never copied, and counts as a staged part.
// Expected sums are closed forms (rank r contributes (r + 1) * (i + 1)).
#include "server/engine/reduce_strategy.h"

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/data_type.h"
#include "core/fingerprint.h"
#include "gtest/gtest.h"
#include "server/engine/chunk_pool.h"
#include "server/engine/kind_strategy.h"
#include "server/engine/shared_bytes.h"

namespace reducer {
namespace {

constexpr size_t kChunkBytes = 64;  // 16 floats

// 8-byte aligned storage (uint64_t words) holding `bytes` from byte `shift`.
class WordOwner final : public ByteOwner {
 public:
  WordOwner(const std::string& bytes, size_t shift)
      : words_((bytes.size() + shift + 7) / 8), shift_(shift) {
    std::memcpy(data(), bytes.data(), bytes.size());
  }
  char* data() { return reinterpret_cast<char*>(words_.data()) + shift_; }
  const char* data() const {
    return reinterpret_cast<const char*>(words_.data()) + shift_;
  }

 private:
  std::vector<uint64_t> words_;
  size_t shift_;
};

// A payload of one piece: the first `bytes` of `owner`'s storage, held in
// place.
Payload OnePiece(const std::shared_ptr<WordOwner>& owner, size_t bytes) {
  Payload one_piece;
  one_piece.Append(SharedBytes(owner, owner->data(), bytes));
  return one_piece;
}

class NoOutput final : public KindStrategy::Output {
 public:
  void SendTo(int, uint64_t, std::vector<SharedBytes>) override {}
};

// Rank r's input of n floats: element i is (r + 1) * (i + 1).
std::string Ramp(int rank, int n) {
  std::vector<float> v(n);
  for (int i = 0; i < n; ++i) v[i] = static_cast<float>((rank + 1) * (i + 1));
  std::string out(n * sizeof(float), '\0');
  std::memcpy(out.data(), v.data(), out.size());
  return out;
}

// Elements [first, first + count) of the sum over w ranks of Ramp: element
// i is w (w + 1) / 2 * (i + 1).
std::vector<float> RampSum(int w, int first, int count) {
  std::vector<float> v(count);
  for (int i = 0; i < count; ++i) {
    v[i] = static_cast<float>(w * (w + 1) / 2 * (first + i + 1));
  }
  return v;
}

std::vector<float> Floats(const SharedBytes& bytes) {
  std::vector<float> v(bytes.size() / sizeof(float));
  std::memcpy(v.data(), bytes.data(), v.size() * sizeof(float));
  return v;
}

// A float32 [n] AllReduce over `w` ranks, chunks of kChunkBytes.
class ReduceStrategyTest : public ::testing::Test {
 protected:
  void Plan(int w, int n, int window = 8) {
    strategy_ = std::make_unique<ReduceStrategy>(
        ReduceStrategy::Mode::kAllReduce, -1, w, kChunkBytes, window, &pool_);
    Fingerprint fp;
    fp.kind = CollectiveKind::kAllReduce;
    TensorSpec t;
    t.dtype = DataType::kFloat32;
    t.shape = {n};
    fp.tensors = {t};
    for (int r = 0; r < w; ++r) fp.group.push_back(r);
    ranks_.assign(w, RankState());
    for (RankState& r : ranks_) r.input_bytes = n * sizeof(float);
    strategy_->PlanResult(fp, ranks_);
  }

  void Accept(int rank, uint64_t offset, Payload data) {
    strategy_->Accept(rank, ranks_[rank], offset, std::move(data), true,
                      output_, &ready_);
  }

  // Reduces every ready chunk, in order, checking each against RampSum.
  void ExpectReadyChunksSum(int w) {
    for (StagedChunk& chunk : ready_) {
      const size_t index = chunk.index;
      const size_t bytes = chunk.bytes;
      absl::StatusOr<SharedBytes> sum = strategy_->Reduce(std::move(chunk));
      ASSERT_TRUE(sum.ok()) << sum.status();
      ASSERT_EQ(sum->size(), bytes);
      EXPECT_EQ(Floats(*sum), RampSum(w, index * kChunkBytes / sizeof(float),
                                      bytes / sizeof(float)))
          << "chunk " << index;
    }
  }

  ChunkPool pool_{kChunkBytes, 16};
  std::unique_ptr<ReduceStrategy> strategy_;
  std::vector<RankState> ranks_;
  NoOutput output_;
  std::vector<StagedChunk> ready_;
};

TEST_F(ReduceStrategyTest, AlignedPieceHoldingWholeChunksIsHeldNotCopied) {
  constexpr int kW = 2, kN = 40;  // 160 bytes: chunks of 64, 64 and 32
  Plan(kW, kN);
  std::vector<std::shared_ptr<WordOwner>> owners;
  std::vector<std::weak_ptr<WordOwner>> watch;
  for (int r = 0; r < kW; ++r) {
    owners.push_back(std::make_shared<WordOwner>(Ramp(r, kN), 0));
    watch.push_back(owners.back());
    Accept(r, 0, OnePiece(owners.back(), kN * sizeof(float)));
  }
  ASSERT_EQ(ready_.size(), 3u);
  for (const StagedChunk& chunk : ready_) {
    for (int r = 0; r < kW; ++r) {
      // The part is the piece's own storage at the chunk's offset.
      EXPECT_EQ(chunk.parts[r].contiguous(),
                owners[r]->data() + chunk.index * kChunkBytes);
    }
  }
  EXPECT_EQ(ready_[2].bytes, 32u);
  // Every held part counts as staged.
  EXPECT_TRUE(strategy_->HoldsBytesOf(0));
  // The staged parts keep the storage alive once the payload is gone.
  owners.clear();
  EXPECT_FALSE(watch[0].expired());
  // Reading the storage through the held parts gives the closed-form sum;
  // the parts are released once reduced.
  ExpectReadyChunksSum(kW);
  ready_.clear();
  EXPECT_TRUE(watch[0].expired());
  EXPECT_TRUE(watch[1].expired());
}

TEST_F(ReduceStrategyTest, MisalignedPiecesAreHeldAndReadWhenReduced) {
  constexpr int kW = 3, kN = 32;
  Plan(kW, kN);
  std::vector<std::shared_ptr<WordOwner>> owners;
  for (int r = 0; r < kW; ++r) {
    // Rank 1's bytes start 4 bytes past an 8-byte boundary, rank 2's 3.
    const size_t shift = r == 1 ? 4 : r == 2 ? 3 : 0;
    owners.push_back(std::make_shared<WordOwner>(Ramp(r, kN), shift));
    Accept(r, 0, OnePiece(owners.back(), kN * sizeof(float)));
  }
  ASSERT_EQ(ready_.size(), 2u);
  for (const StagedChunk& chunk : ready_) {
    EXPECT_NE(chunk.parts[0].contiguous(), nullptr);
    for (int r = 1; r < kW; ++r) {
      // Not readable by the kernels where it is, but held there all the same.
      EXPECT_EQ(chunk.parts[r].contiguous(), nullptr);
      ASSERT_EQ(chunk.parts[r].pieces().size(), 1u);
      EXPECT_EQ(chunk.parts[r].pieces()[0].data(),
                owners[r]->data() + chunk.index * kChunkBytes);
    }
  }
  ExpectReadyChunksSum(kW);
}

TEST_F(ReduceStrategyTest, HeldBytesAreReadWhenReducedNotWhenAccepted) {
  constexpr int kW = 2, kN = 16;  // one chunk
  Plan(kW, kN);
  std::vector<std::shared_ptr<WordOwner>> owners;
  for (int r = 0; r < kW; ++r) {
    owners.push_back(std::make_shared<WordOwner>(Ramp(r, kN), r == 1 ? 1 : 0));
    Accept(r, 0, OnePiece(owners.back(), kN * sizeof(float)));
  }
  // No copy was taken at Accept: rank 1's storage, zeroed now, adds nothing.
  std::memset(owners[1]->data(), 0, kN * sizeof(float));
  ASSERT_EQ(ready_.size(), 1u);
  absl::StatusOr<SharedBytes> sum = strategy_->Reduce(std::move(ready_[0]));
  ASSERT_TRUE(sum.ok()) << sum.status();
  EXPECT_EQ(Floats(*sum), RampSum(1, 0, kN));
}

TEST_F(ReduceStrategyTest, PartsSpanningPiecesOrMessagesAreHeldInPieces) {
  constexpr int kW = 2, kN = 32;  // chunks 0 and 1, 64 bytes each
  Plan(kW, kN);
  for (int r = 0; r < kW; ++r) {
    auto owner = std::make_shared<WordOwner>(Ramp(r, kN), 0);
    const char* d = owner->data();
    if (r == 0) {
      // Chunk 0 in two pieces of one message, one cut inside an element;
      // chunk 1 whole in a third.
      Payload message;
      message.Append(SharedBytes(owner, d, 41));
      message.Append(SharedBytes(owner, d + 41, 23));
      message.Append(SharedBytes(owner, d + 64, 64));
      Accept(r, 0, std::move(message));
    } else {
      // Chunk 0 in two messages of one piece each, then chunk 1 and nothing
      // more in one piece that starts mid-chunk-0.
      Payload first, second;
      first.Append(SharedBytes(owner, d, 32));
      second.Append(SharedBytes(owner, d + 32, 96));
      Accept(r, 0, std::move(first));
      Accept(r, 32, std::move(second));
    }
  }
  ASSERT_EQ(ready_.size(), 2u);
  EXPECT_EQ(ready_[0].index, 0u);
  EXPECT_EQ(ready_[0].parts[0].pieces().size(), 2u);
  EXPECT_EQ(ready_[0].parts[1].pieces().size(), 2u);
  EXPECT_EQ(ready_[0].parts[0].contiguous(), nullptr);
  // Chunk 1 is whole inside one piece for both ranks.
  EXPECT_NE(ready_[1].parts[0].contiguous(), nullptr);
  EXPECT_NE(ready_[1].parts[1].contiguous(), nullptr);
  ExpectReadyChunksSum(kW);
}

TEST_F(ReduceStrategyTest, HeldPartsCountAgainstTheWindow) {
  constexpr int kW = 2, kN = 16;  // one chunk
  Plan(kW, kN, /*window=*/1);
  auto owner = std::make_shared<WordOwner>(Ramp(0, kN), 0);
  EXPECT_TRUE(strategy_->MayRead(0, ranks_, true));
  Accept(0, 0, OnePiece(owner, kN * sizeof(float)));
  // Rank 0's held part fills its window of one.
  EXPECT_FALSE(strategy_->MayRead(0, ranks_, true));
  EXPECT_TRUE(strategy_->HoldsBytesOf(0));
  EXPECT_FALSE(strategy_->HoldsBytesOf(1));
  // Clear drops it and gives the window back.
  std::weak_ptr<WordOwner> watch = owner;
  owner.reset();
  strategy_->Clear();
  EXPECT_TRUE(watch.expired());
  EXPECT_TRUE(strategy_->MayRead(0, ranks_, true));
  EXPECT_FALSE(strategy_->HoldsBytesOf(0));
}

}  // namespace
}  // namespace reducer
