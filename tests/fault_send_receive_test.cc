// Fault tests of point-to-point messages (Client::Send / Receive /
// ReceiveAny): a ReceiveAny takes the first send from any source and names
// it, fails at its deadline saying what it waited for, is aborted naming a
// dead rank, and checks its call; a send
// is buffered (it returns once reducerd holds it, before the receiver
// calls); a Receive whose Send never comes fails at its deadline naming the
// source; a receiver waiting on a source that is SIGKILLed before sending
// gets ABORTED within seconds; a ReceiveInPlace of another shape fails
// naming both ranks and leaves its buffer as it was; calls naming no other
// rank, negative tags, names and groups are refused before sending, and
// user collectives taking the reserved names by reducerd; a send larger
// than the job's share of the memory budget is refused at once, naming the
// flag.
#include <signal.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/fault_test_base.h"
#include "tests/process_harness.h"

namespace reducer {
namespace testing {
namespace {

// A timeout far beyond anything these tests wait for.
constexpr int kLongTimeoutMs = 60000;
// How soon a loss or a refusal must be reported.
constexpr absl::Duration kSoon = absl::Seconds(10);

class SendReceiveFaultTest : public FaultTest {
 protected:
  // A job of two ranks: rank 0 hangs while rank 1 runs `receive` (a step
  // whose verb is `verb`, with a long timeout); once the call has had time
  // to reach reducerd, rank 0 is SIGKILLed. Rank 1's step must then fail
  // ABORTED naming rank 0 within kSoon.
  void ExpectReceiveAbortedWhenTheSourceIsKilled(const std::string& verb,
                                                 const std::string& receive) {
    ASSERT_TRUE(StartServer());
    std::vector<std::unique_ptr<ChildProcess>> workers =
        StartJob(Job(), 2, {"hang", receive});
    ASSERT_EQ(workers.size(), 2u);
    ASSERT_NE(workers[0], nullptr);
    ASSERT_NE(workers[1], nullptr);
    ASSERT_TRUE(WaitForOutput(*workers[0], "BEGIN 1 hang"));
    ASSERT_TRUE(WaitForOutput(*workers[1], absl::StrCat("BEGIN 1 ", verb)));
    absl::SleepFor(absl::Milliseconds(500));  // the call reaches reducerd
    ASSERT_TRUE(workers[0]->Signal(SIGKILL));
    const ProcessResult killed = workers[0]->Wait(absl::Seconds(10));
    EXPECT_EQ(killed.term_signal, SIGKILL) << killed.Describe();
    workers.erase(workers.begin());
    std::vector<ProcessResult> results = WaitWorkers(workers);
    ASSERT_EQ(results.size(), 1u);
    ExpectStep(results[0], "1", absl::StatusCode::kAborted, {"rank 0"}, kSoon);
  }
};

// Rank 0's Send returns while rank 1 is still asleep; rank 1's Receive,
// 1.5 s later, still gets the closed-form bytes.
TEST_F(SendReceiveFaultTest, SendReturnsBeforeTheReceiverCalls) {
  ASSERT_TRUE(StartServer());
  std::vector<std::unique_ptr<ChildProcess>> workers = StartJob(
      Job(), 2,
      {"send:to=1,shape=3000,seed=4;touch:path=sent",
       "wait_file:path=sent;sleep:ms=1500;receive:from=0,shape=3000,seed=4"});
  std::vector<ProcessResult> results = WaitWorkers(workers);
  ASSERT_EQ(results.size(), 2u);
  ExpectStep(results[0], "1", absl::StatusCode::kOk, {}, absl::Seconds(5),
             /*require_check=*/false);
  ExpectStep(results[1], "3", absl::StatusCode::kOk);
}

TEST_F(SendReceiveFaultTest, ReceiveWhoseSendNeverComesNamesTheSource) {
  ASSERT_TRUE(StartServer());
  const std::string job = Job();
  std::vector<std::unique_ptr<ChildProcess>> workers = StartJob(
      job, 3,
      {"sleep:ms=3000", "sleep:ms=3000",
       "receive:from=1,tag=5,timeout_ms=1500"});
  std::vector<ProcessResult> results = WaitWorkers(workers);
  ASSERT_EQ(results.size(), 3u);
  ExpectStep(results[2], "1", absl::StatusCode::kDeadlineExceeded,
             {absl::StrCat("sendreceive \"p2p 1>2 tag 5 #0\" of group [1,2] "
                           "in job ", job,
                           " timed out after 1.5s: rank 1 never arrived "
                           "(ranks 2 waited)")},
             absl::Seconds(6));
  EXPECT_GE(Step(results[2], "1").elapsed, absl::Milliseconds(1400))
      << "the receive gave up before its timeout";
}

TEST_F(SendReceiveFaultTest, ReceiverOfAKilledSourceIsAbortedWithinSeconds) {
  ExpectReceiveAbortedWhenTheSourceIsKilled(
      "receive", absl::StrCat("receive:from=0,timeout_ms=", kLongTimeoutMs));
}

// Calls that name no other rank of the world, a negative tag, or call
// options a message must not have are refused before anything is sent; a
// user collective taking the reserved name form is refused by reducerd
// without disturbing anyone; the job then goes on.
TEST_F(SendReceiveFaultTest, MalformedCallsAndReservedNamesAreRefused) {
  ASSERT_TRUE(StartServer());
  std::vector<std::unique_ptr<ChildProcess>> workers = StartJob(
      Job(), 2,
      {"send:to=0;send:to=2;send:to=1,tag=-1;send:to=1,name=x;"
       "send:to=1,group=0+1;receive:from=0;receive:from=-1;"
       "barrier:name=p2p 0>1 tag 0 #0;barrier;send:to=1,seed=7",
       "barrier;receive:from=0,seed=7"});
  std::vector<ProcessResult> results = WaitWorkers(workers);
  ASSERT_EQ(results.size(), 2u);
  const absl::StatusCode invalid = absl::StatusCode::kInvalidArgument;
  ExpectStep(results[0], "1", invalid,
             {"Send: destination 0 is this rank itself"}, kSoon);
  ExpectStep(results[0], "2", invalid,
             {"Send: destination 2 is outside the world of 2"}, kSoon);
  ExpectStep(results[0], "3", invalid, {"Send: tag -1 is negative"}, kSoon);
  ExpectStep(results[0], "4", invalid,
             {"Send: CallOptions.name \"x\" must be empty"}, kSoon);
  ExpectStep(results[0], "5", invalid,
             {"Send: CallOptions.group [0,1] must be empty"}, kSoon);
  ExpectStep(results[0], "6", invalid,
             {"Receive: source 0 is this rank itself"}, kSoon);
  ExpectStep(results[0], "7", invalid,
             {"Receive: source -1 is outside the world of 2"}, kSoon);
  ExpectStep(results[0], "8", invalid,
             {"collective name \"p2p 0>1 tag 0 #0\" is reserved for "
              "point-to-point messages; barrier must not use the prefix"},
             kSoon);
  ExpectStep(results[0], "9", absl::StatusCode::kOk);
  ExpectStep(results[0], "10", absl::StatusCode::kOk, {}, kSoon,
             /*require_check=*/false);
  ExpectStep(results[1], "1", absl::StatusCode::kOk);
  // The refused calls took no place in the count: this is message #0.
  ExpectStep(results[1], "2", absl::StatusCode::kOk);
}

// ReceiveInPlace into a buffer of another shape fails, naming both ranks'
// specs, and leaves the buffer as it was; one of the right shape gets the
// message. Rank 1 receives second, after the send of the first message was
// held, and first for the second message. The same of ReceiveInPlaceAsync
// (async=1), its handle waited for at once.
class ReceiveInPlaceFaultTest
    : public FaultTest,
      public ::testing::WithParamInterface<std::string> {};

TEST_P(ReceiveInPlaceFaultTest, OfAnotherShapeFailsNamingBothRanks) {
  ASSERT_TRUE(StartServer());
  const std::string form = GetParam();
  std::vector<std::unique_ptr<ChildProcess>> workers = StartJob(
      Job(), 2,
      {"send:to=1,shape=6,seed=2;touch:path=sent;wait_file:path=waiting;"
       "sleep:ms=300;send:to=1,shape=4x3,seed=3",
       absl::StrCat("wait_file:path=sent;receive_inplace:from=0,shape=7,seed=2",
                    form, ";touch:path=waiting;",
                    "receive_inplace:from=0,shape=4x3,seed=3", form)});
  std::vector<ProcessResult> results = WaitWorkers(workers);
  ASSERT_EQ(results.size(), 2u);
  ExpectStep(results[0], "1", absl::StatusCode::kOk, {}, kSoon,
             /*require_check=*/false);
  ExpectStep(results[0], "5", absl::StatusCode::kOk, {}, kSoon,
             /*require_check=*/false);
  // Step 2's check=ok: the failed call left the buffer as it was.
  ExpectStep(results[1], "2", absl::StatusCode::kFailedPrecondition,
             {"mismatched shapes: rank 0 sent [6] float32, rank 1 sent [7] "
              "float32"},
             kSoon);
  EXPECT_EQ(Step(results[1], "2").check, "ok");
  ExpectStep(results[1], "4", absl::StatusCode::kOk);
}

INSTANTIATE_TEST_SUITE_P(Forms, ReceiveInPlaceFaultTest,
                         ::testing::Values("", ",async=1"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param.empty() ? "Blocking" : "Async";
                         });

// The job's share is 2 MB of a 4 MB budget; a 2.4 MB send must be refused
// whole, at once, and its receiver gets the same refusal.
TEST_F(SendReceiveFaultTest, SendBeyondTheJobsMemoryShareIsRefused) {
  ASSERT_TRUE(StartServer(
      {"--memory_budget_bytes=4000000", "--max_job_memory_fraction=0.5"}));
  const std::string job = Job();
  std::vector<std::unique_ptr<ChildProcess>> workers = StartJob(
      job, 2,
      {"send:to=1,shape=600000,timeout_ms=20000",
       "receive:from=0,shape=600000,timeout_ms=20000"});
  std::vector<ProcessResult> results = WaitWorkers(workers);
  ASSERT_EQ(results.size(), 2u);
  for (const ProcessResult& r : results) {
    ExpectStep(r, "1", absl::StatusCode::kResourceExhausted,
               {absl::StrCat("job ", job, "'s share of the memory budget, "
                             "2000000 bytes (--max_job_memory_fraction=0.5 "
                             "of --memory_budget_bytes), is exhausted"),
                "rank 0 needs 2400000 more"},
               kSoon);
  }
}

// ReceiveAny (rank 1, tag 7) while nothing was sent waits for the first
// send to arrive: rank 2's, 0.3 s in, then rank 0's, 1.2 s in; each names
// its sender. Then a message rank 0 sent while rank 1 was busy is held:
// ReceiveAny takes it at once, and the Receive from rank 0 after it gets
// rank 0's next message.
TEST_F(SendReceiveFaultTest, ReceiveAnyTakesTheFirstSendFromAnySource) {
  ASSERT_TRUE(StartServer());
  std::vector<std::unique_ptr<ChildProcess>> workers = StartJob(
      Job(), 3,
      {"sleep:ms=1200;send:to=1,tag=7,seed=3;send:to=1,tag=7,seed=4;"
       "send:to=1,tag=7,seed=5",
       "receive_any:tag=7,from=2,seed=2;receive_any:tag=7,from=0,seed=3;"
       "sleep:ms=1000;receive_any:tag=7,from=0,seed=4;"
       "receive:from=0,tag=7,seed=5",
       "sleep:ms=300;send:to=1,tag=7,seed=2"});
  std::vector<ProcessResult> results = WaitWorkers(workers);
  ASSERT_EQ(results.size(), 3u);
  for (const char* step : {"1", "2", "4", "5"}) {
    SCOPED_TRACE(absl::StrCat("rank 1 step ", step));
    ExpectStep(results[1], step, absl::StatusCode::kOk, {}, kSoon);
    EXPECT_EQ(Step(results[1], step).check, "ok");
  }
  ExpectStep(results[1], "1", absl::StatusCode::kOk, {"source=2"});
  ExpectStep(results[1], "2", absl::StatusCode::kOk, {"source=0"});
  // The first waited for rank 2's send, the second for rank 0's; the third
  // found its message held.
  EXPECT_GE(Step(results[1], "1").elapsed, absl::Milliseconds(250));
  EXPECT_GE(Step(results[1], "1").elapsed + Step(results[1], "2").elapsed,
            absl::Milliseconds(1100));
  EXPECT_LT(Step(results[1], "4").elapsed, absl::Milliseconds(900));
}

// A ReceiveAny no send matches fails at its deadline, saying what it waited
// for; the rank's later receives of the tag still work: a plain Receive
// (rank 0's message 0) and a ReceiveAny (its message 1).
TEST_F(SendReceiveFaultTest, ReceiveAnyWhoseSendNeverComesSaysWhatItWaitedFor) {
  ASSERT_TRUE(StartServer());
  const std::string job = Job();
  std::vector<std::unique_ptr<ChildProcess>> workers = StartJob(
      job, 3,
      {"wait_file:path=timed_out;send:to=1,tag=7,seed=8;send:to=1,tag=7,seed=9",
       "receive_any:tag=7,timeout_ms=1500;touch:path=timed_out;"
       "receive:from=0,tag=7,seed=8;receive_any:tag=7,from=0,seed=9",
       "wait_file:path=timed_out"});
  std::vector<ProcessResult> results = WaitWorkers(workers);
  ASSERT_EQ(results.size(), 3u);
  ExpectStep(results[1], "1", absl::StatusCode::kDeadlineExceeded,
             {absl::StrCat("match \"p2p *>1 tag 7 #0\" of group [1] in job ",
                           job, ": no rank sent to rank 1 with tag 7 within 1.5s")},
             absl::Seconds(6));
  EXPECT_GE(Step(results[1], "1").elapsed, absl::Milliseconds(1400))
      << "the receive gave up before its timeout";
  ExpectStep(results[1], "3", absl::StatusCode::kOk, {}, kSoon);
  EXPECT_EQ(Step(results[1], "3").check, "ok");
  ExpectStep(results[1], "4", absl::StatusCode::kOk, {"source=0"}, kSoon);
  EXPECT_EQ(Step(results[1], "4").check, "ok");
}

// The only other rank is SIGKILLed while rank 1 waits in ReceiveAny: it
// gets ABORTED naming rank 0 within seconds, as a Receive would.
TEST_F(SendReceiveFaultTest, ReceiveAnyOfAJobWhoseOtherRankDiedNamesIt) {
  ExpectReceiveAbortedWhenTheSourceIsKilled(
      "receive_any",
      absl::StrCat("receive_any:tag=3,timeout_ms=", kLongTimeoutMs));
}

// ReceiveAny with a negative tag, a name, or a group with no other rank is
// refused before anything is sent; with a group, it receives from that
// group only and names the sender by its place in it.
TEST_F(SendReceiveFaultTest, ReceiveAnyChecksItsCallAndHonoursItsGroup) {
  ASSERT_TRUE(StartServer());
  std::vector<std::unique_ptr<ChildProcess>> workers = StartJob(
      Job(), 3,
      {"send:to=2,tag=4,seed=6;touch:path=sent",
       "wait_file:path=sent;send:to=2,tag=4,seed=5",
       "receive_any:tag=-1;receive_any:name=x;receive_any:group=2;"
       "wait_file:path=sent;receive_any:tag=4,group=1+2,from=0,seed=5;"
       "receive_any:tag=4,seed=6,from=0"});
  std::vector<ProcessResult> results = WaitWorkers(workers);
  ASSERT_EQ(results.size(), 3u);
  const absl::StatusCode invalid = absl::StatusCode::kInvalidArgument;
  ExpectStep(results[2], "1", invalid, {"ReceiveAny: tag -1 is negative"}, kSoon);
  ExpectStep(results[2], "2", invalid,
             {"ReceiveAny: CallOptions.name \"x\" must be empty"}, kSoon);
  ExpectStep(results[2], "3", invalid,
             {"ReceiveAny: the group [2] has no other rank to receive from"},
             kSoon);
  // Rank 0's message was held first, but the group [1,2] leaves it out:
  // rank 1's comes, named 0, its place in the group.
  ExpectStep(results[2], "5", absl::StatusCode::kOk, {"source=0"}, kSoon);
  EXPECT_EQ(Step(results[2], "5").check, "ok");
  ExpectStep(results[2], "6", absl::StatusCode::kOk, {"source=0"}, kSoon);
  EXPECT_EQ(Step(results[2], "6").check, "ok");
}

}  // namespace
}  // namespace testing
}  // namespace reducer
