#include "client/internal/quorum_step.h"

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "core/reduce.h"
#include "core/tensor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/matchers.h"

namespace reducer {
namespace {

Tensor Marks(std::vector<int32_t> marks) {
  Tensor t(DataType::kInt32, {static_cast<int64_t>(marks.size())});
  for (size_t i = 0; i < marks.size(); ++i)
    t.mutable_values<int32_t>()[i] = marks[i];
  return t;
}

TEST(ReadQuorumMarksTest, SplitsContributorsAndJoined) {
  absl::StatusOr<QuorumMarks> m = ReadQuorumMarks(Marks({1, 0, 2, 1}), 4, 2);
  ASSERT_THAT(m, IsOk());
  EXPECT_THAT(m->contributors, ElementsAre(0, 3));
  EXPECT_THAT(m->joined, ElementsAre(2));
  EXPECT_THAT(m->taking_part, ElementsAre(0, 2, 3));
}

TEST(ReadQuorumMarksTest, RefusesWhatReducerdCannotHaveMeant) {
  EXPECT_THAT(ReadQuorumMarks(Marks({1, 1}), 3, 0).status().message(),
              HasSubstr("where [3] int32 marks were expected"));
  EXPECT_THAT(ReadQuorumMarks(Marks({1, 7}), 2, 0).status().message(),
              HasSubstr("marked rank 1 of a quorum step 7"));
  EXPECT_THAT(ReadQuorumMarks(Marks({1, 0}), 2, 1).status().message(),
              HasSubstr("leave it out"));
  EXPECT_THAT(ReadQuorumMarks(Marks({2, 0}), 2, 0).status().message(),
              HasSubstr("name no contributor"));
}

TEST(QuorumNamesTest, EachAttemptHasItsOwnNames) {
  EXPECT_EQ(QuorumBarrierName("quorum step 4", 0), "quorum step 4");
  EXPECT_EQ(QuorumBarrierName("quorum step 4", 2), "quorum step 4 try 2");
  EXPECT_EQ(QuorumDataName("quorum step 4", 0), "quorum step 4 data");
  EXPECT_EQ(QuorumDataName("quorum step 4", 1), "quorum step 4 try 1 data");
}

TEST(IdentityTensorTest, HoldsTheIdentityOfTheOp) {
  absl::StatusOr<Tensor> t =
      IdentityTensor(ReduceOp::kProduct, DataType::kInt64, {2, 2});
  ASSERT_THAT(t, IsOk());
  EXPECT_THAT(t->values<int64_t>(), ElementsAre(1, 1, 1, 1));
  EXPECT_EQ(t->shape(), (std::vector<int64_t>{2, 2}));
  EXPECT_THAT(IdentityTensor(ReduceOp::kBitAnd, DataType::kFloat32, {1}),
              Not(IsOk()));
}

TEST(DivideInPlaceTest, DividesEachFloatingType) {
  Tensor f(DataType::kFloat32, {2});
  f.mutable_values<float>()[0] = 3;
  f.mutable_values<float>()[1] = -9;
  ASSERT_THAT(DivideInPlace(f, 3), IsOk());
  EXPECT_THAT(f.values<float>(), ElementsAre(1.0f, -3.0f));

  Tensor d(DataType::kFloat64, {1});
  d.mutable_values<double>()[0] = 1;
  ASSERT_THAT(DivideInPlace(d, 4), IsOk());
  EXPECT_EQ(d.values<double>()[0], 0.25);

  Tensor h(DataType::kFloat16, {1});
  h.mutable_values<uint16_t>()[0] = 0x4200;  // 3.0
  ASSERT_THAT(DivideInPlace(h, 2), IsOk());
  EXPECT_EQ(h.values<uint16_t>()[0], 0x3E00);  // 1.5

  Tensor b(DataType::kBFloat16, {1});
  b.mutable_values<uint16_t>()[0] = 0x4040;  // 3.0
  ASSERT_THAT(DivideInPlace(b, 2), IsOk());
  EXPECT_EQ(b.values<uint16_t>()[0], 0x3FC0);  // 1.5

  Tensor i(DataType::kInt32, {1});
  EXPECT_THAT(DivideInPlace(i, 2),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace reducer
