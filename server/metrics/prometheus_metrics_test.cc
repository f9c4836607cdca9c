#include "server/metrics/prometheus_metrics.h"

#include <initializer_list>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "prometheus/text_serializer.h"
#include "tests/matchers.h"

namespace reducer {
namespace {

std::string Scrape(PrometheusMetrics& metrics, ServerState state) {
  std::shared_ptr<prometheus::Collectable> target =
      metrics.MakeScrapeTarget([state] { return state; });
  return prometheus::TextSerializer().Serialize(target->Collect());
}

// Expects `text` to hold each of `samples` ("name{labels} value") followed by
// the newline that ends its line.
void ExpectSamples(const std::string& text,
                   std::initializer_list<const char*> samples) {
  for (const char* sample : samples) {
    EXPECT_THAT(text, HasSubstr(std::string(sample) + "\n"));
  }
}

TEST(PrometheusMetricsTest, CountsCollectivesByKindAndOutcome) {
  PrometheusMetrics metrics("1.2.3");
  for (int i = 0; i < 3; ++i) {
    metrics.CollectiveEnded(CollectiveKind::kAllReduce, absl::StatusCode::kOk,
                            absl::Milliseconds(2), 2048, 2048);
  }
  metrics.CollectiveEnded(CollectiveKind::kAllReduce,
                          absl::StatusCode::kDeadlineExceeded,
                          absl::Seconds(1), 1024, 0);
  metrics.CollectiveEnded(std::nullopt, absl::StatusCode::kInvalidArgument,
                          absl::ZeroDuration(), 0, 0);
  const std::string text = Scrape(metrics, {});
  ExpectSamples(
      text,
      {
          "reducer_collectives_total{kind=\"allreduce\",outcome=\"OK\"} 3",
          "reducer_collectives_total{kind=\"allreduce\",outcome="
          "\"DeadlineExceeded\"} 1",
          "reducer_collectives_total{kind=\"unknown\",outcome="
          "\"InvalidArgument\"} 1",
          "reducer_collectives_total{kind=\"barrier\",outcome=\"OK\"} 0",
          "reducer_payload_received_bytes_total{kind=\"allreduce\"} 7168",
          "reducer_payload_sent_bytes_total{kind=\"allreduce\"} 6144",
          // Only successful collectives are timed: 3 of 2 ms, in the 2.5 ms
          // bucket.
          "reducer_collective_duration_seconds_count{kind=\"allreduce\"} 3",
          "reducer_collective_duration_seconds_bucket{kind=\"allreduce\",le="
          "\"0.001\"} 0",
          "reducer_collective_duration_seconds_bucket{kind=\"allreduce\",le="
          "\"0.0025\"} 3",
      });
}

TEST(PrometheusMetricsTest, CountsStallsAbortsAndRefusals) {
  PrometheusMetrics metrics("1.2.3");
  metrics.CollectiveStalled(CollectiveKind::kBroadcast);
  metrics.EpochAborted(EpochEndReason::kSessionCancelled);
  metrics.EpochAborted(EpochEndReason::kSessionCancelled);
  metrics.QuorumRanksLeftOut(2);
  metrics.QuorumRanksLeftOut(1);
  metrics.RelayCallEnded(4, 3000);
  metrics.RelayCallEnded(1, 0);
  metrics.RelayCallEnded(2, 500);
  metrics.RequestRefused(absl::StatusCode::kResourceExhausted,
                         RefusedLimit::kMaxJobs);
  metrics.RequestRefused(absl::StatusCode::kFailedPrecondition,
                         RefusedLimit::kNone);
  const std::string text = Scrape(metrics, {});
  ExpectSamples(
      text, {
                "reducer_collective_stalls_total{kind=\"broadcast\"} 1",
                "reducer_epochs_aborted_total{reason=\"session_cancelled\"} 2",
                "reducer_epochs_aborted_total{reason=\"session_ended\"} 0",
                "reducer_quorum_ranks_left_out_total 3",
                "reducer_relay_upstream_calls_total{combined=\"true\"} 2",
                "reducer_relay_upstream_calls_total{combined=\"false\"} 1",
                "reducer_relay_bytes_saved_total 3500",
                "reducer_requests_refused_total{code=\"ResourceExhausted\","
                "limit=\"max_jobs\"} 1",
                "reducer_requests_refused_total{code=\"FailedPrecondition\","
                "limit=\"none\"} 1",
                "reducer_requests_refused_total{code=\"ResourceExhausted\","
                "limit=\"memory_budget_bytes\"} 0",
            });
}

TEST(PrometheusMetricsTest, GaugesComeFromTheStateAtEachScrape) {
  PrometheusMetrics metrics("1.2.3");
  ServerState state;
  state.jobs = 2;
  state.ranks_connected = 5;
  state.collectives_pending = 3;
  state.collectives_stalled = 1;
  state.memory_reserved_bytes = 4096;
  state.memory_budget_bytes = 1 << 20;
  std::string text = Scrape(metrics, state);
  ExpectSamples(text, {
                          "reducer_jobs 2",
                          "reducer_ranks_connected 5",
                          "reducer_collectives_pending 3",
                          "reducer_collectives_stalled 1",
                          "reducer_memory_budget_reserved_bytes 4096",
                          "reducer_memory_budget_bytes 1048576",
                      });
  EXPECT_THAT(text, HasSubstr("reducer_build_info{grpc_version=\""));
  EXPECT_THAT(text, HasSubstr("version=\"1.2.3\"} 1\n"));
  state.jobs = 0;
  text = Scrape(metrics, state);
  EXPECT_THAT(text, HasSubstr("reducer_jobs 0\n"));
  EXPECT_THAT(text, Not(HasSubstr("reducer_jobs 2\n")));
}

TEST(PrometheusMetricsTest, NullSinkAcceptsEveryEvent) {
  MetricsSink none;
  none.CollectiveEnded(CollectiveKind::kBarrier, absl::StatusCode::kOk,
                       absl::Seconds(1), 0, 0);
  none.CollectiveStalled(CollectiveKind::kBarrier);
  none.EpochAborted(EpochEndReason::kSessionEnded);
  none.RequestRefused(absl::StatusCode::kResourceExhausted,
                      RefusedLimit::kMaxJobs);
}

}  // namespace
}  // namespace reducer
