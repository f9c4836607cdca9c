// Fault tests: server limits. Each limit, when exceeded, answers
// RESOURCE_EXHAUSTED naming the limit (its flag and value), before reducerd
// commits the memory; the job goes on once back within the limit; and a job
// over a limit does not disturb another job running at the same time.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/reducer/v1/admin.grpc.pb.h"
#include "proto/reducer/v1/reducer.pb.h"
#include "tests/fault_test_base.h"
#include "tests/raw_client.h"
#include "tests/status_matchers.h"

namespace reducer {
namespace testing {
namespace {

using ::testing::AnyOf;
using ::testing::HasSubstr;

// A limit must be reported at once, not after some wait.
constexpr absl::Duration kFast = absl::Seconds(3);

// True once reducerd's Admin.Status shows a collective of `job` that waits
// for `rank` alone (every other rank of its group has arrived); false after
// `limit`.
bool WaitUntilOnlyRankMissing(const std::string& address,
                              const std::string& job, int rank,
                              absl::Duration limit) {
  std::unique_ptr<v1::Admin::Stub> admin = v1::Admin::NewStub(
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  const absl::Time deadline = absl::Now() + limit;
  while (absl::Now() < deadline) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
    v1::StatusResponse status;
    if (admin->Status(&context, v1::StatusRequest(), &status).ok()) {
      for (const v1::JobStatus& j : status.jobs()) {
        if (j.name() != job) continue;
        for (const v1::PendingCollective& c : j.pending()) {
          if (c.missing_ranks_size() == 1 && c.missing_ranks(0) == rank) {
            return true;
          }
        }
      }
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  return false;
}

class LimitsTest : public FaultTest {};

TEST_F(LimitsTest, MaxTensorBytes) {
  ASSERT_TRUE(StartServer({"--max_tensor_bytes=4096"}));
  // 1025 float32 = 4100 bytes: over. 1024 = 4096: at the limit, fine. An
  // AllReduceMany whose tensors together exceed it (two of 2048 bytes plus
  // padding) is over too.
  std::vector<std::unique_ptr<ChildProcess>> workers = StartJob(
      Job(), 2,
      {"allreduce:shape=1025,timeout_ms=5000;allreduce:shape=1024,timeout_ms=5000;"
       "many:count=3,shape=512,timeout_ms=5000"});
  std::vector<ProcessResult> results = WaitWorkers(workers);
  ASSERT_EQ(results.size(), 2u);
  for (const ProcessResult& r : results) {
    // The message names the flag, as for every other limit.
    ExpectStep(r, "1", absl::StatusCode::kResourceExhausted,
               {"payload of 4100 bytes exceeds the limit of 4096 bytes",
                "--max_tensor_bytes"},
               kFast);
    ExpectStep(r, "2", absl::StatusCode::kOk);
    ExpectStep(r, "3", absl::StatusCode::kResourceExhausted,
               {"payload of 6144 bytes exceeds the limit of 4096 bytes"}, kFast);
  }
}

TEST_F(LimitsTest, MaxJobs) {
  ASSERT_TRUE(StartServer({"--max_jobs=2"}));
  // Jobs a and b hold their sessions until told to go; job c is refused
  // meanwhile; job d connects once a has gone.
  std::vector<std::unique_ptr<ChildProcess>> held;
  for (const char* name : {"a", "b"}) {
    WorkerSpec spec;
    spec.job = Job(name);
    spec.steps = absl::StrCat("wait_file:path=release-", name,
                              ";allreduce:timeout_ms=5000");
    held.push_back(StartWorker(spec));
    ASSERT_TRUE(WaitForOutput(*held.back(), "RESULT 0 connect code=OK"));
  }
  WorkerSpec refused;
  refused.job = Job("c");
  refused.steps = "allreduce:timeout_ms=5000";
  std::vector<std::unique_ptr<ChildProcess>> c;
  c.push_back(StartWorker(refused));
  std::vector<ProcessResult> c_results = WaitWorkers(c);
  ASSERT_EQ(c_results.size(), 1u);
  ExpectStep(c_results[0], "0", absl::StatusCode::kResourceExhausted,
             {absl::StrCat("cannot create job ", Job("c"),
                           ": reducerd already serves 2 jobs (--max_jobs=2)")},
             kFast);

  Touch("release-a");
  ASSERT_TRUE(held[0]->Wait(absl::Seconds(20)).Succeeded());
  // Job a is freed once reducerd has seen its session close; until then a
  // third job is still one too many. Try a few times.
  ProcessResult d_result;
  for (int attempt = 0; attempt < 10; ++attempt) {
    absl::SleepFor(absl::Milliseconds(200));
    WorkerSpec later;
    later.job = Job("d");
    later.steps = "allreduce:timeout_ms=5000";
    later.name = absl::StrCat(later.job, ".attempt", attempt);
    std::vector<std::unique_ptr<ChildProcess>> d;
    d.push_back(StartWorker(later));
    d_result = WaitWorkers(d)[0];
    if (Step(d_result, "0").code != absl::StatusCode::kResourceExhausted) break;
  }
  ExpectStep(d_result, "0", absl::StatusCode::kOk);
  ExpectStep(d_result, "1", absl::StatusCode::kOk);
  Touch("release-b");
  std::vector<std::unique_ptr<ChildProcess>> rest;
  rest.push_back(std::move(held[1]));
  std::vector<ProcessResult> rest_results = WaitWorkers(rest);
  ExpectStep(rest_results[0], "2", absl::StatusCode::kOk);
}

TEST_F(LimitsTest, MaxPendingCollectivesPerJob) {
  ASSERT_TRUE(StartServer({"--max_pending_collectives_per_job=3"}));
  // Rank 0 opens three named collectives that wait for rank 1, then a
  // fourth: refused. Rank 1 then joins the three, and a fourth fits again.
  std::vector<std::unique_ptr<ChildProcess>> workers = StartJob(
      Job(), 2,
      {"async_allreduce:name=p0,timeout_ms=20000;"
       "async_allreduce:name=p1,timeout_ms=20000;"
       "async_allreduce:name=p2,timeout_ms=20000;sleep:ms=500;"
       "allreduce:name=p3,timeout_ms=5000;touch:path=go;join;"
       "allreduce:name=p4,timeout_ms=20000",
       "wait_file:path=go;async_allreduce:name=p0,timeout_ms=20000;"
       "async_allreduce:name=p1,timeout_ms=20000;"
       "async_allreduce:name=p2,timeout_ms=20000;join;sleep:ms=0;"
       "sleep:ms=0;allreduce:name=p4,timeout_ms=20000"});
  std::vector<ProcessResult> results = WaitWorkers(workers);
  ASSERT_EQ(results.size(), 2u);
  ExpectStep(results[0], "5", absl::StatusCode::kResourceExhausted,
             {"already has 3 collectives waiting for ranks "
              "(--max_pending_collectives_per_job=3)"},
             kFast);
  // Rank 0's three waiting collectives are steps 1-3, rank 1's 2-4.
  for (const char* i : {"1", "2", "3"}) ExpectStep(results[0], i, absl::StatusCode::kOk);
  for (const char* i : {"2", "3", "4"}) ExpectStep(results[1], i, absl::StatusCode::kOk);
  ExpectStep(results[0], "8", absl::StatusCode::kOk);
  ExpectStep(results[1], "8", absl::StatusCode::kOk);
}

TEST_F(LimitsTest, MemoryBudget) {
  // A 1 MiB float32 all-reduce reserves 2 x min(1 MiB, window x chunk) per
  // rank, far over a 100 kB budget; a 4 KiB one fits.
  ASSERT_TRUE(StartServer({"--memory_budget_bytes=100000"}));
  const int64_t rss_before = ServerRssKib();
  std::vector<std::unique_ptr<ChildProcess>> workers = StartJob(
      Job(), 3,
      {"allreduce:shape=262144,timeout_ms=5000;allreduce:shape=1024,timeout_ms=5000;"
       "allreduce_inplace:shape=4194304,timeout_ms=20000;"
       "barrier:timeout_ms=20000"});
  std::vector<ProcessResult> results = WaitWorkers(workers);
  ASSERT_EQ(results.size(), 3u);
  for (const ProcessResult& r : results) {
    ExpectStep(r, "1", absl::StatusCode::kResourceExhausted,
               {"memory budget of 100000 bytes (--memory_budget_bytes) is "
                "exhausted"},
               kFast);
    ExpectStep(r, "2", absl::StatusCode::kOk);
    // 16 MiB per rank, refused before reducerd takes it in (and the
    // in-place buffer keeps its bytes).
    ExpectStep(r, "3", absl::StatusCode::kResourceExhausted,
               {"--memory_budget_bytes"}, absl::Seconds(10));
  }
  const int64_t rss_after = ServerRssKib();
  std::printf("reducerd VmRSS: %lld KiB before, %lld KiB after 3 x 16 MiB "
              "refused\n",
              static_cast<long long>(rss_before),
              static_cast<long long>(rss_after));
  if (RssChecksApply()) {
    EXPECT_LT(rss_after - rss_before, 24 * 1024)
        << "reducerd took in refused payload (3 x 16 MiB offered)";
  }
}

TEST_F(LimitsTest, MaxConcurrentCalls) {
  ASSERT_TRUE(StartServer({"--max_concurrent_calls=3"}));
  // Rank 0 holds three streams open (named collectives rank 1 does not
  // join; 2 s timeout); a fourth call is refused at once. Once those streams
  // have ended, both ranks run a collective. The payloads are over one
  // message (1.2 MB) so that each collective has a stream of its own; small
  // ones share the client's one Collectives stream.
  std::vector<std::unique_ptr<ChildProcess>> workers = StartJob(
      Job(), 2,
      {"async_allreduce:name=c0,shape=300000,timeout_ms=2000;"
       "async_allreduce:name=c1,shape=300000,timeout_ms=2000;"
       "async_allreduce:name=c2,shape=300000,timeout_ms=2000;sleep:ms=500;"
       "allreduce:name=c3,shape=300000,timeout_ms=5000;join;touch:path=go;"
       "allreduce:name=after,timeout_ms=20000",
       "wait_file:path=go;allreduce:name=after,timeout_ms=20000"});
  std::vector<ProcessResult> results = WaitWorkers(workers);
  ASSERT_EQ(results.size(), 2u);
  ExpectStep(results[0], "5", absl::StatusCode::kResourceExhausted,
             {"reducerd already serves 3 collective calls "
              "(--max_concurrent_calls=3)"},
             kFast);
  for (const char* i : {"1", "2", "3"}) {
    ExpectStep(results[0], i, absl::StatusCode::kDeadlineExceeded,
               {"rank 1 never arrived"});
  }
  ExpectStep(results[0], "8", absl::StatusCode::kOk);
  ExpectStep(results[1], "2", absl::StatusCode::kOk);
}

// A message over reducerd's receive limit (chunk size plus 1 MiB of
// headroom: 2 MiB by default), sent by a raw client after a valid header.
TEST_F(LimitsTest, MessageOverTheReceiveLimit) {
  ASSERT_TRUE(StartServer());
  const std::string job = Job();
  // Rank 0 a fault_worker, rank 1 the raw client.
  std::vector<std::unique_ptr<ChildProcess>> workers;
  workers.push_back(StartWorker(
      WorkerSpec{job, 0, 2, "allreduce:shape=1048576,timeout_ms=8000"}));
  absl::StatusOr<std::unique_ptr<RawSession>> raw =
      RawSession::Join(server()->address(), job, 1, 2, absl::Seconds(30));
  ASSERT_TRUE(raw.ok()) << raw.status();
  // Rank 0's contribution must be in first: a stream cut before every rank
  // arrived only detaches its rank (a retry may attach again), so rank 0
  // arriving after the cut would wait for its timeout instead.
  ASSERT_TRUE(WaitUntilOnlyRankMissing(server()->address(), job, 1,
                                       absl::Seconds(20)));

  v1::CollectiveRequest header = (*raw)->AllReduceRequest({1048576});  // 4 MiB
  header.mutable_header()->set_timeout_ms(8000);
  v1::CollectiveRequest huge;
  huge.set_offset(0);
  huge.set_data(std::string(size_t{4} << 20, '\0'));  // all of it at once
  const RawCallResult r = (*raw)->Call({header, huge}, absl::Seconds(20));
  EXPECT_THAT(r.status, StatusIs(absl::StatusCode::kResourceExhausted,
                                 HasSubstr("larger than max")));
  EXPECT_THAT(r.status.message(), HasSubstr("2097152")) << r.status;
  EXPECT_LE(r.elapsed, kFast);

  std::vector<ProcessResult> results = WaitWorkers(workers);
  ASSERT_EQ(results.size(), 1u);
  // The collective the oversized message belonged to fails for rank 0 too,
  // at once rather than at its timeout.
  const StepResult s = Step(results[0], "1");
  EXPECT_NE(s.code, absl::StatusCode::kOk);
  EXPECT_LE(s.elapsed, kFast) << s.message;
  EXPECT_THAT(s.message, HasSubstr("rank 1")) << s.message;
}

// Job "over" keeps exceeding per-job limits (tensor bytes, pending
// collectives) while job "fine" runs a few hundred exact collectives at the
// same time; job "fine" must not notice.
TEST_F(LimitsTest, JobOverALimitDoesNotDisturbAnotherJob) {
  ASSERT_TRUE(StartServer(
      {"--max_tensor_bytes=1048576", "--max_pending_collectives_per_job=2"}));
  std::string over_steps;
  for (int i = 0; i < 4; ++i) {
    absl::StrAppend(&over_steps, i == 0 ? "" : ";",
                    "allreduce:shape=300000,timeout_ms=5000;",
                    "async_allreduce:name=a", i, ",timeout_ms=1500;",
                    "async_allreduce:name=b", i, ",timeout_ms=1500;sleep:ms=100;",
                    "allreduce:name=c", i, ",timeout_ms=1500;join");
  }
  std::vector<std::unique_ptr<ChildProcess>> over =
      StartJob(Job("over"), 2, {over_steps, "sleep:ms=8000"});
  std::vector<std::unique_ptr<ChildProcess>> fine =
      StartJob(Job("fine"), 3, {"soak:iters=200,seed=11,timeout_ms=20000"});
  std::vector<ProcessResult> fine_results = WaitWorkers(fine);
  for (const ProcessResult& r : fine_results) {
    ExpectStep(r, "1", absl::StatusCode::kOk);
  }
  std::vector<ProcessResult> over_results = WaitWorkers(over);
  ASSERT_EQ(over_results.size(), 2u);
  // The limits did bite in job "over".
  ExpectStep(over_results[0], "1", absl::StatusCode::kResourceExhausted,
             {"exceeds the limit of 1048576 bytes"}, kFast);
  ExpectStep(over_results[0], "5", absl::StatusCode::kResourceExhausted,
             {"--max_pending_collectives_per_job=2"}, kFast);
}

// Fair shares: a job's collectives hold at most --max_job_memory_fraction of
// the memory budget. Two ranks of job "hog" each reserve 1.6 MB for a
// collective its third rank never joins: the second reservation would take
// the job past its half of the 4 MB budget and is refused at once, naming
// the flag, so job "other" (1 MB) still fits. With no share of its own
// (fraction 1), hog would hold 3.2 MB until its timeout and other would be
// refused.
TEST_F(LimitsTest, MaxJobMemoryFractionKeepsRoomForOtherJobs) {
  ASSERT_TRUE(StartServer(
      {"--memory_budget_bytes=4000000", "--max_job_memory_fraction=0.5"}));
  const std::string big = "allreduce:name=big,shape=200000,timeout_ms=6000";
  std::vector<std::unique_ptr<ChildProcess>> hog =
      StartJob(Job("hog"), 3, {big, big, "sleep:ms=7000"});
  ASSERT_TRUE(WaitForOutput(*hog[0], "BEGIN 1 "));
  ASSERT_TRUE(WaitForOutput(*hog[1], "BEGIN 1 "));
  absl::SleepFor(absl::Milliseconds(300));
  std::vector<std::unique_ptr<ChildProcess>> other = StartJob(
      Job("other"), 2, {"allreduce:shape=62500,timeout_ms=5000"});
  for (const ProcessResult& r : WaitWorkers(other)) {
    ExpectStep(r, "1", absl::StatusCode::kOk);
  }
  std::vector<ProcessResult> hog_results = WaitWorkers(hog);
  ASSERT_EQ(hog_results.size(), 3u);
  for (int r = 0; r < 2; ++r) {
    ExpectStep(hog_results[r], "1", absl::StatusCode::kResourceExhausted,
               {absl::StrCat("job ", Job("hog"), "'s share of the memory "
                             "budget, 2000000 bytes "
                             "(--max_job_memory_fraction=0.5 of "
                             "--memory_budget_bytes), is exhausted")},
               kFast);
  }
}

}  // namespace
}  // namespace testing
}  // namespace reducer
