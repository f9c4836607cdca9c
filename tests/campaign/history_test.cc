#include "tests/campaign/history.h"

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace reducer {
namespace testing {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;

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

TEST(HistoryTest, CleanHistoryHasNoViolation) {
  EXPECT_THAT(Check(Line("j0", 0, 1, "allreduce", 1, 1.1, "OK") +
                    Line("j0", 1, 1, "allreduce", 1, 1.1, "OK") +
                    Line("j0", 0, 2, "barrier", 2, 2.5, "ABORTED", "rank 1 lost") +
                    Line("j0", 1, 2, "barrier", 2, 2.5, "ABORTED", "rank 1 lost"),
                    {Fault("j0", 1.9, 2.1)}),
              IsEmpty());
}

TEST(HistoryTest, AWrongResultIsAViolation) {
  std::vector<Violation> v =
      Check(Line("j0", 0, 1, "allreduce", 1, 1.1, "OK", "", "bad: element 3 is 9, want 7"));
  ASSERT_THAT(v, SizeIs(1));
  EXPECT_THAT(v[0].what, HasSubstr("wrong result"));
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

TEST(HistoryTest, TheSameStepInAnotherRoundIsAnotherCollective) {
  EXPECT_THAT(Check(Line("j0", 0, 3, "poll", 1, 1.1, "OK", "", "none", 1) +
                        Line("j0", 1, 3, "poll", 1, 1.2, "ABORTED", "rank 2 lost", "none", 2),
                    {Fault("j0", 0.5, 1.5)}),
              IsEmpty());
}

TEST(HistoryTest, OutlivingTheDeadlineIsAViolation) {
  std::vector<Violation> v =
      Check(Line("j0", 0, 1, "allreduce", 1, 30, "DEADLINE_EXCEEDED", "deadline"),
            {Fault("j0", 0.5, 1.5)});
  ASSERT_THAT(v, SizeIs(1));
  EXPECT_THAT(v[0].what, HasSubstr("outlived its deadline"));
}

TEST(HistoryTest, AFailureWithNoFaultOrOfAnotherJobsFaultIsAViolation) {
  EXPECT_THAT(Check(Line("j0", 0, 1, "allreduce", 10, 10.1, "ABORTED", "rank 1 lost"),
                    {Fault("j0", 1, 2)}),
              SizeIs(1));
  std::vector<Violation> v =
      Check(Line("j1", 0, 1, "allreduce", 1, 1.1, "ABORTED", "rank 1 lost"),
            {Fault("j0", 0.5, 1.5)});
  ASSERT_THAT(v, SizeIs(1));
  EXPECT_THAT(v[0].what, HasSubstr("no fault that reaches its job"));
  // A shard's fault reaches every job.
  EXPECT_THAT(Check(Line("j1", 0, 1, "allreduce", 1, 1.1, "UNAVAILABLE",
                         "reducerd shard 0 of 2 at 10.77.0.2:50051: Socket closed"),
                    {Fault("", 0.5, 1.5)}),
              IsEmpty());
}

TEST(HistoryTest, AFailureThatNamesNoCauseIsAViolation) {
  std::vector<Violation> v =
      Check(Line("j0", 0, 1, "allreduce", 1, 1.1, "UNAVAILABLE", "Socket closed"),
            {Fault("j0", 0.5, 1.5)});
  ASSERT_THAT(v, SizeIs(1));
  EXPECT_THAT(v[0].what, HasSubstr("names no cause"));
}

}  // namespace
}  // namespace testing
}  // namespace reducer
