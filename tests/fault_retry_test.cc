// Fault tests: replays and retries. When the transport failed
// (UNAVAILABLE), the client first asks reducerd for the call's result again
// (which it keeps until a later call acknowledges it), and resends the
// contribution, with the same attempt id, only when none was kept and no
// answer had begun to arrive; the server must never count a contribution
// twice, and a call that can get no result must fail cleanly rather than
// return a wrong one.
//
// Rank r of W = 3 sends the one-hot int64 vector e_r (times a scale), so
// the exact sum is all ones (all `scale`s); a contribution counted twice
// shows as a 2, one counted into the wrong collective as a mix of scales.
// Rank 0 reaches reducerd through a TcpProxy of its own: its connection 0
// is the session, connection 1 the collectives' channel (the client opens
// the session first, and the data channel on its first collective). The
// tests pause and cut connection 1 at chosen moments.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/random/random.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/fault_test_base.h"
#include "tests/tcp_proxy.h"

namespace reducer {
namespace testing {
namespace {

constexpr int kWorld = 3;

// The warm-up: a named one-hot all-reduce of 512 KiB that opens every
// rank's data connection (rank 0's is then proxy connection 1, and carries
// the 512 KiB while the session's connection 0 does not).
constexpr char kWarm[] =
    "allreduce:fill=onehot,shape=65536,name=warm,timeout_ms=20000";

class RetryTest : public FaultTest {
 protected:
  absl::Duration TimeLimit() const override { return absl::Seconds(90); }

  // Starts reducerd, rank 0's proxy and the job; runs the warm-up and
  // checks that rank 0 has exactly its session and data connections.
  void StartJobBehindProxy(const std::vector<std::string>& steps) {
    ASSERT_TRUE(StartServer());
    absl::StatusOr<std::unique_ptr<TcpProxy>> proxy =
        TcpProxy::Start(server()->port());
    ASSERT_TRUE(proxy.ok()) << proxy.status();
    proxy_ = *std::move(proxy);
    job_ = Job();
    workers_ = StartJob(job_, kWorld, steps, {proxy_->address(), "", ""});
    for (auto& w : workers_) ASSERT_TRUE(WaitForOutput(*w, "RESULT 1 "));
    ASSERT_EQ(proxy_->num_connections(), 2)
        << "rank 0 should have a session and a data connection";
    // Which is which: the collective's bytes went over connection 1.
    EXPECT_GE(proxy_->connection(1).bytes_up, 512u << 10);
    EXPECT_LT(proxy_->connection(0).bytes_up, 64u << 10);
    data_bytes_up_ = proxy_->connection(1).bytes_up;
  }

  // Runs the job of the lost-answer tests, after the warm-up a one-hot
  // all-reduce (step 3) and one of twice the values (step 5), both named by
  // `naming` (",name=step", or "" to match them by call order), and loses
  // rank 0's answer of step 3: holds what reducerd sends it on its data
  // connection, lets the job go (file "go"), and once ranks 1 and 2 have
  // their results and rank 0's answer sits in the proxy, cuts that
  // connection; then gives rank 0 time to retry and lets the job go on to
  // step 5 (file "next"). Sets *results to the job's 3 results.
  void RunLosingRank0sAnswer(const std::string& naming,
                             std::vector<ProcessResult>* results) {
    ASSERT_NO_FATAL_FAILURE(StartJobBehindProxy({absl::StrCat(
        kWarm, ";wait_file:path=go;allreduce:fill=onehot,shape=3", naming,
        ",timeout_ms=8000;wait_file:path=next;"
        "allreduce:fill=onehot,shape=3,scale=2",
        naming, ",timeout_ms=8000")}));
    proxy_->Pause(1, TcpProxy::kDownstream);
    Touch("go");
    ASSERT_TRUE(WaitForOutput(*workers_[1], "RESULT 3 "));
    ASSERT_TRUE(WaitForOutput(*workers_[2], "RESULT 3 "));
    absl::SleepFor(absl::Milliseconds(300));  // the answer sits in the proxy
    proxy_->Drop(1);
    absl::SleepFor(absl::Milliseconds(500));  // rank 0 retries
    Touch("next");
    *results = WaitWorkers(workers_);
    ASSERT_EQ(results->size(), 3u);
  }

  std::unique_ptr<TcpProxy> proxy_;
  std::string job_;
  std::vector<std::unique_ptr<ChildProcess>> workers_;
  uint64_t data_bytes_up_ = 0;
};

// Rank 0's request never reaches reducerd: its data connection stalls and
// is then cut. The client sees UNAVAILABLE with no answer, retries on a new
// connection, and the collective succeeds with exact values everywhere.
TEST_F(RetryTest, LostRequestIsRetriedAndCountedOnce) {
  const std::string call =
      "wait_file:path=go;allreduce:fill=onehot,shape=3,timeout_ms=20000";
  StartJobBehindProxy({absl::StrCat(kWarm, ";", call)});
  proxy_->Pause(1, TcpProxy::kBoth);
  Touch("go");
  ASSERT_TRUE(WaitForOutput(*workers_[0], "BEGIN 3 "));
  absl::SleepFor(absl::Milliseconds(300));
  EXPECT_EQ(proxy_->connection(1).bytes_up, data_bytes_up_)
      << "nothing of the call may have reached reducerd";
  proxy_->Drop(1);
  std::vector<ProcessResult> results = WaitWorkers(workers_);
  ASSERT_EQ(results.size(), 3u);
  for (const ProcessResult& r : results) {
    ExpectStep(r, "1", absl::StatusCode::kOk);
    // All ones: rank 0's retry counted once.
    ExpectStep(r, "3", absl::StatusCode::kOk, {}, absl::Seconds(10));
  }
  EXPECT_GE(proxy_->num_connections(), 3)
      << "the retry should have come over a new connection";
}

// Part of the answer has arrived when rank 0's data connection is cut,
// while its 4 MiB in-place all-reduce streams both ways (its link throttled
// by the proxy). Its contribution is never sent again (it was used), but
// its result is asked for again, on a new connection, and comes whole from
// what reducerd kept: rank 0's buffer holds the exact sum, and so does
// everyone's.
TEST_F(RetryTest, AnAnswerCutHalfWayIsSentAgainWhole) {
  // The big call waits for "go": the byte counts below are taken from
  // where the warm-up ended, and a rank that went on at once would have
  // sent part of its 4 MiB before they were read.
  const std::string big =
      "wait_file:path=go;"
      "allreduce_inplace:shape=1048576,seed=4,timeout_ms=30000";
  const std::string after =
      "allreduce:fill=onehot,shape=3,name=after,timeout_ms=20000";
  StartJobBehindProxy({absl::StrCat(kWarm, ";", big, ";", after),
                       absl::StrCat(kWarm, ";", big, ";", after),
                       absl::StrCat(kWarm, ";", big, ";", after)});
  const uint64_t down_before = proxy_->connection(1).bytes_down;
  proxy_->SetDelay(absl::Milliseconds(20), 64 << 10);  // ~3 MB/s each way
  Touch("go");
  // Rank 0's whole contribution has gone up (its 4 MiB and more than the
  // 2 KiB of framing they take), so that every input is in once reducerd
  // reads it: a cut before that must fail the collective, which could not
  // end without it. Its result trails it by about a chunk, so about 3 MiB
  // of it has come down by then, and at least 2.5 MiB (two whole result
  // messages of about 1 MiB) by the time the rest is held back.
  ASSERT_TRUE(proxy_->WaitForBytes(1, TcpProxy::kUpstream,
                                   data_bytes_up_ + (4 << 20) + (2 << 10),
                                   absl::Seconds(30)));
  ASSERT_TRUE(proxy_->WaitForBytes(1, TcpProxy::kDownstream,
                                   down_before + (5 << 19), absl::Seconds(30)));
  proxy_->Pause(1, TcpProxy::kDownstream);
  ASSERT_LT(proxy_->connection(1).bytes_down, down_before + (4 << 20))
      << "the whole result came down before the cut";
  absl::SleepFor(absl::Milliseconds(300));  // reducerd reads the last input
  proxy_->Drop(1);
  proxy_->SetDelay(absl::ZeroDuration());
  std::vector<ProcessResult> results = WaitWorkers(workers_);
  ASSERT_EQ(results.size(), 3u);
  for (const ProcessResult& r : results) {
    ExpectStep(r, "3", absl::StatusCode::kOk);
    ExpectStep(r, "4", absl::StatusCode::kOk);
  }
  const std::string log = server()->Stderr();
  EXPECT_THAT(log, ::testing::HasSubstr("sent again from what was kept"));
  EXPECT_THAT(log, ::testing::Not(::testing::HasSubstr("retried a contribution")));
}

// Rank 0's request reached reducerd (its contribution is attached and its
// bytes staged) when its connection is cut; the other ranks arrive later.
// The retry cannot be told from a new contribution with certainty, so the
// collective must fail for everyone (or succeed exactly): never a 2.
TEST_F(RetryTest, RetryAfterTheServerTookTheContributionNeverDoubleCounts) {
  const std::string rank0 =
      "wait_file:path=go;allreduce:fill=onehot,shape=3,timeout_ms=10000;"
      "allreduce:fill=onehot,shape=3,name=after,timeout_ms=20000";
  const std::string others =
      "wait_file:path=go2;allreduce:fill=onehot,shape=3,timeout_ms=10000;"
      "allreduce:fill=onehot,shape=3,name=after,timeout_ms=20000";
  StartJobBehindProxy({absl::StrCat(kWarm, ";", rank0),
                       absl::StrCat(kWarm, ";", others),
                       absl::StrCat(kWarm, ";", others)});
  Touch("go");
  ASSERT_TRUE(WaitForOutput(*workers_[0], "BEGIN 3 "));
  ASSERT_TRUE(proxy_->WaitForBytes(1, TcpProxy::kUpstream, data_bytes_up_ + 64,
                                   absl::Seconds(10)));
  absl::SleepFor(absl::Milliseconds(300));  // reducerd attaches it
  proxy_->Drop(1);
  absl::SleepFor(absl::Milliseconds(500));  // rank 0 retries
  Touch("go2");
  std::vector<ProcessResult> results = WaitWorkers(workers_);
  ASSERT_EQ(results.size(), 3u);
  for (const ProcessResult& r : results) {
    const StepResult s = Step(r, "3");
    EXPECT_NE(s.check, "bad") << r.name << ": " << s.message;
    EXPECT_THAT(s.code, ::testing::AnyOf(absl::StatusCode::kOk,
                                         absl::StatusCode::kAborted,
                                         absl::StatusCode::kUnavailable))
        << r.name << ": " << s.message;
    EXPECT_LE(s.elapsed, absl::Seconds(8)) << r.name << " waited for the timeout";
    ExpectStep(r, "4", absl::StatusCode::kOk);
  }
  // The outcome is the same on every rank.
  EXPECT_EQ(Step(results[1], "3").code, Step(results[2], "3").code);
}

// The answer is lost instead: reducerd finished the collective (ranks 1
// and 2 have their results) but rank 0's result never reached it before
// its connection was cut. Its client asks for the result again (a replay)
// and gets the one reducerd kept: exact, fast, as the other ranks had it.
// Its contribution is not taken for a new one: not counted into the next
// collective of the same name (ranks 1 and 2 then send 2 e_r, so a mix
// shows as [1,2,2]).
//
// (Counting it again would start a second "step" with the retried e_0, which
// ranks 1 and 2 would join with 2 e_1, 2 e_2: [1,2,2] somewhere.)
TEST_F(RetryTest, ALostAnswerIsSentAgainAndNotCountedAgain) {
  std::vector<ProcessResult> results;
  ASSERT_NO_FATAL_FAILURE(RunLosingRank0sAnswer(",name=step", &results));
  for (int r = 1; r < kWorld; ++r) {
    ExpectStep(results[r], "3", absl::StatusCode::kOk);
  }
  // Rank 0's first "step": its answer was lost, then sent again.
  const StepResult lost = Step(results[0], "3");
  EXPECT_EQ(lost.code, absl::StatusCode::kOk) << lost.message;
  EXPECT_EQ(lost.check, "ok")
      << "rank 0 got a wrong result for its replayed contribution: "
      << lost.message;
  EXPECT_LE(lost.elapsed, absl::Seconds(4))
      << "the replay waited for the timeout: " << lost.message;
  EXPECT_THAT(server()->Stderr(), ::testing::HasSubstr("sent again from what was kept"));
  // Nobody's second "step" may mix in rank 0's first contribution.
  for (const ProcessResult& r : results) {
    const StepResult second = Step(r, "5");
    EXPECT_NE(second.check, "bad")
        << r.name << " got a wrong result for the second \"step\": "
        << second.message;
  }
}

// The same lost answer for a collective matched by call order: the replay
// gets it promptly, it is not taken for a new collective #0 (which would
// wait alone for its 8 s timeout claiming that ranks which did arrive never
// arrived), and the next collective is exact.
TEST_F(RetryTest, ALostAnswerOfAnUnnamedCollectiveIsSentAgainPromptly) {
  std::vector<ProcessResult> results;
  ASSERT_NO_FATAL_FAILURE(RunLosingRank0sAnswer("", &results));
  ExpectStep(results[0], "3", absl::StatusCode::kOk, {}, absl::Seconds(4));
  for (const ProcessResult& r : results) {
    ExpectStep(r, "5", absl::StatusCode::kOk);
  }
}

// The session goes too: reducerd finished the collective (ranks 1 and 2
// have their results) while nothing reaches rank 0 on either of its
// connections, long enough for reducerd to drop rank 0's session (its pings
// go unanswered; the epoch ends) and for rank 0 to lose it; then both
// connections are cut. Rank 0 asks for its result again on a new
// connection, in an epoch that is over, without a session, and gets it
// exact: all three ranks agree on the collective.
TEST_F(RetryTest, AResultLostWithTheSessionIsSentAgainAfterTheEpochEnded) {
  const std::string steps = absl::StrCat(
      kWarm,
      ";wait_file:path=go;allreduce:fill=onehot,shape=3,name=step,"
      "timeout_ms=20000");
  StartJobBehindProxy({steps});
  for (int c : {0, 1}) proxy_->Pause(c, TcpProxy::kDownstream);
  Touch("go");
  ASSERT_TRUE(WaitForOutput(*workers_[1], "RESULT 3 "));
  ASSERT_TRUE(WaitForOutput(*workers_[2], "RESULT 3 "));
  // reducerd's keepalive gives up on rank 0 within about 3 s.
  const absl::Time give_up = absl::Now() + absl::Seconds(15);
  while (!absl::StrContains(server()->Stderr(), "rank 0's session was lost") &&
         absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(100));
  }
  ASSERT_THAT(server()->Stderr(), ::testing::HasSubstr("rank 0's session was lost"));
  proxy_->Drop(0);
  proxy_->Drop(1);
  std::vector<ProcessResult> results = WaitWorkers(workers_);
  ASSERT_EQ(results.size(), 3u);
  for (const ProcessResult& r : results) {
    ExpectStep(r, "3", absl::StatusCode::kOk);
  }
  EXPECT_THAT(server()->Stderr(),
              ::testing::HasSubstr("rank 0's attempt"));
}

// Chaos: 20 rounds of one-hot all-reduces of 512 KiB (each named, so that
// a failed round cannot shift the matching of later ones; 80 ms apart)
// while rank 0's data connection is cut at random moments: before a call,
// in the middle of its bytes, while its answer travels. Rounds may fail;
// none may return anything but exactly e_0 + e_1 + e_2.
TEST_F(RetryTest, RandomCutsNeverProduceAWrongSum) {
  std::string rounds;
  constexpr int kRounds = 20;
  for (int i = 0; i < kRounds; ++i) {
    absl::StrAppend(&rounds, ";allreduce:fill=onehot,shape=65536,name=round", i,
                    ",timeout_ms=4000;sleep:ms=80");
  }
  StartJobBehindProxy({absl::StrCat(kWarm, rounds)});
  absl::BitGen gen;
  int cuts = 0;
  while (workers_[0]->IsRunning() && absl::Now() < deadline_ - absl::Seconds(40)) {
    absl::SleepFor(absl::Milliseconds(absl::Uniform(gen, 30, 300)));
    const int n = proxy_->num_connections();
    // Cut the newest connection (the data channel's current one), now and
    // then the session too (connection 0 is never the newest after warm-up).
    proxy_->Drop(n - 1);
    ++cuts;
  }
  std::vector<ProcessResult> results = WaitWorkers(workers_);
  ASSERT_EQ(results.size(), 3u);
  int ok = 0;
  for (const ProcessResult& r : results) {
    for (int i = 0; i < kRounds; ++i) {
      const StepResult s = Step(r, absl::StrCat(2 + 2 * i));
      if (!s.found) continue;
      EXPECT_NE(s.check, "bad") << r.name << " round " << i << ": "
                                << s.message;
      if (s.code == absl::StatusCode::kOk) ++ok;
    }
  }
  std::printf("%d cuts; %d of %d calls succeeded\n", cuts, ok, 3 * kRounds);
}

}  // namespace
}  // namespace testing
}  // namespace reducer
