// The partition plan against hand-computed cuts, and its invariants (every
// element in exactly one piece, in order; partitions on distinct shards) on
// a sweep of shapes.
#include "client/shards/partition_plan.h"

#include <cstdint>
#include <set>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace reducer {
namespace {

using ::testing::ElementsAre;
using ::testing::SizeIs;


TensorSpec Spec(DataType dtype, std::vector<int64_t> shape) {
  TensorSpec t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  return t;
}

TEST(PartitionPlanTest, KeyHashIsStableAndSeparatesNamesFromSequences) {
  // FNV-1a of "name" "step7": fixed across builds and machines.
  EXPECT_EQ(CollectiveKeyHash("step7", {}, 0),
            CollectiveKeyHash("step7", {0, 1}, 99));
  EXPECT_NE(CollectiveKeyHash("", {0, 1}, 3), CollectiveKeyHash("", {0, 1}, 4));
  EXPECT_NE(CollectiveKeyHash("", {0, 1}, 3), CollectiveKeyHash("", {0, 2}, 3));
  // An unnamed key never equals a named one spelling the same bytes.
  EXPECT_NE(CollectiveKeyHash("", {}, 0), CollectiveKeyHash("seq", {}, 0));
  uint64_t fnv = 14695981039346656037ull;
  for (char c : std::string("namestep7")) {
    fnv ^= static_cast<unsigned char>(c);
    fnv *= 1099511628211ull;
  }
  EXPECT_EQ(CollectiveKeyHash("step7", {}, 0), fnv);
}

TEST(PartitionPlanTest, SmallCollectivesSpreadOverShardsByKey) {
  std::set<int> used;
  for (uint64_t seq = 0; seq < 64; ++seq) {
    const uint64_t h = CollectiveKeyHash("", {0, 1, 2, 3}, seq);
    std::vector<ReducePartition> plan =
        PlanAllReduce({Spec(DataType::kFloat32, {1})}, 3, h);
    ASSERT_THAT(plan, SizeIs(1));
    EXPECT_EQ(plan[0].shard, ShardForKey(h, 3));
    EXPECT_THAT(plan[0].pieces, ElementsAre(TensorPiece{0, 0, 1}));
    used.insert(plan[0].shard);
  }
  EXPECT_EQ(used, (std::set<int>{0, 1, 2}));
}

TEST(PartitionPlanTest, OneShardIsOnePartitionOfEverything) {
  std::vector<ReducePartition> plan = PlanAllReduce(
      {Spec(DataType::kFloat32, {64 << 20})}, 1, 12345);
  ASSERT_THAT(plan, SizeIs(1));
  EXPECT_EQ(plan[0].shard, 0);
  EXPECT_THAT(plan[0].pieces, ElementsAre(TensorPiece{0, 0, 64 << 20}));
}

TEST(PartitionPlanTest, LargeTensorIsCutIntoOneNearEqualPartitionPerShard) {
  // 3 MiB + 4 B of float32 = 786433 elements over 3 shards: cuts at bytes
  // 1048577.33 and 2097154.67, moved back to elements 262144 and 524288.
  const int64_t n = 786433;
  const uint64_t h = 7;  // first shard 7 % 3 = 1
  std::vector<ReducePartition> plan =
      PlanAllReduce({Spec(DataType::kFloat32, {n})}, 3, h);
  ASSERT_THAT(plan, SizeIs(3));
  EXPECT_EQ(plan[0].shard, 1);
  EXPECT_EQ(plan[1].shard, 2);
  EXPECT_EQ(plan[2].shard, 0);
  EXPECT_THAT(plan[0].pieces, ElementsAre(TensorPiece{0, 0, 262144}));
  EXPECT_THAT(plan[1].pieces, ElementsAre(TensorPiece{0, 262144, 262144}));
  EXPECT_THAT(plan[2].pieces, ElementsAre(TensorPiece{0, 524288, 262145}));
}

TEST(PartitionPlanTest, PartitionsStayAboveTheMinimumSize) {
  // 2.5 x the minimum (160 KiB) over 4 shards: only 2 partitions of at
  // least the minimum; 256 KiB is cut over all 4, and a partition below it
  // goes whole.
  const int64_t min = static_cast<int64_t>(kMinPartitionBytes);
  EXPECT_EQ(min, 64 << 10);
  std::vector<ReducePartition> plan =
      PlanAllReduce({Spec(DataType::kUInt8, {5 * min / 2})}, 4, 2);
  ASSERT_THAT(plan, SizeIs(2));
  EXPECT_EQ(plan[0].shard, 2);
  EXPECT_EQ(plan[1].shard, 3);
  EXPECT_THAT(plan[0].pieces, ElementsAre(TensorPiece{0, 0, 5 * min / 4}));
  EXPECT_THAT(PlanAllReduce({Spec(DataType::kFloat32, {64 << 10})}, 4, 2), SizeIs(4));
  EXPECT_THAT(PlanAllReduce({Spec(DataType::kFloat32, {16 << 10})}, 4, 2), SizeIs(1));
}

TEST(PartitionPlanTest, ManyTensorsArePiecedAcrossPartitionsInOrder) {
  // float64 [100], an empty int32 [0], float32 [50], min partition 400 B:
  // 1000 B in 2 partitions, cut at byte 500 = element 62 of tensor 0
  // (float64 element 62 spans bytes 496..504).
  std::vector<ReducePartition> plan = PlanAllReduce(
      {Spec(DataType::kFloat64, {100}), Spec(DataType::kInt32, {0}),
       Spec(DataType::kFloat32, {50})},
      2, 0, /*min_partition_bytes=*/400);
  ASSERT_THAT(plan, SizeIs(2));
  EXPECT_THAT(plan[0].pieces,
              ElementsAre(TensorPiece{0, 0, 62}, TensorPiece{1, 0, 0}));
  EXPECT_THAT(plan[1].pieces,
              ElementsAre(TensorPiece{0, 62, 38}, TensorPiece{2, 0, 50}));
}

TEST(PartitionPlanTest, EveryElementIsInExactlyOnePieceInOrder) {
  const std::vector<DataType> dtypes = {DataType::kUInt8, DataType::kFloat16,
                                        DataType::kFloat32, DataType::kInt64};
  for (int shards = 1; shards <= 5; ++shards) {
    for (int64_t n : {0, 1, 7, 1000, 4099}) {
      std::vector<TensorSpec> tensors;
      for (size_t i = 0; i < dtypes.size(); ++i) {
        tensors.push_back(Spec(dtypes[i], {n + static_cast<int64_t>(i)}));
      }
      SCOPED_TRACE(testing::Message() << shards << " shards, n " << n);
      std::vector<ReducePartition> plan =
          PlanAllReduce(tensors, shards, 99, /*min_partition_bytes=*/256);
      ASSERT_GE(plan.size(), 1u);
      ASSERT_LE(static_cast<int>(plan.size()), shards);
      std::set<int> shard_set;
      std::vector<int64_t> next(tensors.size(), 0);
      int last_tensor = -1;
      for (const ReducePartition& p : plan) {
        EXPECT_TRUE(shard_set.insert(p.shard).second);
        for (const TensorPiece& piece : p.pieces) {
          EXPECT_GE(piece.tensor, last_tensor);  // tensors in order
          last_tensor = piece.tensor;
          EXPECT_EQ(piece.begin, next[piece.tensor]);  // contiguous, no overlap
          next[piece.tensor] += piece.count;
        }
      }
      for (size_t i = 0; i < tensors.size(); ++i) {
        EXPECT_EQ(next[i], tensors[i].shape[0]) << "tensor " << i;
      }
    }
  }
}

TEST(PartitionPlanTest, ReduceScatterCutsEachRanksSlice) {
  // [4 x 3, 65536] float32 among 4 ranks: each slice is 3 x 65536 elements
  // (768 KiB), the input 3 MiB: 3 partitions of 65536 elements per slice.
  std::vector<ScatterPartition> plan = PlanReduceScatter(
      Spec(DataType::kFloat32, {12, 65536}), 4, 3, /*key_hash=*/3);
  ASSERT_THAT(plan, SizeIs(3));
  EXPECT_EQ(plan[0].shard, 0);
  for (int k = 0; k < 3; ++k) {
    EXPECT_EQ(plan[k].begin, k * 65536);
    EXPECT_EQ(plan[k].count, 65536);
  }
}

TEST(PartitionPlanTest, SmallReduceScatterGoesWholeToOneShard) {
  std::vector<ScatterPartition> plan =
      PlanReduceScatter(Spec(DataType::kFloat32, {4, 2}), 4, 3, 5);
  ASSERT_THAT(plan, SizeIs(1));
  EXPECT_EQ(plan[0].shard, ShardForKey(5, 3));
  EXPECT_EQ(plan[0].begin, 0);
  EXPECT_EQ(plan[0].count, 2);
}

}  // namespace
}  // namespace reducer
