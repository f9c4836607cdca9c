#include "core/point_to_point_name.h"

#include "absl/status/status.h"
#include "core/fingerprint.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace reducer {
namespace {

using ::testing::HasSubstr;

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
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("\"p2p 0>1 tag 0 #0\" is reserved"));
  EXPECT_THAT(s.message(), HasSubstr("allreduce"));
  EXPECT_TRUE(CheckPointToPointName("p2p_step", fp).ok());
  EXPECT_TRUE(CheckPointToPointName("", fp).ok());
}

TEST(PointToPointNameTest, RefusesMalformedNames) {
  for (const char* name : {"", "step7", "p2p 0>1 tag 0", "p2p 0-1 tag 0 #0",
                           "p2p 0>1 tags 0 #0", "p2p 0>1 tag x #0",
                           "p2p 0>1 tag 0 #-1", "p2p 0>1 tag 0 #0 extra"}) {
    const absl::Status s = CheckPointToPointName(name, SendReceive(0, 1));
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << name;
    EXPECT_THAT(s.message(), HasSubstr("is not of the form")) << name;
  }
}

TEST(PointToPointNameTest, RefusesNegativeTags) {
  const absl::Status s =
      CheckPointToPointName("p2p 0>1 tag -4 #0", SendReceive(0, 1));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("tag -4 is negative"));
}

TEST(PointToPointNameTest, RefusesNamesThatDisagreeWithTheHeader) {
  // Source and destination swapped: the header says 1 sends to 0.
  absl::Status s = CheckPointToPointName("p2p 0>1 tag 0 #0", SendReceive(1, 0));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("names source 0 and destination 1"));
  EXPECT_THAT(s.message(), HasSubstr("root is 1"));
  s = CheckPointToPointName("p2p 0>2 tag 0 #0", SendReceive(0, 1));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace reducer
