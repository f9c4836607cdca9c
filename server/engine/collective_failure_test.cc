// Collective in process, how it fails: mismatched fingerprints, payload a
// rank must not send, timeouts naming what is missing, cancelled calls
// (detached for a retry before every rank arrived, aborting everyone in
// between, only their own once every input is in) and the end of a job's
// epoch.
#include <cstdint>
#include <limits>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/engine/collective_test_base.h"
#include "tests/matchers.h"

namespace reducer {
namespace {

// A `kind` over ranks 0 and 1 rooted at 0, whose rank 1 sends `payload`
// though a non-root sends none: the collective fails for both ranks with
// INVALID_ARGUMENT saying so, and nothing stays reserved.
void ExpectNonRootPayloadFailsAll(CollectiveTest& t, CollectiveKind kind,
                                  DataType dtype, const std::string& payload) {
  std::shared_ptr<Collective> c = t.Make(kind, {0, 1});
  auto ch = Channels(2);
  c->Attach(ch[0], 0, Fp(kind, {Spec(dtype, {2})}, {0, 1}, 0), "");
  c->Attach(ch[1], 1, Fp(kind, {}, {0, 1}, 0), "");
  EXPECT_FALSE(c->OnData(1, 0, Range(payload)));
  for (int r = 0; r < 2; ++r) {
    SCOPED_TRACE(absl::StrCat("rank ", r));
    EXPECT_THAT(ch[r]->failure(),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr(absl::StrCat("a non-root rank sends no ",
                                                CollectiveKindName(kind),
                                                " payload"))));
  }
  EXPECT_EQ(t.memory().used(), 0u);
}

TEST_F(CollectiveTest, NonRootBroadcastPayloadFailsTheCollective) {
  ExpectNonRootPayloadFailsAll(*this, CollectiveKind::kBroadcast,
                               DataType::kFloat32, std::string(8, 'x'));
}

// Ranks 0 and 1 of a `kind` over ranks 0..2 attach with one `dtype`
// tensor of shape `agreed` (rank 0 then sends its first `rank0_floats`
// floats of payload), rank 2 with shape `other`: every rank must fail once
// with FAILED_PRECONDITION naming `mismatch` and the job, sent nothing, and
// nothing stays reserved.
void ExpectThirdRankShapeFailsAll(CollectiveTest& t, CollectiveKind kind,
                                  DataType dtype, std::vector<int64_t> agreed,
                                  std::vector<int64_t> other, int rank0_floats,
                                  const std::string& mismatch) {
  std::shared_ptr<Collective> c = t.Make(kind, {0, 1, 2});
  auto ch = Channels(3);
  for (int r : {0, 1}) {
    c->Attach(ch[r], r, Fp(kind, {Spec(dtype, agreed)}, {0, 1, 2}), "");
  }
  if (rank0_floats > 0) c->OnData(0, 0, Range(Bytes(Ramp(0, rank0_floats))));
  c->Attach(ch[2], 2, Fp(kind, {Spec(dtype, std::move(other))}, {0, 1, 2}), "");
  for (int r = 0; r < 3; ++r) {
    SCOPED_TRACE(absl::StrCat("rank ", r));
    EXPECT_THAT(ch[r]->failure(),
                StatusIs(absl::StatusCode::kFailedPrecondition,
                         AllOf(HasSubstr(mismatch), HasSubstr("in job j1"))));
    EXPECT_EQ(ch[r]->fail_calls(), 1);
    EXPECT_THAT(ch[r]->sent(), IsEmpty());
  }
  EXPECT_TRUE(c->done());
  EXPECT_EQ(t.memory().used(), 0u);
}

TEST_F(CollectiveTest, ShapeMismatchFailsEveryAttachedRank) {
  // Rank 0's payload is already in when rank 2 disagrees.
  ExpectThirdRankShapeFailsAll(*this, CollectiveKind::kAllReduce,
                               DataType::kFloat32, {4, 3}, {4, 4},
                               /*rank0_floats=*/12,
                               "mismatched shapes: rank 0 sent [4,3] float32, "
                               "rank 2 sent [4,4] float32");
}

// A `kind` (all-gather or gather to rank 0) over ranks 0..2 whose ranks 0
// and 2 each send an int32 tensor of shape [INT64_MAX, 0]: no bytes, but a
// dimension 0 whose sum passes INT64_MAX. Rank 2's attach fails the
// collective for both with INVALID_ARGUMENT naming both ranks and shapes,
// and nothing stays reserved.
void ExpectEmptyRowsOverflowFailsAll(CollectiveTest& t, CollectiveKind kind,
                                     const std::string& gathered) {
  constexpr int64_t kMost = std::numeric_limits<int64_t>::max();
  std::shared_ptr<Collective> c = t.Make(kind, {0, 1, 2});
  auto ch = Channels(3);
  const Fingerprint fp =
      Fp(kind, {Spec(DataType::kInt32, {kMost, 0})}, {0, 1, 2},
         kind == CollectiveKind::kGather ? 0 : -1);
  c->Attach(ch[0], 0, fp, "");
  c->Attach(ch[2], 2, fp, "");
  for (int r : {0, 2}) {
    SCOPED_TRACE(absl::StrCat("rank ", r));
    EXPECT_THAT(
        ch[r]->failure(),
        StatusIs(
            absl::StatusCode::kInvalidArgument,
            AllOf(HasSubstr(absl::StrCat("the ", gathered,
                                         " result's dimension 0 would pass "
                                         "9223372036854775807: rank 2 sent "
                                         "[9223372036854775807,0] int32 after "
                                         "9223372036854775807 rows")),
                  HasSubstr("from rank 0, which sent "
                            "[9223372036854775807,0] int32"))));
    EXPECT_THAT(ch[r]->sent(), IsEmpty());
  }
  EXPECT_TRUE(c->done());
  EXPECT_EQ(t.memory().used(), 0u);
}

TEST_F(CollectiveTest, AllGatherOfEmptyRowsPastInt64FailsNamingTheRanks) {
  ExpectEmptyRowsOverflowFailsAll(*this, CollectiveKind::kAllGather,
                                  "all-gathered");
}

TEST_F(CollectiveTest, GatherOfEmptyRowsPastInt64FailsNamingTheRanks) {
  ExpectEmptyRowsOverflowFailsAll(*this, CollectiveKind::kGather, "gathered");
}

TEST_F(CollectiveTest, AllGatherOfEmptyRowsUpToInt64Succeeds) {
  // [INT64_MAX - 1, 0] and [1, 0]: the sum is INT64_MAX exactly, which a
  // shape holds; the result has no bytes.
  constexpr int64_t kMost = std::numeric_limits<int64_t>::max();
  std::shared_ptr<Collective> c = Make(CollectiveKind::kAllGather, {0, 1});
  auto ch = Channels(2);
  c->Attach(ch[0], 0,
            Fp(CollectiveKind::kAllGather,
               {Spec(DataType::kInt32, {kMost - 1, 0})}, {0, 1}),
            "");
  c->Attach(
      ch[1], 1,
      Fp(CollectiveKind::kAllGather, {Spec(DataType::kInt32, {1, 0})}, {0, 1}),
      "");
  for (int r = 0; r < 2; ++r) {
    SCOPED_TRACE(absl::StrCat("rank ", r));
    ExpectResult(*ch[r], "", DataType::kInt32, {kMost, 0});
  }
  EXPECT_TRUE(c->done());
}

TEST_F(CollectiveTest, TimeoutFailsWaitingRanksNamingTheMissingOne) {
  std::shared_ptr<Collective> c =
      Make(CollectiveKind::kAllReduce, {0, 1, 2}, absl::Milliseconds(200));
  auto ch = Channels(3);
  const Fingerprint fp = FloatAllReduce(4, {0, 1, 2});
  c->Attach(ch[0], 0, fp, "");
  c->Attach(ch[2], 2, fp, "");
  for (int r : {0, 2}) {
    SCOPED_TRACE(absl::StrCat("rank ", r));
    ExpectFailed(
        *ch[r], absl::StatusCode::kDeadlineExceeded,
        "timed out after 200ms: rank 1 never arrived (ranks 0,2 waited)");
  }
  EXPECT_TRUE(c->done());
  EXPECT_EQ(memory_->used(), 0u);
  // A late rank gets the same failure.
  c->Attach(ch[1], 1, fp, "");
  EXPECT_THAT(ch[1]->failure(), StatusIs(absl::StatusCode::kDeadlineExceeded));
}

TEST_F(CollectiveTest, RankCancelledBeforeAllArrivedIsDetachedAndMayRetry) {
  constexpr int kN = 20;
  auto [c, ch, fp] = MakeAllReduce(kN, {0, 1, 2});
  c->Attach(ch[0], 0, fp, "a0");
  Feed(*c, 0, Bytes(Ramp(0, kN)));
  c->Attach(ch[1], 1, fp, "a1");
  const size_t reserved_before = memory_->used();
  c->OnRankCancelled(1, ch[1].get());
  // Detached: nothing sent to it, nothing failed, its reservation returned.
  EXPECT_EQ(ch[1]->fail_calls(), 0);
  EXPECT_LT(memory_->used(), reserved_before);
  EXPECT_FALSE(c->done());
  EXPECT_FALSE(c->all_attached());

  auto retry = std::make_shared<FakeRankChannel>();
  c->Attach(retry, 1, fp, "a1");
  Feed(*c, 1, Bytes(Ramp(1, kN)));
  // A second cancellation of the old call (it raced the retry) is ignored.
  c->OnRankCancelled(1, ch[1].get());
  EXPECT_FALSE(c->done());
  c->Attach(ch[2], 2, fp, "a2");
  EXPECT_TRUE(c->all_attached());
  Feed(*c, 2, Bytes(Ramp(2, kN)));
  const std::string expected = Bytes(RampSum(3, kN));  // rank 1 counted once
  for (FakeRankChannel* p : {ch[0].get(), retry.get(), ch[2].get()}) {
    ASSERT_TRUE(p->WaitEnded());
    EXPECT_TRUE(p->finished_ok()) << p->failure();
    EXPECT_EQ(p->result(), expected);
  }
  EXPECT_THAT(ch[1]->sent(), IsEmpty());
  EXPECT_EQ(ch[1]->fail_calls(), 0);
  EXPECT_EQ(memory_->used(), 0u);
}

TEST_F(CollectiveTest, RetryOnANewStreamReplacesTheFirstBeforeData) {
  std::shared_ptr<Collective> c = Make(CollectiveKind::kBarrier, {0, 1});
  auto ch = Channels(2);
  auto retry = std::make_shared<FakeRankChannel>();
  const Fingerprint fp = Fp(CollectiveKind::kBarrier, {}, {0, 1});
  c->Attach(ch[0], 0, fp, "a0");
  c->Attach(retry, 0, fp, "a0");
  EXPECT_THAT(
      ch[0]->failure(),
      StatusIs(absl::StatusCode::kAborted,
               HasSubstr("rank 0's contribution was replaced by its retry")));
  // The same rank with a different attempt is a second contribution.
  auto twice = std::make_shared<FakeRankChannel>();
  c->Attach(twice, 0, fp, "other");
  EXPECT_THAT(twice->failure(),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("rank 0 contributed twice")));
  c->Attach(ch[1], 1, fp, "a1");
  EXPECT_TRUE(retry->finished_ok());
  EXPECT_TRUE(ch[1]->finished_ok());
  EXPECT_TRUE(c->done());
  EXPECT_EQ(memory_->used(), 0u);
}

TEST_F(CollectiveTest, RankCancelledAfterAllArrivedAbortsEveryone) {
  constexpr int kN = 20;
  auto [c, ch, fp] = MakeAllReduce(kN, {0, 1, 2});
  for (int r = 0; r < 3; ++r) c->Attach(ch[r], r, fp, "");
  c->OnData(0, 0, Range(Bytes(Ramp(0, kN)).substr(0, 16)));
  c->OnRankCancelled(1, ch[1].get());
  for (int r = 0; r < 3; ++r) {
    SCOPED_TRACE(absl::StrCat("rank ", r));
    EXPECT_THAT(ch[r]->failure(),
                StatusIs(absl::StatusCode::kAborted,
                         HasSubstr("rank 1's call was cancelled")));
  }
  EXPECT_TRUE(c->done());
  EXPECT_EQ(memory_->used(), 0u);
  // Data still in flight from the others is dropped, not read on.
  EXPECT_FALSE(c->OnData(2, 0, Range(Bytes(Ramp(2, kN)))));
}

TEST_F(CollectiveTest,
       ReduceScatterRankCancelledAfterOthersHadTheirSlicesFailsEveryone) {
  // [24] float32 = 96 bytes over 3 ranks: 32-byte slices, chunks [0,64)
  // and [64,96). Ranks 0 and 1 send all, rank 2 chunk 0 only: ranks 0 and
  // 1 have their whole slices, but rank 2's call is cancelled before its
  // payload is all in. The collective fails for every rank, none ends OK.
  constexpr int kN = 24;
  std::shared_ptr<Collective> c =
      Make(CollectiveKind::kReduceScatter, {0, 1, 2});
  auto ch = Channels(3);
  const Fingerprint fp = Fp(CollectiveKind::kReduceScatter,
                            {Spec(DataType::kFloat32, {kN})}, {0, 1, 2});
  for (int r = 0; r < 3; ++r) c->Attach(ch[r], r, fp, "");
  Feed(*c, 0, Bytes(Ramp(0, kN)), 64);
  Feed(*c, 1, Bytes(Ramp(1, kN)), 64);
  c->OnData(2, 0, Range(Bytes(Ramp(2, kN)).substr(0, 64)));  // chunk 0 only
  // Rank 0's slice (bytes [0,32)) is reduced and sent.
  ASSERT_TRUE(ch[0]->WaitMessages(1));
  EXPECT_EQ(ch[0]->byte_count(), 32u);
  c->OnRankCancelled(2, ch[2].get());
  for (int r = 0; r < 2; ++r) {
    SCOPED_TRACE(absl::StrCat("rank ", r));
    ASSERT_TRUE(ch[r]->WaitEnded());
    EXPECT_FALSE(ch[r]->finished_ok());
    EXPECT_THAT(ch[r]->failure(),
                StatusIs(absl::StatusCode::kAborted,
                         HasSubstr("rank 2's call was cancelled")));
  }
  EXPECT_TRUE(c->done());
  EXPECT_TRUE(Settles(*c)) << memory_->used() << " bytes still reserved";
}

TEST_F(CollectiveTest, EpochEndOnceEveryInputIsInStillDeliversTheResult) {
  constexpr int kN = 40;
  std::shared_ptr<Collective> c = Make(CollectiveKind::kAllReduce, {0, 1, 2});
  auto ch = DecideThen(*c, kN, [&](const auto&) {
    EXPECT_FALSE(c->done());
    c->FailUnlessDecided(absl::AbortedError("epoch 1 aborted: rank 5 lost"));
  });
  const std::string expected = Bytes(RampSum(3, kN));
  for (int r = 0; r < 3; ++r) {
    SCOPED_TRACE(absl::StrCat("rank ", r));
    ASSERT_TRUE(ch[r]->WaitEnded());
    EXPECT_TRUE(ch[r]->finished_ok()) << ch[r]->failure();
    EXPECT_EQ(ch[r]->fail_calls(), 0);
    EXPECT_EQ(ch[r]->result(), expected);
  }
  EXPECT_TRUE(Settles(*c)) << memory_->used() << " bytes still reserved";
}

TEST_F(CollectiveTest, EpochEndBeforeEveryInputIsInFailsEveryone) {
  constexpr int kN = 20;
  auto [c, ch, fp] = MakeAllReduce(kN, {0, 1});
  for (int r = 0; r < 2; ++r) c->Attach(ch[r], r, fp, "");
  Feed(*c, 0, Bytes(Ramp(0, kN)));
  Feed(*c, 1, Bytes(Ramp(1, kN)).substr(0, 40));
  c->FailUnlessDecided(absl::AbortedError("epoch 1 aborted: rank 5 lost"));
  for (int r = 0; r < 2; ++r) {
    EXPECT_THAT(ch[r]->failure(), StatusIs(absl::StatusCode::kAborted));
    EXPECT_FALSE(ch[r]->finished_ok());
  }
  EXPECT_TRUE(c->done());
  EXPECT_EQ(memory_->used(), 0u);
}

TEST_F(CollectiveTest, RankCancelledOnceEveryInputIsInEndsOnlyItsOwnCall) {
  constexpr int kN = 40;
  std::shared_ptr<Collective> c = Make(CollectiveKind::kAllReduce, {0, 1, 2});
  auto ch = DecideThen(*c, kN, [&](const auto& channels) {
    c->OnRankCancelled(1, channels[1].get());
  });
  const std::string expected = Bytes(RampSum(3, kN));
  for (int r : {0, 2}) {
    SCOPED_TRACE(absl::StrCat("rank ", r));
    ASSERT_TRUE(ch[r]->WaitEnded());
    EXPECT_TRUE(ch[r]->finished_ok()) << ch[r]->failure();
    EXPECT_EQ(ch[r]->result(), expected);
  }
  // The cut-off rank's stream is gone: nothing more is sent to it, and it
  // is not failed either (its call already ended with the cancellation).
  EXPECT_EQ(ch[1]->fail_calls(), 0);
  EXPECT_FALSE(ch[1]->finished_ok());
  EXPECT_TRUE(Settles(*c)) << memory_->used() << " bytes still reserved";
}

TEST_F(CollectiveTest,
       RankCancelledAfterSendingDataAbortsEveryoneEvenBeforeAllArrived) {
  // Its bytes are staged in a chunk: detaching it would lose them, so the
  // collective cannot go on without counting it twice or not at all.
  auto [c, ch, fp] = MakeAllReduce(4, {0, 1, 2});
  c->Attach(ch[0], 0, fp, "a0");
  c->Attach(ch[1], 1, fp, "a1");
  c->OnData(1, 0, Range(Bytes(Ramp(1, 4))));
  c->OnRankCancelled(1, ch[1].get());
  for (int r : {0, 1}) {
    EXPECT_THAT(ch[r]->failure(),
                StatusIs(absl::StatusCode::kAborted,
                         HasSubstr("rank 1's call was cancelled")));
  }
  c->Attach(ch[2], 2, fp, "a2");
  EXPECT_THAT(ch[2]->failure(), StatusIs(absl::StatusCode::kAborted));
  EXPECT_EQ(memory_->used(), 0u);
}

TEST_F(CollectiveTest, TimeoutFollowsTheEngineClockNotTheWallClock) {
  use_fake_clock_ = true;
  std::shared_ptr<Collective> c =
      Make(CollectiveKind::kAllReduce, {0, 1}, absl::Milliseconds(200));
  auto ch = Channels(2);
  const Fingerprint fp = FloatAllReduce(4, {0, 1});
  c->Attach(ch[0], 0, fp, "");
  // Twice the timeout passes on the wall clock, none on the engine's.
  EXPECT_FALSE(ch[0]->WaitEnded(absl::Milliseconds(400)));
  clock_.Advance(absl::Milliseconds(199));
  EXPECT_FALSE(ch[0]->WaitEnded(absl::Milliseconds(50)));
  EXPECT_FALSE(c->done());
  clock_.Advance(absl::Milliseconds(1));
  ExpectFailed(*ch[0], absl::StatusCode::kDeadlineExceeded,
               "timed out after 200ms: rank 1 never arrived");
  EXPECT_TRUE(c->done());
}

TEST_F(CollectiveTest, StallWarningAndAgeFollowTheEngineClock) {
  use_fake_clock_ = true;
  std::shared_ptr<Collective> c =
      Make(CollectiveKind::kAllReduce, {0, 1}, absl::Seconds(10));
  auto ch = Channels(2);
  c->Attach(ch[0], 0, FloatAllReduce(4, {0, 1}), "");
  clock_.Advance(absl::Seconds(3));
  std::optional<CollectiveSnapshot> s = c->Snapshot();
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->age, absl::Seconds(3));
  EXPECT_FALSE(s->stalled);
  // Half the timeout on the engine's clock: the stall warning is due.
  clock_.Advance(absl::Seconds(2));
  for (int i = 0; i < 10000 && !c->Snapshot()->stalled; ++i) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  s = c->Snapshot();
  ASSERT_TRUE(s.has_value());
  EXPECT_TRUE(s->stalled);
  EXPECT_EQ(s->age, absl::Seconds(5));
  EXPECT_FALSE(c->done());
}

TEST_F(CollectiveTest, TimeoutWithEveryRankArrivedNamesTheMissingPayload) {
  std::shared_ptr<Collective> c =
      Make(CollectiveKind::kAllReduce, {0, 1}, absl::Milliseconds(200));
  auto ch = Channels(2);
  auto fp = FloatAllReduce(20, {0, 1});
  c->Attach(ch[0], 0, fp, "");
  c->Attach(ch[1], 1, fp, "");
  Feed(*c, 0, Bytes(Ramp(0, 20)));
  c->OnData(1, 0, Range(Bytes(Ramp(1, 20)).substr(0, 16)));
  for (int r = 0; r < 2; ++r) {
    ExpectFailed(*ch[r], absl::StatusCode::kDeadlineExceeded,
                 "every rank arrived but payload is missing: rank 0 has "
                 "received 0 of 80 result bytes; rank 1 sent 16 of 80 bytes");
  }
  EXPECT_EQ(memory_->used(), 0u);
}

TEST_F(CollectiveTest, AllToAllShapeMismatchFailsEveryRankNamingBoth) {
  ExpectThirdRankShapeFailsAll(*this, CollectiveKind::kAllToAll,
                               DataType::kInt32, {6, 2}, {3, 2}, 0,
                               "mismatched shapes: rank 0 sent [6,2] int32, "
                               "rank 2 sent [3,2] int32");
}

TEST_F(CollectiveTest, ReduceRootMismatchFailsEveryRankNamingBoth) {
  std::shared_ptr<Collective> c = Make(CollectiveKind::kReduce, {0, 1});
  auto ch = Channels(2);
  c->Attach(
      ch[0], 0,
      Fp(CollectiveKind::kReduce, {Spec(DataType::kFloat32, {4})}, {0, 1}, 0),
      "");
  c->Attach(
      ch[1], 1,
      Fp(CollectiveKind::kReduce, {Spec(DataType::kFloat32, {4})}, {0, 1}, 1),
      "");
  for (int r = 0; r < 2; ++r) {
    SCOPED_TRACE(absl::StrCat("rank ", r));
    EXPECT_THAT(
        ch[r]->failure(),
        StatusIs(absl::StatusCode::kFailedPrecondition,
                 HasSubstr("mismatched roots: rank 0 sent 0, rank 1 sent 1")));
  }
  EXPECT_EQ(memory_->used(), 0u);
}

TEST_F(CollectiveTest, GatherWhoseRootNeverArrivesTimesOutNamingIt) {
  std::shared_ptr<Collective> c =
      Make(CollectiveKind::kGather, {0, 1, 2}, absl::Milliseconds(200));
  auto ch = Channels(3);
  for (int r : {0, 2}) {
    c->Attach(ch[r], r,
              Fp(CollectiveKind::kGather, {Spec(DataType::kInt32, {2})},
                 {0, 1, 2}, 1),
              "");
    Feed(*c, r, Bytes(Tagged(r, 2)));
  }
  for (int r : {0, 2}) {
    SCOPED_TRACE(absl::StrCat("rank ", r));
    ExpectFailed(*ch[r], absl::StatusCode::kDeadlineExceeded,
                 "rank 1 never arrived (ranks 0,2 waited)");
  }
  EXPECT_EQ(memory_->used(), 0u);
}

TEST_F(CollectiveTest, NonRootScatterPayloadFailsTheCollective) {
  ExpectNonRootPayloadFailsAll(*this, CollectiveKind::kScatter,
                               DataType::kInt32, Bytes(Tagged(1, 1)));
}

}  // namespace
}  // namespace reducer
