// ExpandTargets against hand-written expectations.
#include "client/shards/shard_targets.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/matchers.h"

namespace reducer {
namespace {

TEST(ShardTargetsTest, OneAddressIsOneShard) {
  EXPECT_THAT(*ExpandTargets("127.0.0.1:50051"), ElementsAre("127.0.0.1:50051"));
  EXPECT_THAT(*ExpandTargets("unix:///run/reducer.sock"),
              ElementsAre("unix:///run/reducer.sock"));
}

TEST(ShardTargetsTest, CommasSeparateShardsInOrder) {
  EXPECT_THAT(*ExpandTargets("10.0.0.6:50051, 10.0.0.5:50051"),
              ElementsAre("10.0.0.6:50051", "10.0.0.5:50051"));
}

TEST(ShardTargetsTest, RangesExpandLikeAShell) {
  EXPECT_THAT(*ExpandTargets("reducer-{0..3}.reducer:50051"),
              ElementsAre("reducer-0.reducer:50051", "reducer-1.reducer:50051",
                          "reducer-2.reducer:50051", "reducer-3.reducer:50051"));
  EXPECT_THAT(*ExpandTargets("127.0.0.1:{50051..50052},h:1"),
              ElementsAre("127.0.0.1:50051", "127.0.0.1:50052", "h:1"));
  EXPECT_THAT(*ExpandTargets("r{08..10}:1"),
              ElementsAre("r08:1", "r09:1", "r10:1"));
  EXPECT_THAT(*ExpandTargets("r{5..5}:1"), ElementsAre("r5:1"));
}

TEST(ShardTargetsTest, BadTargetsNameTheProblem) {
  struct Case {
    std::string target;
    std::string why;
  };
  const std::vector<Case> cases = {
      {"", "an empty address"},
      {"a:1,,b:1", "an empty address"},
      {"r{3..1}:1", "runs backwards"},
      {"r{a..b}:1", "is not a range"},
      {"r{1-3}:1", "is not a range"},
      {"r{-1..2}:1", "is not a range"},
      {"r{0..1}.{0..1}:1", "more than one range"},
      {"r{0..1:1", "unbalanced braces"},
      {"r}0..1{:1", "unbalanced braces"},
      {"r{0..5000}:1", "more than 1024"},
      {"a:1,b:1,a:1", "\"a:1\" is named twice"},
      {"r{0..1}:1,r1:1", "\"r1:1\" is named twice"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.target);
    EXPECT_THAT(ExpandTargets(c.target),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         AllOf(HasSubstr(c.why), HasSubstr(c.target))));
  }
}

}  // namespace
}  // namespace reducer
