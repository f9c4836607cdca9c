// PointToPointCounts: message names per (source, destination, tag) and
// epoch; matches named per receiver and tag, their counts of the messages
// numbered before them, and when receives must be matched by reducerd.
#include "client/internal/point_to_point_counts.h"

#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace reducer {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::Pair;

TEST(PointToPointCountsTest, MessagesAreCountedPerPairTagAndEpoch) {
  PointToPointCounts counts;
  EXPECT_EQ(counts.NextMessage(1, 0, 3, 7), "p2p 0>3 tag 7 #0");
  EXPECT_EQ(counts.NextMessage(1, 0, 3, 7), "p2p 0>3 tag 7 #1");
  EXPECT_EQ(counts.NextMessage(1, 0, 3, 8), "p2p 0>3 tag 8 #0");
  EXPECT_EQ(counts.NextMessage(1, 2, 3, 7), "p2p 2>3 tag 7 #0");
  EXPECT_EQ(counts.NextMessage(2, 0, 3, 7), "p2p 0>3 tag 7 #0");
}

TEST(PointToPointCountsTest, AMatchCarriesTheCountsBeforeIt) {
  PointToPointCounts counts;
  counts.NextMessage(1, 0, 1, 7);
  counts.NextMessage(1, 0, 1, 7);
  counts.NextMessage(1, 2, 1, 7);
  counts.NextMessage(1, 2, 1, 9);  // another tag
  PointToPointCounts::NewMatch m = counts.StartMatch(1, 1, 7, {0, 2, 3});
  EXPECT_EQ(m.name, "p2p *>1 tag 7 #0");
  EXPECT_THAT(m.received, ElementsAre(Pair(0, 2u), Pair(2, 1u)));
  // Only its sources' counts.
  EXPECT_THAT(counts.StartMatch(1, 1, 7, {3}).received, IsEmpty());
  EXPECT_EQ(counts.StartMatch(1, 1, 7, {0}).name, "p2p *>1 tag 7 #2");
}

TEST(PointToPointCountsTest, ReceivesAreMatchedWhileAMatchIsUnanswered) {
  PointToPointCounts counts;
  EXPECT_FALSE(counts.MustMatch(1, 1, 7));
  counts.StartMatch(1, 1, 7, {0, 2});
  counts.StartMatch(1, 1, 7, {0, 2});
  EXPECT_TRUE(counts.MustMatch(1, 1, 7));
  EXPECT_FALSE(counts.MustMatch(1, 1, 8));
  EXPECT_FALSE(counts.MustMatch(2, 1, 7));  // another epoch
  counts.Answered(1, 1, 7, 2, 4);
  EXPECT_TRUE(counts.MustMatch(1, 1, 7));
  counts.Abandoned(1, 1, 7);
  EXPECT_FALSE(counts.MustMatch(1, 1, 7));
  // The answer moved rank 2's count past its message 4.
  EXPECT_EQ(counts.NextMessage(1, 2, 1, 7), "p2p 2>1 tag 7 #5");
  // An answer below the count leaves it.
  counts.StartMatch(1, 1, 7, {2});
  counts.Answered(1, 1, 7, 2, 1);
  EXPECT_EQ(counts.NextMessage(1, 2, 1, 7), "p2p 2>1 tag 7 #6");
}

}  // namespace
}  // namespace reducer
