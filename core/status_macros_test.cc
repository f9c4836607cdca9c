#include "core/status_macros.h"

#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/cord.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/matchers.h"

namespace reducer {
namespace {

// Counts its calls, so that each test can say the macro evaluated its
// argument exactly once.
struct Source {
  int calls = 0;

  absl::Status Status(absl::Status status) {
    ++calls;
    return status;
  }

  template <typename T>
  absl::StatusOr<T> StatusOr(absl::StatusOr<T> value) {
    ++calls;
    return value;
  }
};

// Runs REDUCER_RETURN_IF_ERROR on `status`; `reached` says whether control
// went past it.
absl::Status ReturnIfError(Source& source, absl::Status status, bool& reached) {
  reached = false;
  REDUCER_RETURN_IF_ERROR(source.Status(std::move(status)));
  reached = true;
  return absl::OkStatus();
}

TEST(ReturnIfErrorTest, OkPassesThrough) {
  Source source;
  bool reached = false;
  EXPECT_TRUE(ReturnIfError(source, absl::OkStatus(), reached).ok());
  EXPECT_TRUE(reached);
  EXPECT_EQ(source.calls, 1);
}

TEST(ReturnIfErrorTest, ErrorReturnsEarlyUnchanged) {
  Source source;
  bool reached = true;
  absl::Status error = absl::InvalidArgumentError("shape [4,3] is not [4,4]");
  error.SetPayload("reducer/test", absl::Cord("kept"));
  absl::Status got = ReturnIfError(source, error, reached);
  EXPECT_FALSE(reached);
  EXPECT_THAT(got, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(got.message(), "shape [4,3] is not [4,4]");
  EXPECT_EQ(got, error);  // payloads too
  EXPECT_EQ(source.calls, 1);
}

TEST(ReturnIfErrorTest, ReturnsIntoAStatusOr) {
  Source source;
  auto f = [&source]() -> absl::StatusOr<int> {
    REDUCER_RETURN_IF_ERROR(source.Status(absl::NotFoundError("no job j1")));
    return 7;
  };
  absl::StatusOr<int> got = f();
  EXPECT_EQ(got.status(), absl::NotFoundError("no job j1"));
  EXPECT_EQ(source.calls, 1);
}

TEST(ReturnIfErrorTest, IsOneStatementUnderAnUnbracedIf) {
  Source source;
  auto f = [&source](bool check) -> absl::Status {
    if (check)
      REDUCER_RETURN_IF_ERROR(source.Status(absl::InternalError("checked")));
    else
      return absl::CancelledError("not checked");
    return absl::OkStatus();
  };
  EXPECT_EQ(f(true), absl::InternalError("checked"));
  EXPECT_EQ(f(false), absl::CancelledError("not checked"));
  EXPECT_EQ(source.calls, 1);
}

TEST(ReturnIfErrorTest, TakesAReferenceToAStatus) {
  const absl::Status stored = absl::DataLossError("ring corrupt");
  auto f = [&stored]() -> absl::Status {
    REDUCER_RETURN_IF_ERROR(stored);
    return absl::OkStatus();
  };
  EXPECT_EQ(f(), stored);
}

TEST(AssignOrReturnTest, DeclaresAndAssignsOnOk) {
  Source source;
  auto f = [&source]() -> absl::StatusOr<int> {
    REDUCER_ASSIGN_OR_RETURN(int x, source.StatusOr<int>(20));
    REDUCER_ASSIGN_OR_RETURN(const int y, source.StatusOr<int>(22));
    return x + y;
  };
  absl::StatusOr<int> got = f();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, 42);
  EXPECT_EQ(source.calls, 2);
}

TEST(AssignOrReturnTest, AssignsAnExistingVariableOnOk) {
  Source source;
  std::string kept = "before";
  auto f = [&]() -> absl::Status {
    REDUCER_ASSIGN_OR_RETURN(kept, source.StatusOr<std::string>("after"));
    return absl::OkStatus();
  };
  EXPECT_TRUE(f().ok());
  EXPECT_EQ(kept, "after");
  EXPECT_EQ(source.calls, 1);
}

TEST(AssignOrReturnTest, ErrorReturnsEarlyUnchangedAndAssignsNothing) {
  Source source;
  std::string kept = "before";
  bool reached = false;
  auto f = [&]() -> absl::Status {
    REDUCER_ASSIGN_OR_RETURN(
        kept, source.StatusOr<std::string>(
                  absl::ResourceExhaustedError("over --max_tensor_bytes")));
    reached = true;
    return absl::OkStatus();
  };
  absl::Status got = f();
  EXPECT_THAT(got, StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_EQ(got.message(), "over --max_tensor_bytes");
  EXPECT_FALSE(reached);
  EXPECT_EQ(kept, "before");
  EXPECT_EQ(source.calls, 1);
}

TEST(AssignOrReturnTest, ReturnsTheErrorIntoAStatusOfAnotherType) {
  Source source;
  auto f = [&source]() -> absl::StatusOr<std::string> {
    REDUCER_ASSIGN_OR_RETURN(
        int x, source.StatusOr<int>(absl::UnavailableError("shard 1 lost")));
    return std::to_string(x);
  };
  EXPECT_EQ(f().status(), absl::UnavailableError("shard 1 lost"));
  EXPECT_EQ(source.calls, 1);
}

TEST(AssignOrReturnTest, MovesAMoveOnlyValue) {
  auto make = []() -> absl::StatusOr<std::unique_ptr<int>> {
    return std::make_unique<int>(5);
  };
  auto f = [&make]() -> absl::StatusOr<int> {
    REDUCER_ASSIGN_OR_RETURN(std::unique_ptr<int> p, make());
    return *p;
  };
  absl::StatusOr<int> got = f();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, 5);
}

TEST(AssignOrReturnTest, SeveralInOneScopeOnDifferentLines) {
  Source source;
  auto f = [&source]() -> absl::StatusOr<int> {
    REDUCER_ASSIGN_OR_RETURN(int a, source.StatusOr<int>(1));
    REDUCER_ASSIGN_OR_RETURN(int b, source.StatusOr<int>(2));
    REDUCER_ASSIGN_OR_RETURN(int c, source.StatusOr<int>(3));
    return a * 100 + b * 10 + c;
  };
  EXPECT_EQ(f().value(), 123);
  EXPECT_EQ(source.calls, 3);
}

}  // namespace
}  // namespace reducer
