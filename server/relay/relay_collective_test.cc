// RelayCollective in process, against a fake upstream session that records
// what the relay sends and answers as the test says. Expected payloads and
// results are computed here, element by element.
#include "server/relay/relay_collective.h"

#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "core/fingerprint_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/reducer/v1/wire_conversion.h"
#include "server/engine/clock.h"
#include "server/engine/fake_rank_channel.h"
#include "server/engine/string_bytes.h"
#include "server/engine/thread_pool.h"
#include "server/relay/relay_collective_fixture.h"
#include "tests/status_matchers.h"

namespace reducer {
namespace {

using ::reducer::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

TEST_F(RelayCollectiveTest, AllReduceSendsTheSumOfItsRanksOnceAndHandsBack) {
  // Ranks 0-2 of a group of 4 (rank 3 elsewhere); 50 floats = 200 bytes,
  // 4 chunks of 64 bytes.
  constexpr int kN = 50;
  const std::vector<int> group = {0, 1, 2, 3};
  const Fingerprint fp =
      MakeFingerprint(CollectiveKind::kAllReduce,
                      {Spec(DataType::kFloat32, {kN}, ReduceOp::kAvg)}, group);
  auto c = Make({0, 1, 2});
  std::vector<std::shared_ptr<FakeRankChannel>> ch;
  std::vector<float> sum(kN, 0.0f);
  for (int r = 0; r < 3; ++r) {
    ch.push_back(std::make_shared<FakeRankChannel>());
    ASSERT_TRUE(c->Attach(ch[r], r, HeaderOf(fp, r), fp));
  }
  for (int r = 2; r >= 0; --r) {
    std::vector<float> x(kN);
    for (int i = 0; i < kN; ++i) {
      x[i] = static_cast<float>(r * 100 + i);
      sum[i] += x[i];
    }
    const std::string bytes = Bytes(x);
    // In two messages that do not fall on chunk boundaries.
    c->OnData(r, 0, PayloadOf(bytes.substr(0, 72)));
    c->OnData(r, 72, PayloadOf(bytes.substr(72)));
    c->OnInputEnd(r);
  }
  EXPECT_EQ(session_->Payload(), Bytes(sum));
  const v1::CollectiveHeader up = session_->header();
  EXPECT_EQ(up.rank(), 0);
  EXPECT_THAT(up.ranks(), ElementsAre(0, 1, 2));
  EXPECT_TRUE(up.session_id().empty());
  EXPECT_TRUE(up.attempt_id().empty());
  // The result, as upstream would make it (any bytes will do).
  std::vector<float> result(kN);
  for (int i = 0; i < kN; ++i) result[i] = 0.5f * i;
  session_->Answer(Spec(DataType::kFloat32, {kN}, ReduceOp::kAvg),
                   Bytes(result));
  for (int r = 0; r < 3; ++r) {
    DrainWrites(*c, r, *ch[r]);
    ASSERT_TRUE(ch[r]->WaitEnded());
    EXPECT_TRUE(ch[r]->finished_ok()) << ch[r]->failure();
    EXPECT_EQ(ch[r]->result(), Bytes(result));
    // 200 bytes in messages of at most 64.
    EXPECT_EQ(ch[r]->message_count(), 4);
  }
  // One copy for the host: every member's messages are the same bytes of
  // the same owner, which its same-host sessions write into the job's
  // result segment once for all of them.
  const std::vector<SentMessage> first = ch[0]->sent();
  for (int r = 1; r < 3; ++r) {
    const std::vector<SentMessage> other = ch[r]->sent();
    ASSERT_EQ(other.size(), first.size());
    for (size_t m = 0; m < first.size(); ++m) {
      EXPECT_EQ(other[m].offset, first[m].offset);
      EXPECT_EQ(other[m].pieces, first[m].pieces)
          << "rank " << r << " message " << m << " was copied apart";
    }
  }
  EXPECT_TRUE(c->done());
  // Two ranks' 200 bytes up and down were not sent.
  EXPECT_EQ(saved_, 4u * 200u);
  EXPECT_EQ(memory_.used(), 0u);
}

TEST_F(RelayCollectiveTest, ChunksReducedOnThePoolGoUpstreamInOrder) {
  // Ranks 0-1 of {0,1,2}: int32 [1000] SUM in chunks of 64 bytes, each
  // reduced on a pool of two threads; upstream reads the sum in order.
  ThreadPool pool(2);
  env_.reduction_pool = &pool;
  env_.offload_bytes = 64;
  constexpr int kN = 1000;
  const Fingerprint fp = MakeFingerprint(
      CollectiveKind::kAllReduce, {Spec(DataType::kInt32, {kN})}, {0, 1, 2});
  auto c = Make({0, 1});
  std::vector<std::shared_ptr<FakeRankChannel>> ch;
  std::vector<int32_t> sum(kN);
  for (int r = 0; r < 2; ++r) {
    ch.push_back(std::make_shared<FakeRankChannel>());
    ASSERT_TRUE(c->Attach(ch[r], r, HeaderOf(fp, r), fp));
  }
  for (int r = 0; r < 2; ++r) {
    std::vector<int32_t> x(kN);
    for (int i = 0; i < kN; ++i) sum[i] += x[i] = r * 7919 + i * 31;
    const std::string bytes = Bytes(x);
    for (size_t at = 0; at < bytes.size(); at += 100) {
      c->OnData(r, at, PayloadOf(bytes.substr(at, 100)));
    }
  }
  EXPECT_EQ(session_->Payload(), Bytes(sum));
}

TEST_F(RelayCollectiveTest, GatherConcatenatesInRankOrderForTheRoot) {
  // Ranks 1-2 of {0,1,2}, root 2: rank 1 sends [1,2], rank 2 [2,2] int32.
  const std::vector<int> group = {0, 1, 2};
  auto fp = [&](int64_t rows) {
    return MakeFingerprint(CollectiveKind::kGather,
                           {Spec(DataType::kInt32, {rows, 2})}, group,
                           /*root=*/2);
  };
  auto c = Make({1, 2});
  auto ch1 = std::make_shared<FakeRankChannel>();
  auto ch2 = std::make_shared<FakeRankChannel>();
  ASSERT_TRUE(c->Attach(ch2, 2, HeaderOf(fp(2), 2), fp(2)));
  // Rank 2 sends before rank 1 attached: held until its place is known.
  c->OnData(2, 0, PayloadOf(Bytes(std::vector<int32_t>{20, 21, 22, 23})));
  ASSERT_TRUE(c->Attach(ch1, 1, HeaderOf(fp(1), 1), fp(1)));
  c->OnData(1, 0, PayloadOf(Bytes(std::vector<int32_t>{10, 11})));
  EXPECT_EQ(session_->Payload(),
            Bytes(std::vector<int32_t>{10, 11, 20, 21, 22, 23}));
  const v1::CollectiveHeader up = session_->header();
  EXPECT_EQ(up.rank(), 2);  // sent as the root
  EXPECT_THAT(up.ranks(), ElementsAre(1, 2));
  EXPECT_EQ(up.tensors(0).shape(0), 3);
  const std::string all =
      Bytes(std::vector<int32_t>{0, 1, 10, 11, 20, 21, 22, 23});
  session_->Answer(Spec(DataType::kInt32, {4, 2}), all);
  DrainWrites(*c, 2, *ch2);
  ASSERT_TRUE(ch2->WaitEnded());
  EXPECT_EQ(ch2->result(), all);
  ASSERT_TRUE(ch1->WaitEnded());
  EXPECT_TRUE(ch1->finished_ok());
  EXPECT_EQ(ch1->byte_count(), 0u);
  EXPECT_THAT(ch1->specs(), IsEmpty());
}

TEST_F(RelayCollectiveTest, ReduceScatterSendsTheSumOnceAndHandsEachItsSlice) {
  // Ranks 1-3 of a group of 4; [48, 2] float32 = 384 bytes, AVG (summed
  // here, divided upstream). Each rank's slice is 12 rows (96 bytes):
  // upstream answers the three members' slices, [36, 2], and each member
  // gets its own in two messages (64 and 32 bytes).
  constexpr int kRows = 48;
  constexpr int kN = kRows * 2;
  constexpr int kSliceN = kN / 4;
  const std::vector<int> group = {0, 1, 2, 3};
  const Fingerprint fp = MakeFingerprint(
      CollectiveKind::kReduceScatter,
      {Spec(DataType::kFloat32, {kRows, 2}, ReduceOp::kAvg)}, group);
  auto c = Make({1, 2, 3});
  std::vector<std::shared_ptr<FakeRankChannel>> ch(4);
  for (int r = 1; r <= 3; ++r) {
    ch[r] = std::make_shared<FakeRankChannel>();
    ASSERT_TRUE(c->Attach(ch[r], r, HeaderOf(fp, r), fp));
  }
  std::vector<float> sum(kN, 0.0f);
  for (int r : {3, 1, 2}) {
    std::vector<float> x(kN);
    for (int i = 0; i < kN; ++i) {
      x[i] = static_cast<float>(r * 1000 + i);
      sum[i] += x[i];
    }
    const std::string bytes = Bytes(x);
    c->OnData(r, 0, PayloadOf(bytes.substr(0, 100)));
    c->OnData(r, 100, PayloadOf(bytes.substr(100)));
    c->OnInputEnd(r);
  }
  EXPECT_EQ(session_->Payload(), Bytes(sum));
  const v1::CollectiveHeader up = session_->header();
  EXPECT_EQ(up.rank(), 1);
  EXPECT_THAT(up.ranks(), ElementsAre(1, 2, 3));
  EXPECT_EQ(up.tensors(0).shape(0), kRows);  // every rank's whole input
  EXPECT_EQ(up.tensors(0).op(), v1::REDUCE_OP_AVG);
  // The members' slices as upstream would make them (any bytes will do).
  std::vector<float> slices(3 * kSliceN);
  for (int i = 0; i < 3 * kSliceN; ++i) slices[i] = 0.25f * i;
  session_->Answer(Spec(DataType::kFloat32, {36, 2}, ReduceOp::kAvg),
                   Bytes(slices));
  for (int r = 1; r <= 3; ++r) {
    SCOPED_TRACE(r);
    DrainWrites(*c, r, *ch[r]);
    ASSERT_TRUE(ch[r]->WaitEnded());
    EXPECT_TRUE(ch[r]->finished_ok()) << ch[r]->failure();
    const int k = r - 1;  // its place among the members
    EXPECT_EQ(ch[r]->result(),
              Bytes(std::vector<float>(slices.begin() + k * kSliceN,
                                       slices.begin() + (k + 1) * kSliceN)));
    EXPECT_EQ(ch[r]->headers(), 1);
    ASSERT_EQ(ch[r]->specs().size(), 1u);
    EXPECT_EQ(ch[r]->specs()[0].shape, (std::vector<int64_t>{12, 2}));
    EXPECT_EQ(ch[r]->message_count(), 2);
  }
  EXPECT_TRUE(c->done());
  // Two ranks' inputs were not sent; each slice was received once, as it
  // would have been.
  EXPECT_EQ(saved_, 2u * 4 * kN);
  EXPECT_EQ(memory_.used(), 0u);
}

TEST_F(RelayCollectiveTest, ScatterSendsTheRootsInputAndHandsEachItsPart) {
  // Ranks 1-2 of {0,1,2,3}, root 2: [8] int32, two per rank. The call
  // goes as the root with its input; upstream answers ranks 1-2's parts.
  const std::vector<int> group = {0, 1, 2, 3};
  const Fingerprint root_fp = MakeFingerprint(
      CollectiveKind::kScatter, {Spec(DataType::kInt32, {8})}, group, 2);
  const Fingerprint other_fp =
      MakeFingerprint(CollectiveKind::kScatter, {}, group, 2);
  auto c = Make({1, 2});
  auto ch1 = std::make_shared<FakeRankChannel>();
  auto ch2 = std::make_shared<FakeRankChannel>();
  const std::vector<int32_t> input = {0, 1, 10, 11, 20, 21, 30, 31};
  ASSERT_TRUE(c->Attach(ch2, 2, HeaderOf(root_fp, 2), root_fp));
  c->OnData(2, 0, PayloadOf(Bytes(input)));
  ASSERT_TRUE(c->Attach(ch1, 1, HeaderOf(other_fp, 1), other_fp));
  EXPECT_EQ(session_->Payload(), Bytes(input));
  const v1::CollectiveHeader up = session_->header();
  EXPECT_EQ(up.rank(), 2);  // sent as the root
  EXPECT_THAT(up.ranks(), ElementsAre(1, 2));
  ASSERT_EQ(up.tensors_size(), 1);
  EXPECT_EQ(up.tensors(0).shape(0), 8);
  session_->Answer(Spec(DataType::kInt32, {4}),
                   Bytes(std::vector<int32_t>{10, 11, 20, 21}));
  for (int r : {1, 2}) {
    FakeRankChannel& ch = r == 1 ? *ch1 : *ch2;
    DrainWrites(*c, r, ch);
    ASSERT_TRUE(ch.WaitEnded());
    EXPECT_TRUE(ch.finished_ok()) << ch.failure();
    EXPECT_EQ(ch.result(), Bytes(std::vector<int32_t>{10 * r, 10 * r + 1}));
    ASSERT_EQ(ch.specs().size(), 1u);
    EXPECT_EQ(ch.specs()[0].shape, (std::vector<int64_t>{2}));
  }
  EXPECT_TRUE(c->done());
  EXPECT_EQ(saved_, 0u);  // the root's input and each part move once anyway
}

TEST_F(RelayCollectiveTest, ScatterWithoutTheRootSendsNothing) {
  // Ranks 2-3 of {0,1,2,3}, root 0 elsewhere: one call as rank 2, no
  // payload, and each member gets its part of the answer.
  const std::vector<int> group = {0, 1, 2, 3};
  const Fingerprint fp =
      MakeFingerprint(CollectiveKind::kScatter, {}, group, 0);
  auto c = Make({2, 3});
  auto ch2 = std::make_shared<FakeRankChannel>();
  auto ch3 = std::make_shared<FakeRankChannel>();
  ASSERT_TRUE(c->Attach(ch3, 3, HeaderOf(fp, 3), fp));
  ASSERT_TRUE(c->Attach(ch2, 2, HeaderOf(fp, 2), fp));
  EXPECT_EQ(session_->Payload(), "");
  const v1::CollectiveHeader up = session_->header();
  EXPECT_EQ(up.rank(), 2);
  EXPECT_THAT(up.ranks(), ElementsAre(2, 3));
  EXPECT_EQ(up.tensors_size(), 0);
  session_->Answer(Spec(DataType::kFloat64, {2, 3}),
                   Bytes(std::vector<double>{2, 2.5, 2.75, 3, 3.5, 3.75}));
  for (int r : {2, 3}) {
    FakeRankChannel& ch = r == 2 ? *ch2 : *ch3;
    DrainWrites(*c, r, ch);
    ASSERT_TRUE(ch.WaitEnded());
    EXPECT_TRUE(ch.finished_ok()) << ch.failure();
    EXPECT_EQ(ch.result(),
              Bytes(std::vector<double>{r + 0.0, r + 0.5, r + 0.75}));
    ASSERT_EQ(ch.specs().size(), 1u);
    EXPECT_EQ(ch.specs()[0].shape, (std::vector<int64_t>{1, 3}));
  }
}

// All-to-all over {0,1,2,3}: rank r sends [8, 2] int32, two rows (16
// bytes) to each rank d, whose element (k, e) is 1000 r + 100 d + 10 k + e.
int32_t A2aValue(int from, int to, int row, int col) {
  return 1000 * from + 100 * to + 10 * row + col;
}
std::vector<int32_t> A2aInput(int rank) {
  std::vector<int32_t> v;
  for (int d = 0; d < 4; ++d) {
    for (int k = 0; k < 2; ++k) {
      for (int e = 0; e < 2; ++e) v.push_back(A2aValue(rank, d, k, e));
    }
  }
  return v;
}

TEST_F(RelayCollectiveTest,
       AllToAllSendsPartsByDestinationAndHandsEachItsRows) {
  // Ranks 1-3 of the group: one call as rank 1, its payload per
  // destination d the parts of ranks 1, 2 and 3 for d; upstream answers
  // the three members' results, [24, 2], and each gets its own 8 rows.
  const std::vector<int> group = {0, 1, 2, 3};
  const Fingerprint fp = MakeFingerprint(
      CollectiveKind::kAllToAll, {Spec(DataType::kInt32, {8, 2})}, group);
  auto c = Make({1, 2, 3});
  std::vector<std::shared_ptr<FakeRankChannel>> ch(4);
  ch[3] = std::make_shared<FakeRankChannel>();
  ASSERT_TRUE(c->Attach(ch[3], 3, HeaderOf(fp, 3), fp));
  // Rank 3 sends before the others attached: held until they are in.
  const std::string input3 = Bytes(A2aInput(3));
  c->OnData(3, 0, PayloadOf(input3.substr(0, 20)));
  for (int r : {1, 2}) {
    ch[r] = std::make_shared<FakeRankChannel>();
    ASSERT_TRUE(c->Attach(ch[r], r, HeaderOf(fp, r), fp));
  }
  // Messages that do not fall on parts' boundaries, ranks out of order.
  const std::string input1 = Bytes(A2aInput(1));
  const std::string input2 = Bytes(A2aInput(2));
  c->OnData(2, 0, PayloadOf(input2.substr(0, 40)));
  c->OnData(1, 0, PayloadOf(input1.substr(0, 24)));
  // Every member's part for rank 0 is in, then rank 1's first 8 bytes of
  // its part for rank 1: that much of the payload is ready (rank 2's part
  // for rank 1, though whole, comes after what rank 1 has yet to send).
  EXPECT_EQ(session_->input()->ready(), 3u * 16u + 8u);
  c->OnData(3, 20, PayloadOf(input3.substr(20)));
  c->OnData(1, 24, PayloadOf(input1.substr(24)));
  c->OnData(2, 40, PayloadOf(input2.substr(40)));
  for (int r = 1; r <= 3; ++r) c->OnInputEnd(r);
  std::vector<int32_t> want_up;
  for (int d = 0; d < 4; ++d) {
    for (int r = 1; r <= 3; ++r) {
      for (int k = 0; k < 2; ++k) {
        for (int e = 0; e < 2; ++e) want_up.push_back(A2aValue(r, d, k, e));
      }
    }
  }
  EXPECT_EQ(session_->Payload(), Bytes(want_up));
  const v1::CollectiveHeader up = session_->header();
  EXPECT_EQ(up.rank(), 1);
  EXPECT_THAT(up.ranks(), ElementsAre(1, 2, 3));
  ASSERT_EQ(up.tensors_size(), 1);
  EXPECT_EQ(up.tensors(0).shape(0), 24);  // the three members' rows
  EXPECT_EQ(up.tensors(0).shape(1), 2);
  // The members' results as upstream would make them: member r's is the
  // rows every rank s sent it, in group order.
  std::vector<int32_t> answer;
  for (int r = 1; r <= 3; ++r) {
    for (int s = 0; s < 4; ++s) {
      for (int k = 0; k < 2; ++k) {
        for (int e = 0; e < 2; ++e) answer.push_back(A2aValue(s, r, k, e));
      }
    }
  }
  session_->Answer(Spec(DataType::kInt32, {24, 2}), Bytes(answer));
  for (int r = 1; r <= 3; ++r) {
    SCOPED_TRACE(r);
    DrainWrites(*c, r, *ch[r]);
    ASSERT_TRUE(ch[r]->WaitEnded());
    EXPECT_TRUE(ch[r]->finished_ok()) << ch[r]->failure();
    std::vector<int32_t> own;
    for (int s = 0; s < 4; ++s) {
      for (int k = 0; k < 2; ++k) {
        for (int e = 0; e < 2; ++e) own.push_back(A2aValue(s, r, k, e));
      }
    }
    EXPECT_EQ(ch[r]->result(), Bytes(own));
    EXPECT_EQ(ch[r]->headers(), 1);
    ASSERT_EQ(ch[r]->specs().size(), 1u);
    EXPECT_EQ(ch[r]->specs()[0].shape, (std::vector<int64_t>{8, 2}));
  }
  // Each member's rows are the answer's own bytes, not copies: member k's
  // 64 bytes at k * 64 of the answer.
  const std::vector<SentMessage> first = ch[1]->sent();
  ASSERT_FALSE(first.empty());
  ASSERT_FALSE(first[0].pieces.empty());
  for (int r = 2; r <= 3; ++r) {
    const std::vector<SentMessage> other = ch[r]->sent();
    ASSERT_FALSE(other.empty());
    ASSERT_FALSE(other[0].pieces.empty());
    EXPECT_EQ(other[0].pieces[0].second,
              first[0].pieces[0].second + (r - 1) * 64)
        << "rank " << r << "'s rows were copied apart";
  }
  EXPECT_TRUE(c->done());
  // Every member's input goes up and its rows come back as they would
  // alone: combining saves calls, not bytes.
  EXPECT_EQ(saved_, 0u);
  EXPECT_EQ(memory_.used(), 0u);
}

TEST_F(RelayCollectiveTest, AnUnevenAnswerForMembersPartsFailsThemAll) {
  // Upstream's answer to two members' reduce-scatter must cut in two along
  // dimension 0; [3] does not.
  const Fingerprint fp =
      MakeFingerprint(CollectiveKind::kReduceScatter,
                      {Spec(DataType::kFloat32, {6})}, {0, 1, 2});
  auto c = Make({0, 1});
  auto ch0 = std::make_shared<FakeRankChannel>();
  auto ch1 = std::make_shared<FakeRankChannel>();
  ASSERT_TRUE(c->Attach(ch0, 0, HeaderOf(fp, 0), fp));
  ASSERT_TRUE(c->Attach(ch1, 1, HeaderOf(fp, 1), fp));
  const std::string bytes = Bytes(std::vector<float>{1, 2, 3, 4, 5, 6});
  c->OnData(0, 0, PayloadOf(bytes));
  c->OnData(1, 0, PayloadOf(bytes));
  EXPECT_EQ(session_->Payload(), Bytes(std::vector<float>{2, 4, 6, 8, 10, 12}));
  session_->Answer(Spec(DataType::kFloat32, {3}),
                   Bytes(std::vector<float>{1, 2, 3}));
  for (auto* ch : {ch0.get(), ch1.get()}) {
    ASSERT_TRUE(ch->WaitEnded());
    EXPECT_THAT(ch->failure(),
                StatusIs(absl::StatusCode::kInternal,
                         HasSubstr("not one tensor of 2 ranks' parts")));
  }
  EXPECT_TRUE(c->done());
  EXPECT_EQ(memory_.used(), 0u);
}

TEST_F(RelayCollectiveTest, OneRankGoesUpstreamAsItsOwn) {
  const Fingerprint fp = MakeFingerprint(
      CollectiveKind::kReduceScatter, {Spec(DataType::kFloat32, {4})}, {0, 1});
  auto c = Make({1});
  auto ch = std::make_shared<FakeRankChannel>();
  v1::CollectiveHeader header = HeaderOf(fp, 1);
  header.set_sequence(7);
  ASSERT_TRUE(c->Attach(ch, 1, header, fp));
  const std::string bytes = Bytes(std::vector<float>{1, 2, 3, 4});
  c->OnData(1, 0, PayloadOf(bytes));
  EXPECT_EQ(session_->Payload(), bytes);
  const v1::CollectiveHeader up = session_->header();
  EXPECT_EQ(up.rank(), 1);
  EXPECT_EQ(up.sequence(), 7u);
  EXPECT_THAT(up.ranks(), IsEmpty());
  session_->Answer(Spec(DataType::kFloat32, {2}),
                   Bytes(std::vector<float>{6, 8}));
  DrainWrites(*c, 1, *ch);
  ASSERT_TRUE(ch->WaitEnded());
  EXPECT_EQ(ch->result(), Bytes(std::vector<float>{6, 8}));
}

TEST_F(RelayCollectiveTest, AMismatchHereSendsEachRankUpstreamAlone) {
  // Rank 1 disagrees with rank 0: each goes upstream as its own, with its
  // own payload, and upstream's verdict (the mismatch, named there with
  // the other hosts' ranks) reaches each.
  const std::vector<int> group = {0, 1, 2};
  auto fp = [&](int64_t n) {
    return MakeFingerprint(CollectiveKind::kAllReduce,
                           {Spec(DataType::kFloat32, {n})}, group);
  };
  auto c = Make({0, 1});
  auto ch0 = std::make_shared<FakeRankChannel>();
  auto ch1 = std::make_shared<FakeRankChannel>();
  const std::string bytes0 = Bytes(std::vector<float>{1, 2, 3, 4});
  const std::string bytes1 = Bytes(std::vector<float>{5, 6, 7, 8, 9});
  ASSERT_TRUE(c->Attach(ch0, 0, HeaderOf(fp(4), 0), fp(4)));
  c->OnData(0, 0, PayloadOf(bytes0.substr(0, 8)));  // held until it goes
  ASSERT_TRUE(c->Attach(ch1, 1, HeaderOf(fp(5), 1), fp(5)));
  c->OnData(0, 8, PayloadOf(bytes0.substr(8)));
  c->OnData(1, 0, PayloadOf(bytes1));
  ASSERT_EQ(session_->Payload(0), bytes0);
  ASSERT_EQ(session_->Payload(1), bytes1);
  for (int call : {0, 1}) {
    const v1::CollectiveHeader up = session_->header(call);
    EXPECT_EQ(up.rank(), call);
    EXPECT_THAT(up.ranks(), IsEmpty());
    EXPECT_EQ(up.tensors(0).shape(0), call == 0 ? 4 : 5);
    EXPECT_TRUE(up.session_id().empty());
  }
  const absl::Status mismatch = absl::FailedPreconditionError(
      "allreduce #0 in job j: mismatched shapes: rank 1 sent [5] float32, "
      "rank 2 sent [4] float32");
  EXPECT_FALSE(c->done());
  session_->Refuse(mismatch, 1);
  session_->Refuse(mismatch, 0);
  for (auto* ch : {ch0.get(), ch1.get()}) {
    ASSERT_TRUE(ch->WaitEnded());
    EXPECT_EQ(ch->failure(), mismatch);
  }
  EXPECT_TRUE(c->done());
  EXPECT_EQ(memory_.used(), 0u);
}

TEST_F(RelayCollectiveTest, RanksInAtHalfTheTimeoutGoUpstreamWithoutTheLate) {
  // Rank 1 is late: at half the 400 ms timeout rank 0 goes upstream alone,
  // and rank 1 alone once it attaches; each gets its own answer.
  const Fingerprint fp = MakeFingerprint(
      CollectiveKind::kAllReduce, {Spec(DataType::kFloat32, {2})}, {0, 1, 2});
  auto c = Make({0, 1});
  auto ch0 = std::make_shared<FakeRankChannel>();
  auto ch1 = std::make_shared<FakeRankChannel>();
  v1::CollectiveHeader header0 = HeaderOf(fp, 0);
  header0.set_timeout_ms(400);
  const absl::Time attached = absl::Now();
  ASSERT_TRUE(c->Attach(ch0, 0, header0, fp));
  c->OnData(0, 0, PayloadOf(Bytes(std::vector<float>{1, 2})));
  EXPECT_EQ(session_->Payload(0), Bytes(std::vector<float>{1, 2}));
  EXPECT_GE(absl::Now() - attached, absl::Milliseconds(190));
  EXPECT_EQ(session_->header(0).rank(), 0);
  EXPECT_THAT(session_->header(0).ranks(), IsEmpty());
  EXPECT_EQ(session_->calls(), 1u);
  ASSERT_TRUE(c->Attach(ch1, 1, HeaderOf(fp, 1), fp));
  c->OnData(1, 0, PayloadOf(Bytes(std::vector<float>{3, 4})));
  EXPECT_EQ(session_->Payload(1), Bytes(std::vector<float>{3, 4}));
  EXPECT_EQ(session_->header(1).rank(), 1);
  const std::string sum = Bytes(std::vector<float>{9, 9});
  session_->Answer(Spec(DataType::kFloat32, {2}), sum, 0);
  session_->Answer(Spec(DataType::kFloat32, {2}), sum, 1);
  for (int r : {0, 1}) {
    FakeRankChannel& ch = r == 0 ? *ch0 : *ch1;
    DrainWrites(*c, r, ch);
    ASSERT_TRUE(ch.WaitEnded());
    EXPECT_TRUE(ch.finished_ok()) << ch.failure();
    EXPECT_EQ(ch.result(), sum);
  }
  EXPECT_TRUE(c->done());
  EXPECT_EQ(saved_, 0u);  // nothing was combined
}

TEST_F(RelayCollectiveTest, ARankThatNeverArrivesIsLeftForUpstreamToName) {
  // Rank 1 never attaches: rank 0 goes alone at half its timeout, and
  // upstream's timeout (naming rank 1 with the other hosts' ranks) ends
  // it; the collective is done without rank 1.
  const Fingerprint fp =
      MakeFingerprint(CollectiveKind::kBarrier, {}, {0, 1, 2});
  auto c = Make({0, 1});
  auto ch0 = std::make_shared<FakeRankChannel>();
  v1::CollectiveHeader header = HeaderOf(fp, 0);
  header.set_timeout_ms(100);
  ASSERT_TRUE(c->Attach(ch0, 0, header, fp));
  EXPECT_EQ(session_->header(0).rank(), 0);
  const absl::Status timeout = absl::DeadlineExceededError(
      "barrier #0 in job j timed out after 100ms: rank 1 never arrived "
      "(ranks 0,2 waited)");
  session_->Refuse(timeout, 0);
  ASSERT_TRUE(ch0->WaitEnded());
  EXPECT_EQ(ch0->failure(), timeout);
  EXPECT_TRUE(c->done());
  EXPECT_THAT(absent_, ElementsAre(1));  // to go alone when it comes
}

TEST_F(RelayCollectiveTest, RanksThatAllArriveInTimeAreNotSplit) {
  const Fingerprint fp =
      MakeFingerprint(CollectiveKind::kBarrier, {}, {0, 1, 2});
  auto c = Make({0, 1});
  auto ch0 = std::make_shared<FakeRankChannel>();
  auto ch1 = std::make_shared<FakeRankChannel>();
  v1::CollectiveHeader header = HeaderOf(fp, 0);
  header.set_timeout_ms(100);
  ASSERT_TRUE(c->Attach(ch0, 0, header, fp));
  ASSERT_TRUE(c->Attach(ch1, 1, HeaderOf(fp, 1), fp));
  EXPECT_THAT(session_->header(0).ranks(), ElementsAre(0, 1));
  absl::SleepFor(absl::Milliseconds(150));  // past the split's time
  EXPECT_EQ(session_->calls(), 1u);
  session_->AnswerNothing(0);
  for (auto* ch : {ch0.get(), ch1.get()}) {
    ASSERT_TRUE(ch->WaitEnded());
    EXPECT_TRUE(ch->finished_ok()) << ch->failure();
  }
}

TEST_F(RelayCollectiveTest, AnUpstreamFailureReachesEveryRank) {
  const Fingerprint fp =
      MakeFingerprint(CollectiveKind::kBarrier, {}, {0, 1, 2});
  auto c = Make({0, 1});
  auto ch0 = std::make_shared<FakeRankChannel>();
  auto ch1 = std::make_shared<FakeRankChannel>();
  ASSERT_TRUE(c->Attach(ch0, 0, HeaderOf(fp, 0), fp));
  ASSERT_TRUE(c->Attach(ch1, 1, HeaderOf(fp, 1), fp));
  EXPECT_THAT(session_->header().ranks(), ElementsAre(0, 1));
  session_->Refuse(
      absl::DeadlineExceededError("barrier #0 in job j: rank 2 never arrived"));
  for (auto* ch : {ch0.get(), ch1.get()}) {
    ASSERT_TRUE(ch->WaitEnded());
    EXPECT_THAT(ch->failure(), StatusIs(absl::StatusCode::kDeadlineExceeded,
                                        HasSubstr("rank 2 never arrived")));
  }
}

// What a relay ends its calls with when its upstream session or its epoch
// ends: a call not made yet fails and can never be made; one made goes on
// as upstream decides.
TEST_F(RelayCollectiveTest, FailUnlessStartedEndsOnlyACallNotMadeUpstream) {
  const Fingerprint fp =
      MakeFingerprint(CollectiveKind::kBarrier, {}, {0, 1, 2});
  auto waiting = Make({0, 1});
  auto ch0 = std::make_shared<FakeRankChannel>();
  ASSERT_TRUE(waiting->Attach(ch0, 0, HeaderOf(fp, 0), fp));
  EXPECT_TRUE(waiting->FailUnlessStarted(absl::AbortedError("upstream ended")));
  ASSERT_TRUE(ch0->WaitEnded());
  EXPECT_THAT(ch0->failure(), StatusIs(absl::StatusCode::kAborted));
  // Its last member, attaching after, does not make it upstream.
  auto late = std::make_shared<FakeRankChannel>();
  EXPECT_FALSE(waiting->Attach(late, 1, HeaderOf(fp, 1), fp));
  EXPECT_THAT(late->failure(), StatusIs(absl::StatusCode::kAborted));
  EXPECT_EQ(session_->calls(), 0u);
  EXPECT_TRUE(waiting->done());

  auto made = Make({0, 1});
  auto ch1 = std::make_shared<FakeRankChannel>();
  auto ch2 = std::make_shared<FakeRankChannel>();
  ASSERT_TRUE(made->Attach(ch1, 0, HeaderOf(fp, 0), fp));
  ASSERT_TRUE(made->Attach(ch2, 1, HeaderOf(fp, 1), fp));
  EXPECT_FALSE(made->FailUnlessStarted(absl::AbortedError("upstream ended")));
  session_->AnswerNothing();
  for (auto* ch : {ch1.get(), ch2.get()}) {
    ASSERT_TRUE(ch->WaitEnded());
    EXPECT_TRUE(ch->finished_ok()) << ch->failure();
  }
}

}  // namespace
}  // namespace reducer
