// Observability end to end: reducerd with --metrics_listen and
// --log_format=json runs a known workload, and
//  - the scraped counters have exactly the values the workload implies,
//    and `promtool check metrics` accepts the scrape;
//  - a second job with another name adds no new series (bounded labels);
//  - every json log line parses, with the job, epoch, collective and ranks;
//  - a real Prometheus server scrapes reducerd and its HTTP API answers
//    with the same values;
//  - reducerctl status names the rank a pending collective waits for, and
//    health and server reflection answer.
#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/fault_test_base.h"
#include "tests/http_get.h"
#include "tests/process_harness.h"

namespace reducer {
namespace testing {
namespace {

using ::testing::HasSubstr;

constexpr char kPromtool[] = "/usr/bin/promtool";
constexpr char kPrometheus[] = "/usr/bin/prometheus";
constexpr char kPython[] = "/usr/bin/python3";

// The workload at W = 2: ten all-reduces of 1 KiB (256 float32), one
// mismatch (rank 1 sends 128 elements, 300 ms after rank 0 sent its 256),
// and one collective rank 1 never calls, which times out after 3 s (its
// stall warning comes at 1.5 s). Rank 1 stays connected until well after
// that timeout.
std::vector<std::string> Workload() {
  std::string ten;
  for (int i = 0; i < 10; ++i) absl::StrAppend(&ten, "allreduce:shape=256;");
  return {
      absl::StrCat(ten, "allreduce:shape=256,name=mm,timeout_ms=10000;",
                   "allreduce:shape=256,name=lonely,timeout_ms=3000"),
      absl::StrCat(ten, "sleep:ms=300;",
                   "allreduce:shape=128,name=mm,timeout_ms=10000;",
                   "sleep:ms=5000"),
  };
}

// What Workload() does to reducerd's counters, per job.
struct Expected {
  const char* series;
  double value;
};
const Expected kPerJob[] = {
    {"reducer_collectives_total{kind=allreduce,outcome=OK}", 10},
    {"reducer_collectives_total{kind=allreduce,outcome=FailedPrecondition}", 1},
    {"reducer_collectives_total{kind=allreduce,outcome=DeadlineExceeded}", 1},
    {"reducer_collective_duration_seconds_count{kind=allreduce}", 10},
    // 20 contributions of 1024 bytes, rank 0's of the mismatch (rank 1's
    // was refused before its payload was read) and rank 0's of the timeout.
    {"reducer_payload_received_bytes_total{kind=allreduce}", 22 * 1024},
    {"reducer_payload_sent_bytes_total{kind=allreduce}", 20 * 1024},
    {"reducer_collective_stalls_total{kind=allreduce}", 1},
    {"reducer_epochs_aborted_total{reason=session_cancelled}", 0},
    {"reducer_requests_refused_total{code=ResourceExhausted,limit=max_jobs}", 0},
    // One session and one Collectives stream per rank; each call is one
    // message each way (12 calls of rank 0, 11 of rank 1).
    {"grpc_server_started_total{grpc_method=Join,grpc_service=reducer.v1.Reducer,grpc_type=server_stream}", 2},
    {"grpc_server_started_total{grpc_method=Collectives,grpc_service=reducer.v1.Reducer,grpc_type=bidi_stream}", 2},
    {"grpc_server_started_total{grpc_method=Collective,grpc_service=reducer.v1.Reducer,grpc_type=bidi_stream}", 0},
    {"grpc_server_msg_received_total{grpc_method=Collectives,grpc_service=reducer.v1.Reducer,grpc_type=bidi_stream}", 23},
    {"grpc_server_msg_sent_total{grpc_method=Collectives,grpc_service=reducer.v1.Reducer,grpc_type=bidi_stream}", 23},
    {"grpc_server_started_total{grpc_method=Leave,grpc_service=reducer.v1.Reducer,grpc_type=unary}", 2},
    {"grpc_server_handled_total{grpc_code=OK,grpc_method=Leave,grpc_service=reducer.v1.Reducer,grpc_type=unary}", 2},
    {"grpc_server_handling_seconds_count{grpc_method=Leave,grpc_service=reducer.v1.Reducer,grpc_type=unary}", 2},
};

// Label names any series may carry; none of them can take a job name, a
// rank or another value a client chooses.
const std::set<std::string> kAllowedLabels = {
    "kind",         "outcome",     "reason",       "code",      "limit",
    "grpc_service", "grpc_method", "grpc_type",    "grpc_code", "le",
    "quantile",     "version",     "grpc_version", "combined"};

class ObservabilityTest : public FaultTest {
 protected:
  absl::Duration TimeLimit() const override { return absl::Seconds(90); }

  // Starts reducerd with metrics on a free port and json logs, and
  // `flags`.
  bool StartObservedServer(std::vector<std::string> flags = {}) {
    flags.push_back("--metrics_listen=127.0.0.1:0");
    flags.push_back("--log_format=json");
    if (!StartServer(std::move(flags))) return false;
    metrics_port_ = server()->MetricsPort();
    EXPECT_NE(metrics_port_, 0) << server()->Logs();
    return metrics_port_ != 0;
  }

  // Scrapes /metrics; {} (with a failure recorded) if that fails.
  std::string ScrapeText() {
    absl::StatusOr<std::string> body = HttpGet(metrics_port_, "/metrics");
    EXPECT_TRUE(body.ok()) << body.status();
    return body.ok() ? *body : std::string();
  }

  std::map<std::string, double> Scrape() {
    absl::StatusOr<std::vector<Sample>> samples = ParseExposition(ScrapeText());
    EXPECT_TRUE(samples.ok()) << samples.status();
    std::map<std::string, double> out;
    if (!samples.ok()) return out;
    for (const Sample& s : *samples) out[s.Series()] = s.value;
    return out;
  }

  // Scrapes until reducerd has let go of every job (sessions end a moment
  // after their workers exit), at most 10 s; returns the last scrape.
  std::map<std::string, double> ScrapeOnceIdle() {
    std::map<std::string, double> m;
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    do {
      m = Scrape();
      if (m["reducer_jobs{}"] == 0 && m["reducer_ranks_connected{}"] == 0) break;
      absl::SleepFor(absl::Milliseconds(100));
    } while (absl::Now() < deadline);
    return m;
  }

  // Runs Workload() as `job` and checks each rank's steps.
  void RunWorkload(const std::string& job) {
    std::vector<std::unique_ptr<ChildProcess>> workers =
        StartJob(job, 2, Workload());
    std::vector<ProcessResult> done = WaitWorkers(workers);
    ASSERT_EQ(done.size(), 2u);
    for (int r = 0; r < 2; ++r) {
      for (int i = 1; i <= 10; ++i) {
        ExpectStep(done[r], absl::StrCat(i), absl::StatusCode::kOk);
      }
    }
    ExpectStep(done[0], "11", absl::StatusCode::kFailedPrecondition,
               {"mismatched"});
    ExpectStep(done[1], "12", absl::StatusCode::kFailedPrecondition,
               {"mismatched"});
    ExpectStep(done[0], "12", absl::StatusCode::kDeadlineExceeded,
               {"rank 1 never arrived"});
  }

  int metrics_port_ = 0;
};

TEST_F(ObservabilityTest, KnownWorkloadGivesExactCountersWithBoundedLabels) {
  ASSERT_TRUE(StartObservedServer());
  const std::map<std::string, double> before = Scrape();
  ASSERT_FALSE(before.empty());
  const std::string first = Job("first");
  RunWorkload(first);
  const std::string scrape_text = ScrapeText();
  std::map<std::string, double> after_first = ScrapeOnceIdle();
  for (const Expected& e : kPerJob) {
    ASSERT_TRUE(after_first.count(e.series)) << "no series " << e.series;
    EXPECT_EQ(after_first[e.series], e.value) << e.series;
  }
  for (const char* gauge :
       {"reducer_jobs{}", "reducer_ranks_connected{}",
        "reducer_collectives_pending{}", "reducer_collectives_stalled{}",
        "reducer_memory_budget_reserved_bytes{}"}) {
    EXPECT_EQ(after_first[gauge], 0) << gauge;
  }
  EXPECT_EQ(after_first["reducer_memory_budget_bytes{}"], double{int64_t{2} << 30});
  EXPECT_EQ((after_first["reducer_build_info{grpc_version=1.51.1,version=0.1.0}"]), 1);

  // promtool accepts a scrape.
  const std::string scrape_file = absl::StrCat(scratch_dir_, "/scrape.txt");
  std::ofstream(scrape_file) << scrape_text;
  ProcessResult promtool = RunToCompletion(
      {"/bin/sh", "-c", absl::StrCat(kPromtool, " check metrics < ", scrape_file)},
      "promtool");
  EXPECT_TRUE(promtool.Succeeded()) << promtool.Describe();

  // Bounded cardinality: only known label names, no value naming the job,
  // and a second job with another name creates no new series.
  for (const auto& [series, value] : after_first) {
    EXPECT_THAT(series, ::testing::Not(HasSubstr(first)));
  }
  absl::StatusOr<std::vector<Sample>> samples = ParseExposition(scrape_text);
  ASSERT_TRUE(samples.ok()) << samples.status();
  for (const Sample& s : *samples) {
    for (const auto& [label, value] : s.labels) {
      EXPECT_TRUE(kAllowedLabels.count(label))
          << "label " << label << " on " << s.Series();
    }
  }
  // Series exist from the start, but for failed outcomes, which appear as
  // they happen (one per kind and status code at most).
  std::set<std::string> created;
  for (const auto& [series, value] : after_first) {
    if (!before.count(series)) created.insert(series);
  }
  EXPECT_EQ(created,
            (std::set<std::string>{
                "reducer_collectives_total{kind=allreduce,outcome=DeadlineExceeded}",
                "reducer_collectives_total{kind=allreduce,outcome=FailedPrecondition}"}));
  const std::string second = Job("second");
  RunWorkload(second);
  std::map<std::string, double> after_second = ScrapeOnceIdle();
  std::set<std::string> names_first, names_second;
  for (const auto& [series, value] : after_first) names_first.insert(series);
  for (const auto& [series, value] : after_second) names_second.insert(series);
  EXPECT_EQ(names_first, names_second);
  for (const Expected& e : kPerJob) {
    EXPECT_EQ(after_second[e.series], 2 * e.value) << e.series;
  }

  // Every json log line parses, with the fields the events need.
  const std::string log_file = absl::StrCat(scratch_dir_, "/reducerd.json.log");
  std::ofstream(log_file) << server()->Stderr();
  absl::StatusOr<std::string> checker = RunfilePath("tests/check_json_log.py");
  ASSERT_TRUE(checker.ok()) << checker.status();
  ProcessResult checked = RunToCompletion({kPython, *checker, log_file}, "check_json_log");
  ASSERT_TRUE(checked.Succeeded()) << checked.Describe();
  for (const std::string& job : {first, second}) {
    EXPECT_THAT(checked.stdout_text,
                HasSubstr(absl::StrCat("job_ready job=", job,
                                       " epoch=1 collective= ranks=\n")));
    EXPECT_THAT(checked.stdout_text,
                HasSubstr(absl::StrCat("collective_failed job=", job,
                                       " epoch=1 collective=allreduce \"mm\" "
                                       "ranks=0,1\n")));
    EXPECT_THAT(checked.stdout_text,
                HasSubstr(absl::StrCat("collective_stalled job=", job,
                                       " epoch=1 collective=allreduce "
                                       "\"lonely\" ranks=1\n")));
    EXPECT_THAT(checked.stdout_text,
                HasSubstr(absl::StrCat("collective_failed job=", job,
                                       " epoch=1 collective=allreduce "
                                       "\"lonely\" ranks=1\n")));
  }
}

// The value of the one sample an instant query answers, from Prometheus'
// JSON: ..."value":[<time>,"<value>"]...; NaN if there is none.
double QueryValue(const std::string& json) {
  const std::string marker = "\"value\":[";
  const size_t at = json.find(marker);
  if (at == std::string::npos) return std::nan("");
  const size_t open = json.find('"', json.find(',', at));
  const size_t close = json.find('"', open + 1);
  double v = std::nan("");
  if (open == std::string::npos || close == std::string::npos ||
      !absl::SimpleAtod(json.substr(open + 1, close - open - 1), &v)) {
    return std::nan("");
  }
  return v;
}

TEST_F(ObservabilityTest, PrometheusScrapesReducerdAndAnswersQueries) {
  ASSERT_TRUE(StartObservedServer());
  absl::StatusOr<int> web_port = PickFreeLoopbackPort();
  ASSERT_TRUE(web_port.ok()) << web_port.status();
  const std::string dir = absl::StrCat(scratch_dir_, "/prometheus");
  const std::string config = absl::StrCat(scratch_dir_, "/prometheus.yml");
  std::ofstream(config) << "global:\n  scrape_interval: 1s\n"
                        << "scrape_configs:\n  - job_name: reducerd\n"
                        << "    static_configs:\n      - targets: ['127.0.0.1:"
                        << metrics_port_ << "']\n";
  absl::StatusOr<std::unique_ptr<ChildProcess>> prometheus = ChildProcess::Start(
      {kPrometheus, absl::StrCat("--config.file=", config),
       absl::StrCat("--storage.tsdb.path=", dir),
       absl::StrCat("--web.listen-address=127.0.0.1:", *web_port)},
      "prometheus");
  ASSERT_TRUE(prometheus.ok()) << prometheus.status();

  std::vector<std::unique_ptr<ChildProcess>> workers = StartJob(
      Job(), 2, {"allreduce:shape=256;allreduce:shape=256;allreduce:shape=256"});
  std::vector<ProcessResult> done = WaitWorkers(workers);
  for (const ProcessResult& r : done) {
    ExpectStep(r, "3", absl::StatusCode::kOk);
  }

  // Each query must come to the value reducerd's own scrape shows.
  const std::vector<std::pair<std::string, double>> queries = {
      {"up{job=\"reducerd\"}", 1},
      {"reducer_collectives_total{kind=\"allreduce\",outcome=\"OK\"}", 3},
      {"reducer_payload_received_bytes_total{kind=\"allreduce\"}", 6 * 1024},
      {"grpc_server_started_total{grpc_method=\"Join\"}", 2},
      {"reducer_jobs", 0},
  };
  const absl::Time deadline = absl::Now() + absl::Seconds(40);
  for (const auto& [query, want] : queries) {
    double got = std::nan("");
    std::string last;
    while (absl::Now() < deadline) {
      absl::StatusOr<std::string> answer = HttpGet(
          *web_port, absl::StrCat("/api/v1/query?query=", UrlEncode(query)));
      last = answer.ok() ? *answer : answer.status().ToString();
      got = answer.ok() ? QueryValue(*answer) : std::nan("");
      if (got == want) break;
      absl::SleepFor(absl::Milliseconds(250));
    }
    EXPECT_EQ(got, want) << query << ": last answer " << last << "\n"
                         << (*prometheus)->ReadStderr();
  }
  (*prometheus)->Signal(SIGTERM);
  (*prometheus)->Wait(absl::Seconds(10));
}

TEST_F(ObservabilityTest, ReducerctlNamesTheRankAPendingCollectiveWaitsFor) {
  ASSERT_TRUE(StartObservedServer());
  absl::StatusOr<std::string> ctl = RunfilePath("tools/reducerctl");
  ASSERT_TRUE(ctl.ok()) << ctl.status();
  const std::string target = absl::StrCat("--target=", server()->address());
  const std::string job = Job();
  // Ranks 0 and 1 call; rank 2 never does, and stays until it timed out.
  std::vector<std::unique_ptr<ChildProcess>> workers = StartJob(
      job, 3,
      {"allreduce:name=step7,timeout_ms=4000", "allreduce:name=step7,timeout_ms=4000",
       "sleep:ms=6000"});
  ASSERT_EQ(workers.size(), 3u);
  ASSERT_TRUE(WaitForOutput(*workers[0], "BEGIN 1 allreduce"));
  ASSERT_TRUE(WaitForOutput(*workers[1], "BEGIN 1 allreduce"));
  // Status until both waiting contributions are in (they are sent as the
  // BEGIN lines are printed, so this is quick).
  ProcessResult status;
  const absl::Time deadline = absl::Now() + absl::Seconds(3);
  do {
    status = RunToCompletion({*ctl, target, "status"}, "reducerctl_status");
    if (absl::StrContains(status.stdout_text, "waiting")) break;
    absl::SleepFor(absl::Milliseconds(100));
  } while (absl::Now() < deadline);
  ASSERT_TRUE(status.Succeeded()) << status.Describe();
  EXPECT_THAT(status.stdout_text,
              HasSubstr(absl::StrCat("job ", job,
                                     ": epoch 1, running, 3 of 3 ranks joined "
                                     "(0,1,2); chunks 256 KiB\n")));
  EXPECT_THAT(status.stdout_text,
              ::testing::ContainsRegex(
                  "  allreduce \"step7\" \\(ranks 0,1,2\\): waiting "
                  "[0-9.]+s for rank 2\n"));

  ProcessResult health = RunToCompletion({*ctl, target, "health"}, "reducerctl_health");
  EXPECT_TRUE(health.Succeeded()) << health.Describe();
  EXPECT_EQ(health.stdout_text, "SERVING\n");
  ProcessResult services = RunToCompletion({*ctl, target, "services"}, "reducerctl_services");
  EXPECT_TRUE(services.Succeeded()) << services.Describe();
  for (const char* s : {"reducer.v1.Reducer\n", "reducer.v1.Admin\n",
                        "grpc.health.v1.Health\n",
                        "grpc.reflection.v1alpha.ServerReflection\n"}) {
    EXPECT_THAT(services.stdout_text, HasSubstr(s));
  }

  std::vector<ProcessResult> done = WaitWorkers(workers);
  ExpectStep(done[0], "1", absl::StatusCode::kDeadlineExceeded,
             {"rank 2 never arrived"});
  // An unreachable target is an error naming it, not a hang.
  ProcessResult unreachable =
      RunToCompletion({*ctl, "--target=127.0.0.1:1", "--timeout=1s", "status"},
          "reducerctl_unreachable");
  EXPECT_EQ(unreachable.exit_code, 1) << unreachable.Describe();
  EXPECT_THAT(unreachable.stderr_text, HasSubstr("127.0.0.1:1"));
}

// Clients cut payloads at reducerd's --chunk_bytes, which JobReady carries:
// against 64 KiB chunks a 1 MiB all-reduce is no small call but travels on
// a Collective stream of its own per rank, in 16 messages each.
TEST_F(ObservabilityTest, ClientsCutPayloadsAtReducerdsChunkSize) {
  ASSERT_TRUE(StartObservedServer({"--chunk_bytes=65536"}));
  std::vector<std::unique_ptr<ChildProcess>> workers =
      StartJob(Job(), 2, {"allreduce:shape=262144,timeout_ms=20000"});
  std::vector<ProcessResult> done = WaitWorkers(workers);
  ASSERT_EQ(done.size(), 2u);
  for (const ProcessResult& r : done) {
    ExpectStep(r, "1", absl::StatusCode::kOk);
  }
  std::map<std::string, double> m = ScrapeOnceIdle();
  const std::string labels =
      "grpc_method=Collective,grpc_service=reducer.v1.Reducer,"
      "grpc_type=bidi_stream}";
  EXPECT_EQ(m["grpc_server_started_total{" + labels], 2);
  EXPECT_EQ(m["grpc_server_msg_received_total{" + labels], 2 * 16);
}

}  // namespace
}  // namespace testing
}  // namespace reducer
