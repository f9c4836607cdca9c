#include "server/jobs/several_ranks.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/status_matchers.h"

namespace reducer {
namespace {

using ::reducer::testing::IsOk;
using ::reducer::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// The ranks CoveredRanks returns, checked OK first.
std::vector<int> Covered(const Fingerprint& fp, int rank,
                         const std::vector<int>& ranks) {
  absl::StatusOr<std::vector<int>> covered = CoveredRanks(fp, rank, ranks, "d");
  EXPECT_THAT(covered, IsOk());
  return covered.ok() ? *covered : std::vector<int>{-1};
}

Fingerprint Of(CollectiveKind kind, std::vector<int> group, int root = -1) {
  Fingerprint fp;
  fp.kind = kind;
  fp.group = std::move(group);
  fp.root = root;
  return fp;
}

TEST(CoveredRanksTest, OneRankCoversNone) {
  const Fingerprint fp = Of(CollectiveKind::kAllReduce, {0, 1, 2, 3});
  EXPECT_THAT(Covered(fp, 2, {}), IsEmpty());
  EXPECT_THAT(Covered(fp, 2, {2}), IsEmpty());
}

TEST(CoveredRanksTest, ConsecutiveRanksSentAsTheFirst) {
  const Fingerprint fp = Of(CollectiveKind::kAllReduce, {0, 1, 2, 3, 4, 5});
  EXPECT_THAT(Covered(fp, 2, {2, 3, 4}), ElementsAre(3, 4));
  // Consecutive in the group, not in the world.
  const Fingerprint sparse = Of(CollectiveKind::kAllGather, {0, 2, 4, 6});
  EXPECT_THAT(Covered(sparse, 2, {2, 4}), ElementsAre(4));
}

TEST(CoveredRanksTest, RootedKindsAreSentAsTheRoot) {
  const Fingerprint fp = Of(CollectiveKind::kGather, {0, 1, 2, 3}, 3);
  EXPECT_THAT(Covered(fp, 3, {2, 3}), ElementsAre(2));
  EXPECT_THAT(CoveredRanks(fp, 2, {2, 3}, "gather #1"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("gather #1: a contribution for ranks [2,3] "
                                 "was sent as rank 2; it must be sent as "
                                 "rank 3, the root")));
  // Without the root among them: the first.
  EXPECT_THAT(CoveredRanks(fp, 1, {0, 1}, "d"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("must be sent as rank 0, the first")));
}

TEST(CoveredRanksTest, ScatterIsSentAsItsRootOrElseTheFirst) {
  const Fingerprint fp = Of(CollectiveKind::kScatter, {0, 1, 2, 3, 4}, 2);
  EXPECT_THAT(Covered(fp, 2, {1, 2, 3}), ElementsAre(1, 3));
  EXPECT_THAT(Covered(fp, 3, {3, 4}), ElementsAre(4));
  EXPECT_THAT(CoveredRanks(fp, 1, {1, 2, 3}, "d"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("must be sent as rank 2, the root")));
}

TEST(CoveredRanksTest, RefusesRanksWithAnotherOfTheGroupBetween) {
  const Fingerprint fp = Of(CollectiveKind::kAllReduce, {0, 1, 2, 3});
  EXPECT_THAT(CoveredRanks(fp, 0, {0, 2}, "d"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("must name consecutive ranks of the group "
                                 "[0,1,2,3]")));
  EXPECT_THAT(CoveredRanks(fp, 3, {3, 4}, "d"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("consecutive ranks of the group")));
}

TEST(CoveredRanksTest, RefusesUnsortedRepeatedOrWithoutTheSender) {
  const Fingerprint fp = Of(CollectiveKind::kAllReduce, {0, 1, 2, 3});
  EXPECT_THAT(CoveredRanks(fp, 1, {1, 0}, "d"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("sorted, each once")));
  EXPECT_THAT(CoveredRanks(fp, 0, {0, 0, 1}, "d"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("sorted, each once")));
  EXPECT_THAT(CoveredRanks(fp, 3, {0, 1}, "d"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("was sent as rank 3, which is not one of "
                                 "them")));
}

TEST(CoveredRanksTest, KindsOfOwnPartsTakeOneRankEach) {
  for (CollectiveKind kind :
       {CollectiveKind::kAllToAllV, CollectiveKind::kSendReceive,
        CollectiveKind::kMatch, CollectiveKind::kDone,
        CollectiveKind::kQuorumBarrier}) {
    const Fingerprint fp = Of(kind, {0, 1}, -1);
    EXPECT_THAT(CoveredRanks(fp, 0, {0, 1}, "d"),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("takes each rank's own contribution")))
        << CollectiveKindName(kind);
  }
  for (CollectiveKind kind :
       {CollectiveKind::kAllReduce, CollectiveKind::kReduce,
        CollectiveKind::kReduceScatter, CollectiveKind::kAllGather,
        CollectiveKind::kGather, CollectiveKind::kBroadcast,
        CollectiveKind::kScatter, CollectiveKind::kAllToAll,
        CollectiveKind::kBarrier}) {
    const Fingerprint fp = Of(kind, {0, 1}, 0);
    EXPECT_THAT(Covered(fp, 0, {0, 1}), ElementsAre(1))
        << CollectiveKindName(kind);
  }
}

TEST(CoveredRanksTest, AllToAllHoldsEachRanksRowsForEveryRank) {
  // Ranks 1-2 of a group of 3: 2 x 3 parts of 4 rows each.
  Fingerprint fp = Of(CollectiveKind::kAllToAll, {0, 1, 2});
  fp.tensors.push_back(TensorSpec{DataType::kFloat32, {24, 5}});
  EXPECT_THAT(Covered(fp, 1, {1, 2}), ElementsAre(2));
  // 6 rows divide among the group's 3 ranks, not among 2 x 3 parts.
  fp.tensors[0].shape = {9, 5};
  EXPECT_THAT(CoveredRanks(fp, 1, {1, 2}, "alltoall #4"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("alltoall #4: a contribution for ranks [1,2] "
                                 "must hold each of its 2 ranks' rows for each "
                                 "of the 3 ranks of the group: dimension 0 a "
                                 "multiple of 6")));
  fp.tensors[0].shape = {};
  EXPECT_THAT(CoveredRanks(fp, 1, {1, 2}, "d"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("dimension 0 a multiple of 6")));
}

}  // namespace
}  // namespace reducer
