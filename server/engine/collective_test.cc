// Collective in process, through recording rank channels: each kind's
// result bytes and specs, whatever the order ranks arrive in. Expected
// results are computed here in closed form (rank r contributes r + 1 times
// a ramp), never by the engine's own code. Failures are in
// collective_failure_test.cc, back-pressure, the memory budget and kept
// results in collective_memory_test.cc.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/engine/collective_test_base.h"
#include "server/engine/string_bytes.h"

namespace reducer {
namespace {

using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::SizeIs;

TEST_F(CollectiveTest, AllReduceSumIsExactWhateverTheArrivalOrder) {
  // 40 floats = 160 bytes: chunks of 64, 64 and 32 bytes, fed in messages
  // of 48 bytes that straddle chunk boundaries. The two full chunks are
  // reduced on the pool, the short one inline.
  options_.offload_bytes = 64;
  constexpr int kN = 40;
  const std::string expected = Bytes(RampSum(3, kN));
  for (const std::vector<int>& order :
       {std::vector<int>{2, 1, 0}, std::vector<int>{0, 1, 2}}) {
    SCOPED_TRACE(absl::StrCat("rank ", order[0], " first"));
    std::shared_ptr<Collective> c = Make(CollectiveKind::kAllReduce, {0, 1, 2});
    std::vector<std::shared_ptr<FakeRankChannel>> ch =
        RunAllReduce(*c, order, kN);
    for (int r = 0; r < 3; ++r) {
      SCOPED_TRACE(absl::StrCat("rank ", r));
      ExpectResult(*ch[r], expected, DataType::kFloat32, {kN});
      std::vector<SentMessage> messages = ch[r]->sent();
      // One message per chunk, the last one ending the stream.
      ASSERT_THAT(messages, SizeIs(3));
      EXPECT_TRUE(messages.back().last);
    }
    EXPECT_TRUE(c->done());
    EXPECT_EQ(memory_->used(), 0u);
  }
}

// Whole-chunk pieces are held in place and the rest copied; mixed in one
// reduction, the sum is the same, and no piece outlives the collective.
TEST_F(CollectiveTest, AllReduceOfHeldAndCopiedPartsIsExact) {
  options_.offload_bytes = 64;
  constexpr int kN = 40;  // chunks of 64, 64 and 32 bytes
  std::shared_ptr<Collective> c = Make(CollectiveKind::kAllReduce, {0, 1, 2});
  auto ch = Channels(3);
  std::vector<std::weak_ptr<const StringOwner>> owners;
  for (int r = 0; r < 3; ++r) {
    c->Attach(ch[r], r, FloatAllReduce(kN, {0, 1, 2}),
              absl::StrCat("attempt-", r));
    // Rank 0: its whole input in one piece. Rank 1: the same, 4 bytes into
    // its storage (misaligned, so copied). Rank 2: one piece per chunk.
    const std::string input = Bytes(Ramp(r, kN));
    const size_t shift = r == 1 ? 4 : 0;
    auto owner = std::make_shared<const StringOwner>(
        std::string(shift, '\0') + input);
    owners.push_back(owner);
    const char* data = owner->bytes().data() + shift;
    const size_t message_bytes = r == 2 ? 64 : input.size();
    for (size_t pos = 0; pos < input.size(); pos += message_bytes) {
      Payload message;
      message.Append(SharedBytes(
          owner, data + pos, std::min(message_bytes, input.size() - pos)));
      EXPECT_TRUE(c->OnData(r, pos, std::move(message)));
    }
  }
  const std::string expected = Bytes(RampSum(3, kN));
  for (int r = 0; r < 3; ++r) {
    SCOPED_TRACE(absl::StrCat("rank ", r));
    ASSERT_TRUE(ch[r]->WaitEnded());
    EXPECT_TRUE(ch[r]->finished_ok()) << ch[r]->failure();
    EXPECT_EQ(ch[r]->result(), expected);
    EXPECT_TRUE(owners[r].expired());
  }
  EXPECT_TRUE(c->done());
  EXPECT_EQ(memory_->used(), 0u);
}

TEST_F(CollectiveTest, ReduceScatterGivesEachRankItsSliceOfTheSum) {
  // [9,2] float32 = 72 bytes, 24 per rank; chunks [0,64) and [64,72), so
  // chunk 0 feeds all three slices and chunk 1 the end of rank 2's.
  constexpr int kN = 18;
  std::shared_ptr<Collective> c = Make(CollectiveKind::kReduceScatter, {0, 1, 2});
  auto ch = Channels(3);
  for (int r : {1, 0, 2}) {
    c->Attach(ch[r], r,
              Fp(CollectiveKind::kReduceScatter,
                 {Spec(DataType::kFloat32, {9, 2})}, {0, 1, 2}),
              "");
    Feed(*c, r, Bytes(Ramp(r, kN)), 40);
  }
  const std::vector<float> sum = RampSum(3, kN);
  for (int r = 0; r < 3; ++r) {
    SCOPED_TRACE(absl::StrCat("rank ", r));
    ExpectResult(*ch[r], PartBytes(sum, r, 6), DataType::kFloat32, {3, 2});
  }
  // Rank 2's slice spans both chunks: two messages; the others one each.
  EXPECT_THAT(ch[0]->sent(), SizeIs(1));
  EXPECT_THAT(ch[1]->sent(), SizeIs(1));
  EXPECT_THAT(ch[2]->sent(), SizeIs(2));
  EXPECT_EQ(memory_->used(), 0u);
}

TEST_F(CollectiveTest, AllGatherConcatenatesUnevenContributionsInRankOrder) {
  // Rank r sends [r+1, 2] int32 holding 100 r + j: the gathered [6,2] is
  // the three contributions one after the other.
  std::shared_ptr<Collective> c = Make(CollectiveKind::kAllGather, {0, 1, 2});
  auto ch = Channels(3);
  std::vector<std::string> inputs;
  std::vector<int32_t> gathered;
  for (int r = 0; r < 3; ++r) {
    std::vector<int32_t> v;
    for (int j = 0; j < 2 * (r + 1); ++j) v.push_back(100 * r + j);
    gathered.insert(gathered.end(), v.begin(), v.end());
    inputs.push_back(Bytes(v));
  }
  auto fp = [](int r) {
    return Fp(CollectiveKind::kAllGather,
              {Spec(DataType::kInt32, {r + 1, 2})}, {0, 1, 2});
  };
  // Rank 1 sends before every header is in: held back, and its reading
  // paused until the others arrive.
  c->Attach(ch[1], 1, fp(1), "");
  EXPECT_FALSE(c->OnData(1, 0, Range(inputs[1])));
  EXPECT_THAT(ch[1]->sent(), IsEmpty());
  c->Attach(ch[2], 2, fp(2), "");
  c->Attach(ch[0], 0, fp(0), "");
  EXPECT_EQ(ch[1]->resumes(), 1);
  // Rank 2 in two messages, at offsets 0 and 12.
  c->OnData(2, 0, Range(inputs[2].substr(0, 12)));
  c->OnData(2, 12, Range(inputs[2].substr(12)));
  c->OnData(0, 0, Range(inputs[0]));
  for (int r = 0; r < 3; ++r) {
    SCOPED_TRACE(absl::StrCat("rank ", r));
    ExpectResult(*ch[r], Bytes(gathered), DataType::kInt32, {6, 2});
    std::vector<SentMessage> messages = ch[r]->sent();
    ASSERT_THAT(messages, SizeIs(4));
    // Rank 1's bytes land after rank 0's 8, rank 2's after 8 + 16.
    EXPECT_EQ(messages[0].offset, 8u);
    EXPECT_EQ(messages[1].offset, 24u);
    EXPECT_EQ(messages[2].offset, 36u);
    EXPECT_EQ(messages[3].offset, 0u);
    EXPECT_TRUE(messages[3].last);
  }
  EXPECT_EQ(memory_->used(), 0u);
}

TEST_F(CollectiveTest, BroadcastSendsTheRootsTensorToEveryRank) {
  // Root 1 sends [5] float64; ranks 0 and 2 name no tensor and send nothing.
  std::shared_ptr<Collective> c = Make(CollectiveKind::kBroadcast, {0, 1, 2});
  auto ch = Channels(3);
  const std::string root_bytes = Bytes(std::vector<double>{1.5, -2, 3, 1e300, 0.25});
  c->Attach(ch[0], 0, Fp(CollectiveKind::kBroadcast, {}, {0, 1, 2}, 1), "");
  c->Attach(ch[1], 1,
            Fp(CollectiveKind::kBroadcast, {Spec(DataType::kFloat64, {5})},
               {0, 1, 2}, 1),
            "");
  c->Attach(ch[2], 2, Fp(CollectiveKind::kBroadcast, {}, {0, 1, 2}, 1), "");
  EXPECT_THAT(ch[0]->sent(), IsEmpty());
  c->OnData(1, 0, Range(root_bytes));
  for (int r = 0; r < 3; ++r) {
    SCOPED_TRACE(absl::StrCat("rank ", r));
    ExpectResult(*ch[r], root_bytes, DataType::kFloat64, {5});
    std::vector<SentMessage> messages = ch[r]->sent();
    ASSERT_THAT(messages, SizeIs(1));
    EXPECT_TRUE(messages[0].last);
  }
  EXPECT_EQ(memory_->used(), 0u);
}

TEST_F(CollectiveTest, BarrierEndsEveryRankOnceAllArrived) {
  std::shared_ptr<Collective> c = Make(CollectiveKind::kBarrier, {0, 1, 2});
  auto ch = Channels(3);
  c->Attach(ch[2], 2, Fp(CollectiveKind::kBarrier, {}, {0, 1, 2}), "");
  c->Attach(ch[0], 0, Fp(CollectiveKind::kBarrier, {}, {0, 1, 2}), "");
  EXPECT_FALSE(ch[0]->finished_ok());
  EXPECT_FALSE(ch[2]->finished_ok());
  EXPECT_FALSE(c->done());
  c->Attach(ch[1], 1, Fp(CollectiveKind::kBarrier, {}, {0, 1, 2}), "");
  for (int r = 0; r < 3; ++r) {
    SCOPED_TRACE(absl::StrCat("rank ", r));
    EXPECT_TRUE(ch[r]->finished_ok());
    EXPECT_EQ(ch[r]->fail_calls(), 0);
    std::vector<SentMessage> messages = ch[r]->sent();
    ASSERT_THAT(messages, SizeIs(1));
    EXPECT_THAT(messages[0].result, IsEmpty());
    EXPECT_THAT(messages[0].data, IsEmpty());
    EXPECT_TRUE(messages[0].last);
    EXPECT_TRUE(c->HasFinished(r));
  }
  EXPECT_TRUE(c->done());
  EXPECT_EQ(memory_->used(), 0u);
}

// Every rank's call of a rooted kind ended OK: the root got `expected`
// (all of its bytes) with the one result spec `spec` in its first message
// only; every other rank one empty message with no specs, an empty result.
void ExpectResultAtRootOnly(
    const std::vector<std::shared_ptr<FakeRankChannel>>& ch, int root,
    const std::string& expected, const TensorSpec& spec) {
  for (int r = 0; r < static_cast<int>(ch.size()); ++r) {
    SCOPED_TRACE(absl::StrCat("rank ", r));
    ASSERT_TRUE(ch[r]->WaitEnded());
    EXPECT_TRUE(ch[r]->finished_ok()) << ch[r]->failure();
    std::vector<SentMessage> messages = ch[r]->sent();
    ASSERT_THAT(messages, Not(IsEmpty()));
    if (r == root) {
      ExpectResult(*ch[r], expected, spec.dtype, spec.shape);
      EXPECT_EQ(ch[r]->byte_count(), expected.size());
    } else {
      EXPECT_EQ(ch[r]->byte_count(), 0u);
      EXPECT_THAT(messages, SizeIs(1));
      EXPECT_THAT(messages[0].result, IsEmpty());
    }
  }
}

TEST_F(CollectiveTest, ReduceSendsTheSumToTheRootOnlyAndNonRootsNoBytes) {
  // 40 floats = 160 bytes: chunks of 64, 64 and 32 (an uneven last chunk),
  // fed in messages of 48 bytes. Every root in turn.
  constexpr int kN = 40;
  const std::string expected = Bytes(RampSum(3, kN));
  ASSERT_EQ(expected.size(), 160u);
  for (int root = 0; root < 3; ++root) {
    SCOPED_TRACE(absl::StrCat("root ", root));
    std::shared_ptr<Collective> c = Make(CollectiveKind::kReduce, {0, 1, 2});
    auto ch = Channels(3);
    for (int r : {2, 0, 1}) {
      c->Attach(ch[r], r,
                Fp(CollectiveKind::kReduce, {Spec(DataType::kFloat32, {kN})},
                   {0, 1, 2}, root),
                "");
      Feed(*c, r, Bytes(Ramp(r, kN)));
    }
    ExpectResultAtRootOnly(ch, root, expected, Spec(DataType::kFloat32, {kN}));
    EXPECT_TRUE(Settles(*c));
  }
}

TEST_F(CollectiveTest, ReduceNonRootsFinishOnceTheirInputIsInBeforeTheSum) {
  // Every full chunk is reduced on the pool, which is held: the non-roots
  // end while no reduction has run; the root ends once the pool is let go.
  options_.offload_bytes = 64;
  constexpr int kN = 32;  // two chunks of 64 bytes
  std::shared_ptr<Collective> c = Make(CollectiveKind::kReduce, {0, 1, 2});
  auto ch = Channels(3);
  {
    PoolHold hold(pool_);
    for (int r = 0; r < 3; ++r) {
      c->Attach(ch[r], r,
                Fp(CollectiveKind::kReduce, {Spec(DataType::kFloat32, {kN})},
                   {0, 1, 2}, 2),
                "");
      Feed(*c, r, Bytes(Ramp(r, kN)), 64);
    }
    EXPECT_TRUE(ch[0]->finished_ok());
    EXPECT_TRUE(ch[1]->finished_ok());
    EXPECT_FALSE(ch[2]->finished_ok());
  }
  ASSERT_TRUE(ch[2]->WaitEnded());
  EXPECT_TRUE(ch[2]->finished_ok()) << ch[2]->failure();
  EXPECT_EQ(ch[2]->result(), Bytes(RampSum(3, kN)));
  EXPECT_TRUE(Settles(*c));
}

TEST_F(CollectiveTest, GatherConcatenatesInRankOrderAtTheRootOnly) {
  // Rank r sends [4 (r + 1), 2] int32 (32, 64, 96 bytes: more than a chunk
  // for ranks 1 and 2), in messages of 40 bytes; root 1.
  std::shared_ptr<Collective> c = Make(CollectiveKind::kGather, {0, 1, 2});
  auto ch = Channels(3);
  std::vector<int32_t> gathered;
  for (int r : {0, 1, 2}) {
    const std::vector<int32_t> v = Tagged(r, 8 * (r + 1));
    gathered.insert(gathered.end(), v.begin(), v.end());
  }
  for (int r : {2, 1, 0}) {
    c->Attach(ch[r], r,
              Fp(CollectiveKind::kGather,
                 {Spec(DataType::kInt32, {4 * (r + 1), 2})}, {0, 1, 2}, 1),
              "");
    Feed(*c, r, Bytes(Tagged(r, 8 * (r + 1))), 40);
  }
  ASSERT_EQ(Bytes(gathered).size(), 192u);
  ExpectResultAtRootOnly(ch, 1, Bytes(gathered),
                         Spec(DataType::kInt32, {24, 2}));
  EXPECT_TRUE(Settles(*c));
}

TEST_F(CollectiveTest, ScatterSendsEachRankOnlyTheBytesOfItsPart) {
  // Root 2 sends [12, 2] int32 = 96 bytes in messages of 20 bytes (which
  // straddle the parts' boundaries at 32 and 64); ranks 0 and 1 send none.
  // Rank i gets elements [16 i, 16 (i + 1)) and not one byte more.
  std::shared_ptr<Collective> c = Make(CollectiveKind::kScatter, {0, 1, 2});
  auto ch = Channels(3);
  const std::vector<int32_t> input = Tagged(7, 24);
  c->Attach(ch[0], 0, Fp(CollectiveKind::kScatter, {}, {0, 1, 2}, 2), "");
  c->Attach(ch[2], 2,
            Fp(CollectiveKind::kScatter, {Spec(DataType::kInt32, {12, 2})},
               {0, 1, 2}, 2),
            "");
  // Before every header is in: held back.
  c->OnData(2, 0, Range(Bytes(input).substr(0, 20)));
  c->Attach(ch[1], 1, Fp(CollectiveKind::kScatter, {}, {0, 1, 2}, 2), "");
  Feed(*c, 2, Bytes(input).substr(20), 20, 20);
  for (int r = 0; r < 3; ++r) {
    SCOPED_TRACE(absl::StrCat("rank ", r));
    ExpectResult(*ch[r], PartBytes(input, r, 8), DataType::kInt32, {4, 2});
    EXPECT_EQ(ch[r]->byte_count(), 32u);
  }
  EXPECT_TRUE(Settles(*c));
}

TEST_F(CollectiveTest, AllToAllSendsPartJOfRankIToRankJAtOffsetI) {
  // Every rank sends [12, 2] int32 = 96 bytes (parts of 32), in messages
  // of 20 bytes. Rank j gets part j of ranks 0, 1, 2 in that order.
  constexpr int kRanks = 3;
  std::shared_ptr<Collective> c = Make(CollectiveKind::kAllToAll, {0, 1, 2});
  auto ch = Channels(kRanks);
  for (int r : {1, 2, 0}) {
    c->Attach(ch[r], r,
              Fp(CollectiveKind::kAllToAll, {Spec(DataType::kInt32, {12, 2})},
                 {0, 1, 2}),
              "");
    Feed(*c, r, Bytes(Tagged(r, 24)), 20);
  }
  for (int j = 0; j < kRanks; ++j) {
    SCOPED_TRACE(absl::StrCat("rank ", j));
    std::vector<int32_t> expected;
    for (int i = 0; i < kRanks; ++i) {
      for (int k = 8 * j; k < 8 * (j + 1); ++k) {
        expected.push_back(1000 * i + k);
      }
    }
    ExpectResult(*ch[j], Bytes(expected), DataType::kInt32, {12, 2});
    EXPECT_EQ(ch[j]->byte_count(), 96u);
  }
  EXPECT_TRUE(Settles(*c));
}

}  // namespace
}  // namespace reducer
