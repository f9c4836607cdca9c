#include "server/log.h"

#include <string>

#include "absl/time/civil_time.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/matchers.h"

namespace reducer {
namespace {

absl::Time Noon() {
  return absl::FromCivil(absl::CivilSecond(2026, 11, 30, 8, 0, 0),
                         absl::UTCTimeZone()) +
         absl::Milliseconds(123);
}

TEST(LoggerTest, TextLineIsTimeLevelMessage) {
  const int ranks[] = {1};
  const LogEvent event{LogSeverity::kWarning, "collective_failed",
                       "allreduce #5 in job j1 timed out", "j1", 3,
                       "allreduce #5", ranks};
  EXPECT_EQ(Logger(LogFormat::kText).FormatLine(event, Noon()),
            "2026-11-30T08:00:00.123Z WARN allreduce #5 in job j1 timed out\n");
}

TEST(LoggerTest, TextEscapesControlCharactersSoOneEventIsOneLine) {
  // A job name with a newline must not forge a second log line.
  const LogEvent event{LogSeverity::kInfo, "job_ready",
                       "job a\n2026-11-30T08:00:00.000Z ERROR forged\r\t\x01 ready"};
  EXPECT_EQ(Logger(LogFormat::kText).FormatLine(event, Noon()),
            "2026-11-30T08:00:00.123Z INFO job a\\n2026-11-30T08:00:00.000Z "
            "ERROR forged\\r\\t\\x01 ready\n");
}

TEST(LoggerTest, JsonLineCarriesEveryField) {
  const int ranks[] = {1, 3};
  const LogEvent event{LogSeverity::kWarning, "collective_stalled",
                       "allreduce #5 stalled", "j1", 3, "allreduce #5", ranks};
  EXPECT_EQ(Logger(LogFormat::kJson).FormatLine(event, Noon()),
            "{\"time\":\"2026-11-30T08:00:00.123Z\",\"level\":\"WARN\","
            "\"event\":\"collective_stalled\",\"message\":\"allreduce #5 "
            "stalled\",\"job\":\"j1\",\"epoch\":3,\"collective\":\"allreduce "
            "#5\",\"ranks\":[1,3]}\n");
}

TEST(LoggerTest, JsonLeavesOutFieldsThatDoNotApply) {
  const LogEvent event{LogSeverity::kInfo, "draining", "received signal 15"};
  EXPECT_EQ(Logger(LogFormat::kJson).FormatLine(event, Noon()),
            "{\"time\":\"2026-11-30T08:00:00.123Z\",\"level\":\"INFO\","
            "\"event\":\"draining\",\"message\":\"received signal 15\"}\n");
}

TEST(LoggerTest, JsonEscapesQuotesBackslashesAndControlCharacters) {
  const LogEvent event{LogSeverity::kError, "collective_failed",
                       "allreduce \"a\\b\"\n\x01", "j\"1"};
  EXPECT_EQ(Logger(LogFormat::kJson).FormatLine(event, Noon()),
            "{\"time\":\"2026-11-30T08:00:00.123Z\",\"level\":\"ERROR\","
            "\"event\":\"collective_failed\",\"message\":\"allreduce "
            "\\\"a\\\\b\\\"\\n\\u0001\",\"job\":\"j\\\"1\"}\n");
}

// A clock at Noon() that moves only when told.
struct FakeClock {
  absl::Time now = Noon();
  LogGate::Clock clock() {
    return [this] { return now; };
  }
};

TEST(LoggerTest, EventsOfATenantAreGatedWithTheCountSaidByTheNextLine) {
  FakeClock clock;
  const Logger log(LogFormat::kText, clock.clock());
  const LogEvent event{LogSeverity::kWarning,
                       "collective_failed",
                       "allreduce #5 in job a/x failed",
                       "a/x",
                       1,
                       "allreduce #5",
                       {},
                       "a"};
  EXPECT_THAT(log.LinesFor(event),
              ElementsAre("2026-11-30T08:00:00.123Z WARN allreduce #5 in job "
                          "a/x failed\n"));
  for (int i = 0; i < 1000; ++i) EXPECT_THAT(log.LinesFor(event), IsEmpty());
  clock.now += absl::Seconds(1);
  EXPECT_THAT(log.LinesFor(event),
              ElementsAre("2026-11-30T08:00:01.123Z WARN allreduce #5 in job "
                          "a/x failed (1000 more like this suppressed in the "
                          "last 1.0s)\n"));
}

TEST(LoggerTest, EventsWithoutATenantAreNeverGated) {
  FakeClock clock;
  const Logger log(LogFormat::kText, clock.clock());
  const LogEvent event{LogSeverity::kInfo, "job_ready", "job j ready"};
  for (int i = 0; i < 3; ++i) EXPECT_THAT(log.LinesFor(event), SizeIs(1));
}

TEST(LoggerTest, AQuietTenantsCountIsSummarizedInJsonNamingIt) {
  FakeClock clock;
  const Logger log(LogFormat::kJson, clock.clock());
  const LogEvent a{LogSeverity::kWarning,
                   "collective_failed",
                   "failed",
                   "a/x",
                   1,
                   "",
                   {},
                   "a"};
  ASSERT_THAT(log.LinesFor(a), SizeIs(1));
  ASSERT_THAT(log.LinesFor(a), IsEmpty());
  clock.now += absl::Seconds(2);
  const LogEvent b{
      LogSeverity::kWarning, "epoch_aborted", "aborted", "b", 1, "", {}, "b"};
  EXPECT_THAT(
      log.LinesFor(b),
      ElementsAre("{\"time\":\"2026-11-30T08:00:02.123Z\",\"level\":\"WARN\","
                  "\"event\":\"collective_failed\",\"message\":\"1 more "
                  "collective_failed lines of tenant a suppressed in the last "
                  "2.0s\",\"tenant\":\"a\"}\n",
                  "{\"time\":\"2026-11-30T08:00:02.123Z\",\"level\":\"WARN\","
                  "\"event\":\"epoch_aborted\",\"message\":\"aborted\",\"job\":"
                  "\"b\",\"epoch\":1,\"tenant\":\"b\"}\n"));
}

TEST(LoggerTest, ParseLogFormatAcceptsTextAndJsonOnly) {
  EXPECT_EQ(ParseLogFormat("text").value(), LogFormat::kText);
  EXPECT_EQ(ParseLogFormat("json").value(), LogFormat::kJson);
  absl::StatusOr<LogFormat> bad = ParseLogFormat("yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad, StatusIs(absl::StatusCode::kInvalidArgument,
                            HasSubstr("--log_format must be text or json, "
                                      "got 'yaml'")));
}

}  // namespace
}  // namespace reducer
