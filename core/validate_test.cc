#include "core/validate.h"

#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "core/data_type.h"
#include "core/fingerprint.h"
#include "core/fingerprint_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/matchers.h"

namespace reducer {
namespace {

constexpr size_t kNoLimit = std::numeric_limits<size_t>::max();
constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

Fingerprint Make(CollectiveKind kind, std::vector<TensorSpec> tensors,
                 std::vector<int> group = {0, 1, 2, 3}, int root = -1) {
  return MakeFingerprint(kind, std::move(tensors), std::move(group), root);
}

// ValidateContribution --------------------------------------------------------

TEST(ValidateContributionTest, AcceptsWellFormedContributions) {
  EXPECT_TRUE(ValidateContribution(
                  Make(CollectiveKind::kAllReduce,
                       {Spec(DataType::kFloat32, {4, 3}),
                        Spec(DataType::kInt64, {}, ReduceOp::kBitXor),
                        Spec(DataType::kBFloat16, {0}, ReduceOp::kAvg)}),
                  2, 4, kNoLimit)
                  .ok());
  EXPECT_TRUE(ValidateContribution(Make(CollectiveKind::kAllGather,
                                        {Spec(DataType::kInt8, {0, 2})}),
                                   0, 4, kNoLimit)
                  .ok());
  EXPECT_TRUE(ValidateContribution(
                  Make(CollectiveKind::kReduceScatter,
                       {Spec(DataType::kFloat64, {8, 3}, ReduceOp::kMax)}),
                  3, 4, kNoLimit)
                  .ok());
  EXPECT_TRUE(
      ValidateContribution(Make(CollectiveKind::kBroadcast,
                                {Spec(DataType::kBool, {2})}, {1, 3}, 3),
                           3, 4, kNoLimit)
          .ok());
  EXPECT_TRUE(
      ValidateContribution(Make(CollectiveKind::kBroadcast, {}, {1, 3}, 3), 1,
                           4, kNoLimit)
          .ok());
  EXPECT_TRUE(
      ValidateContribution(Make(CollectiveKind::kBarrier, {}, {0}), 0, 1, 0)
          .ok());
}

TEST(ValidateContributionTest, WorldSizeBelowOneIsInvalid) {
  ExpectInvalid(ValidateContribution(Make(CollectiveKind::kBarrier, {}, {0}), 0,
                                     0, kNoLimit),
                "world size 0 is less than 1");
}

TEST(ValidateContributionTest, RankOutsideWorldIsInvalid) {
  const Fingerprint fp =
      Make(CollectiveKind::kAllReduce, {Spec(DataType::kFloat32, {1})});
  ExpectInvalid(ValidateContribution(fp, 5, 4, kNoLimit),
                "rank 5 outside world of 4");
  ExpectInvalid(ValidateContribution(fp, 4, 4, kNoLimit),
                "rank 4 outside world of 4");
  ExpectInvalid(ValidateContribution(fp, -1, 4, kNoLimit),
                "rank -1 outside world of 4");
}

TEST(ValidateContributionTest, UnknownCollectiveKindIsInvalid) {
  ExpectInvalid(ValidateContribution(
                    Make(static_cast<CollectiveKind>(kNumCollectiveKinds), {}),
                    0, 4, kNoLimit),
                "unknown collective kind 14");
}

TEST(ValidateContributionTest, EmptyGroupIsInvalid) {
  ExpectInvalid(ValidateContribution(Make(CollectiveKind::kBarrier, {}, {}), 0,
                                     4, kNoLimit),
                "group is empty");
}

TEST(ValidateContributionTest, GroupMemberOutsideWorldIsInvalid) {
  ExpectInvalid(ValidateContribution(Make(CollectiveKind::kBarrier, {}, {0, 4}),
                                     0, 4, kNoLimit),
                "group [0,4]: rank 4 outside world of 4");
  ExpectInvalid(
      ValidateContribution(Make(CollectiveKind::kBarrier, {}, {-1, 0}), 0, 4,
                           kNoLimit),
      "group [-1,0]: rank -1 outside world of 4");
}

TEST(ValidateContributionTest, UnsortedOrDuplicateGroupIsInvalid) {
  ExpectInvalid(
      ValidateContribution(Make(CollectiveKind::kBarrier, {}, {0, 2, 1}), 0, 4,
                           kNoLimit),
      "group [0,2,1] is not sorted or has duplicates");
  ExpectInvalid(
      ValidateContribution(Make(CollectiveKind::kBarrier, {}, {0, 1, 1}), 0, 4,
                           kNoLimit),
      "group [0,1,1] is not sorted or has duplicates");
}

TEST(ValidateContributionTest, RankOutsideItsGroupIsInvalid) {
  ExpectInvalid(ValidateContribution(Make(CollectiveKind::kBarrier, {}, {0, 1}),
                                     2, 4, kNoLimit),
                "rank 2 is not in its group [0,1]");
}

TEST(ValidateContributionTest, BroadcastRootOutsideGroupIsInvalid) {
  ExpectInvalid(
      ValidateContribution(Make(CollectiveKind::kBroadcast, {}, {0, 1, 2}, 3),
                           0, 4, kNoLimit),
      "broadcast root 3 is not in group [0,1,2]");
  ExpectInvalid(
      ValidateContribution(Make(CollectiveKind::kBroadcast, {}, {0, 1}, -1), 0,
                           4, kNoLimit),
      "broadcast root -1 is not in group [0,1]");
}

TEST(ValidateContributionTest, TensorCountsFollowTheCollectiveKind) {
  const TensorSpec t = Spec(DataType::kFloat32, {4});
  ExpectInvalid(ValidateContribution(Make(CollectiveKind::kAllReduce, {}), 0, 4,
                                     kNoLimit),
                "allreduce needs at least one tensor, got 0");
  ExpectInvalid(ValidateContribution(Make(CollectiveKind::kAllGather, {t, t}),
                                     0, 4, kNoLimit),
                "allgather needs exactly one tensor, got 2");
  ExpectInvalid(ValidateContribution(Make(CollectiveKind::kReduceScatter, {}),
                                     0, 4, kNoLimit),
                "reducescatter needs exactly one tensor, got 0");
  ExpectInvalid(ValidateContribution(
                    Make(CollectiveKind::kBroadcast, {}, {0, 1, 2, 3}, 1), 1, 4,
                    kNoLimit),
                "broadcast root 1 needs exactly one tensor, got 0");
  ExpectInvalid(ValidateContribution(
                    Make(CollectiveKind::kBroadcast, {t, t}, {0, 1, 2, 3}, 1),
                    0, 4, kNoLimit),
                "broadcast needs at most one tensor, got 2");
  ExpectInvalid(
      ValidateContribution(Make(CollectiveKind::kBarrier, {t}), 0, 4, kNoLimit),
      "barrier takes no tensors, got 1");
  ExpectInvalid(ValidateContribution(Make(CollectiveKind::kQuorumBarrier, {t}),
                                     0, 4, kNoLimit),
                "quorum takes no tensors, got 1");
}

TEST(ValidateContributionTest, QuorumSettingsAreChecked) {
  Fingerprint fp = Make(CollectiveKind::kQuorumBarrier, {});
  EXPECT_TRUE(ValidateContribution(fp, 0, 4, kNoLimit).ok());
  fp.quorum.min_ranks = 5;
  ExpectInvalid(ValidateContribution(fp, 0, 4, kNoLimit),
                "quorum min_ranks is 5; it must be between 0 (every rank) and "
                "the group's size, 4");
  fp.quorum.min_ranks = 2;
  fp.quorum.grace = -absl::Seconds(1);
  ExpectInvalid(ValidateContribution(fp, 0, 4, kNoLimit),
                "quorum grace is -1s");
}

TEST(ValidateContributionTest, OpNotSupportedOnDtypeNamesTensorOpAndDtype) {
  ExpectInvalid(
      ValidateContribution(Make(CollectiveKind::kAllReduce,
                                {Spec(DataType::kFloat32, {1}),
                                 Spec(DataType::kInt32, {2}, ReduceOp::kAvg)}),
                           0, 4, kNoLimit),
      "tensor 1: avg is defined for floating-point dtypes only, not int32");
  ExpectInvalid(
      ValidateContribution(
          Make(CollectiveKind::kReduceScatter,
               {Spec(DataType::kFloat16, {4}, ReduceOp::kBitAnd)}),
          0, 4, kNoLimit),
      "tensor 0: bit_and is defined for integer and bool dtypes only, "
      "not float16");
}

TEST(ValidateContributionTest, OpIsIgnoredWhereNothingIsReduced) {
  EXPECT_TRUE(ValidateContribution(
                  Make(CollectiveKind::kAllGather,
                       {Spec(DataType::kFloat32, {4}, ReduceOp::kBitXor)}),
                  0, 4, kNoLimit)
                  .ok());
}

TEST(ValidateContributionTest, UnknownEnumsInTensorsAreInvalid) {
  ExpectInvalid(
      ValidateContribution(Make(CollectiveKind::kAllReduce,
                                {Spec(static_cast<DataType>(12), {1})}),
                           0, 4, kNoLimit),
      "tensor 0: unknown dtype 12");
  ExpectInvalid(
      ValidateContribution(
          Make(CollectiveKind::kAllReduce,
               {Spec(DataType::kInt8, {1}, static_cast<ReduceOp>(8))}),
          0, 4, kNoLimit),
      "tensor 0: unknown reduce op 8");
}

TEST(ValidateContributionTest, NegativeDimensionNamesTensorAndShape) {
  ExpectInvalid(ValidateContribution(Make(CollectiveKind::kAllReduce,
                                          {Spec(DataType::kFloat32, {1}),
                                           Spec(DataType::kFloat32, {2, -3})}),
                                     0, 4, kNoLimit),
                "tensor 1: negative dimension -3 in shape [2,-3]");
}

TEST(ValidateContributionTest, SizeOverflowIsInvalid) {
  ExpectInvalid(
      ValidateContribution(Make(CollectiveKind::kAllReduce,
                                {Spec(DataType::kInt64, {kInt64Max / 2})}),
                           0, 4, kNoLimit),
      "tensor 0: byte size of shape");
  ExpectInvalid(
      ValidateContribution(Make(CollectiveKind::kAllReduce,
                                {Spec(DataType::kInt8, {kInt64Max / 2 + 1}),
                                 Spec(DataType::kInt8, {kInt64Max / 2 + 1})}),
                           0, 4, kNoLimit),
      "payload size overflows int64");
}

TEST(ValidateContributionTest, GatherAndScatterNeedADimension) {
  ExpectInvalid(
      ValidateContribution(
          Make(CollectiveKind::kAllGather, {Spec(DataType::kInt8, {})}), 0, 4,
          kNoLimit),
      "tensor 0: allgather needs at least one dimension, got shape []");
  ExpectInvalid(ValidateContribution(Make(CollectiveKind::kReduceScatter,
                                          {Spec(DataType::kInt8, {})}),
                                     0, 4, kNoLimit),
                "tensor 0: reducescatter needs at least one dimension");
}

TEST(ValidateContributionTest,
     ReduceScatterDimensionZeroMustDivideByGroupSize) {
  ExpectInvalid(ValidateContribution(Make(CollectiveKind::kReduceScatter,
                                          {Spec(DataType::kFloat32, {6, 2})}),
                                     0, 4, kNoLimit),
                "tensor 0: reducescatter dimension 0 of shape [6,2] is not "
                "divisible by the group size 4");
  // The group size counts, not the world size.
  EXPECT_TRUE(
      ValidateContribution(Make(CollectiveKind::kReduceScatter,
                                {Spec(DataType::kFloat32, {6, 2})}, {0, 2, 3}),
                           0, 4, kNoLimit)
          .ok());
  EXPECT_TRUE(ValidateContribution(Make(CollectiveKind::kReduceScatter,
                                        {Spec(DataType::kFloat32, {0, 2})}),
                                   0, 4, kNoLimit)
                  .ok());
}

TEST(ValidateContributionTest,
     PayloadAboveLimitIsResourceExhaustedNamingTheLimit) {
  const Fingerprint fp = Make(
      CollectiveKind::kAllReduce,
      {Spec(DataType::kInt8, {3}), Spec(DataType::kFloat64, {4})});  // 40 B
  EXPECT_TRUE(ValidateContribution(fp, 0, 4, 40).ok());
  EXPECT_THAT(
      ValidateContribution(fp, 0, 4, 39),
      StatusIs(absl::StatusCode::kResourceExhausted,
               "allreduce payload of 40 bytes exceeds the limit of 39 bytes"));
}


TEST(ValidateContributionTest, RootOfReduceGatherScatterMustBeInTheGroup) {
  const TensorSpec t = Spec(DataType::kFloat32, {4});
  ExpectInvalid(ValidateContribution(
                    Make(CollectiveKind::kReduce, {t}, {0, 1, 2}, 3), 0, 4,
                    kNoLimit),
                "reduce root 3 is not in group [0,1,2]");
  ExpectInvalid(ValidateContribution(
                    Make(CollectiveKind::kGather, {t}, {0, 2}, 1), 0, 4,
                    kNoLimit),
                "gather root 1 is not in group [0,2]");
  ExpectInvalid(ValidateContribution(
                    Make(CollectiveKind::kScatter, {}, {0, 1}, -1), 0, 4,
                    kNoLimit),
                "scatter root -1 is not in group [0,1]");
  EXPECT_TRUE(ValidateContribution(
                  Make(CollectiveKind::kReduce, {t}, {0, 2}, 2), 0, 4, kNoLimit)
                  .ok());
}

TEST(ValidateContributionTest, TensorCountsOfReduceGatherScatterAllToAll) {
  const TensorSpec t = Spec(DataType::kFloat32, {4});
  ExpectInvalid(ValidateContribution(
                    Make(CollectiveKind::kReduce, {}, {0, 1, 2, 3}, 0), 1, 4,
                    kNoLimit),
                "reduce needs exactly one tensor, got 0");
  ExpectInvalid(ValidateContribution(
                    Make(CollectiveKind::kGather, {t, t}, {0, 1, 2, 3}, 0), 0,
                    4, kNoLimit),
                "gather needs exactly one tensor, got 2");
  ExpectInvalid(ValidateContribution(Make(CollectiveKind::kAllToAll, {}), 0, 4,
                                     kNoLimit),
                "alltoall needs exactly one tensor, got 0");
  ExpectInvalid(ValidateContribution(
                    Make(CollectiveKind::kScatter, {}, {0, 1, 2, 3}, 2), 2, 4,
                    kNoLimit),
                "scatter root 2 needs exactly one tensor, got 0");
  ExpectInvalid(ValidateContribution(
                    Make(CollectiveKind::kScatter, {t}, {0, 1, 2, 3}, 2), 1, 4,
                    kNoLimit),
                "scatter rank 1 is not the root (2) and sends no tensor, "
                "got 1");
  EXPECT_TRUE(ValidateContribution(
                  Make(CollectiveKind::kScatter, {}, {0, 1, 2, 3}, 2), 1, 4,
                  kNoLimit)
                  .ok());
  EXPECT_TRUE(ValidateContribution(
                  Make(CollectiveKind::kScatter, {t}, {0, 1, 2, 3}, 2), 2, 4,
                  kNoLimit)
                  .ok());
}

TEST(ValidateContributionTest, ReduceChecksItsOpOnTheDtype) {
  ExpectInvalid(ValidateContribution(
                    Make(CollectiveKind::kReduce,
                         {Spec(DataType::kFloat32, {4}, ReduceOp::kBitXor)},
                         {0, 1, 2, 3}, 0),
                    0, 4, kNoLimit),
                "tensor 0: ");
  // Gather reduces nothing: its op is ignored.
  EXPECT_TRUE(ValidateContribution(
                  Make(CollectiveKind::kGather,
                       {Spec(DataType::kFloat32, {4}, ReduceOp::kBitXor)},
                       {0, 1, 2, 3}, 0),
                  0, 4, kNoLimit)
                  .ok());
}

TEST(ValidateContributionTest, ScatterAndAllToAllDimensionZeroMustDivide) {
  ExpectInvalid(ValidateContribution(Make(CollectiveKind::kAllToAll,
                                          {Spec(DataType::kInt32, {6, 2})}),
                                     0, 4, kNoLimit),
                "tensor 0: alltoall dimension 0 of shape [6,2] is not "
                "divisible by the group size 4");
  ExpectInvalid(ValidateContribution(
                    Make(CollectiveKind::kScatter,
                         {Spec(DataType::kInt32, {5})}, {0, 1}, 0),
                    0, 4, kNoLimit),
                "tensor 0: scatter dimension 0 of shape [5] is not divisible "
                "by the group size 2");
  ExpectInvalid(ValidateContribution(Make(CollectiveKind::kGather,
                                          {Spec(DataType::kInt8, {})},
                                          {0, 1, 2, 3}, 0),
                                     0, 4, kNoLimit),
                "tensor 0: gather needs at least one dimension, got shape []");
  // Gather's dim 0 need not divide; AllToAll's is counted in the group.
  EXPECT_TRUE(ValidateContribution(Make(CollectiveKind::kGather,
                                        {Spec(DataType::kInt32, {5, 2})},
                                        {0, 1, 2, 3}, 0),
                                   0, 4, kNoLimit)
                  .ok());
  EXPECT_TRUE(ValidateContribution(Make(CollectiveKind::kAllToAll,
                                        {Spec(DataType::kInt32, {6, 2})},
                                        {0, 1, 3}),
                                   0, 4, kNoLimit)
                  .ok());
}

TEST(ValidateContributionTest, SendReceiveSourceSendsOneTensorToOneOtherRank) {
  // Rank 2 sends to rank 0: group {0, 2}, root (the source) 2.
  const Fingerprint send =
      Make(CollectiveKind::kSendReceive, {Spec(DataType::kFloat32, {3, 2})},
           {0, 2}, 2);
  EXPECT_TRUE(ValidateContribution(send, 2, 4, kNoLimit).ok());
  // The destination declares nothing (Receive) or its buffer's spec.
  EXPECT_TRUE(ValidateContribution(
                  Make(CollectiveKind::kSendReceive, {}, {0, 2}, 2), 0, 4,
                  kNoLimit)
                  .ok());
  EXPECT_TRUE(ValidateContribution(send, 0, 4, kNoLimit).ok());
  // An empty message is a message.
  EXPECT_TRUE(ValidateContribution(
                  Make(CollectiveKind::kSendReceive,
                       {Spec(DataType::kInt8, {0})}, {0, 2}, 2),
                  2, 4, kNoLimit)
                  .ok());
}

TEST(ValidateContributionTest, SendReceiveRefusesMalformedMessages) {
  // The source without a tensor, or with two.
  ExpectInvalid(ValidateContribution(
                    Make(CollectiveKind::kSendReceive, {}, {0, 2}, 2), 2, 4,
                    kNoLimit),
                "sendreceive source 2 needs exactly one tensor, got 0");
  const Fingerprint two_tensors =
      Make(CollectiveKind::kSendReceive,
           {Spec(DataType::kFloat32, {1}), Spec(DataType::kFloat32, {1})},
           {0, 2}, 2);
  ExpectInvalid(ValidateContribution(two_tensors, 2, 4, kNoLimit),
                "sendreceive source 2 needs exactly one tensor, got 2");
  ExpectInvalid(ValidateContribution(two_tensors, 0, 4, kNoLimit),
                "sendreceive destination 0 declares at most one tensor, got 2");
  // Source and destination the same rank, or more than two ranks.
  ExpectInvalid(ValidateContribution(
                    Make(CollectiveKind::kSendReceive,
                         {Spec(DataType::kFloat32, {1})}, {1}, 1),
                    1, 4, kNoLimit),
                "sendreceive group [1] must be exactly its source and its "
                "destination");
  ExpectInvalid(ValidateContribution(
                    Make(CollectiveKind::kSendReceive,
                         {Spec(DataType::kFloat32, {1})}, {0, 1, 2}, 1),
                    1, 4, kNoLimit),
                "sendreceive group [0,1,2] must be exactly");
  // A destination outside the world; a source outside the group.
  ExpectInvalid(ValidateContribution(
                    Make(CollectiveKind::kSendReceive,
                         {Spec(DataType::kFloat32, {1})}, {1, 4}, 1),
                    1, 4, kNoLimit),
                "rank 4 outside world of 4");
  ExpectInvalid(ValidateContribution(
                    Make(CollectiveKind::kSendReceive,
                         {Spec(DataType::kFloat32, {1})}, {0, 1}, 3),
                    1, 4, kNoLimit),
                "sendreceive root 3 is not in group [0,1]");
}

Fingerprint AllToAllV(std::vector<int64_t> shape, std::vector<int64_t> send,
                      std::vector<int64_t> recv = {}) {
  Fingerprint fp = Make(CollectiveKind::kAllToAllV,
                        {Spec(DataType::kFloat32, std::move(shape))}, {0, 1, 2});
  fp.send_rows = std::move(send);
  fp.recv_rows = std::move(recv);
  return fp;
}

TEST(ValidateContributionTest, AllToAllVRowsCoverItsTensorOnePerRank) {
  EXPECT_TRUE(
      ValidateContribution(AllToAllV({5, 2}, {1, 4, 0}), 1, 4, kNoLimit).ok());
  EXPECT_TRUE(ValidateContribution(AllToAllV({0, 2}, {0, 0, 0}, {3, 0, 2}), 1,
                                   4, kNoLimit)
                  .ok());
  ExpectInvalid(
      ValidateContribution(AllToAllV({5, 2}, {1, 4}), 1, 4, kNoLimit),
      "alltoallv send_rows has 2 entries, but the group [0,1,2] has 3 ranks");
  ExpectInvalid(
      ValidateContribution(AllToAllV({5, 2}, {6, -1, 0}), 1, 4, kNoLimit),
      "alltoallv send_rows[1] is -1, negative");
  ExpectInvalid(
      ValidateContribution(AllToAllV({5, 2}, {1, 1, 1}), 1, 4, kNoLimit),
      "alltoallv send_rows [1,1,1] do not sum to dimension 0 of its tensor (5)");
  ExpectInvalid(ValidateContribution(
                    AllToAllV({5, 2}, {kInt64Max, kInt64Max, 2}), 1, 4,
                    kNoLimit),
                "do not sum to dimension 0");
  ExpectInvalid(
      ValidateContribution(AllToAllV({5, 2}, {1, 4, 0}, {1}), 1, 4, kNoLimit),
      "alltoallv recv_rows has 1 entry, but the group [0,1,2] has 3 ranks");
  ExpectInvalid(ValidateContribution(AllToAllV({5, 2}, {1, 4, 0}, {0, -2, 0}),
                                     1, 4, kNoLimit),
                "alltoallv recv_rows[1] is -2, negative");
  ExpectInvalid(ValidateContribution(AllToAllV({}, {0, 0, 0}), 1, 4, kNoLimit),
                "alltoallv needs at least one dimension");
}

Fingerprint Match(int rank, std::vector<int> sources, int root = -1,
                  int64_t tag = 0) {
  Fingerprint fp = Make(CollectiveKind::kMatch, {}, {rank}, root);
  fp.sources = std::move(sources);
  fp.tag = tag;
  return fp;
}

TEST(ValidateContributionTest, MatchIsTheReceiverAloneFromOtherRanks) {
  EXPECT_TRUE(ValidateContribution(Match(1, {0, 2, 3}), 1, 4, kNoLimit).ok());
  EXPECT_TRUE(ValidateContribution(Match(1, {0, 3}, 3, 7), 1, 4, kNoLimit).ok());
  ExpectInvalid(ValidateContribution(Match(1, {0}, -1, -2), 1, 4, kNoLimit),
                "match tag -2 is negative");
  ExpectInvalid(ValidateContribution(Match(1, {}), 1, 4, kNoLimit),
                "match names no source rank");
  ExpectInvalid(ValidateContribution(Match(1, {0, 1}), 1, 4, kNoLimit),
                "match sources [0,1] must be other ranks of the world of 4 "
                "than the receiver 1");
  ExpectInvalid(ValidateContribution(Match(1, {2, 0}), 1, 4, kNoLimit),
                "sorted, each once");
  ExpectInvalid(ValidateContribution(Match(1, {0, 4}), 1, 4, kNoLimit),
                "match sources [0,4]");
  ExpectInvalid(ValidateContribution(Match(1, {0, 2}, 3), 1, 4, kNoLimit),
                "match source 3 is not in its sources [0,2]");
  Fingerprint two = Match(1, {2});
  two.group = {1, 2};
  ExpectInvalid(ValidateContribution(two, 1, 4, kNoLimit),
                "match group [1,2] must be the receiving rank alone");
  Fingerprint with_tensor = Match(1, {2});
  with_tensor.tensors = {Spec(DataType::kFloat32, {1})};
  ExpectInvalid(ValidateContribution(with_tensor, 1, 4, kNoLimit),
                "match takes no tensors, got 1");
}

}  // namespace
}  // namespace reducer
