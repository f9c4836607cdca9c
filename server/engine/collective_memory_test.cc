// Collective in process, what it holds: back-pressure (readers paused by
// the window and resumed as chunks are reduced and written), the memory
// budget (a reservation per rank before its payload, refused when it does
// not fit, released once nothing of the rank is held) and results kept for
// a replay.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/engine/collective_test_base.h"
#include "server/engine/kept_results.h"
#include "tests/matchers.h"

namespace reducer {
namespace {

TEST_F(CollectiveTest, ForwardingPausesReadersWhileAWindowOfWritesIsQueued) {
  // Window 1, two ranks: one forwarded message queues a write for each
  // rank, which fills the group's window of 1 x 2 queued messages; one of
  // them written, reading resumes.
  options_.window = 1;
  std::shared_ptr<Collective> c = Make(CollectiveKind::kAllGather, {0, 1});
  auto ch = Channels(2);
  const std::string in0 = Bytes(std::vector<int32_t>{1, 2, 3, 4});
  const std::string in1 = Bytes(std::vector<int32_t>{5, 6, 7, 8});
  for (int r = 0; r < 2; ++r) {
    c->Attach(ch[r], r,
              Fp(CollectiveKind::kAllGather, {Spec(DataType::kInt32, {2, 2})},
                 {0, 1}),
              "");
  }
  EXPECT_FALSE(c->OnData(0, 0, Range(in0.substr(0, 8))));
  EXPECT_EQ(ch[0]->resumes(), 0);
  AcknowledgeWrites(*c, 1, *ch[1]);
  EXPECT_EQ(ch[0]->resumes(), 1);
  AcknowledgeWrites(*c, 0, *ch[0]);
  c->OnData(0, 8, Range(in0.substr(8)));
  AcknowledgeWrites(*c, 0, *ch[0]);
  AcknowledgeWrites(*c, 1, *ch[1]);
  c->OnData(1, 0, Range(in1));
  for (int r = 0; r < 2; ++r) {
    SCOPED_TRACE(absl::StrCat("rank ", r));
    ASSERT_TRUE(ch[r]->WaitEnded());
    EXPECT_TRUE(ch[r]->finished_ok()) << ch[r]->failure();
    EXPECT_EQ(ch[r]->result(), in0 + in1);
  }
  EXPECT_EQ(memory_->used(), 0u);
}

TEST_F(CollectiveTest, EveryRanksWholeResultIsKeptAsSent) {
  constexpr int kN = 40;
  std::shared_ptr<Collective> c = Make(CollectiveKind::kAllReduce, {0, 1, 2});
  auto ch = DecideThen(
      *c, kN, [](const auto&) {}, /*attempt_ids=*/true);
  for (int r = 0; r < 3; ++r) ASSERT_TRUE(ch[r]->WaitEnded());
  ASSERT_TRUE(Settles(*c)) << memory_->used() << " bytes still reserved";
  const std::string expected = Bytes(RampSum(3, kN));
  for (int r = 0; r < 3; ++r) {
    SCOPED_TRACE(absl::StrCat("rank ", r));
    EXPECT_EQ(KeptBytes(*kept_, absl::StrCat("s", r, "/0"), r), expected);
    // The first kept message carries the result's specs, as sent.
    std::optional<KeptResults::Kept> k =
        kept_->Find(absl::StrCat("s", r, "/0"), r);
    ASSERT_TRUE(k.has_value() && !k->messages.empty());
    ASSERT_NE(k->messages[0].result_specs, nullptr);
    EXPECT_EQ(k->messages[0].result_specs->at(0).shape,
              std::vector<int64_t>{kN});
    EXPECT_EQ(k->declared,
              std::vector<TensorSpec>{Spec(DataType::kFloat32, {kN})});
  }
  EXPECT_FALSE(kept_->Find("s0/0", 1).has_value());  // rank 0's, not 1's
  EXPECT_EQ(kept_memory_.used(),
            3u * (kN * sizeof(float) + KeptResults::kEntryBytes));
}

TEST_F(CollectiveTest, ACallCutOffOnceEveryInputIsInHasItsResultKept) {
  constexpr int kN = 40;
  std::shared_ptr<Collective> c = Make(CollectiveKind::kAllReduce, {0, 1, 2});
  auto ch = DecideThen(
      *c, kN,
      [&](const auto& channels) { c->OnRankCancelled(1, channels[1].get()); },
      /*attempt_ids=*/true);
  for (int r : {0, 2}) ASSERT_TRUE(ch[r]->WaitEnded());
  ASSERT_TRUE(Settles(*c)) << memory_->used() << " bytes still reserved";
  // The cut-off call got at most what was made before the cut (the inline
  // tail chunk), never its end; its whole result is kept.
  EXPECT_FALSE(ch[1]->finished_ok());
  EXPECT_LT(ch[1]->sent().size(), kept_->Find("s1/0", 1)->messages.size());
  EXPECT_EQ(KeptBytes(*kept_, "s1/0", 1), Bytes(RampSum(3, kN)));
}

TEST_F(CollectiveTest, AReplayResumesACutOffCallWithItsWholeResult) {
  constexpr int kN = 40;
  std::shared_ptr<Collective> c = Make(CollectiveKind::kAllReduce, {0, 1, 2});
  auto replay = std::make_shared<FakeRankChannel>();
  const std::vector<TensorSpec> declared = {Spec(DataType::kFloat32, {kN})};
  const std::vector<TensorSpec> other = {Spec(DataType::kFloat32, {kN / 2})};
  auto ch = DecideThen(
      *c, kN,
      [&](const auto& channels) {
        c->OnRankCancelled(1, channels[1].get());
        EXPECT_THAT(c->Resume(1, "s1/9", declared, replay),  // another attempt
                    StatusIs(absl::StatusCode::kNotFound));
        EXPECT_THAT(c->Resume(1, "s1/0", other, replay),  // other tensors
                    StatusIs(absl::StatusCode::kInvalidArgument));
        EXPECT_TRUE(c->Resume(1, "s1/0", declared, replay).ok());
      },
      /*attempt_ids=*/true);
  ASSERT_TRUE(replay->WaitEnded());
  EXPECT_TRUE(replay->finished_ok()) << replay->failure();
  EXPECT_EQ(replay->result(), Bytes(RampSum(3, kN)));
  ASSERT_FALSE(replay->sent().empty());
  EXPECT_EQ(replay->sent()[0].result,
            std::vector<TensorSpec>{Spec(DataType::kFloat32, {kN})});
  for (int r : {0, 2}) ASSERT_TRUE(ch[r]->WaitEnded());
  AcknowledgeWrites(*c, 1, *replay);
  EXPECT_TRUE(Settles(*c)) << memory_->used() << " bytes still reserved";
}

TEST_F(CollectiveTest, AReplayTakesThePlaceOfACallNotYetSeenToEnd) {
  constexpr int kN = 40;
  std::shared_ptr<Collective> c = Make(CollectiveKind::kAllReduce, {0, 1, 2});
  auto replay = std::make_shared<FakeRankChannel>();
  auto ch = DecideThen(
      *c, kN,
      [&](const auto&) {
        EXPECT_TRUE(
            c->Resume(1, "s1/0", {Spec(DataType::kFloat32, {kN})}, replay)
                .ok());
      },
      /*attempt_ids=*/true);
  ASSERT_TRUE(replay->WaitEnded());
  EXPECT_TRUE(replay->finished_ok()) << replay->failure();
  EXPECT_EQ(replay->result(), Bytes(RampSum(3, kN)));
  EXPECT_THAT(ch[1]->failure(), StatusIs(absl::StatusCode::kAborted,
                                         HasSubstr("replaced by its replay")));
  for (int r : {0, 2}) ASSERT_TRUE(ch[r]->WaitEnded());
  AcknowledgeWrites(*c, 1, *replay);
  EXPECT_TRUE(Settles(*c)) << memory_->used() << " bytes still reserved";
}

// A retry (not a replay: its client saw no answer, so it sends its
// payload again) of an attempt whose whole input is in takes that call's
// place as a replay would, and its payload is passed over: its rank gets
// the result the others got, never ABORTED for a collective that went on.
TEST_F(CollectiveTest, ARetryOfAnAttemptWhoseInputIsInGetsItsResult) {
  constexpr int kN = 40;
  std::shared_ptr<Collective> c = Make(CollectiveKind::kAllReduce, {0, 1, 2});
  auto retry = std::make_shared<FakeRankChannel>();
  auto ch = DecideThen(
      *c, kN,
      [&](const auto& channels) {
        c->OnRankCancelled(1, channels[1].get());
        ASSERT_TRUE(c->Attach(retry, 1, FloatAllReduce(kN, {0, 1, 2}), "s1/0"));
        // The same bytes again, which count once.
        Feed(*c, 1, Bytes(Ramp(1, kN)));
        c->OnInputEnd(1);
      },
      /*attempt_ids=*/true);
  ASSERT_TRUE(retry->WaitEnded());
  EXPECT_TRUE(retry->finished_ok()) << retry->failure();
  EXPECT_EQ(retry->result(), Bytes(RampSum(3, kN)));
  for (int r : {0, 2}) {
    ASSERT_TRUE(ch[r]->WaitEnded());
    EXPECT_TRUE(ch[r]->finished_ok()) << ch[r]->failure();
    EXPECT_EQ(ch[r]->result(), Bytes(RampSum(3, kN)));
  }
  AcknowledgeWrites(*c, 1, *retry);
  EXPECT_TRUE(Settles(*c)) << memory_->used() << " bytes still reserved";
}

TEST_F(CollectiveTest, AFailedCollectiveKeepsNothingAndGivesItsRoomBack) {
  constexpr int kN = 20;
  auto [c, ch, fp] = MakeAllReduce(kN, {0, 1});
  for (int r = 0; r < 2; ++r)
    c->Attach(ch[r], r, fp, absl::StrCat("s", r, "/0"));
  Feed(*c, 0, Bytes(Ramp(0, kN)));
  EXPECT_GT(kept_memory_.used(), 0u);  // room taken once every header was in
  c->Fail(absl::AbortedError("epoch 1 aborted: rank 5 lost"));
  EXPECT_EQ(kept_memory_.used(), 0u);
  EXPECT_EQ(kept_->size(), 0u);
  EXPECT_THAT(c->Resume(0, "s0/0", {Spec(DataType::kFloat32, {kN})},
                        std::make_shared<FakeRankChannel>()),
              StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(CollectiveTest, WindowOfOneStopsReadingUntilChunksAreReducedAndWritten) {
  // Two ranks, 64 floats = 4 chunks of 64 bytes, window 1: each rank may
  // hold one staged chunk and one unwritten message.
  options_.window = 1;
  constexpr int kN = 64;
  constexpr int kChunks = 4;
  auto [c, ch, fp] = MakeAllReduce(kN, {0, 1});
  c->Attach(ch[0], 0, fp, "");
  c->Attach(ch[1], 1, fp, "");
  const std::string in0 = Bytes(Ramp(0, kN)), in1 = Bytes(Ramp(1, kN));
  for (int b = 0; b < kChunks; ++b) {
    SCOPED_TRACE(absl::StrCat("chunk ", b));
    // Rank 0's chunk is staged, waiting for rank 1's: the window is full.
    EXPECT_FALSE(c->OnData(0, 64 * b, Range(in0.substr(64 * b, 64))));
    EXPECT_EQ(ch[0]->resumes(), b);
    // Rank 1 completes the chunk; it is reduced (inline, being small) and
    // sent to both, whose unwritten message now fills the window.
    EXPECT_FALSE(c->OnData(1, 64 * b, Range(in1.substr(64 * b, 64))));
    ASSERT_THAT(ch[0]->sent(), SizeIs(b + 1));
    ASSERT_THAT(ch[1]->sent(), SizeIs(b + 1));
    EXPECT_EQ(ch[0]->resumes(), b);
    EXPECT_EQ(ch[1]->resumes(), b);
    if (b + 1 == kChunks) break;  // the last message ends the stream
    // Writing rank 0's message resumes rank 0 only.
    EXPECT_EQ(ch[0]->TakeUnacknowledged(), 1);
    c->OnWriteDone(0);
    EXPECT_EQ(ch[0]->resumes(), b + 1);
    EXPECT_EQ(ch[1]->resumes(), b);
    EXPECT_EQ(ch[1]->TakeUnacknowledged(), 1);
    c->OnWriteDone(1);
    EXPECT_EQ(ch[1]->resumes(), b + 1);
  }
  const std::string expected = Bytes(RampSum(2, kN));
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(ch[r]->finished_ok()) << ch[r]->failure();
    EXPECT_TRUE(ch[r]->sent().back().last);
    EXPECT_EQ(ch[r]->result(), expected);
  }
  EXPECT_EQ(memory_->used(), 0u);
}

TEST_F(CollectiveTest, MemoryBudgetBelowOneRanksReservationIsRefused) {
  // A rank of a 256-byte AllReduce reserves min(256, window x chunk) twice
  // (staged in and queued out) = 512 bytes.
  memory_budget_bytes_ = 500;
  auto [c, ch, fp] = MakeAllReduce(64, {0, 1});
  c->Attach(ch[0], 0, fp, "");
  EXPECT_THAT(
      ch[0]->failure(),
      StatusIs(absl::StatusCode::kResourceExhausted,
               HasSubstr("memory budget of 500 bytes (--memory_budget_bytes) "
                         "is exhausted: 0 bytes in use, rank 0 needs 512 "
                         "more")));
  c->Attach(ch[1], 1, fp, "");
  EXPECT_THAT(ch[1]->failure(), StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_TRUE(c->done());
  EXPECT_EQ(memory_->used(), 0u);
}

TEST_F(CollectiveTest,
       MemoryBudgetForOneRankOnlyRefusesTheSecondAndFreesTheFirst) {
  memory_budget_bytes_ = 600;
  auto [c, ch, fp] = MakeAllReduce(64, {0, 1});
  c->Attach(ch[0], 0, fp, "");
  EXPECT_EQ(memory_->used(), 512u);
  EXPECT_EQ(ch[0]->fail_calls(), 0);
  c->Attach(ch[1], 1, fp, "");
  for (int r = 0; r < 2; ++r) {
    SCOPED_TRACE(absl::StrCat("rank ", r));
    EXPECT_THAT(ch[r]->failure(),
                StatusIs(absl::StatusCode::kResourceExhausted,
                         AllOf(HasSubstr("512 bytes in use, rank 1 needs 512 "
                                         "more"),
                               HasSubstr("--memory_budget_bytes"))));
  }
  EXPECT_EQ(memory_->used(), 0u);
}

// A ReduceScatter rank has its own slice once that is reduced, while its
// parts of chunks beyond its slice may still wait for slower ranks: its
// reservation stays until those are reduced, and its call ends (OK) only
// once every rank's payload is in. Here ranks 0 and 1 have their slices
// after chunk 0 while their 64-byte parts of chunk 1 stay staged.
TEST_F(CollectiveTest,
       ReduceScatterRanksWithTheirSlicesKeepStagedChunksInTheBudget) {
  constexpr int kN = 18;  // [9,2] float32: chunks [0,64) and [64,72)
  std::shared_ptr<Collective> c =
      Make(CollectiveKind::kReduceScatter, {0, 1, 2});
  auto ch = Channels(3);
  for (int r = 0; r < 3; ++r) {
    c->Attach(ch[r], r,
              Fp(CollectiveKind::kReduceScatter,
                 {Spec(DataType::kFloat32, {9, 2})}, {0, 1, 2}),
              "");
  }
  // Each rank reserves min(72, window x chunk) in + window x chunk out.
  EXPECT_EQ(memory_->used(), 3u * (72 + 4 * 64));
  Feed(*c, 0, Bytes(Ramp(0, kN)), 64);
  Feed(*c, 1, Bytes(Ramp(1, kN)), 64);
  c->OnData(2, 0, Range(Bytes(Ramp(2, kN)).substr(0, 64)));  // chunk 0 only
  // Ranks 0 and 1 have their 3 rows (24 bytes) each.
  ASSERT_TRUE(ch[0]->WaitMessages(1));
  ASSERT_TRUE(ch[1]->WaitMessages(1));
  EXPECT_EQ(ch[0]->byte_count(), 24u);
  EXPECT_EQ(ch[1]->byte_count(), 24u);
  EXPECT_FALSE(ch[0]->WaitEnded(absl::Milliseconds(100)))
      << "rank 0's call ended while rank 2's payload was still coming";
  // Held now: rank 2's reservation plus ranks 0 and 1's staged parts of
  // chunk 1, 64 bytes each.
  EXPECT_GE(memory_->used(), (72u + 4 * 64) + 2 * 64);
  c->OnData(2, 64, Range(Bytes(Ramp(2, kN)).substr(64)));
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(ch[r]->WaitEnded());
    EXPECT_TRUE(ch[r]->finished_ok()) << ch[r]->failure();
  }
  EXPECT_EQ(memory_->used(), 0u);
}

// A rank's reservation covers its answer until the answer is written, not
// merely queued: a client that never reads keeps it counted in the budget
// after the collective is done, and nothing more once it is written.
TEST_F(CollectiveTest, AnAnswerNotYetWrittenKeepsItsRanksReservation) {
  auto [c, ch, fp] = MakeAllReduce(16, {0, 1});
  for (int r = 0; r < 2; ++r) ch[r]->KeepUnwritten();
  for (int r = 0; r < 2; ++r) c->Attach(ch[r], r, fp, "");
  // Each rank reserves min(64, window x chunk) staged in and as much queued
  // out.
  const size_t per_rank = 2 * 64;
  ASSERT_EQ(memory_->used(), 2 * per_rank);
  for (int r = 0; r < 2; ++r) Feed(*c, r, Bytes(Ramp(r, 16)), 64);
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(ch[r]->WaitEnded());
    EXPECT_TRUE(ch[r]->finished_ok()) << ch[r]->failure();
  }
  ASSERT_TRUE(c->done());
  EXPECT_EQ(memory_->used(), 2 * per_rank);
  ch[0]->WriteKept();
  EXPECT_EQ(memory_->used(), per_rank);
  ch[1]->WriteKept();
  EXPECT_EQ(memory_->used(), 0u);
}

}  // namespace
}  // namespace reducer
