// gMock matchers for absl::Status and absl::StatusOr<T>, in the style of
// Abseil's internal status matchers and tensorstore's MatchesStatus.
// (tests/matchers.h declares them in namespace reducer, where tests name
// them without the using-declarations below.)
//
//   using ::reducer::testing::IsOk;
//   using ::reducer::testing::StatusIs;
//   using ::testing::HasSubstr;
//
//   EXPECT_THAT(CheckOpSupported(ReduceOp::kAvg, DataType::kInt32),
//               StatusIs(absl::StatusCode::kInvalidArgument,
//                        HasSubstr("floating-point dtypes only")));
//   EXPECT_THAT(NumElements({2, -3}),     // an absl::StatusOr<int64_t>
//               StatusIs(absl::StatusCode::kInvalidArgument));
//   EXPECT_THAT(NumElements({2, 3}), IsOk());
//
// StatusIs(code, message_matcher)
//   Matches an absl::Status, or an absl::StatusOr<T> by its status(), whose
//   code() matches `code` (an absl::StatusCode, or a matcher of one) and
//   whose message() matches `message_matcher` (a std::string matcher such as
//   HasSubstr("..."), or a string, which must equal the message). An OK
//   status has code kOk and an empty message, so StatusIs(kOk) matches it.
// StatusIs(code)
//   The same, whatever the message.
// IsOk()
//   Matches an OK absl::Status, or an absl::StatusOr<T> holding a value.
//
// A mismatch is explained with the status there was, code and message
// ("which has status INVALID_ARGUMENT: shape [2,-3]"), so a failing
// EXPECT_THAT names it even where the StatusOr<T> itself cannot be printed.
#ifndef REDUCER_TESTS_STATUS_MATCHERS_H_
#define REDUCER_TESTS_STATUS_MATCHERS_H_

#include <ostream>
#include <string>
#include <type_traits>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gmock/gmock.h"

namespace reducer {
namespace testing {
namespace status_matchers_internal {

inline const absl::Status& GetStatus(const absl::Status& status) {
  return status;
}

template <typename T>
const absl::Status& GetStatus(const absl::StatusOr<T>& status_or) {
  return status_or.status();
}

// Says which status there was: "which has status CODE: message" ("OK" for
// an OK one).
void ExplainStatus(const absl::Status& status,
                   ::testing::MatchResultListener* listener);

// StatusIs's test, on the absl::Status whichever kind of argument held it.
class StatusIsImpl {
 public:
  StatusIsImpl(::testing::Matcher<absl::StatusCode> code,
               ::testing::Matcher<const std::string&> message)
      : code_(std::move(code)), message_(std::move(message)) {}

  void DescribeTo(std::ostream* os) const;
  void DescribeNegationTo(std::ostream* os) const;
  bool MatchAndExplain(const absl::Status& status,
                       ::testing::MatchResultListener* listener) const;

 private:
  ::testing::Matcher<absl::StatusCode> code_;
  ::testing::Matcher<const std::string&> message_;
};

// The monomorphic matcher for one argument type, absl::Status or
// absl::StatusOr<T>, as a reference or not.
template <typename Arg>
class MonoStatusIsMatcher : public ::testing::MatcherInterface<Arg> {
 public:
  explicit MonoStatusIsMatcher(StatusIsImpl impl) : impl_(std::move(impl)) {}

  void DescribeTo(std::ostream* os) const override { impl_.DescribeTo(os); }
  void DescribeNegationTo(std::ostream* os) const override {
    impl_.DescribeNegationTo(os);
  }
  bool MatchAndExplain(
      Arg actual, ::testing::MatchResultListener* listener) const override {
    return impl_.MatchAndExplain(GetStatus(actual), listener);
  }

 private:
  StatusIsImpl impl_;
};

// What StatusIs returns: converts to a Matcher of any status argument.
class StatusIsMatcher {
 public:
  explicit StatusIsMatcher(StatusIsImpl impl) : impl_(std::move(impl)) {}

  template <typename Arg>
  operator ::testing::Matcher<Arg>() const {  // NOLINT: implicit by design
    return ::testing::Matcher<Arg>(
        new MonoStatusIsMatcher<const std::decay_t<Arg>&>(impl_));
  }

 private:
  StatusIsImpl impl_;
};

// IsOk's test, for one argument type.
template <typename Arg>
class MonoIsOkMatcher : public ::testing::MatcherInterface<Arg> {
 public:
  void DescribeTo(std::ostream* os) const override { *os << "is OK"; }
  void DescribeNegationTo(std::ostream* os) const override {
    *os << "is not OK";
  }
  bool MatchAndExplain(
      Arg actual, ::testing::MatchResultListener* listener) const override {
    const absl::Status& status = GetStatus(actual);
    if (!status.ok()) ExplainStatus(status, listener);
    return status.ok();
  }
};

// What IsOk returns: converts to a Matcher of any status argument.
class IsOkMatcher {
 public:
  template <typename Arg>
  operator ::testing::Matcher<Arg>() const {  // NOLINT: implicit by design
    return ::testing::Matcher<Arg>(
        new MonoIsOkMatcher<const std::decay_t<Arg>&>());
  }
};

}  // namespace status_matchers_internal

// See the header comment.
template <typename CodeMatcher, typename MessageMatcher>
status_matchers_internal::StatusIsMatcher StatusIs(CodeMatcher&& code,
                                                   MessageMatcher&& message) {
  return status_matchers_internal::StatusIsMatcher(
      status_matchers_internal::StatusIsImpl(
          ::testing::MatcherCast<absl::StatusCode>(
              std::forward<CodeMatcher>(code)),
          ::testing::MatcherCast<const std::string&>(
              std::forward<MessageMatcher>(message))));
}

// See the header comment.
template <typename CodeMatcher>
status_matchers_internal::StatusIsMatcher StatusIs(CodeMatcher&& code) {
  return StatusIs(std::forward<CodeMatcher>(code), ::testing::_);
}

// See the header comment.
inline status_matchers_internal::IsOkMatcher IsOk() {
  return status_matchers_internal::IsOkMatcher();
}

}  // namespace testing
}  // namespace reducer

#endif  // REDUCER_TESTS_STATUS_MATCHERS_H_
