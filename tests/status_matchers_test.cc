#include "tests/status_matchers.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/matchers.h"

namespace reducer {
namespace testing {
namespace {

using ::testing::AnyOf;
using ::testing::DescribeMatcher;
using ::testing::Matcher;
using ::testing::StartsWith;
using ::testing::StringMatchResultListener;

// What `matcher` says about `value`: whether it matched, and its
// explanation.
template <typename T, typename M>
std::string Explain(const M& matcher, const T& value, bool* matched) {
  StringMatchResultListener listener;
  *matched = ::testing::ExplainMatchResult(Matcher<const T&>(matcher), value,
                                           &listener);
  return listener.str();
}

TEST(StatusIsTest, MatchesCodeAndMessageOfAStatus) {
  const absl::Status s = absl::InvalidArgumentError("shape [2,-3]");
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument, "shape [2,-3]"));
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument,
                          HasSubstr("[2,-3]")));
  EXPECT_THAT(s, Not(StatusIs(absl::StatusCode::kNotFound)));
  EXPECT_THAT(s, Not(StatusIs(absl::StatusCode::kInvalidArgument, "shape")));
  EXPECT_THAT(s, Not(StatusIs(absl::StatusCode::kInvalidArgument,
                              HasSubstr("[4,4]"))));
}

TEST(StatusIsTest, MatchesTheStatusOfAStatusOr) {
  const absl::StatusOr<int> error = absl::NotFoundError("no job j1");
  EXPECT_THAT(error, StatusIs(absl::StatusCode::kNotFound, HasSubstr("j1")));
  EXPECT_THAT(error, Not(StatusIs(absl::StatusCode::kNotFound, "j2")));
  const absl::StatusOr<std::vector<int>> value = std::vector<int>{1, 2};
  EXPECT_THAT(value, StatusIs(absl::StatusCode::kOk));
  EXPECT_THAT(value, StatusIs(absl::StatusCode::kOk, ""));
  EXPECT_THAT(value, Not(StatusIs(absl::StatusCode::kInternal)));
}

TEST(StatusIsTest, TakesTemporariesAndMoveOnlyValues) {
  EXPECT_THAT(absl::StatusOr<std::unique_ptr<int>>(
                  absl::AbortedError("epoch 3 ended")),
              StatusIs(absl::StatusCode::kAborted, HasSubstr("epoch 3")));
  EXPECT_THAT(absl::StatusOr<std::unique_ptr<int>>(std::make_unique<int>(1)),
              StatusIs(absl::StatusCode::kOk));
  EXPECT_THAT(absl::CancelledError("given up"),
              StatusIs(absl::StatusCode::kCancelled));
}

TEST(StatusIsTest, TakesMatchersOfTheCode) {
  EXPECT_THAT(absl::UnavailableError("shard 1 lost"),
              StatusIs(AnyOf(absl::StatusCode::kUnavailable,
                             absl::StatusCode::kAborted),
                       AllOf(StartsWith("shard"), HasSubstr("lost"))));
}

TEST(StatusIsTest, DescribesWhatItWants) {
  const Matcher<const absl::Status&> m =
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("avg"));
  EXPECT_EQ(DescribeMatcher<const absl::Status&>(m),
            "has a status code that is equal to INVALID_ARGUMENT, and has an "
            "error message that has substring \"avg\"");
  EXPECT_EQ(DescribeMatcher<const absl::Status&>(m, /*negation=*/true),
            "has a status code that isn't equal to INVALID_ARGUMENT, or has "
            "an error message that has no substring \"avg\"");
}

TEST(StatusIsTest, AWrongCodeIsExplainedWithCodeAndMessage) {
  bool matched = true;
  const std::string why =
      Explain(StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("avg")),
              absl::Status(absl::NotFoundError("no job j1")), &matched);
  EXPECT_FALSE(matched);
  EXPECT_EQ(why, "which has status NOT_FOUND: no job j1, whose status code "
                 "is wrong");
}

TEST(StatusIsTest, AWrongMessageIsExplainedWithCodeAndMessage) {
  bool matched = true;
  const std::string why =
      Explain(StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("avg")),
              absl::StatusOr<int>(absl::InvalidArgumentError("bit_xor on "
                                                             "bfloat16")),
              &matched);
  EXPECT_FALSE(matched);
  EXPECT_EQ(why, "which has status INVALID_ARGUMENT: bit_xor on bfloat16, "
                 "whose error message is wrong");
}

TEST(StatusIsTest, AnOkStatusOrIsExplainedAsOk) {
  bool matched = true;
  const std::string why = Explain(StatusIs(absl::StatusCode::kInternal),
                                  absl::StatusOr<int>(3), &matched);
  EXPECT_FALSE(matched);
  EXPECT_EQ(why, "which has status OK, whose status code is wrong");
}

TEST(StatusIsTest, AMatchIsExplainedToo) {
  bool matched = false;
  const std::string why =
      Explain(StatusIs(absl::StatusCode::kDataLoss),
              absl::Status(absl::DataLossError("ring corrupt")), &matched);
  EXPECT_TRUE(matched);
  EXPECT_EQ(why, "which has status DATA_LOSS: ring corrupt");
}

TEST(IsOkTest, MatchesOkStatusesAndStatusOrsHoldingAValue) {
  EXPECT_THAT(absl::OkStatus(), IsOk());
  EXPECT_THAT(absl::StatusOr<int>(0), IsOk());
  EXPECT_THAT(absl::StatusOr<std::unique_ptr<int>>(std::make_unique<int>(1)),
              IsOk());
  EXPECT_THAT(absl::InternalError("x"), Not(IsOk()));
  EXPECT_THAT(absl::StatusOr<int>(absl::InternalError("x")), Not(IsOk()));
}

TEST(IsOkTest, DescribesAndExplains) {
  const Matcher<const absl::StatusOr<int>&> m = IsOk();
  EXPECT_EQ(DescribeMatcher<const absl::StatusOr<int>&>(m), "is OK");
  EXPECT_EQ(DescribeMatcher<const absl::StatusOr<int>&>(m, true), "is not OK");
  bool matched = true;
  EXPECT_EQ(Explain(IsOk(),
                    absl::StatusOr<int>(absl::DeadlineExceededError("late")),
                    &matched),
            "which has status DEADLINE_EXCEEDED: late");
  EXPECT_FALSE(matched);
}

}  // namespace
}  // namespace testing
}  // namespace reducer
