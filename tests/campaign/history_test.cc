#include "tests/campaign/history.h"

#include <ostream>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/matchers.h"

namespace reducer {
namespace testing {
namespace {

}  // namespace

// gMock prints a violation by its sentence.
void PrintTo(const Violation& v, std::ostream* os) { *os << v.what; }

namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1000000);

// A worker's line, as campaign_worker writes it.
std::string Line(const std::string& job, int rank, int64_t step, const std::string& kind,
                 double start_s, double end_s, const std::string& code,
                 const std::string& message = "", const std::string& check = "ok",
                 int64_t round = 1) {
  return absl::StrCat("{\"job\":\"", job, "\",\"rank\":", rank, ",\"gen\":1,\"round\":", round,
                      ",\"step\":", step, ",\"kind\":\"", kind, "\",\"elements\":10,"
                      "\"named\":false,\"start_us\":",
                      absl::ToUnixMicros(kT0 + absl::Seconds(start_s)), ",\"end_us\":",
                      absl::ToUnixMicros(kT0 + absl::Seconds(end_s)),
                      ",\"timeout_ms\":6000,\"code\":\"", code, "\",\"message\":\"", message,
                      "\",\"check\":\"", check, "\"}\n");
}

FaultWindow Fault(const std::string& job, double start_s, double end_s) {
  return FaultWindow{"kill_rank", "j0 rank 1", job, kT0 + absl::Seconds(start_s),
                     kT0 + absl::Seconds(end_s)};
}

std::vector<Violation> Check(const std::string& lines,
                             const std::vector<FaultWindow>& faults = {}) {
  Limits limits;
  limits.aftermath = absl::Seconds(5);
  return CheckHistory(ParseHistory(lines), faults, limits);
}

TEST(HistoryTest, ParsesTheWorkersLinesAndSkipsACutOne) {
  std::vector<Operation> ops = ParseHistory(
      Line("j0", 1, 4, "allreduce", 1, 2, "ABORTED", "job j0 \\\"x\\\" rank 2 lost") +
      "{\"job\":\"j0\",\"rank\":1,\"ge");
  ASSERT_THAT(ops, SizeIs(1));
  EXPECT_EQ(ops[0].rank, 1);
  EXPECT_EQ(ops[0].step, 4);
  EXPECT_EQ(ops[0].round, 1);
  EXPECT_EQ(ops[0].message, "job j0 \"x\" rank 2 lost");
  EXPECT_EQ(ops[0].end - ops[0].start, absl::Seconds(1));
}

// The fields of `op` that a line's round trip must keep, in a tuple that
// EXPECT_EQ compares and prints.
auto ComparedFields(const Operation& op) {
  return std::tie(op.job, op.rank, op.gen, op.step, op.kind, op.elements,
                  op.start, op.end, op.code, op.message, op.contributors,
                  op.joined, op.state);
}

// The `what` of the one violation Check finds in `lines` (a test failure,
// and "", when it finds another number of them).
std::string OnlyViolation(const std::string& lines,
                          const std::vector<FaultWindow>& faults = {}) {
  const std::vector<Violation> v = Check(lines, faults);
  EXPECT_THAT(v, SizeIs(1));
  return v.size() == 1 ? v[0].what : "";
}

TEST(HistoryTest, FormatHistoryLineIsTheParsersInverse) {
  Operation op;
  op.job = "j2";
  op.rank = 1;
  op.gen = 3;
  op.step = 17;
  op.kind = "quorum_inplace";
  op.elements = 640;
  op.named = true;
  op.start = kT0;
  op.end = kT0 + absl::Milliseconds(250);
  op.timeout_ms = 6000;
  op.code = "FAILED_PRECONDITION";
  op.message = "quorum \"quorum step 5\" finished\nwithout rank 1";
  op.check = "ok";
  op.contributors = {0, 2};
  op.joined = {1};
  op.state = "00ab-01";
  std::vector<Operation> parsed = ParseHistory(FormatHistoryLine(op));
  ASSERT_THAT(parsed, SizeIs(1));
  const Operation& back = parsed[0];
  EXPECT_EQ(ComparedFields(back), ComparedFields(op));
  EXPECT_TRUE(back.named);
  EXPECT_TRUE(back.quorum());
  EXPECT_TRUE(back.collective());
}

TEST(HistoryTest, CleanHistoryHasNoViolation) {
  EXPECT_THAT(Check(Line("j0", 0, 1, "allreduce", 1, 1.1, "OK") +
                    Line("j0", 1, 1, "allreduce", 1, 1.1, "OK") +
                    Line("j0", 0, 2, "barrier", 2, 2.5, "ABORTED", "rank 1 lost") +
                    Line("j0", 1, 2, "barrier", 2, 2.5, "ABORTED", "rank 1 lost"),
                    {Fault("j0", 1.9, 2.1)}),
              IsEmpty());
}

TEST(HistoryTest, AWrongResultIsAViolation) {
  EXPECT_THAT(OnlyViolation(Line("j0", 0, 1, "allreduce", 1, 1.1, "OK", "",
                                 "bad: element 3 is 9, want 7")),
              HasSubstr("wrong result"));
}

TEST(HistoryTest, RanksThatDisagreeAreAViolation) {
  std::vector<Violation> v = Check(Line("j0", 0, 3, "allreduce", 1, 1.1, "OK") +
                                       Line("j0", 1, 3, "allreduce", 1, 7.2,
                                            "DEADLINE_EXCEEDED", "timed out: rank 2 never arrived"),
                                   {Fault("j0", 0.5, 1.5)});
  ASSERT_THAT(v, SizeIs(1));
  EXPECT_THAT(v[0].what, HasSubstr("ranks disagree"));
  EXPECT_FALSE(v[0].lost_with_shard);
}

// A shard's fault, as the driver records it.
FaultWindow ShardFault(const std::string& kind, double start_s, double end_s) {
  return FaultWindow{kind, "shard 1 (10.77.0.3:50051)", "", kT0 + absl::Seconds(start_s),
                     kT0 + absl::Seconds(end_s)};
}

constexpr char kLostShard1[] =
    "reducerd shard 1 of 2: lost the session with reducerd at 10.77.0.3:50051: "
    "Socket closed; Connect again";

TEST(HistoryTest, AResultThatDiedWithItsKilledShardIsReportedApart) {
  for (const char* kind : {"kill_shard", "restart_shard"}) {
    SCOPED_TRACE(kind);
    std::vector<Violation> v = Check(
        Line("j0", 0, 3, "allreduce", 1, 1.1, "OK") +
            Line("j0", 1, 3, "allreduce", 1, 3.2, "UNAVAILABLE", kLostShard1),
        {ShardFault(kind, 1.0, 1.5)});
    ASSERT_THAT(v, SizeIs(1));
    EXPECT_TRUE(v[0].lost_with_shard);
  }
}

TEST(HistoryTest, AResultLostWhileItsShardLivedIsAViolation) {
  // The shard was only stopped, or another shard was killed, or the link
  // went: reducerd kept the result, and a replay must have found it.
  for (const FaultWindow& f :
       {ShardFault("stop_shard", 1.0, 1.5), ShardFault("link_down", 1.0, 1.5),
        FaultWindow{"kill_shard", "shard 0 (10.77.0.2:50051)", "", kT0 + absl::Seconds(1),
                    kT0 + absl::Seconds(1.5)},
        Fault("j0", 0.5, 1.5)}) {
    SCOPED_TRACE(f.kind);
    std::vector<Violation> v = Check(
        Line("j0", 0, 3, "allreduce", 1, 1.1, "OK") +
            Line("j0", 1, 3, "allreduce", 1, 3.2, "UNAVAILABLE", kLostShard1),
        {f});
    ASSERT_THAT(v, SizeIs(1));
    EXPECT_FALSE(v[0].lost_with_shard);
    EXPECT_THAT(v[0].what, HasSubstr("ranks disagree"));
  }
}

// A relay of j0's ranks 0 and 1 SIGKILLed (as the driver records it), and
// rank r's part of one all-reduce of ranks 0-2.
FaultWindow KilledRelayOf01(double start_s, double end_s) {
  return FaultWindow{"kill_relay",
                     "j0 relay 0 of ranks [0,1] (10.77.0.5:50051)",
                     "j0",
                     kT0 + absl::Seconds(start_s),
                     kT0 + absl::Seconds(end_s),
                     {0, 1}};
}
std::string RelayRun(int rank, bool ok) {
  return ok ? Line("j0", rank, 3, "allreduce", 1, 1.1, "OK")
            : Line("j0", rank, 3, "allreduce", 1, 1.2, "UNAVAILABLE",
                   "lost the session with reducerd at 10.77.0.5:50051");
}

TEST(HistoryTest, RanksLostWithTheirKilledRelayAreReportedApart) {
  std::vector<Violation> v =
      Check(RelayRun(0, false) + RelayRun(1, false) + RelayRun(2, true),
            {KilledRelayOf01(1.0, 1.5)});
  ASSERT_THAT(v, SizeIs(1));
  EXPECT_TRUE(v[0].lost_with_shard);
}

TEST(HistoryTest, ARelayKilledLosesAllItsRanksOrNone) {
  // One of the relay's ranks succeeded: not all or nothing.
  std::vector<Violation> split =
      Check(RelayRun(0, true) + RelayRun(1, false) + RelayRun(2, true),
            {KilledRelayOf01(1.0, 1.5)});
  ASSERT_THAT(split, SizeIs(1));
  EXPECT_FALSE(split[0].lost_with_shard);
  // A rank of another relay failed as well.
  std::vector<Violation> beyond =
      Check(RelayRun(0, false) + RelayRun(1, false) + RelayRun(2, false) +
                Line("j0", 3, 3, "allreduce", 1, 1.1, "OK"),
            {KilledRelayOf01(1.0, 1.5)});
  ASSERT_THAT(beyond, Not(IsEmpty()));
  for (const Violation& one : beyond)
    EXPECT_FALSE(one.lost_with_shard) << one.what;
  // The relay was only stopped.
  FaultWindow stopped = KilledRelayOf01(1.0, 1.5);
  stopped.kind = "stop_relay";
  std::vector<Violation> alive = Check(
      RelayRun(0, false) + RelayRun(1, false) + RelayRun(2, true), {stopped});
  ASSERT_THAT(alive, SizeIs(1));
  EXPECT_FALSE(alive[0].lost_with_shard);
}

TEST(HistoryTest, TheSameStepInAnotherRoundIsAnotherCollective) {
  EXPECT_THAT(Check(Line("j0", 0, 3, "poll", 1, 1.1, "OK", "", "none", 1) +
                        Line("j0", 1, 3, "poll", 1, 1.2, "ABORTED", "rank 2 lost", "none", 2),
                    {Fault("j0", 0.5, 1.5)}),
              IsEmpty());
}

TEST(HistoryTest, OutlivingTheDeadlineIsAViolation) {
  EXPECT_THAT(OnlyViolation(Line("j0", 0, 1, "allreduce", 1, 30,
                                 "DEADLINE_EXCEEDED", "deadline"),
                            {Fault("j0", 0.5, 1.5)}),
              HasSubstr("outlived its deadline"));
}

TEST(HistoryTest, AFailureWithNoFaultOrOfAnotherJobsFaultIsAViolation) {
  EXPECT_THAT(Check(Line("j0", 0, 1, "allreduce", 10, 10.1, "ABORTED", "rank 1 lost"),
                    {Fault("j0", 1, 2)}),
              SizeIs(1));
  EXPECT_THAT(OnlyViolation(Line("j1", 0, 1, "allreduce", 1, 1.1, "ABORTED",
                                 "rank 1 lost"),
                            {Fault("j0", 0.5, 1.5)}),
              HasSubstr("no fault that reaches its job"));
  // A shard's fault reaches every job.
  EXPECT_THAT(Check(Line("j1", 0, 1, "allreduce", 1, 1.1, "UNAVAILABLE",
                         "reducerd shard 0 of 2 at 10.77.0.2:50051: Socket closed"),
                    {Fault("", 0.5, 1.5)}),
              IsEmpty());
}

TEST(HistoryTest, AFailureThatNamesNoCauseIsAViolation) {
  EXPECT_THAT(OnlyViolation(Line("j0", 0, 1, "allreduce", 1, 1.1, "UNAVAILABLE",
                                 "Socket closed"),
                            {Fault("j0", 0.5, 1.5)}),
              HasSubstr("names no cause"));
}

// A quorum job's line: rank `rank` ran `kind` ("quorum", "handoff") over
// [start_s, end_s] and saw `contributors` and `joined`.
std::string QuorumLine(int rank, int64_t step, double start_s, double end_s,
                       std::vector<int> contributors, std::vector<int> joined = {},
                       const std::string& state = "s1", const std::string& kind = "quorum") {
  Operation op;
  op.job = "j2";
  op.rank = rank;
  op.step = step;
  op.kind = kind;
  op.start = kT0 + absl::Seconds(start_s);
  op.end = kT0 + absl::Seconds(end_s);
  op.timeout_ms = 6000;
  op.code = "OK";
  op.check = "ok";
  op.contributors = std::move(contributors);
  op.joined = std::move(joined);
  op.state = state;
  return FormatHistoryLine(op);
}

FaultWindow RankFault(const std::string& kind, int rank, double start_s, double end_s) {
  return FaultWindow{kind, absl::StrCat("j2 rank ", rank, " (host 10.77.0.9)"), "j2",
                     kT0 + absl::Seconds(start_s), kT0 + absl::Seconds(end_s)};
}

TEST(QuorumCheckTest, AStepOverEveryRankHasNoViolation) {
  EXPECT_THAT(Check(QuorumLine(0, 4, 1, 1.2, {0, 1, 2}) + QuorumLine(1, 4, 1.05, 1.2, {0, 1, 2}) +
                    QuorumLine(2, 4, 1.1, 1.21, {0, 1, 2})),
              IsEmpty());
}

TEST(QuorumCheckTest, ARankLeftOutWithNoFaultOnItIsAViolation) {
  // Rank 2's connect says the job has 3 ranks.
  const std::string history = QuorumLine(0, 4, 1, 4, {0, 1}) +
                              QuorumLine(1, 4, 1.05, 4, {0, 1}) +
                              Line("j2", 2, -1, "connect", 0, 0.1, "OK");
  // Its own fault excuses it; another rank's fault, or none, does not.
  EXPECT_THAT(Check(history, {RankFault("stop_rank", 2, 0.5, 3.5)}), IsEmpty());
  EXPECT_THAT(Check(history, {ShardFault("crawl", 0.5, 1.5)}), IsEmpty());
  for (const std::vector<FaultWindow>& faults :
       {std::vector<FaultWindow>{}, {RankFault("stop_rank", 1, 0.5, 3.5)},
        {RankFault("kill_rank", 2, 30, 31)}}) {
    EXPECT_THAT(OnlyViolation(history, faults),
                HasSubstr("went on without rank 2, alive and in time"));
  }
}

TEST(QuorumCheckTest, AFaultOfItsRelayExcusesARankLeftOut) {
  const std::string history = QuorumLine(0, 4, 1, 4, {0, 1}) +
                              QuorumLine(1, 4, 1.05, 4, {0, 1}) +
                              Line("j2", 2, -1, "connect", 0, 0.1, "OK");
  auto relay_of = [](std::vector<int> ranks) {
    return FaultWindow{"crawl",
                       "j2 relay 1 of ranks [...] (10.77.0.8:50051)",
                       "j2",
                       kT0 + absl::Seconds(0.5),
                       kT0 + absl::Seconds(3.5),
                       std::move(ranks)};
  };
  EXPECT_THAT(Check(history, {relay_of({2})}), IsEmpty());
  EXPECT_THAT(OnlyViolation(history, {relay_of({0, 1})}),
              HasSubstr("went on without rank 2, alive and in time"));
}

TEST(QuorumCheckTest, RanksThatSawDifferentContributorsAreAViolation) {
  EXPECT_THAT(OnlyViolation(QuorumLine(0, 4, 1, 4, {0, 1}) +
                                QuorumLine(1, 4, 1.05, 4, {0, 1, 2}) +
                                QuorumLine(2, 4, 1.1, 4, {0, 1, 2}),
                            {RankFault("stop_rank", 2, 0.5, 3.5)}),
              HasSubstr("ranks disagree on step 4 of j2"));
}

TEST(QuorumCheckTest, AListedRankWithNoCallInFlightIsAViolation) {
  // Rank 2's only call ended before the others' began.
  const std::string history = QuorumLine(0, 4, 1, 1.2, {0, 1, 2}) +
                              QuorumLine(1, 4, 1.05, 1.2, {0, 1, 2}) +
                              Line("j2", 2, -1, "connect", 0.2, 0.5, "OK");
  EXPECT_THAT(OnlyViolation(history),
              HasSubstr("lists rank 2, which had no call in flight"));
  // Killed around the decision: its line was never written.
  EXPECT_THAT(Check(history, {RankFault("kill_rank", 2, 1.1, 3)}), IsEmpty());
}

TEST(QuorumCheckTest, TheSameStepNumberLaterIsAnotherJobsStep) {
  // A job started afresh counts from 0 again: two collectives, each whole.
  EXPECT_THAT(Check(QuorumLine(0, 0, 1, 1.2, {0, 1, 2}) + QuorumLine(1, 0, 1.05, 1.2, {0, 1, 2}) +
                    QuorumLine(2, 0, 1.1, 1.2, {0, 1, 2}) +
                    QuorumLine(0, 0, 9, 9.2, {0, 1, 2}, {}, "s9") +
                    QuorumLine(1, 0, 9.05, 9.2, {0, 1, 2}, {}, "s9") +
                    QuorumLine(2, 0, 9.1, 9.2, {0, 1, 2}, {}, "s9")),
              IsEmpty());
}

TEST(QuorumCheckTest, ContributorsOrAHandoffWithDifferentStatesAreAViolation) {
  // Rank 2 joined step 6: it holds no state until the handoff gives it one.
  const std::string step = QuorumLine(0, 6, 1, 1.2, {0, 1}, {2}) +
                           QuorumLine(1, 6, 1.05, 1.2, {0, 1}, {2}) +
                           QuorumLine(2, 6, 1.1, 1.2, {0, 1}, {2}, "");
  const std::vector<FaultWindow> kill = {RankFault("kill_rank", 2, 0, 0.8)};
  EXPECT_THAT(Check(step + QuorumLine(0, 6, 1.3, 1.4, {}, {}, "s1", "handoff") +
                        QuorumLine(1, 6, 1.3, 1.4, {}, {}, "s1", "handoff") +
                        QuorumLine(2, 6, 1.3, 1.4, {}, {}, "s1", "handoff"),
                    kill),
              IsEmpty());
  EXPECT_THAT(
      OnlyViolation(step + QuorumLine(0, 6, 1.3, 1.4, {}, {}, "s1", "handoff") +
                        QuorumLine(2, 6, 1.3, 1.4, {}, {}, "s0", "handoff"),
                    kill),
      HasSubstr("replicated state differs after the handoff after step 6"));
  EXPECT_THAT(OnlyViolation(QuorumLine(0, 7, 1, 1.2, {0, 1, 2}, {}, "s1") +
                            QuorumLine(1, 7, 1.05, 1.2, {0, 1, 2}, {}, "s1") +
                            QuorumLine(2, 7, 1.1, 1.2, {0, 1, 2}, {}, "s2")),
              HasSubstr("replicated state differs after step 7"));
}

}  // namespace
}  // namespace testing
}  // namespace reducer
