// The matchers reducer's tests use, declared in namespace reducer so that a
// test there names them without using-declarations: StatusIs and IsOk
// (tests/status_matchers.h) and the gMock matchers tests combine with them.
//
//   EXPECT_THAT(CheckOpSupported(ReduceOp::kAvg, DataType::kInt32),
//               StatusIs(absl::StatusCode::kInvalidArgument,
//                        AllOf(HasSubstr("avg"), HasSubstr("int32"))));
//   EXPECT_THAT(group, ElementsAre(0, 2));
#ifndef REDUCER_TESTS_MATCHERS_H_
#define REDUCER_TESTS_MATCHERS_H_

#include "gmock/gmock.h"
#include "tests/status_matchers.h"

namespace reducer {

using ::reducer::testing::IsOk;
using ::reducer::testing::StatusIs;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::SizeIs;

}  // namespace reducer

#endif  // REDUCER_TESTS_MATCHERS_H_
