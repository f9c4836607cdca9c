#include "core/fingerprint.h"

#include <iterator>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "core/fingerprint_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/matchers.h"

namespace reducer {
namespace {

Fingerprint AllReduce(std::vector<TensorSpec> tensors,
                      std::vector<int> group = {0, 1, 2}) {
  return MakeFingerprint(CollectiveKind::kAllReduce, std::move(tensors),
                         std::move(group));
}

Fingerprint Broadcast(int root, std::vector<TensorSpec> tensors) {
  return MakeFingerprint(CollectiveKind::kBroadcast, std::move(tensors),
                         {0, 1, 2}, root);
}

void ExpectMismatch(const absl::Status& s, const std::string& message) {
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_EQ(s.message(), message);
}

TEST(CollectiveKindTest, NamesAndWireValues) {
  const char* names[] = {"allreduce", "allgather", "broadcast", "reducescatter",
                         "barrier",   "reduce",    "gather",    "scatter",
                         "alltoall",  "sendreceive", "quorum", "done",
                         "alltoallv", "match"};
  ASSERT_EQ(std::size(names), static_cast<size_t>(kNumCollectiveKinds));
  for (int i = 0; i < kNumCollectiveKinds; ++i) {
    const CollectiveKind kind = static_cast<CollectiveKind>(i);
    EXPECT_EQ(CollectiveKindName(kind), names[i]);
    EXPECT_EQ(CollectiveKindToWire(kind), i + 1);
    absl::StatusOr<CollectiveKind> back = CollectiveKindFromWire(i + 1);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, kind);
  }
}

TEST(CollectiveKindTest, UnspecifiedAndUnknownWireValuesAreInvalid) {
  absl::StatusOr<CollectiveKind> k = CollectiveKindFromWire(0);
  EXPECT_THAT(k.status(), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(std::string(k.status().message()), HasSubstr("unspecified"));
  for (int v : {15, -1, 99}) {
    k = CollectiveKindFromWire(v);
    EXPECT_THAT(k.status(), StatusIs(absl::StatusCode::kInvalidArgument)) << v;
    EXPECT_THAT(
        std::string(k.status().message()),
        HasSubstr("unknown collective kind wire value " + std::to_string(v)));
  }
}

TEST(DescribeTensorTest, ShapeThenDtype) {
  EXPECT_EQ(DescribeTensor(Spec(DataType::kFloat32, {4, 3})), "[4,3] float32");
  EXPECT_EQ(DescribeTensor(Spec(DataType::kBool, {})), "[] bool");
}

TEST(CheckAgreementTest, IdenticalFingerprintsAgree) {
  Fingerprint a = AllReduce({Spec(DataType::kFloat32, {4, 3})});
  EXPECT_TRUE(CheckAgreement(0, a, 1, a).ok());
  Fingerprint barrier;
  barrier.kind = CollectiveKind::kBarrier;
  barrier.group = {0, 1};
  EXPECT_TRUE(CheckAgreement(0, barrier, 1, barrier).ok());
}

TEST(CheckAgreementTest, DifferentCollectivesAreNamed) {
  ExpectMismatch(
      CheckAgreement(0, AllReduce({Spec(DataType::kFloat32, {4})}), 1,
                     Broadcast(0, {Spec(DataType::kFloat32, {4})})),
      "mismatched collectives: rank 0 called allreduce, rank 1 called "
      "broadcast");
}

TEST(CheckAgreementTest, DifferentQuorumSettingsAreNamed) {
  Fingerprint a;
  a.kind = CollectiveKind::kQuorumBarrier;
  a.group = {0, 1, 2};
  a.quorum.min_ranks = 2;
  a.quorum.grace = absl::Seconds(2);
  Fingerprint b = a;
  EXPECT_TRUE(CheckAgreement(0, a, 1, b).ok());
  b.quorum.grace = absl::Milliseconds(500);
  ExpectMismatch(CheckAgreement(0, a, 1, b),
                 "mismatched quorum settings: rank 0 sent min_ranks 2, grace "
                 "2s, rank 1 sent min_ranks 2, grace 500ms");
  b = a;
  b.quorum.min_ranks = 3;
  ExpectMismatch(CheckAgreement(0, a, 2, b),
                 "mismatched quorum settings: rank 0 sent min_ranks 2, grace "
                 "2s, rank 2 sent min_ranks 3, grace 2s");
}

TEST(CheckAgreementTest, DifferentGroupsAreNamed) {
  ExpectMismatch(
      CheckAgreement(0, AllReduce({Spec(DataType::kFloat32, {4})}, {0, 1}), 1,
                     AllReduce({Spec(DataType::kFloat32, {4})}, {0, 1, 2})),
      "mismatched groups: rank 0 sent [0,1], rank 1 sent [0,1,2]");
}

TEST(CheckAgreementTest, DifferentRootsAreNamed) {
  ExpectMismatch(CheckAgreement(0, Broadcast(0, {Spec(DataType::kInt8, {2})}),
                                1, Broadcast(2, {})),
                 "mismatched roots: rank 0 sent 0, rank 1 sent 2");
}

TEST(CheckAgreementTest, RootIsIgnoredOutsideBroadcast) {
  Fingerprint a = AllReduce({Spec(DataType::kFloat32, {4})});
  Fingerprint b = a;
  b.root = 3;
  EXPECT_TRUE(CheckAgreement(0, a, 1, b).ok());
}

TEST(CheckAgreementTest, DifferentTensorCountsAreNamed) {
  Fingerprint a =
      AllReduce({Spec(DataType::kFloat32, {1}), Spec(DataType::kFloat32, {1}),
                 Spec(DataType::kFloat32, {1})});
  Fingerprint b =
      AllReduce({Spec(DataType::kFloat32, {1}), Spec(DataType::kFloat32, {1})});
  ExpectMismatch(
      CheckAgreement(0, a, 1, b),
      "mismatched tensor counts: rank 0 sent 3 tensors, rank 1 sent 2 tensors");
  Fingerprint one = AllReduce({Spec(DataType::kFloat32, {1})});
  ExpectMismatch(
      CheckAgreement(2, one, 0, b),
      "mismatched tensor counts: rank 2 sent 1 tensor, rank 0 sent 2 tensors");
}

TEST(CheckAgreementTest, DifferentOpsAreNamed) {
  ExpectMismatch(
      CheckAgreement(
          0, AllReduce({Spec(DataType::kFloat32, {4}, ReduceOp::kSum)}), 1,
          AllReduce({Spec(DataType::kFloat32, {4}, ReduceOp::kMax)})),
      "mismatched ops: rank 0 sent sum, rank 1 sent max");
}

TEST(CheckAgreementTest, DifferentDtypesAreNamedWithTheirShapes) {
  ExpectMismatch(
      CheckAgreement(0, AllReduce({Spec(DataType::kFloat32, {4})}), 1,
                     AllReduce({Spec(DataType::kFloat64, {4})})),
      "mismatched dtypes: rank 0 sent [4] float32, rank 1 sent [4] float64");
}

TEST(CheckAgreementTest, DifferentShapesAreNamedWithTheirDtypes) {
  ExpectMismatch(
      CheckAgreement(0, AllReduce({Spec(DataType::kFloat32, {4, 3})}), 2,
                     AllReduce({Spec(DataType::kFloat32, {4, 4})})),
      "mismatched shapes: rank 0 sent [4,3] float32, rank 2 sent [4,4] "
      "float32");
}

TEST(CheckAgreementTest, ScalarAndOneElementVectorDiffer) {
  ExpectMismatch(
      CheckAgreement(0, AllReduce({Spec(DataType::kInt64, {})}), 1,
                     AllReduce({Spec(DataType::kInt64, {1})})),
      "mismatched shapes: rank 0 sent [] int64, rank 1 sent [1] int64");
}

TEST(CheckAgreementTest, FirstDifferenceInDocumentedOrderIsReported) {
  // Everything differs: the collective kind is named first.
  Fingerprint a = AllReduce({Spec(DataType::kFloat32, {4})}, {0, 1});
  Fingerprint b = Broadcast(1, {Spec(DataType::kInt8, {5})});
  EXPECT_THAT(std::string(CheckAgreement(0, a, 1, b).message()),
              HasSubstr("mismatched collectives"));
  // Same kind: the group comes before counts, ops, dtypes and shapes.
  b = AllReduce(
      {Spec(DataType::kInt8, {5}, ReduceOp::kMax), Spec(DataType::kInt8, {5})});
  EXPECT_THAT(std::string(CheckAgreement(0, a, 1, b).message()),
              HasSubstr("mismatched groups"));
  b.group = a.group;
  EXPECT_THAT(std::string(CheckAgreement(0, a, 1, b).message()),
              HasSubstr("mismatched tensor counts"));
  b.tensors.pop_back();
  EXPECT_THAT(std::string(CheckAgreement(0, a, 1, b).message()),
              HasSubstr("mismatched ops"));
  b.tensors[0].op = ReduceOp::kSum;
  EXPECT_THAT(std::string(CheckAgreement(0, a, 1, b).message()),
              HasSubstr("mismatched dtypes"));
  b.tensors[0].dtype = DataType::kFloat32;
  EXPECT_THAT(std::string(CheckAgreement(0, a, 1, b).message()),
              HasSubstr("mismatched shapes"));
  b.tensors[0].shape = {4};
  EXPECT_TRUE(CheckAgreement(0, a, 1, b).ok());
}

TEST(CheckAgreementTest, SeveralTensorsNameTheTensorIndex) {
  std::vector<TensorSpec> specs;
  for (int i = 0; i < 5; ++i) specs.push_back(Spec(DataType::kFloat32, {2}));
  Fingerprint a = AllReduce(specs);
  Fingerprint b = a;
  b.tensors[3].shape = {3};
  ExpectMismatch(CheckAgreement(1, a, 0, b),
                 "tensor 3: mismatched shapes: rank 1 sent [2] float32, rank 0 "
                 "sent [3] float32");
  b = a;
  b.tensors[4].op = ReduceOp::kAvg;
  ExpectMismatch(CheckAgreement(1, a, 0, b),
                 "tensor 4: mismatched ops: rank 1 sent sum, rank 0 sent avg");
}

TEST(CheckAgreementTest, AllGatherAllowsDimensionZeroToDiffer) {
  Fingerprint a = MakeFingerprint(CollectiveKind::kAllGather,
                                  {Spec(DataType::kFloat32, {3, 5})}, {0, 1});
  Fingerprint b = a;
  b.tensors[0].shape = {7, 5};
  EXPECT_TRUE(CheckAgreement(0, a, 1, b).ok());
  b.tensors[0].shape = {0, 5};
  EXPECT_TRUE(CheckAgreement(0, a, 1, b).ok());
  b.tensors[0].shape = {3, 6};
  ExpectMismatch(CheckAgreement(0, a, 1, b),
                 "mismatched shapes: rank 0 sent [3,5] float32, rank 1 sent "
                 "[3,6] float32");
  b.tensors[0].shape = {15};
  ExpectMismatch(
      CheckAgreement(0, a, 1, b),
      "mismatched shapes: rank 0 sent [3,5] float32, rank 1 sent [15] float32");
  b.tensors[0] = Spec(DataType::kFloat64, {3, 5});
  ExpectMismatch(CheckAgreement(0, a, 1, b),
                 "mismatched dtypes: rank 0 sent [3,5] float32, rank 1 sent "
                 "[3,5] float64");
}

TEST(CheckAgreementTest, OpsAreIgnoredWhereNothingIsReduced) {
  Fingerprint a =
      MakeFingerprint(CollectiveKind::kAllGather,
                      {Spec(DataType::kFloat32, {3}, ReduceOp::kSum)}, {0, 1});
  Fingerprint b = a;
  b.tensors[0].op = ReduceOp::kMax;
  EXPECT_TRUE(CheckAgreement(0, a, 1, b).ok());
  EXPECT_TRUE(
      CheckAgreement(0, Broadcast(0, {Spec(DataType::kInt8, {2})}), 1,
                     Broadcast(0, {Spec(DataType::kInt8, {2}, ReduceOp::kMin)}))
          .ok());
}

TEST(CheckAgreementTest, ReduceScatterComparesOpsAndWholeShapes) {
  Fingerprint a =
      MakeFingerprint(CollectiveKind::kReduceScatter,
                      {Spec(DataType::kInt32, {4, 2}, ReduceOp::kSum)}, {0, 1});
  Fingerprint b = a;
  b.tensors[0].op = ReduceOp::kProduct;
  ExpectMismatch(CheckAgreement(0, a, 1, b),
                 "mismatched ops: rank 0 sent sum, rank 1 sent product");
  b = a;
  b.tensors[0].shape = {6, 2};
  ExpectMismatch(
      CheckAgreement(0, a, 1, b),
      "mismatched shapes: rank 0 sent [4,2] int32, rank 1 sent [6,2] int32");
}

TEST(CheckAgreementTest, BroadcastRankWithoutInputAgreesWithAnySpec) {
  Fingerprint root = Broadcast(0, {Spec(DataType::kBFloat16, {8, 8})});
  Fingerprint no_input = Broadcast(0, {});
  EXPECT_TRUE(CheckAgreement(0, root, 1, no_input).ok());
  EXPECT_TRUE(CheckAgreement(1, no_input, 0, root).ok());
  EXPECT_TRUE(CheckAgreement(1, no_input, 2, no_input).ok());
  Fingerprint other = Broadcast(0, {Spec(DataType::kBFloat16, {8, 9})});
  ExpectMismatch(CheckAgreement(0, root, 2, other),
                 "mismatched shapes: rank 0 sent [8,8] bfloat16, rank 2 sent "
                 "[8,9] bfloat16");
}


Fingerprint Rooted(CollectiveKind kind, int root,
                   std::vector<TensorSpec> tensors) {
  return MakeFingerprint(kind, std::move(tensors), {0, 1, 2}, root);
}

TEST(CheckAgreementTest, ReduceComparesRootsOpsAndWholeShapes) {
  const Fingerprint a =
      Rooted(CollectiveKind::kReduce, 1, {Spec(DataType::kInt32, {4, 2})});
  EXPECT_TRUE(CheckAgreement(0, a, 2, a).ok());
  ExpectMismatch(CheckAgreement(0, a, 2,
                                Rooted(CollectiveKind::kReduce, 0,
                                       {Spec(DataType::kInt32, {4, 2})})),
                 "mismatched roots: rank 0 sent 1, rank 2 sent 0");
  ExpectMismatch(
      CheckAgreement(0, a, 2,
                     Rooted(CollectiveKind::kReduce, 1,
                            {Spec(DataType::kInt32, {4, 2}, ReduceOp::kMax)})),
      "mismatched ops: rank 0 sent sum, rank 2 sent max");
  ExpectMismatch(CheckAgreement(0, a, 2,
                                Rooted(CollectiveKind::kReduce, 1,
                                       {Spec(DataType::kInt32, {3, 2})})),
                 "mismatched shapes: rank 0 sent [4,2] int32, rank 2 sent "
                 "[3,2] int32");
}

TEST(CheckAgreementTest, GatherComparesRootsAndAllowsDimensionZeroToDiffer) {
  const Fingerprint a =
      Rooted(CollectiveKind::kGather, 2, {Spec(DataType::kFloat32, {3, 5})});
  EXPECT_TRUE(CheckAgreement(0, a, 1,
                             Rooted(CollectiveKind::kGather, 2,
                                    {Spec(DataType::kFloat32, {7, 5})}))
                  .ok());
  ExpectMismatch(CheckAgreement(0, a, 1,
                                Rooted(CollectiveKind::kGather, 0,
                                       {Spec(DataType::kFloat32, {3, 5})})),
                 "mismatched roots: rank 0 sent 2, rank 1 sent 0");
  ExpectMismatch(CheckAgreement(0, a, 1,
                                Rooted(CollectiveKind::kGather, 2,
                                       {Spec(DataType::kFloat32, {3, 6})})),
                 "mismatched shapes: rank 0 sent [3,5] float32, rank 1 sent "
                 "[3,6] float32");
  // Nothing is reduced: ops are ignored.
  EXPECT_TRUE(CheckAgreement(
                  0, a, 1,
                  Rooted(CollectiveKind::kGather, 2,
                         {Spec(DataType::kFloat32, {3, 5}, ReduceOp::kMin)}))
                  .ok());
}

TEST(CheckAgreementTest, ScatterNonRootsSendNothingAndRootsMustAgree) {
  const Fingerprint root =
      Rooted(CollectiveKind::kScatter, 0, {Spec(DataType::kInt8, {6})});
  const Fingerprint other = Rooted(CollectiveKind::kScatter, 0, {});
  EXPECT_TRUE(CheckAgreement(0, root, 1, other).ok());
  EXPECT_TRUE(CheckAgreement(2, other, 0, root).ok());
  EXPECT_TRUE(CheckAgreement(1, other, 2, other).ok());
  ExpectMismatch(
      CheckAgreement(0, root, 1, Rooted(CollectiveKind::kScatter, 1, {})),
      "mismatched roots: rank 0 sent 0, rank 1 sent 1");
}

TEST(CheckAgreementTest, AllToAllComparesWholeShapesAndDtypes) {
  Fingerprint a = MakeFingerprint(CollectiveKind::kAllToAll,
                                  {Spec(DataType::kInt32, {4, 2})}, {0, 1});
  Fingerprint b = a;
  b.tensors[0].shape = {2, 2};
  ExpectMismatch(
      CheckAgreement(0, a, 1, b),
      "mismatched shapes: rank 0 sent [4,2] int32, rank 1 sent [2,2] int32");
  b.tensors[0] = Spec(DataType::kFloat32, {4, 2});
  ExpectMismatch(CheckAgreement(0, a, 1, b),
                 "mismatched dtypes: rank 0 sent [4,2] int32, rank 1 sent "
                 "[4,2] float32");
  // No root: it is not compared.
  b = a;
  b.root = 1;
  EXPECT_TRUE(CheckAgreement(0, a, 1, b).ok());
}

TEST(CheckAgreementTest, AllToAllVAllowsDimensionZeroToDiffer) {
  Fingerprint a =
      MakeFingerprint(CollectiveKind::kAllToAllV,
                      {Spec(DataType::kInt32, {5, 2, 3})}, {0, 1, 2});
  a.send_rows = {1, 4, 0};
  Fingerprint b = a;
  b.tensors[0].shape = {0, 2, 3};
  b.send_rows = {0, 0, 0};
  b.recv_rows = {1, 0, 7};  // the rows are the strategy's to compare
  EXPECT_TRUE(CheckAgreement(0, a, 1, b).ok());
  b.tensors[0].shape = {0, 3, 3};
  ExpectMismatch(CheckAgreement(0, a, 1, b),
                 "mismatched shapes: rank 0 sent [5,2,3] int32, rank 1 sent "
                 "[0,3,3] int32");
  b.tensors[0] = Spec(DataType::kInt64, {5, 2, 3});
  ExpectMismatch(CheckAgreement(0, a, 2, b),
                 "mismatched dtypes: rank 0 sent [5,2,3] int32, rank 2 sent "
                 "[5,2,3] int64");
}

TEST(CheckAgreementTest, SendReceiveComparesSourcesAndDeclaredSpecs) {
  Fingerprint send;
  send.kind = CollectiveKind::kSendReceive;
  send.root = 0;
  send.group = {0, 3};
  send.tensors = {Spec(DataType::kFloat32, {4, 2})};
  // Receive declares nothing: it agrees with any spec.
  Fingerprint receive = send;
  receive.tensors.clear();
  EXPECT_TRUE(CheckAgreement(0, send, 3, receive).ok());
  EXPECT_TRUE(CheckAgreement(3, receive, 0, send).ok());
  // ReceiveInPlace declares its buffer's spec: it must be the sent one.
  Fingerprint in_place = send;
  EXPECT_TRUE(CheckAgreement(0, send, 3, in_place).ok());
  in_place.tensors = {Spec(DataType::kFloat32, {4, 3})};
  ExpectMismatch(CheckAgreement(0, send, 3, in_place),
                 "mismatched shapes: rank 0 sent [4,2] float32, rank 3 sent "
                 "[4,3] float32");
  in_place.tensors = {Spec(DataType::kInt32, {4, 2})};
  ExpectMismatch(CheckAgreement(0, send, 3, in_place),
                 "mismatched dtypes: rank 0 sent [4,2] float32, rank 3 sent "
                 "[4,2] int32");
  // Dimension 0 may not differ (unlike AllGather's), nor may the source.
  in_place.tensors = {Spec(DataType::kFloat32, {5, 2})};
  EXPECT_FALSE(CheckAgreement(0, send, 3, in_place).ok());
  receive.root = 3;
  ExpectMismatch(CheckAgreement(0, send, 3, receive),
                 "mismatched roots: rank 0 sent 0, rank 3 sent 3");
}

}  // namespace
}  // namespace reducer
