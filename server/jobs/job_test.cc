// Job in process, through fake session and rank channels: joining, epochs,
// departures, and which contributions it attaches or refuses.
#include "server/jobs/job.h"

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/engine/chunk_pool.h"
#include "server/engine/memory_budget.h"
#include "server/engine/shared_bytes.h"
#include "server/engine/string_bytes.h"
#include "server/engine/thread_pool.h"
#include "server/engine/timer_queue.h"
#include "server/jobs/fake_job_channels.h"
#include "server/jobs/job_registry.h"
#include "server/log.h"
#include "server/metrics/metrics_sink.h"
#include "server/server_options.h"
#include "tests/matchers.h"

namespace reducer {
namespace {

class JobTest : public ::testing::Test {
 protected:
  JobTest()
      : memory_(ServerOptions().memory_budget_bytes),
        chunks_(options_.chunk_bytes, 4),
        pool_(1),
        job_("j1", 2,
             CollectiveEnv{&options_, &pool_, &timers_, &memory_, &chunks_,
                           &metrics_, &log_, &kept_memory_}) {}

  // A Barrier contribution of `rank` in `epoch`, matched by `sequence`.
  static v1::CollectiveHeader Barrier(int rank, const std::string& session,
                                      uint64_t epoch, uint64_t sequence) {
    v1::CollectiveHeader h;
    h.set_job("j1");
    h.set_epoch(epoch);
    h.set_session_id(session);
    h.set_rank(rank);
    h.set_sequence(sequence);
    h.set_kind(v1::COLLECTIVE_KIND_BARRIER);
    h.set_timeout_ms(10000);
    return h;
  }

  // Attaches `h` to `job` on a channel of its own that nobody reads.
  static absl::StatusOr<std::shared_ptr<Collective>> AttachUnread(
      Job& job, const v1::CollectiveHeader& h) {
    return job.Attach(h, std::make_shared<FakeRankChannel>());
  }

  // A float32 [kFloats] sum all-reduce contribution, as Barrier's.
  static constexpr int kFloats = 4;
  static v1::CollectiveHeader AllReduce(int rank, const std::string& session,
                                        uint64_t epoch, uint64_t sequence) {
    v1::CollectiveHeader h = Barrier(rank, session, epoch, sequence);
    h.set_kind(v1::COLLECTIVE_KIND_ALL_REDUCE);
    v1::TensorSpec* tensor = h.add_tensors();
    tensor->set_dtype(v1::DATA_TYPE_FLOAT32);
    tensor->add_shape(kFloats);
    tensor->set_op(v1::REDUCE_OP_SUM);
    return h;
  }

  // Runs one collective of `job` (job j1), whose ranks 0 and 1 are held by
  // sessions a and b, as attempts a/1 and b/1; returns rank 0's header.
  using RunOfBoth = v1::CollectiveHeader (*)(Job& job);

  // A RunOfBoth: one barrier.
  static v1::CollectiveHeader BarrierOfBoth(Job& job) {
    v1::CollectiveHeader h0 = Barrier(0, "a", 1, 0);
    v1::CollectiveHeader h1 = Barrier(1, "b", 1, 0);
    h0.set_attempt_id("a/1");
    h1.set_attempt_id("b/1");
    EXPECT_TRUE(AttachUnread(job, h0).ok());
    EXPECT_TRUE(AttachUnread(job, h1).ok());
    return h0;
  }
  // A RunOfBoth: one all-reduce, each rank's input sent in one message.
  // Its 16 bytes are below EngineOptions::offload_bytes, so the last
  // OnData reduces on this thread and answers both ranks, keeping each
  // one's result (kFloats * 4 bytes) for a replay, before it returns.
  static v1::CollectiveHeader AllReduceOfBoth(Job& job) {
    v1::CollectiveHeader headers[] = {AllReduce(0, "a", 1, 0),
                                      AllReduce(1, "b", 1, 0)};
    std::shared_ptr<FakeRankChannel> channels[2];
    for (int rank = 0; rank < 2; ++rank) {
      headers[rank].set_attempt_id(absl::StrCat(headers[rank].session_id(), "/1"));
      channels[rank] = std::make_shared<FakeRankChannel>();
      absl::StatusOr<std::shared_ptr<Collective>> c =
          job.Attach(headers[rank], channels[rank]);
      EXPECT_TRUE(c.ok() && *c != nullptr) << c.status();
      if (!c.ok() || *c == nullptr) return headers[0];
      const float input[kFloats] = {1, 2, 3, 4};
      Payload payload;
      payload.Append(StringBytes(std::string(
          reinterpret_cast<const char*>(input), sizeof(input))));
      (*c)->OnData(rank, 0, std::move(payload));
    }
    for (const auto& channel : channels) EXPECT_TRUE(channel->finished_ok());
    return headers[0];
  }

  // Joins sessions a and b (fresh ones unless given) to job_ as ranks 0
  // and 1; true when both joined.
  bool JoinBoth(
      std::shared_ptr<FakeSession> a = std::make_shared<FakeSession>(),
      std::shared_ptr<FakeSession> b = std::make_shared<FakeSession>()) {
    seated_["a"] = a;
    seated_["b"] = b;
    return job_.Join(0, 2, "a", std::move(a)).ok() &&
           job_.Join(1, 2, "b", std::move(b)).ok();
  }

  // The stream of session `id`, as JoinBoth seated it, ended: `job`'s Leave
  // with that session's own channel; true when the job is empty.
  bool Lose(const std::string& id, const std::string& why,
            EpochEndReason reason = EpochEndReason::kSessionCancelled) {
    return job_.Leave(id, seated_[id].get(), why, reason);
  }

  // Both ranks' barrier number `sequence` of epoch `epoch` in job_, from
  // sessions `a` and `b`: true when both calls finished.
  bool BarrierOfBothFinishes(uint64_t epoch, uint64_t sequence,
                             const std::string& a = "a",
                             const std::string& b = "b") {
    auto c0 = std::make_shared<FakeRankChannel>();
    auto c1 = std::make_shared<FakeRankChannel>();
    return job_.Attach(Barrier(0, a, epoch, sequence), c0).ok() &&
           job_.Attach(Barrier(1, b, epoch, sequence), c1).ok() &&
           c0->finished_ok() && c1->finished_ok();
  }

  // Joins sessions a and b to job_ as ranks 0 and 1, then `run`.
  v1::CollectiveHeader JoinAndRun(RunOfBoth run = BarrierOfBoth) {
    EXPECT_TRUE(JoinBoth());
    return run(job_);
  }

  EngineOptions options_;
  MemoryBudget memory_;
  MemoryBudget kept_memory_{1 << 20};
  ChunkPool chunks_;
  TimerQueue timers_;
  ThreadPool pool_;
  MetricsSink metrics_;  // counts nothing
  Logger log_;
  Job job_;
  // The channel each session id was seated with (JoinBoth, Seat).
  std::map<std::string, std::shared_ptr<FakeSession>> seated_;
};

TEST_F(JobTest, EveryRankGetsReadyOnceAllHaveJoined) {
  auto s0 = std::make_shared<FakeSession>();
  auto s1 = std::make_shared<FakeSession>();
  ASSERT_TRUE(job_.Join(0, 2, "a", s0).ok());
  EXPECT_THAT(s0->events(), IsEmpty());
  ASSERT_TRUE(job_.Join(1, 2, "b", s1).ok());
  ASSERT_THAT(s0->events(), SizeIs(1));
  EXPECT_EQ(s0->events()[0].ready().epoch(), 1u);
  EXPECT_EQ(s1->events()[0].ready().epoch(), 1u);
}

// While the job gathers its ranks, a joining session hears at once who
// joined, and every session joined so far hears it within
// Job::kWaitingEvery (what a Connect that times out names); a reducerd
// that is not a relay adds no note.
TEST_F(JobTest, EachJoinBeforeTheLastTellsTheJoinedWhoJoined) {
  Job job("j3", 3,
          CollectiveEnv{&options_, &pool_, &timers_, &memory_, &chunks_,
                        &metrics_, &log_, &kept_memory_});
  auto s0 = std::make_shared<FakeSession>();
  auto s2 = std::make_shared<FakeSession>();
  auto s1 = std::make_shared<FakeSession>();
  ASSERT_TRUE(job.Join(2, 3, "c", s2).ok());
  ASSERT_THAT(s2->waiting(), SizeIs(1));
  EXPECT_THAT(s2->waiting()[0].joined(), ElementsAre(2));
  ASSERT_TRUE(job.Join(0, 3, "a", s0).ok());
  ASSERT_THAT(s0->waiting(), Not(IsEmpty()));
  EXPECT_THAT(s0->waiting()[0].joined(), ElementsAre(0, 2));
  // The first session hears of the second within a period.
  const absl::Time give_up = absl::Now() + 5 * Job::kWaitingEvery;
  while (s2->waiting().back().joined_size() < 2 && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_THAT(s2->waiting().back().joined(), ElementsAre(0, 2));
  EXPECT_EQ(s2->waiting().back().note(), "");
  ASSERT_TRUE(job.Join(1, 3, "b", s1).ok());
  EXPECT_THAT(s1->waiting(), IsEmpty()) << "the last rank gets JobReady only";
  EXPECT_EQ(s1->ready_count(), 1);
}

// Ranks joining in a burst do not tell every joined session of every
// join: the first to join hears its own join, then at most one list per
// Job::kWaitingEvery (one event per join would be 39 here).
TEST_F(JobTest, JoinsInABurstTellTheJoinedAtMostOncePerPeriod) {
  constexpr int kWorld = 41;
  Job job("burst", kWorld,
          CollectiveEnv{&options_, &pool_, &timers_, &memory_, &chunks_,
                        &metrics_, &log_, &kept_memory_});
  std::vector<std::shared_ptr<FakeSession>> sessions;
  for (int rank = 0; rank + 1 < kWorld; ++rank) {
    sessions.push_back(std::make_shared<FakeSession>());
    ASSERT_TRUE(
        job.Join(rank, kWorld, absl::StrCat("s", rank), sessions.back()).ok());
  }
  const absl::Time give_up = absl::Now() + 5 * Job::kWaitingEvery;
  while (sessions[0]->waiting().back().joined_size() < kWorld - 1 &&
         absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  const std::vector<v1::JoinWaiting> first = sessions[0]->waiting();
  EXPECT_EQ(first.back().joined_size(), kWorld - 1);
  EXPECT_LE(first.size(), 4u);
  // The last to join heard the whole list when it joined.
  EXPECT_EQ(sessions.back()->waiting().front().joined_size(), kWorld - 1);
}

// A pending collective's per-rank bookkeeping is held in the memory budget
// until the collective is gone, and a budget that cannot hold it refuses
// the call before anything is created.
TEST_F(JobTest, ACollectivesBookkeepingCountsInTheMemoryBudget) {
  ASSERT_TRUE(JoinBoth());
  const size_t before = memory_.used();
  {
    absl::StatusOr<std::shared_ptr<Collective>> pending =
        AttachUnread(job_, Barrier(0, "a", 1, 0));
    ASSERT_TRUE(pending.ok()) << pending.status();
    // At least the two ranks' states, whatever else it counts.
    EXPECT_GE(memory_.used(), before + 2 * sizeof(RankState));
    ASSERT_TRUE(AttachUnread(job_, Barrier(1, "b", 1, 0)).ok());
  }
  // Done and no longer referenced (the next call prunes it): given back.
  ASSERT_TRUE(AttachUnread(job_, Barrier(0, "a", 1, 1)).ok());
  ASSERT_TRUE(AttachUnread(job_, Barrier(1, "b", 1, 1)).ok());
  ASSERT_TRUE(AttachUnread(job_, Barrier(0, "a", 1, 2)).ok());
  EXPECT_LT(memory_.used(), before + 2 * Collective::StateBytes(2));

  MemoryBudget tiny(64);
  Job small("j2", 2, CollectiveEnv{&options_, &pool_, &timers_, &tiny,
                                   &chunks_, &metrics_, &log_, &kept_memory_});
  ASSERT_TRUE(small.Join(0, 2, "a", std::make_shared<FakeSession>()).ok());
  ASSERT_TRUE(small.Join(1, 2, "b", std::make_shared<FakeSession>()).ok());
  v1::CollectiveHeader header = Barrier(0, "a", 1, 0);
  header.set_job("j2");
  const absl::Status refused = AttachUnread(small, header).status();
  EXPECT_THAT(refused, StatusIs(absl::StatusCode::kResourceExhausted,
                                HasSubstr("--memory_budget_bytes")));
  EXPECT_THAT(refused.message(), HasSubstr("collective of 2 ranks"));
  EXPECT_EQ(tiny.used(), 0u);
}

TEST_F(JobTest, WorldSizeDisagreementIsRefused) {
  absl::Status s = job_.Join(0, 3, "a", std::make_shared<FakeSession>());
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kFailedPrecondition,
                          HasSubstr("has world size 2")));
  EXPECT_THAT(s.message(), HasSubstr("asked for 3"));
}

TEST_F(JobTest, SecondSessionForSameRankIsRejected) {
  ASSERT_TRUE(job_.Join(0, 2, "a", std::make_shared<FakeSession>()).ok());
  absl::Status s = job_.Join(0, 2, "b", std::make_shared<FakeSession>());
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kAlreadyExists,
                          HasSubstr("rank 0 of job j1")));
  s = job_.Join(1, 2, "a", std::make_shared<FakeSession>());
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kAlreadyExists));
}

// A Join that names rank 0's session but is refused (another world size,
// another rank, another session's rank) touches nothing, and neither does
// the end of its stream: the job runs on.
TEST_F(JobTest, ARefusedJoinNamingASeatedSessionTouchesNothing) {
  auto s0 = std::make_shared<FakeSession>();
  auto s1 = std::make_shared<FakeSession>();
  ASSERT_TRUE(JoinBoth(s0, s1));
  auto hostile = std::make_shared<FakeSession>();
  EXPECT_THAT(job_.Join(0, 3, "a", hostile),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("has world size 2")));
  EXPECT_THAT(job_.Join(1, 2, "a", hostile),
              StatusIs(absl::StatusCode::kAlreadyExists,
                       HasSubstr("session a already joined job j1 as rank 0; "
                                 "a Join as rank 1 needs a session id of its "
                                 "own")));
  EXPECT_THAT(job_.Join(0, 2, "x", hostile),
              StatusIs(absl::StatusCode::kAlreadyExists,
                       HasSubstr("rank 0 of job j1 is already held")));
  EXPECT_THAT(job_.Join(0, 2, "a", hostile, {"r0:1", "r1:1"}),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("names the shards")));
  // Its stream ends, naming session a: not its owner, so nothing happens.
  EXPECT_FALSE(job_.Leave("a", hostile.get(), "join rejected",
                          EpochEndReason::kSessionEnded));
  EXPECT_FALSE(job_.Leave("x", hostile.get(), "join rejected",
                          EpochEndReason::kSessionEnded));
  EXPECT_THAT(hostile->events(), IsEmpty());
  EXPECT_EQ(s0->aborted_count(), 0);
  EXPECT_EQ(s1->aborted_count(), 0);
  EXPECT_THAT(s0->failure(), IsOk());
  EXPECT_EQ(job_.Snapshot().state, "running");
  EXPECT_TRUE(BarrierOfBothFinishes(1, 0));
}

// An exact retry of rank 0's Join while the job runs: the new stream takes
// the session over and gets the epoch's JobReady as the first did; the
// replaced stream is ended ABORTED saying why, and its end changes nothing.
TEST_F(JobTest, AnExactRetryOfARunningSessionsJoinIsAnsweredAndTheJobGoesOn) {
  auto s0 = std::make_shared<FakeSession>();
  auto s1 = std::make_shared<FakeSession>();
  ASSERT_TRUE(JoinBoth(s0, s1));
  auto retry = std::make_shared<FakeSession>();
  ASSERT_THAT(job_.Join(0, 2, "a", retry), IsOk());
  ASSERT_EQ(retry->ready_count(), 1);
  EXPECT_EQ(retry->events()[0].ready().epoch(), 1u);
  EXPECT_EQ(retry->events()[0].ready().chunk_bytes(),
            s0->events()[0].ready().chunk_bytes());
  EXPECT_THAT(s0->failure(),
              StatusIs(absl::StatusCode::kAborted,
                       HasSubstr("session a of job j1 was replaced by a retry "
                                 "of its Join")));
  EXPECT_FALSE(Lose("a", "its session ended", EpochEndReason::kSessionEnded));
  EXPECT_EQ(s1->aborted_count(), 0);
  EXPECT_EQ(job_.Snapshot().state, "running");
  EXPECT_TRUE(BarrierOfBothFinishes(1, 0));
  // A second retry is answered the same way.
  auto again = std::make_shared<FakeSession>();
  ASSERT_THAT(job_.Join(0, 2, "a", again), IsOk());
  EXPECT_EQ(again->ready_count(), 1);
  EXPECT_THAT(retry->failure(), StatusIs(absl::StatusCode::kAborted));
  // The session is the newest stream's now: its end is the rank's loss.
  EXPECT_FALSE(job_.Leave("a", again.get(), "connection lost",
                          EpochEndReason::kSessionCancelled));
  EXPECT_EQ(s1->aborted_count(), 1);
}

TEST_F(JobTest, AnExactRetryBeforeTheJobRunsGetsItsReadyWhenItDoes) {
  auto first = std::make_shared<FakeSession>();
  ASSERT_TRUE(job_.Join(0, 2, "a", first).ok());
  auto retry = std::make_shared<FakeSession>();
  ASSERT_THAT(job_.Join(0, 2, "a", retry), IsOk());
  EXPECT_THAT(retry->events(), IsEmpty());
  EXPECT_THAT(first->failure(), StatusIs(absl::StatusCode::kAborted));
  auto s1 = std::make_shared<FakeSession>();
  ASSERT_TRUE(job_.Join(1, 2, "b", s1).ok());
  EXPECT_EQ(retry->ready_count(), 1);
  EXPECT_EQ(s1->ready_count(), 1);
  EXPECT_THAT(first->events(), IsEmpty());
}

TEST_F(JobTest, ARetryOfASessionNoLongerInTheEpochIsRefusedChangingNothing) {
  auto s0 = std::make_shared<FakeSession>();
  auto s1 = std::make_shared<FakeSession>();
  ASSERT_TRUE(JoinBoth(s0, s1));
  // Rank 1 closes its client: a retry of its Join is not its return.
  job_.Depart("b");
  EXPECT_THAT(job_.Join(1, 2, "b", std::make_shared<FakeSession>()),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("session b no longer holds rank 1")));
  EXPECT_EQ(s0->aborted_count(), 0);
  EXPECT_THAT(s1->failure(), IsOk());
  // Rank 0's stream is lost: the epoch ends, and a retry of rank 1's Join
  // is told so.
  EXPECT_FALSE(Lose("a", "connection lost"));
  EXPECT_THAT(job_.Join(1, 2, "b", std::make_shared<FakeSession>()),
              StatusIs(absl::StatusCode::kAborted,
                       HasSubstr("joined epoch 1 of job j1, which has ended")));
  EXPECT_EQ(job_.Snapshot().epoch, 1u);
}

// Ranks connecting again with new sessions while their old streams stay
// open: each new session closes the old one of its rank, so the job never
// holds more open sessions than ranks.
TEST_F(JobTest, ANewSessionOfARankEndsTheStaleOneOfItsRank) {
  auto s0 = std::make_shared<FakeSession>();
  auto s1 = std::make_shared<FakeSession>();
  ASSERT_TRUE(JoinBoth(s0, s1));
  EXPECT_FALSE(Lose("b", "connection lost"));  // the epoch ends
  auto c0 = std::make_shared<FakeSession>();
  auto c1 = std::make_shared<FakeSession>();
  ASSERT_TRUE(job_.Join(0, 2, "c", c0).ok());
  EXPECT_THAT(s0->failure(),
              StatusIs(absl::StatusCode::kAborted,
                       HasSubstr("rank 0 of job j1 was joined by a newer "
                                 "session")));
  ASSERT_TRUE(job_.Join(1, 2, "d", c1).ok());
  EXPECT_EQ(c0->ready_count(), 1);
  // The old stream's end, once it comes, changes nothing.
  EXPECT_FALSE(Lose("a", "its session ended", EpochEndReason::kSessionEnded));
  EXPECT_EQ(c1->aborted_count(), 0);
  EXPECT_TRUE(BarrierOfBothFinishes(2, 0, "c", "d"));
}

TEST_F(JobTest, LostSessionAbortsEpochAndNextJoinStartsAnother) {
  auto s0 = std::make_shared<FakeSession>();
  auto s1 = std::make_shared<FakeSession>();
  ASSERT_TRUE(JoinBoth(s0, s1));

  auto waiting = std::make_shared<FakeRankChannel>();
  ASSERT_TRUE(job_.Attach(Barrier(0, "a", 1, 0), waiting).ok());
  EXPECT_FALSE(Lose("b", "connection lost", EpochEndReason::kSessionCancelled));

  EXPECT_THAT(waiting->failure(),
              StatusIs(absl::StatusCode::kAborted,
                       HasSubstr("rank 1's session was lost")));
  ASSERT_THAT(s0->events(), SizeIs(2));
  EXPECT_TRUE(s0->events()[1].has_aborted());

  // A contribution still made in the old epoch is refused the same way.
  auto late = std::make_shared<FakeRankChannel>();
  absl::StatusOr<std::shared_ptr<Collective>> c =
      job_.Attach(Barrier(0, "a", 1, 1), late);
  EXPECT_THAT(c.status(), StatusIs(absl::StatusCode::kAborted));

  auto r0 = std::make_shared<FakeSession>();
  auto r1 = std::make_shared<FakeSession>();
  ASSERT_TRUE(job_.Join(0, 2, "c", r0).ok());
  ASSERT_TRUE(job_.Join(1, 2, "d", r1).ok());
  ASSERT_THAT(r1->events(), SizeIs(1));
  EXPECT_EQ(r1->events()[0].ready().epoch(), 2u);
}

TEST_F(JobTest, AFailureOnAnotherShardEndsTheEpochNamingItsCause) {
  auto s0 = std::make_shared<FakeSession>();
  auto s1 = std::make_shared<FakeSession>();
  ASSERT_TRUE(JoinBoth(s0, s1));
  auto waiting = std::make_shared<FakeRankChannel>();
  ASSERT_TRUE(job_.Attach(Barrier(0, "a", 1, 0), waiting).ok());

  job_.EndForOtherShard("b", "shard 0 of 2: rank 7's session was lost");
  EXPECT_THAT(
      waiting->failure(),
      StatusIs(absl::StatusCode::kAborted,
               HasSubstr("rank 1's job failed on another of its shards (shard "
                         "0 of 2: rank 7's session was lost)")));
  ASSERT_THAT(s0->events(), SizeIs(2));
  EXPECT_THAT(s0->events()[1].aborted().reason(), HasSubstr("rank 7"));

  // The stream's end that follows names nobody else, and frees nothing
  // while rank 0 is still there.
  EXPECT_FALSE(Lose("b", "cancelled", EpochEndReason::kSessionCancelled));
  EXPECT_THAT(s0->events(), SizeIs(2));
}

TEST_F(JobTest, AFailureOnAnotherShardIsIgnoredForUnknownOrEndedSessions) {
  auto s0 = std::make_shared<FakeSession>();
  ASSERT_TRUE(job_.Join(0, 2, "a", s0).ok());
  job_.EndForOtherShard("a", "not running yet");
  ASSERT_TRUE(job_.Join(1, 2, "b", std::make_shared<FakeSession>()).ok());
  job_.EndForOtherShard("zz", "not a session of the job");
  ASSERT_THAT(s0->events(), SizeIs(1));
  EXPECT_TRUE(s0->events()[0].has_ready());
  job_.Depart("b");
  job_.EndForOtherShard("b", "departed already");
  EXPECT_THAT(s0->events(), SizeIs(1));
}

TEST_F(JobTest, BarrierCompletesOnceEveryRankAttached) {
  ASSERT_TRUE(JoinBoth());
  auto c0 = std::make_shared<FakeRankChannel>();
  auto c1 = std::make_shared<FakeRankChannel>();
  ASSERT_TRUE(job_.Attach(Barrier(0, "a", 1, 0), c0).ok());
  EXPECT_FALSE(c0->finished_ok());
  ASSERT_TRUE(job_.Attach(Barrier(1, "b", 1, 0), c1).ok());
  EXPECT_TRUE(c0->finished_ok());
  EXPECT_TRUE(c1->finished_ok());
  EXPECT_TRUE(c0->failure().ok());
}

TEST_F(JobTest, SessionThatDoesNotHoldTheRankIsRefused) {
  ASSERT_TRUE(JoinBoth());
  absl::StatusOr<std::shared_ptr<Collective>> c =
      AttachUnread(job_, Barrier(1, "a", 1, 0));
  EXPECT_THAT(c.status(), StatusIs(absl::StatusCode::kFailedPrecondition,
                                   HasSubstr("does not hold rank 1")));
}

// A rank that closed its client and connects again starts its call order
// from the beginning, which the other ranks' sessions cannot match: the job
// moves to a new epoch, and runs once every rank has connected again.
TEST_F(JobTest, RankRejoiningAfterLeavingStartsNewEpoch) {
  auto s0 = std::make_shared<FakeSession>();
  ASSERT_TRUE(JoinBoth(s0));
  job_.Depart("b");
  EXPECT_FALSE(Lose("b", "closed", EpochEndReason::kSessionEnded));
  // Leaving on purpose does not end the epoch.
  ASSERT_THAT(s0->events(), SizeIs(1));

  auto again = std::make_shared<FakeSession>();
  ASSERT_TRUE(job_.Join(1, 2, "c", again).ok());
  ASSERT_THAT(s0->events(), SizeIs(2));
  ASSERT_TRUE(s0->events()[1].has_aborted());
  EXPECT_THAT(s0->events()[1].aborted().reason(),
              HasSubstr("rank 1 connected again after closing its client"));
  EXPECT_EQ(again->ready_count(), 0);

  auto r0 = std::make_shared<FakeSession>();
  ASSERT_TRUE(job_.Join(0, 2, "d", r0).ok());
  ASSERT_EQ(again->ready_count(), 1);
  EXPECT_EQ(again->events().back().ready().epoch(), 2u);

  // Both ranks take part again in the new epoch.
  auto c0 = std::make_shared<FakeRankChannel>();
  auto c1 = std::make_shared<FakeRankChannel>();
  ASSERT_TRUE(job_.Attach(Barrier(0, "d", 2, 0), c0).ok());
  ASSERT_TRUE(job_.Attach(Barrier(1, "c", 2, 0), c1).ok());
  EXPECT_TRUE(c0->finished_ok());
  EXPECT_TRUE(c1->finished_ok());
}

TEST_F(JobTest, LastSessionLeavingFreesTheJob) {
  ASSERT_TRUE(JoinBoth());
  EXPECT_FALSE(Lose("a", "closed", EpochEndReason::kSessionEnded));
  EXPECT_TRUE(Lose("b", "closed", EpochEndReason::kSessionEnded));
}

TEST_F(JobTest, RetryOfAnUnusedAttemptReplacesItsFirstCall) {
  ASSERT_TRUE(JoinBoth());
  v1::CollectiveHeader first = Barrier(0, "a", 1, 0);
  first.set_attempt_id("a/1");
  auto lost = std::make_shared<FakeRankChannel>();
  auto retry = std::make_shared<FakeRankChannel>();
  ASSERT_TRUE(job_.Attach(first, lost).ok());
  ASSERT_TRUE(job_.Attach(first, retry).ok());  // same attempt id
  EXPECT_THAT(lost->failure(), StatusIs(absl::StatusCode::kAborted,
                                        HasSubstr("replaced by its retry")));
  auto c1 = std::make_shared<FakeRankChannel>();
  ASSERT_TRUE(job_.Attach(Barrier(1, "b", 1, 0), c1).ok());
  EXPECT_TRUE(retry->finished_ok());
  EXPECT_TRUE(c1->finished_ok());
}

// Each attempt id the job remembers for retries holds its bytes in the
// memory budget: a client sending ever new ids of the longest length fills
// the job's memory, not reducerd's; they go back when the epoch ends.
TEST_F(JobTest, RememberedAttemptIdsHoldTheirBytesInTheBudget) {
  ASSERT_TRUE(JoinBoth());
  const std::string padding(400, 'p');
  auto barrier = [&](uint64_t sequence) {
    v1::CollectiveHeader h0 = Barrier(0, "a", 1, sequence);
    v1::CollectiveHeader h1 = Barrier(1, "b", 1, sequence);
    h0.set_attempt_id(absl::StrCat("a/", sequence, padding));
    h1.set_attempt_id(absl::StrCat("b/", sequence, padding));
    EXPECT_TRUE(AttachUnread(job_, h0).ok());
    EXPECT_TRUE(AttachUnread(job_, h1).ok());
  };
  for (uint64_t sequence = 0; sequence < 10; ++sequence) barrier(sequence);
  // Twenty ids of over 400 bytes, at least.
  EXPECT_GE(memory_.used(), 20 * 400u);
  EXPECT_FALSE(Lose("b", "connection lost"));
  ASSERT_TRUE(job_.Join(1, 2, "c", std::make_shared<FakeSession>()).ok());
  EXPECT_EQ(memory_.used(), 0u);
}

TEST_F(JobTest, AnAttemptIdTheBudgetCannotHoldIsRefusedBeforeAnythingIsMade) {
  ASSERT_TRUE(JoinBoth());
  MemoryReservation fill =
      MemoryReservation::Try(&memory_, memory_.limit() - memory_.used());
  ASSERT_TRUE(fill.ok());
  v1::CollectiveHeader h0 = Barrier(0, "a", 1, 0);
  h0.set_attempt_id("a/1");
  EXPECT_THAT(AttachUnread(job_, h0).status(),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("cannot hold the record of its attempt id, "
                                 "kept to recognize a retry")));
  EXPECT_THAT(job_.Snapshot().pending, IsEmpty());
  fill = MemoryReservation();
  auto c0 = std::make_shared<FakeRankChannel>();
  auto c1 = std::make_shared<FakeRankChannel>();
  ASSERT_TRUE(job_.Attach(h0, c0).ok());
  ASSERT_TRUE(job_.Attach(Barrier(1, "b", 1, 0), c1).ok());
  EXPECT_TRUE(c0->finished_ok());
}

TEST_F(JobTest, RetryOfAnAttemptAlreadyUsedIsAbortedNotCountedAgain) {
  const v1::CollectiveHeader first = JoinAndRun();
  absl::StatusOr<std::shared_ptr<Collective>> again = AttachUnread(job_, first);
  EXPECT_THAT(
      again.status(),
      StatusIs(absl::StatusCode::kAborted,
               HasSubstr("retried a contribution (attempt a/1) that was "
                         "already used")));
}

// `header` as a replay of its attempt.
v1::CollectiveHeader Replay(v1::CollectiveHeader header) {
  header.set_replay(true);
  return header;
}

TEST_F(JobTest, AReplayAfterTheSessionWasLostSendsTheKeptResultAgain) {
  const v1::CollectiveHeader first = JoinAndRun();
  // Rank 0's session is lost (its answer with it): the epoch ends.
  Lose("a", "keepalive watchdog timeout", EpochEndReason::kSessionCancelled);
  auto again = std::make_shared<FakeRankChannel>();
  absl::StatusOr<std::shared_ptr<Collective>> replayed =
      job_.Attach(Replay(first), again);
  ASSERT_TRUE(replayed.ok()) << replayed.status();
  EXPECT_EQ(*replayed, nullptr);  // answered in full, nothing to feed
  EXPECT_TRUE(again->finished_ok());
  // A replay declaring other tensors than its attempt did gets nothing.
  v1::CollectiveHeader changed = Replay(first);
  changed.set_kind(v1::COLLECTIVE_KIND_ALL_REDUCE);
  *changed.add_tensors() = v1::TensorSpec();
  changed.mutable_tensors(0)->set_dtype(v1::DATA_TYPE_FLOAT32);
  changed.mutable_tensors(0)->add_shape(4);
  changed.mutable_tensors(0)->set_op(v1::REDUCE_OP_SUM);
  absl::Status refused = AttachUnread(job_, changed).status();
  EXPECT_THAT(refused, StatusIs(absl::StatusCode::kInvalidArgument,
                                HasSubstr("declaring other tensors")));
  // A normal retry of the same attempt is still never counted again.
  EXPECT_THAT(AttachUnread(job_, first).status(),
              StatusIs(absl::StatusCode::kAborted));
}

TEST_F(JobTest, AReplayOfAnAcknowledgedOrUnknownAttemptFindsNothing) {
  const v1::CollectiveHeader first = JoinAndRun(AllReduceOfBoth);
  // A result's bytes and its entry's.
  constexpr size_t kResultBytes =
      kFloats * sizeof(float) + KeptResults::kEntryBytes;
  EXPECT_EQ(kept_memory_.used(), 2 * kResultBytes);  // both ranks' results
  v1::CollectiveHeader unknown = first;
  unknown.set_attempt_id("a/9");
  absl::Status none = AttachUnread(job_, Replay(unknown)).status();
  EXPECT_THAT(none,
              StatusIs(absl::StatusCode::kNotFound,
                       HasSubstr("rank 0's attempt a/9 has no result kept")));
  // Rank 0's next call says every attempt below 2 has its outcome.
  v1::CollectiveHeader next = Barrier(0, "a", 1, 1);
  next.set_attempt_id("a/2");
  next.set_received_below(2);
  ASSERT_TRUE(AttachUnread(job_, next).ok());
  EXPECT_THAT(AttachUnread(job_, Replay(first)).status(),
              StatusIs(absl::StatusCode::kNotFound));
  // Rank 0's result is forgotten; rank 1 acknowledged nothing yet.
  EXPECT_EQ(kept_memory_.used(), kResultBytes);
}

TEST_F(JobTest, AReplayNamesAnAttemptOfItsOwnSession) {
  v1::CollectiveHeader stolen = Replay(JoinAndRun());
  stolen.set_session_id("b");  // session b asks for a's result
  absl::Status refused = AttachUnread(job_, stolen).status();
  EXPECT_THAT(refused, StatusIs(absl::StatusCode::kInvalidArgument,
                                HasSubstr("an attempt of its own session")));
}

TEST_F(JobTest, AttemptsOfAnEndedEpochAreForgotten) {
  ASSERT_TRUE(JoinBoth());
  v1::CollectiveHeader used = Barrier(0, "a", 1, 0);
  used.set_attempt_id("x/1");
  ASSERT_TRUE(AttachUnread(job_, used).ok());
  ASSERT_TRUE(AttachUnread(job_, Barrier(1, "b", 1, 0)).ok());
  Lose("b", "killed", EpochEndReason::kSessionCancelled);
  Lose("a", "killed", EpochEndReason::kSessionCancelled);
  ASSERT_TRUE(job_.Join(0, 2, "c", std::make_shared<FakeSession>()).ok());
  ASSERT_TRUE(job_.Join(1, 2, "d", std::make_shared<FakeSession>()).ok());
  // The same id in epoch 2 is a new contribution, not a retry.
  v1::CollectiveHeader fresh = Barrier(0, "c", 2, 0);
  fresh.set_attempt_id("x/1");
  auto c0 = std::make_shared<FakeRankChannel>();
  auto c1 = std::make_shared<FakeRankChannel>();
  ASSERT_TRUE(job_.Attach(fresh, c0).ok());
  ASSERT_TRUE(job_.Attach(Barrier(1, "d", 2, 0), c1).ok());
  EXPECT_TRUE(c0->finished_ok()) << c0->failure();
  EXPECT_TRUE(c1->finished_ok()) << c1->failure();
}

TEST_F(JobTest, ShardListsMustAgreeAcrossRanks) {
  ASSERT_TRUE(job_.Join(0, 2, "a", std::make_shared<FakeSession>(),
                        {"r0:1", "r1:1"})
                  .ok());
  absl::Status swapped = job_.Join(1, 2, "b", std::make_shared<FakeSession>(),
                                   {"r1:1", "r0:1"});
  EXPECT_THAT(
      swapped,
      StatusIs(absl::StatusCode::kFailedPrecondition,
               HasSubstr("rank 1 names the shards [r1:1,r0:1], but the ranks "
                         "already joined named [r0:1,r1:1]")));
  // The same list is accepted.
  auto ready = std::make_shared<FakeSession>();
  EXPECT_TRUE(job_.Join(1, 2, "c", ready, {"r0:1", "r1:1"}).ok());
  EXPECT_EQ(ready->ready_count(), 1);
}

TEST_F(JobTest, OneShardsAddressIsNotCompared) {
  ASSERT_TRUE(job_.Join(0, 2, "a", std::make_shared<FakeSession>()).ok());
  EXPECT_TRUE(job_.Join(1, 2, "b", std::make_shared<FakeSession>(), {"proxy:1"}).ok());
}

TEST_F(JobTest, OneShardDoesNotMeetSeveral) {
  ASSERT_TRUE(job_.Join(0, 2, "a", std::make_shared<FakeSession>(), {"r0:1"}).ok());
  absl::Status several = job_.Join(1, 2, "b", std::make_shared<FakeSession>(),
                                   {"r0:1", "r1:1"});
  EXPECT_THAT(
      several,
      StatusIs(absl::StatusCode::kFailedPrecondition,
               HasSubstr("names the shards [r0:1,r1:1], but the ranks already "
                         "joined named [r0:1]")));
}

// JobRegistry: jobs by name, the job limit, refusing work when stopping.
class JobRegistryTest : public JobTest {
 protected:
  static v1::JoinRequest Join(const std::string& job, int rank, int world,
                              const std::string& session) {
    return MakeJoinRequest(job, rank, world, session);
  }
  CollectiveEnv Env() {
    return CollectiveEnv{&options_, &pool_,    &timers_, &memory_,
                         &chunks_,  &metrics_, &log_, &kept_memory_};
  }

  // Joins `session` (a fresh FakeSession, remembered in seated_) to `job`
  // of `registry` as `rank` of `world`: the registry's answer.
  absl::Status JoinAs(JobRegistry& registry, const std::string& job, int rank,
                      int world, const std::string& session) {
    seated_[session] = std::make_shared<FakeSession>();
    return registry.Join(Join(job, rank, world, session), seated_[session]);
  }
  // The stream of `session`, as JoinAs seated it, ended.
  void LeaveAs(JobRegistry& registry, const std::string& job,
               const std::string& session, const std::string& why,
               EpochEndReason reason) {
    registry.Leave(job, session, seated_[session].get(), why, reason);
  }

  // Joins job j1 in `registry` as JoinAndRun does, then `run`; returns
  // rank 0's header as a replay.
  v1::CollectiveHeader JoinAndRun(JobRegistry& registry,
                                  RunOfBoth run = BarrierOfBoth) {
    EXPECT_TRUE(JoinAs(registry, "j1", 0, 2, "a").ok());
    EXPECT_TRUE(JoinAs(registry, "j1", 1, 2, "b").ok());
    v1::CollectiveHeader h0 = run(**registry.Find("j1"));
    h0.set_replay(true);
    return h0;
  }
};

TEST_F(JobRegistryTest, AFreedJobWhoseRankWasLostKeepsItsResultsForAReplay) {
  JobRegistry registry(Env());
  const v1::CollectiveHeader replay = JoinAndRun(registry);
  // Rank 0 is lost, then rank 1 finishes and leaves: the job is freed.
  LeaveAs(registry, "j1", "a", "keepalive watchdog timeout",
          EpochEndReason::kSessionCancelled);
  LeaveAs(registry, "j1", "b", "closed", EpochEndReason::kSessionEnded);
  EXPECT_FALSE(registry.Find("j1").ok());
  // Kept for replays, it holds nothing of the budget: not its per-rank
  // state, nor its remembered attempt ids.
  EXPECT_EQ(memory_.used(), 0u);
  auto again = std::make_shared<FakeRankChannel>();
  absl::StatusOr<std::shared_ptr<Collective>> replayed =
      registry.ReplayForFreedJob(replay, again);
  ASSERT_TRUE(replayed.ok()) << replayed.status();
  EXPECT_TRUE(again->finished_ok());
}

TEST_F(JobRegistryTest, AFreedJobStillAnswersAfterItsNameWasJoinedAgain) {
  JobRegistry registry(Env());
  const v1::CollectiveHeader replay = JoinAndRun(registry);
  LeaveAs(registry, "j1", "a", "keepalive watchdog timeout",
          EpochEndReason::kSessionCancelled);
  LeaveAs(registry, "j1", "b", "closed", EpochEndReason::kSessionEnded);
  // Rank 1 connects again at once: a new job of the same name.
  ASSERT_TRUE(JoinAs(registry, "j1", 1, 2, "c").ok());
  EXPECT_THAT((*registry.Find("j1"))
                  ->Attach(replay, std::make_shared<FakeRankChannel>())
                  .status(),
              StatusIs(absl::StatusCode::kNotFound));
  auto again = std::make_shared<FakeRankChannel>();
  ASSERT_TRUE(registry.ReplayForFreedJob(replay, again).ok());
  EXPECT_TRUE(again->finished_ok());
}

TEST_F(JobRegistryTest, AFreedJobThatEndedCleanlyKeepsNothing) {
  JobRegistry registry(Env());
  const v1::CollectiveHeader replay = JoinAndRun(registry, AllReduceOfBoth);
  EXPECT_EQ(kept_memory_.used(),
            2 * (kFloats * sizeof(float) + KeptResults::kEntryBytes));
  (*registry.Find("j1"))->Depart("a");
  (*registry.Find("j1"))->Depart("b");
  LeaveAs(registry, "j1", "a", "closed", EpochEndReason::kSessionEnded);
  LeaveAs(registry, "j1", "b", "closed", EpochEndReason::kSessionEnded);
  EXPECT_THAT(
      registry.ReplayForFreedJob(replay, std::make_shared<FakeRankChannel>())
          .status(),
      StatusIs(absl::StatusCode::kNotFound));
  EXPECT_EQ(kept_memory_.used(), 0u);
}

// Jobs kept for replays count toward --max_jobs, but a new job forgets the
// oldest of them rather than being refused for them.
TEST_F(JobRegistryTest, FreedJobsCountTowardTheJobLimitAndMakeRoomForNewOnes) {
  options_.max_jobs = 2;
  JobRegistry registry(Env());
  const v1::CollectiveHeader replay = JoinAndRun(registry, AllReduceOfBoth);
  LeaveAs(registry, "j1", "a", "keepalive watchdog timeout",
          EpochEndReason::kSessionCancelled);
  LeaveAs(registry, "j1", "b", "closed", EpochEndReason::kSessionEnded);
  ASSERT_TRUE(JoinAs(registry, "j2", 0, 1, "c").ok());
  // j1 is still kept: one served and one kept make the limit.
  ASSERT_TRUE(registry.ReplayForFreedJob(replay, std::make_shared<FakeRankChannel>())
                  .ok());
  // A third job is let in, and j1 is forgotten for it, with what it kept.
  ASSERT_TRUE(JoinAs(registry, "j3", 0, 1, "d").ok());
  EXPECT_THAT(
      registry.ReplayForFreedJob(replay, std::make_shared<FakeRankChannel>())
          .status(),
      StatusIs(absl::StatusCode::kNotFound));
  EXPECT_EQ(kept_memory_.used(), 0u);
  // Two jobs served: a fourth is refused, naming the limit.
  absl::Status fourth = JoinAs(registry, "j4", 0, 1, "e");
  EXPECT_THAT(fourth, StatusIs(absl::StatusCode::kResourceExhausted,
                               HasSubstr("--max_jobs=2")));
}

TEST_F(JobRegistryTest, FindsAJoinedJobAndNotAnUnknownOne) {
  JobRegistry registry(Env());
  ASSERT_TRUE(JoinAs(registry, "j1", 0, 1, "a").ok());
  EXPECT_TRUE(registry.Find("j1").ok());
  absl::StatusOr<std::shared_ptr<Job>> unknown = registry.Find("nope");
  EXPECT_FALSE(unknown.ok());
  EXPECT_THAT(unknown.status().message(), HasSubstr("nope"));
}

TEST_F(JobRegistryTest, JobsBeyondTheLimitAreRefusedNamingIt) {
  options_.max_jobs = 2;
  JobRegistry registry(Env());
  ASSERT_TRUE(JoinAs(registry, "j1", 0, 1, "a").ok());
  ASSERT_TRUE(JoinAs(registry, "j2", 0, 1, "b").ok());
  absl::Status third = JoinAs(registry, "j3", 0, 1, "c");
  EXPECT_THAT(third, StatusIs(absl::StatusCode::kResourceExhausted,
                              HasSubstr("--max_jobs=2")));
  // A job freed by its last session makes room again.
  LeaveAs(registry, "j1", "a", "closed", EpochEndReason::kSessionEnded);
  EXPECT_TRUE(JoinAs(registry, "j3", 0, 1, "c").ok());
}

TEST_F(JobRegistryTest, ARejectedJoinDoesNotLeaveAJobBehind) {
  options_.max_jobs = 1;
  JobRegistry registry(Env());
  // Rank 2 of a world of 2 is refused; the job it created must go again.
  EXPECT_FALSE(JoinAs(registry, "j1", 2, 2, "a").ok());
  EXPECT_FALSE(registry.Find("j1").ok());
  EXPECT_TRUE(JoinAs(registry, "j2", 0, 1, "b").ok());
}

// What a session stream does with a refused Join (its Join, then its end)
// leaves a running job of that session id running.
TEST_F(JobRegistryTest, ARefusedJoinNamingASeatedSessionLeavesItsJobRunning) {
  JobRegistry registry(Env());
  ASSERT_THAT(JoinAs(registry, "j1", 0, 2, "a"), IsOk());
  ASSERT_THAT(JoinAs(registry, "j1", 1, 2, "b"), IsOk());
  auto hostile = std::make_shared<FakeSession>();
  EXPECT_THAT(registry.Join(Join("j1", 0, 3, "a"), hostile),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  registry.Leave("j1", "a", hostile.get(), "its session ended",
                 EpochEndReason::kSessionEnded);
  ASSERT_THAT(registry.Find("j1"), IsOk());
  EXPECT_EQ((*registry.Find("j1"))->Snapshot().state, "running");
  EXPECT_EQ(seated_["a"]->aborted_count(), 0);
  EXPECT_EQ(seated_["b"]->aborted_count(), 0);
  // An exact retry is answered, and the job still runs.
  auto retry = std::make_shared<FakeSession>();
  EXPECT_THAT(registry.Join(Join("j1", 0, 2, "a"), retry), IsOk());
  EXPECT_EQ(retry->ready_count(), 1);
  LeaveAs(registry, "j1", "a", "its session ended",
          EpochEndReason::kSessionEnded);
  EXPECT_EQ((*registry.Find("j1"))->Snapshot().state, "running");
  EXPECT_EQ(seated_["b"]->aborted_count(), 0);
}

// The shard list a job keeps (its first Join's) is held in the memory
// budget with its per-rank state, until the job is freed.
TEST_F(JobRegistryTest, AJobsShardListCountsInTheMemoryBudget) {
  JobRegistry registry(Env());
  ASSERT_THAT(JoinAs(registry, "plain", 0, 2, "a"), IsOk());
  const size_t plain = memory_.used();
  v1::JoinRequest sharded = Join("sharded", 0, 2, "b");
  sharded.add_shards(std::string(1000, 'x') + ":1");
  sharded.add_shards(std::string(1000, 'y') + ":1");
  seated_["b"] = std::make_shared<FakeSession>();
  ASSERT_THAT(registry.Join(sharded, seated_["b"]), IsOk());
  // Both jobs' per-rank state, and at least the addresses' 2004 bytes.
  EXPECT_GE(memory_.used(), 2 * plain + 2004);
  LeaveAs(registry, "sharded", "b", "closed", EpochEndReason::kSessionEnded);
  EXPECT_EQ(memory_.used(), plain);
}

TEST_F(JobRegistryTest, StoppedRegistryRefusesJoinsAsUnavailable) {
  JobRegistry registry(Env());
  registry.StopAccepting();
  absl::Status joined = JoinAs(registry, "j1", 0, 1, "a");
  EXPECT_THAT(joined, StatusIs(absl::StatusCode::kUnavailable));
}

}  // namespace
}  // namespace reducer
