#include "tests/status_matchers.h"

#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "gmock/gmock.h"

namespace reducer {
namespace testing {
namespace status_matchers_internal {

void ExplainStatus(const absl::Status& status,
                   ::testing::MatchResultListener* listener) {
  *listener << "which has status " << status;
}

void StatusIsImpl::DescribeTo(std::ostream* os) const {
  *os << "has a status code that ";
  code_.DescribeTo(os);
  *os << ", and has an error message that ";
  message_.DescribeTo(os);
}

void StatusIsImpl::DescribeNegationTo(std::ostream* os) const {
  *os << "has a status code that ";
  code_.DescribeNegationTo(os);
  *os << ", or has an error message that ";
  message_.DescribeNegationTo(os);
}

bool StatusIsImpl::MatchAndExplain(
    const absl::Status& status,
    ::testing::MatchResultListener* listener) const {
  ::testing::StringMatchResultListener code_listener;
  if (!code_.MatchAndExplain(status.code(), &code_listener)) {
    ExplainStatus(status, listener);
    *listener << ", whose status code is wrong";
    if (!code_listener.str().empty()) *listener << " " << code_listener.str();
    return false;
  }
  ::testing::StringMatchResultListener message_listener;
  if (!message_.MatchAndExplain(std::string(status.message()),
                                &message_listener)) {
    ExplainStatus(status, listener);
    *listener << ", whose error message is wrong";
    if (!message_listener.str().empty()) {
      *listener << " " << message_listener.str();
    }
    return false;
  }
  ExplainStatus(status, listener);
  return true;
}

}  // namespace status_matchers_internal
}  // namespace testing
}  // namespace reducer
