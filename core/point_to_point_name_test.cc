#include "core/point_to_point_name.h"

#include <optional>

#include "absl/status/status.h"
#include "core/fingerprint.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/matchers.h"

namespace reducer {
namespace {

Fingerprint SendReceive(int source, int destination) {
  Fingerprint fp;
  fp.kind = CollectiveKind::kSendReceive;
  fp.root = source;
  fp.group = source < destination ? std::vector<int>{source, destination}
                                  : std::vector<int>{destination, source};
  return fp;
}

TEST(PointToPointNameTest, SpellsSourceDestinationTagAndCount) {
  EXPECT_EQ(PointToPointName(0, 3, 7, 2), "p2p 0>3 tag 7 #2");
  EXPECT_EQ(PointToPointName(5, 1, 0, 0), "p2p 5>1 tag 0 #0");
}

TEST(PointToPointNameTest, ItsOwnNamesAgreeWithTheirHeaders) {
  EXPECT_TRUE(CheckPointToPointName("p2p 0>3 tag 7 #2", SendReceive(0, 3)).ok());
  EXPECT_TRUE(CheckPointToPointName("p2p 3>0 tag 0 #0", SendReceive(3, 0)).ok());
  EXPECT_TRUE(IsPointToPointName("p2p 3>0 tag 0 #0"));
  EXPECT_FALSE(IsPointToPointName("step7"));
}

TEST(PointToPointNameTest, OtherKindsMustNotUseThePrefix) {
  Fingerprint fp;
  fp.kind = CollectiveKind::kAllReduce;
  fp.group = {0, 1};
  const absl::Status s = CheckPointToPointName("p2p 0>1 tag 0 #0", fp);
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument,
                          HasSubstr("\"p2p 0>1 tag 0 #0\" is reserved")));
  EXPECT_THAT(s.message(), HasSubstr("allreduce"));
  EXPECT_TRUE(CheckPointToPointName("p2p_step", fp).ok());
  EXPECT_TRUE(CheckPointToPointName("", fp).ok());
}

TEST(PointToPointNameTest, RefusesMalformedNames) {
  for (const char* name : {"", "step7", "p2p 0>1 tag 0", "p2p 0-1 tag 0 #0",
                           "p2p 0>1 tags 0 #0", "p2p 0>1 tag x #0",
                           "p2p 0>1 tag 0 #-1", "p2p 0>1 tag 0 #0 extra"}) {
    const absl::Status s = CheckPointToPointName(name, SendReceive(0, 1));
    EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument,
                            HasSubstr("is not of the form")))
        << name;
  }
}

TEST(PointToPointNameTest, RefusesNegativeTags) {
  const absl::Status s =
      CheckPointToPointName("p2p 0>1 tag -4 #0", SendReceive(0, 1));
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument,
                          HasSubstr("tag -4 is negative")));
}

TEST(PointToPointNameTest, RefusesNamesThatDisagreeWithTheHeader) {
  // Source and destination swapped: the header says 1 sends to 0.
  absl::Status s = CheckPointToPointName("p2p 0>1 tag 0 #0", SendReceive(1, 0));
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument,
                          HasSubstr("names source 0 and destination 1")));
  EXPECT_THAT(s.message(), HasSubstr("root is 1"));
  s = CheckPointToPointName("p2p 0>2 tag 0 #0", SendReceive(0, 1));
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument));
}

Fingerprint Match(int destination, int64_t tag) {
  Fingerprint fp;
  fp.kind = CollectiveKind::kMatch;
  fp.group = {destination};
  fp.tag = tag;
  return fp;
}

TEST(PointToPointNameTest, MatchesAreNamedByTheReceiversCountWithAStar) {
  EXPECT_EQ(MatchName(3, 7, 2), "p2p *>3 tag 7 #2");
  EXPECT_TRUE(CheckPointToPointName("p2p *>3 tag 7 #2", Match(3, 7)).ok());
  absl::Status s = CheckPointToPointName("p2p *>3 tag 7 #2", Match(2, 7));
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument,
                          HasSubstr("names destination 3 and tag 7, but the "
                                    "header's group is [2] and its tag 7")));
  s = CheckPointToPointName("p2p *>3 tag 7 #2", Match(3, 8));
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument));
  // A match names no source; a message always does.
  s = CheckPointToPointName("p2p 0>3 tag 7 #2", Match(3, 7));
  EXPECT_THAT(s.message(), HasSubstr("is not of the form \"p2p *>"));
  s = CheckPointToPointName("p2p *>1 tag 0 #0", SendReceive(0, 1));
  EXPECT_THAT(s.message(), HasSubstr("is not of the form \"p2p <source>>"));
}

TEST(PointToPointNameTest, ParsesBothFormsAndNothingElse) {
  std::optional<PointToPointNameParts> p = ParsePointToPointName("p2p 4>1 tag 9 #3");
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->source, 4);
  EXPECT_EQ(p->destination, 1);
  EXPECT_EQ(p->tag, 9);
  EXPECT_EQ(p->n, 3u);
  p = ParsePointToPointName("p2p *>1 tag 9 #5");
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->source, -1);
  EXPECT_EQ(p->n, 5u);
  EXPECT_FALSE(ParsePointToPointName("p2p -1>1 tag 9 #5").has_value());
  EXPECT_FALSE(ParsePointToPointName("step 4>1 tag 9 #3").has_value());
}

TEST(PointToPointNameTest, RoutesByDestinationAndTag) {
  // Every message to rank 1 with tag 9, and its matches, share one route.
  EXPECT_EQ(PointToPointRoute("p2p 4>1 tag 9 #3"), "p2p >1 tag 9");
  EXPECT_EQ(PointToPointRoute("p2p 0>1 tag 9 #0"), "p2p >1 tag 9");
  EXPECT_EQ(PointToPointRoute("p2p *>1 tag 9 #7"), "p2p >1 tag 9");
  EXPECT_NE(PointToPointRoute("p2p 4>1 tag 8 #3"), "p2p >1 tag 9");
  EXPECT_EQ(PointToPointRoute("step7"), "step7");
  EXPECT_EQ(PointToPointRoute(""), "");
}

}  // namespace
}  // namespace reducer
