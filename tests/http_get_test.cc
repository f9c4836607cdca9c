#include "tests/http_get.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/status_matchers.h"

namespace reducer {
namespace testing {
namespace {

TEST(ParseExpositionTest, ReadsNamesLabelsAndValues) {
  absl::StatusOr<std::vector<Sample>> samples = ParseExposition(
      "# HELP a_total A.\n# TYPE a_total counter\n"
      "a_total{kind=\"allreduce\",outcome=\"OK\"} 10\n"
      "b 2.5e-05\n"
      "c{quote=\"x\\\"y\"} 3 1700000000000\n");
  ASSERT_TRUE(samples.ok()) << samples.status();
  ASSERT_EQ(samples->size(), 3u);
  EXPECT_EQ((*samples)[0].Series(), "a_total{kind=allreduce,outcome=OK}");
  EXPECT_EQ((*samples)[0].value, 10);
  EXPECT_EQ((*samples)[1].Series(), "b{}");
  EXPECT_EQ((*samples)[1].value, 2.5e-05);
  EXPECT_EQ((*samples)[2].labels.at("quote"), "x\"y");
  EXPECT_EQ((*samples)[2].value, 3);
}

TEST(ParseExpositionTest, RejectsALineWithoutValueNamingIt) {
  absl::StatusOr<std::vector<Sample>> samples =
      ParseExposition("a_total{kind=\"x\"}\n");
  ASSERT_FALSE(samples.ok());
  EXPECT_THAT(samples.status(), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(std::string(samples.status().message()),
              ::testing::HasSubstr("a_total{kind=\"x\"}"));
}

TEST(UrlEncodeTest, EncodesEverythingButUnreservedCharacters) {
  EXPECT_EQ(UrlEncode("up{job=\"r\"}"), "up%7Bjob%3D%22r%22%7D");
}

}  // namespace
}  // namespace testing
}  // namespace reducer
