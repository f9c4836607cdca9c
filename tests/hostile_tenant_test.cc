// Hostile tenants of a shared reducerd: one user, speaking the wire API
// directly (raw gRPC on the generated stubs, real reducerd processes),
// tries to make reducerd hold more than its share or to break another's
// session, in each of the ways reducerd's per-tenant bounds exist for:
//
//   - a Collectives stream whose client never reads its answers;
//   - a flood of calls with a malformed dtype in a wide job;
//   - one tenant Joining jobs until reducerd is full;
//   - one tenant's jobs buffering sends nobody receives;
//   - one tenant's silent streams from an address another tenant shares;
//   - Joins that name another rank's session, and a client's exact retry.
//
// Each test expects what a tenant that behaves is promised: its calls are
// served, nothing is refused to it, and reducerd's resident memory stays
// within --memory_budget_bytes plus what the budget does not count
// (kUncountedBytes below; docs/deployment.md derives it for deployments).
// The tenant cases run reducerd with a tokens file of two tenants, A and B
// (a tenant is a line of the file: `A` covers `A` and `A/anything`).
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/reducer/v1/call_status.h"
#include "proto/reducer/v1/reducer.grpc.pb.h"
#include "proto/reducer/v1/reducer.pb.h"
#include "tests/fault_test_base.h"
#include "tests/raw_client.h"
#include "tests/status_matchers.h"
#include "tests/token_hash.h"

namespace reducer {
namespace testing {
namespace {

using ::testing::HasSubstr;

constexpr char kTokenA[] = "token-of-tenant-a-5c1d0e";
constexpr char kTokenB[] = "token-of-tenant-b-93ab7f";

constexpr int64_t kMiB = int64_t{1} << 20;

// --memory_budget_bytes of the tests that fill it.
constexpr int64_t kBudgetBytes = 256 * kMiB;
// What reducerd may hold besides its budget: its binary, threads and heap
// at rest, gRPC's per-connection and per-stream buffers, the kept results
// (--kept_results_bytes, 64 MiB by default). docs/deployment.md measures
// each part; this is its sum at the tests' scale, rounded up.
constexpr int64_t kUncountedBytes = 150 * kMiB;

// A Join stream left open once its first event came, so that the session
// it opened lives until the object is destroyed (which cancels it).
class OpenJoin {
 public:
  // Sends `request` on `stub`, with `token` unless empty, and waits up to
  // `timeout` for the first event.
  OpenJoin(v1::Reducer::Stub* stub, const v1::JoinRequest& request,
           const std::string& token, absl::Duration timeout) {
    if (!token.empty()) {
      context_.AddMetadata("authorization", absl::StrCat("Bearer ", token));
    }
    reader_ = stub->Join(&context_, request);
    absl::Notification first_event;
    v1::JoinEvent event;
    bool got_event = false;
    std::thread read([&] {
      // JoinWaiting events come before JobReady while the job gathers.
      do {
        got_event = reader_->Read(&event);
      } while (got_event && event.has_waiting());
      first_event.Notify();
    });
    if (!first_event.WaitForNotificationWithTimeout(timeout)) {
      context_.TryCancel();
    }
    read.join();
    if (got_event && event.has_ready()) {
      epoch_ = event.ready().epoch();
      return;
    }
    if (got_event) {
      status_ = absl::UnknownError(absl::StrCat(
          "the first Join event was not JobReady: ", event.ShortDebugString()));
      return;
    }
    const grpc::Status finished = reader_->Finish();
    finished_ = true;
    status_ = absl::Status(static_cast<absl::StatusCode>(finished.error_code()),
                           finished.error_message());
    if (status_.ok()) status_ = absl::UnknownError("Join stream ended empty");
  }

  ~OpenJoin() {
    if (finished_) return;
    context_.TryCancel();
    reader_->Finish();
  }

  OpenJoin(const OpenJoin&) = delete;
  OpenJoin& operator=(const OpenJoin&) = delete;

  // OK once JobReady came; else the stream's status (CANCELLED when nothing
  // came within the timeout).
  const absl::Status& status() const { return status_; }
  // JobReady's epoch.
  uint64_t epoch() const { return epoch_; }

 private:
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReader<v1::JoinEvent>> reader_;
  absl::Status status_;
  uint64_t epoch_ = 0;
  bool finished_ = false;
};

std::unique_ptr<v1::Reducer::Stub> NewStub(const std::string& address) {
  return v1::Reducer::NewStub(grpc::CreateCustomChannel(
      address, grpc::InsecureChannelCredentials(), RawChannelArguments()));
}

// A float32 [n] SUM all-reduce of zeros on `raw`, number `sequence` of its
// job.
v1::CollectiveRequest ZerosAllReduce(const RawSession& raw, int64_t n,
                                     uint64_t sequence) {
  v1::CollectiveRequest request = raw.AllReduceRequest({n});
  request.mutable_header()->set_sequence(sequence);
  request.set_data(std::string(4 * n, '\0'));
  return request;
}

// Whether `data` is `bytes` zero bytes (a result of ZerosAllReduce).
bool IsZeros(const std::string& data, int64_t bytes) {
  return data == std::string(bytes, '\0');
}

// The status of the one call of a Collectives stream: its last answer's,
// or the stream's when the stream ended otherwise.
absl::Status OnlyCallStatus(const RawCallResult& result) {
  if (result.status.ok() && !result.responses.empty() &&
      result.responses.back().has_status()) {
    return FromCallStatus(result.responses.back().status());
  }
  return result.status;
}

// The lines of `text` that contain `what`.
int LinesWith(const std::string& text, absl::string_view what) {
  int n = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (absl::StrContains(line, what)) ++n;
  }
  return n;
}

class HostileTenantTest : public FaultTest {
 protected:
  absl::Duration TimeLimit() const override { return absl::Seconds(90); }

  // The two tenants' names: lines of the tokens file.
  std::string TenantA() const { return Job("A"); }
  std::string TenantB() const { return Job("B"); }

  // Writes the tokens file of tenants A and B and returns reducerd's flag
  // naming it.
  std::string TokensFlag() {
    const std::string path = absl::StrCat(scratch_dir_, "/tokens");
    std::ofstream(path, std::ios::trunc)
        << "# tenant sha256\n"
        << TenantA() << " " << Sha256Hex(kTokenA) << "\n"
        << TenantB() << " " << Sha256Hex(kTokenB) << "\n";
    return "--job_tokens_file=" + path;
  }

  // Joins ranks 0..world_size-1 of `job` as raw sessions, all at once (each
  // waits for all); fails the test unless every rank joined.
  std::vector<std::unique_ptr<RawSession>> JoinAll(
      const std::string& job, int world_size, const std::string& token = "") {
    std::vector<absl::StatusOr<std::unique_ptr<RawSession>>> joined(world_size);
    std::vector<std::thread> threads;
    for (int r = 0; r < world_size; ++r) {
      threads.emplace_back([&, r] {
        joined[r] = RawSession::Join(server()->address(), job, r, world_size,
                                     absl::Seconds(30), token);
      });
    }
    for (std::thread& t : threads) t.join();
    std::vector<std::unique_ptr<RawSession>> sessions;
    for (auto& j : joined) {
      EXPECT_TRUE(j.ok()) << j.status();
      if (j.ok()) sessions.push_back(*std::move(j));
    }
    return sessions;
  }

  // One all-reduce of zeros [1024] over every session of `sessions` (one
  // job, all its ranks), number `sequence` of the job, each rank on a
  // Collective stream of its own; each rank's status.
  std::vector<absl::Status> AllReduceZeros(
      const std::vector<std::unique_ptr<RawSession>>& sessions,
      uint64_t sequence) {
    std::vector<RawCallResult> results(sessions.size());
    std::vector<std::thread> threads;
    for (size_t r = 0; r < sessions.size(); ++r) {
      threads.emplace_back([&, r] {
        results[r] = sessions[r]->Call(
            {ZerosAllReduce(*sessions[r], 1024, sequence)}, absl::Seconds(15));
      });
    }
    for (std::thread& t : threads) t.join();
    std::vector<absl::Status> statuses;
    for (const RawCallResult& result : results) {
      statuses.push_back(result.status);
      if (result.status.ok()) {
        EXPECT_TRUE(IsZeros(result.data, 4 * 1024))
            << result.data.size() << " bytes, not the zeros of the input";
      }
    }
    return statuses;
  }

  // Starts fault_worker ranks 0..steps.size()-1 of `job`, rank r running
  // steps[r], with `token`, on the gRPC path; named `name`.rank<r> (a job
  // name of a tenant holds a '/').
  std::vector<std::unique_ptr<ChildProcess>> StartRanks(
      const std::string& job, const std::vector<std::string>& steps,
      const std::string& token, const std::string& name) {
    std::vector<std::unique_ptr<ChildProcess>> workers;
    for (size_t r = 0; r < steps.size(); ++r) {
      WorkerSpec spec;
      spec.job = job;
      spec.rank = static_cast<int>(r);
      spec.world_size = static_cast<int>(steps.size());
      spec.steps = steps[r];
      spec.name = absl::StrCat(name, ".rank", r);
      spec.extra_flags = {absl::StrCat("--token=", token),
                          "--shared_memory=off", "--timeout_s=30"};
      std::unique_ptr<ChildProcess> worker = StartWorker(spec);
      if (worker == nullptr) return {};
      workers.push_back(std::move(worker));
    }
    return workers;
  }

  // reducerd's resident memory now, in bytes.
  int64_t ServerRssBytes() { return ServerRssKib() * 1024; }
};

// W = 1, one Collectives stream, 1500 all-gathers of 1 MiB whose answers
// are never read. reducerd must not queue the answers without bound: the
// stream is slowed by flow control (reducerd stops reading it) and may be
// refused naming its unread bytes; reducerd's RSS stays within its budget
// plus kUncountedBytes; and another job is served afterwards.
TEST_F(HostileTenantTest, AnswersNobodyReadsStayWithinTheBudget) {
  ASSERT_TRUE(
      StartServer({absl::StrCat("--memory_budget_bytes=", kBudgetBytes)}));
  const int64_t rss_limit = kBudgetBytes + kUncountedBytes;
  absl::StatusOr<std::unique_ptr<RawSession>> raw = RawSession::Join(
      server()->address(), Job("unread"), 0, 1, absl::Seconds(30));
  ASSERT_TRUE(raw.ok()) << raw.status();

  constexpr int kCalls = 1500;
  constexpr int64_t kElements = kMiB / 4;  // float32: 1 MiB a call
  std::unique_ptr<v1::Reducer::Stub> stub = NewStub(server()->address());
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(60)));
  std::unique_ptr<
      grpc::ClientReaderWriter<v1::CollectiveRequest, v1::CollectiveResponse>>
      stream = stub->Collectives(&context);
  v1::CollectiveRequest request;
  *request.mutable_header() = (*raw)->Header(v1::COLLECTIVE_KIND_ALL_GATHER);
  v1::TensorSpec* spec = request.mutable_header()->add_tensors();
  spec->set_dtype(v1::DATA_TYPE_FLOAT32);
  spec->add_shape(kElements);
  request.set_data(std::string(4 * kElements, '\0'));

  std::atomic<int> written{0};
  std::atomic<bool> writes_over{false};
  std::thread writer([&] {
    for (int i = 0; i < kCalls; ++i) {
      request.set_call_id(i + 1);
      request.mutable_header()->set_sequence(i);
      request.mutable_header()->set_attempt_id(absl::StrCat("unread-", i));
      if (!stream->Write(request)) break;
      written.fetch_add(1);
    }
    writes_over.store(true);
  });

  // Watches reducerd's RSS while the client writes and never reads. Stops
  // when the writes are over (all written, or the stream ended), when they
  // have been held back by flow control for 5 s, or as soon as reducerd is
  // over the limit (the test has failed then; no need to grow it further).
  int64_t peak_rss = ServerRssBytes();
  int last_written = 0;
  absl::Time last_progress = absl::Now();
  const absl::Time give_up = absl::Now() + absl::Seconds(40);
  while (!writes_over.load() && peak_rss <= rss_limit &&
         absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(20));
    peak_rss = std::max(peak_rss, ServerRssBytes());
    const int now_written = written.load();
    if (now_written != last_written) {
      last_written = now_written;
      last_progress = absl::Now();
    } else if (absl::Now() - last_progress > absl::Seconds(5)) {
      break;  // held back by flow control
    }
  }
  const bool ended_by_server = writes_over.load() && written.load() < kCalls;
  if (!writes_over.load()) context.TryCancel();
  writer.join();
  peak_rss = std::max(peak_rss, ServerRssBytes());

  EXPECT_LE(peak_rss, rss_limit)
      << "reducerd reached " << peak_rss / kMiB << " MiB resident holding "
      << written.load() << " unread answers of 1 MiB; its budget is "
      << kBudgetBytes / kMiB << " MiB (+ " << kUncountedBytes / kMiB
      << " MiB it does not count)";
  // A client that never reads cannot have reducerd take 1500 MiB of calls
  // whose answers have nowhere to go.
  EXPECT_LT(written.load(), kCalls)
      << "reducerd read every call of a stream that never read an answer";

  // Now read what is left, and the stream's end.
  v1::CollectiveResponse response;
  while (stream->Read(&response)) {
  }
  const grpc::Status finished = stream->Finish();
  // A stream reducerd ended must name why; one it held back by flow
  // control was cancelled by the test (CANCELLED), which is as good.
  if (ended_by_server) {
    EXPECT_THAT(
        absl::Status(static_cast<absl::StatusCode>(finished.error_code()),
                     finished.error_message()),
        StatusIs(absl::StatusCode::kResourceExhausted,
                 HasSubstr("answers its client has not read")));
  }

  // Another job is served.
  absl::StatusOr<std::unique_ptr<RawSession>> healthy = RawSession::Join(
      server()->address(), Job("healthy"), 0, 1, absl::Seconds(30));
  ASSERT_TRUE(healthy.ok()) << healthy.status();
  const RawCallResult after = (*healthy)->Call(
      {ZerosAllReduce(**healthy, kElements, 0)}, absl::Seconds(15));
  EXPECT_THAT(after.status, IsOk());
  EXPECT_TRUE(IsZeros(after.data, 4 * kElements))
      << after.data.size() << " bytes, not the zeros of the input";
}

// A W = 64 job whose rank 0 sends 20,000 calls with a malformed dtype (the
// other ranks never call): each is refused, and neither reducerd's memory
// nor its log grows with them. The failed collectives keep no entry beyond
// the job's bound on pending ones, and their warnings are rate-limited (one
// line per second per kind, with a count of those suppressed).
TEST_F(HostileTenantTest, MalformedCallsFloodNeitherMemoryNorTheLog) {
  ASSERT_TRUE(StartServer());
  constexpr int kWorld = 64;
  constexpr int kCalls = 20000;
  const std::string job = Job("wide");
  std::vector<std::unique_ptr<RawSession>> sessions = JoinAll(job, kWorld);
  ASSERT_EQ(sessions.size(), static_cast<size_t>(kWorld));
  absl::SleepFor(absl::Milliseconds(200));
  const int64_t rss_before = ServerRssBytes();
  const size_t log_before = server()->Stderr().size();

  std::unique_ptr<v1::Reducer::Stub> stub = NewStub(server()->address());
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(60)));
  std::unique_ptr<
      grpc::ClientReaderWriter<v1::CollectiveRequest, v1::CollectiveResponse>>
      stream = stub->Collectives(&context);
  // The answers are read as they come: this case is about the calls. Each
  // call is refused: INVALID_ARGUMENT naming the dtype, or (once the job's
  // bound on pending and failed collectives is reached) RESOURCE_EXHAUSTED.
  int answered = 0;
  int refused_dtype = 0;
  int unexpected = 0;
  std::string first_unexpected;
  std::thread reader([&] {
    v1::CollectiveResponse response;
    while (stream->Read(&response)) {
      if (!response.has_status()) continue;
      ++answered;
      const absl::Status status = FromCallStatus(response.status());
      if (status.code() == absl::StatusCode::kInvalidArgument &&
          absl::StrContains(status.message(), "dtype")) {
        ++refused_dtype;
      } else if (status.code() != absl::StatusCode::kResourceExhausted &&
                 unexpected++ == 0) {
        first_unexpected = status.ToString();
      }
    }
  });
  v1::CollectiveRequest request = sessions[0]->AllReduceRequest({4});
  request.mutable_header()->mutable_tensors(0)->set_dtype(
      static_cast<v1::DataType>(99));
  request.set_data(std::string(16, '\0'));
  int written = 0;
  // At least kCalls, and for over a second, so that the gate must have let
  // a second line of its kind through, counting those it held back.
  const absl::Time flood_until = absl::Now() + absl::Milliseconds(1500);
  for (int i = 0; i < kCalls || absl::Now() < flood_until; ++i) {
    request.set_call_id(i + 1);
    request.mutable_header()->set_sequence(i);
    request.mutable_header()->set_attempt_id(absl::StrCat("bad-dtype-", i));
    if (!stream->Write(request)) break;
    ++written;
  }
  stream->WritesDone();
  reader.join();
  const grpc::Status finished = stream->Finish();
  EXPECT_TRUE(finished.ok()) << finished.error_message();
  EXPECT_GE(written, kCalls);
  EXPECT_EQ(answered, written);
  EXPECT_GE(refused_dtype, 1) << "no call was refused naming its dtype";
  EXPECT_EQ(unexpected, 0) << unexpected
                           << " calls ended otherwise, the first: "
                           << first_unexpected;

  absl::SleepFor(absl::Milliseconds(200));
  const int64_t rss_after = ServerRssBytes();
  if (RssChecksApply()) {
    EXPECT_LE(rss_after - rss_before, 64 * kMiB)
        << "reducerd grew from " << rss_before / kMiB << " MiB to "
        << rss_after / kMiB << " MiB over " << written << " refused calls";
  }
  // At one line per second per kind, a flood of well under a minute writes
  // a few dozen lines, one of which counts those suppressed.
  const std::string log = server()->Stderr().substr(log_before);
  const int warnings = LinesWith(log, " WARN ");
  EXPECT_LE(warnings, 200) << "reducerd wrote " << warnings
                           << " warning lines for " << written
                           << " malformed calls";
  EXPECT_GE(LinesWith(log, "suppressed"), 1)
      << "no line counts the warnings suppressed";
}

// Tenant A Joins one-rank jobs A/j0, A/j1, ... until refused: the refusal
// names --max_jobs_per_tenant and comes before reducerd is full
// (--max_jobs, 1024), and tenant B's Join is still accepted.
TEST_F(HostileTenantTest, OneTenantsJobsLeaveRoomForAnother) {
  ASSERT_TRUE(StartServer({TokensFlag()}));
  constexpr int kMaxJobs = 1024;  // --max_jobs's default
  // Streams spread over channels: many streams of one connection are not
  // what this case is about.
  std::vector<std::unique_ptr<v1::Reducer::Stub>> stubs;
  for (int c = 0; c < 8; ++c) stubs.push_back(NewStub(server()->address()));
  std::vector<std::unique_ptr<OpenJoin>> held;
  absl::Status refusal;
  for (int i = 0; i <= kMaxJobs; ++i) {
    auto join = std::make_unique<OpenJoin>(
        stubs[i % stubs.size()].get(),
        JoinRequestFor(absl::StrCat(TenantA(), "/j", i), 0, 1,
                       absl::StrCat("session-a-", i)),
        kTokenA, absl::Seconds(10));
    if (!join->status().ok()) {
      refusal = join->status();
      break;
    }
    held.push_back(std::move(join));
  }
  EXPECT_LT(held.size(), static_cast<size_t>(kMaxJobs))
      << "tenant A alone filled reducerd";
  EXPECT_THAT(refusal, StatusIs(absl::StatusCode::kResourceExhausted,
                                HasSubstr("--max_jobs_per_tenant")));
  EXPECT_THAT(refusal.message(), HasSubstr(TenantA()));

  OpenJoin other(
      stubs[0].get(),
      JoinRequestFor(absl::StrCat(TenantB(), "/j0"), 0, 1, "session-b-0"),
      kTokenB, absl::Seconds(10));
  EXPECT_THAT(other.status(), IsOk());
}

// Tenant A's two jobs A/x and A/y each Send almost a job's share (half the
// budget) to a rank that never receives: the tenant's share is half the
// budget, so A/y's send is refused naming --max_tenant_memory_fraction,
// and tenant B's 1 MiB all-reduce is served.
TEST_F(HostileTenantTest, OneTenantsBufferedSendsLeaveAnotherItsShare) {
  ASSERT_TRUE(StartServer(
      {TokensFlag(), absl::StrCat("--memory_budget_bytes=", kBudgetBytes)}));
  // Each send: a job's share (0.5 of the budget) less 256 KiB; two of them
  // leave less than 1 MiB of the budget.
  const int64_t send_bytes = kBudgetBytes / 2 - 256 * 1024;
  const std::string send_step =
      absl::StrCat("send:to=1,shape=", send_bytes / 4, ",timeout_ms=30000");
  const std::string wait_step = "wait_file:path=done,timeout_ms=60000";
  std::vector<std::unique_ptr<ChildProcess>> x = StartRanks(
      TenantA() + "/x", {absl::StrCat(send_step, ";", wait_step), wait_step},
      kTokenA, "x");
  ASSERT_EQ(x.size(), 2u);
  ASSERT_TRUE(WaitForOutput(*x[0], "RESULT 1 send"));
  std::vector<std::unique_ptr<ChildProcess>> y = StartRanks(
      TenantA() + "/y", {absl::StrCat(send_step, ";", wait_step), wait_step},
      kTokenA, "y");
  ASSERT_EQ(y.size(), 2u);
  ASSERT_TRUE(WaitForOutput(*y[0], "RESULT 1 send"));

  std::vector<std::unique_ptr<ChildProcess>> b = StartRanks(
      TenantB(), {"allreduce:shape=262144,timeout_ms=20000"}, kTokenB, "b");
  std::vector<ProcessResult> b_done = WaitWorkers(b, absl::Seconds(40));
  Touch("done");
  std::vector<ProcessResult> x_done = WaitWorkers(x, absl::Seconds(40));
  std::vector<ProcessResult> y_done = WaitWorkers(y, absl::Seconds(40));
  ASSERT_EQ(b_done.size(), 1u);
  ASSERT_EQ(x_done.size(), 2u);
  ASSERT_EQ(y_done.size(), 2u);
  ExpectStep(b_done[0], "1", absl::StatusCode::kOk);
  ExpectStep(x_done[0], "1", absl::StatusCode::kOk, {},
             absl::InfiniteDuration(),
             /*require_check=*/false);
  ExpectStep(y_done[0], "1", absl::StatusCode::kResourceExhausted,
             {TenantA(), "--max_tenant_memory_fraction"});
}

// Tenant A (its token) opens 1100 Collectives streams from one address and
// sends nothing on them; tenant B's streams from the same address (a
// sidecar, a NAT, a unix socket) are served, and so are its all-reduces.
TEST_F(HostileTenantTest, OneTenantsSilentStreamsLeaveAnotherServed) {
  ASSERT_TRUE(StartServer({TokensFlag()}));
  constexpr int kSilent = 1100;
  struct Silent {
    grpc::ClientContext context;
    std::unique_ptr<
        grpc::ClientReaderWriter<v1::CollectiveRequest, v1::CollectiveResponse>>
        stream;
  };
  std::vector<std::unique_ptr<v1::Reducer::Stub>> stubs;
  for (int c = 0; c < 11; ++c) stubs.push_back(NewStub(server()->address()));
  std::vector<std::unique_ptr<Silent>> silent;
  for (int i = 0; i < kSilent; ++i) {
    auto s = std::make_unique<Silent>();
    s->context.AddMetadata("authorization", absl::StrCat("Bearer ", kTokenA));
    s->context.set_deadline(
        absl::ToChronoTime(absl::Now() + absl::Seconds(60)));
    s->stream = stubs[i % stubs.size()]->Collectives(&s->context);
    silent.push_back(std::move(s));
  }
  absl::SleepFor(absl::Milliseconds(500));

  absl::StatusOr<std::unique_ptr<RawSession>> b = RawSession::Join(
      server()->address(), TenantB(), 0, 1, absl::Seconds(30), kTokenB);
  ASSERT_TRUE(b.ok()) << b.status();
  v1::CollectiveRequest many = ZerosAllReduce(**b, 1024, 0);
  many.set_call_id(1);
  const RawCallResult on_many = (*b)->Call({many}, absl::Seconds(15),
                                           /*half_close=*/true,
                                           /*many_calls=*/true);
  EXPECT_THAT(OnlyCallStatus(on_many), IsOk());
  EXPECT_TRUE(IsZeros(on_many.data, 4 * 1024))
      << on_many.data.size() << " bytes, not the zeros of the input";
  const RawCallResult on_one =
      (*b)->Call({ZerosAllReduce(**b, 1024, 1)}, absl::Seconds(15));
  EXPECT_THAT(on_one.status, IsOk());
  EXPECT_TRUE(IsZeros(on_one.data, 4 * 1024))
      << on_one.data.size() << " bytes, not the zeros of the input";

  for (std::unique_ptr<Silent>& s : silent) s->context.TryCancel();
  for (std::unique_ptr<Silent>& s : silent) s->stream->Finish();
}

// A running W = 2 job. A Join naming rank 0's session id with world size 3
// is refused (the world size differs) and leaves rank 0's session alone:
// the job's next all-reduce completes. On another such job, an exact retry
// of rank 0's own Join is answered as the first was (JobReady of the same
// epoch), and the job goes on working.
TEST_F(HostileTenantTest, RefusedAndRetriedJoinsLeaveTheSessionAlone) {
  ASSERT_TRUE(StartServer());
  std::unique_ptr<v1::Reducer::Stub> stub = NewStub(server()->address());

  const std::string named = Job("named");
  std::vector<std::unique_ptr<RawSession>> ranks = JoinAll(named, 2);
  ASSERT_EQ(ranks.size(), 2u);
  for (const absl::Status& s : AllReduceZeros(ranks, 0)) EXPECT_THAT(s, IsOk());
  {
    OpenJoin wrong(stub.get(),
                   JoinRequestFor(named, 0, 3, ranks[0]->session_id()), "",
                   absl::Seconds(10));
    EXPECT_THAT(wrong.status(), StatusIs(absl::StatusCode::kFailedPrecondition,
                                         HasSubstr("world size")));
  }
  for (const absl::Status& s : AllReduceZeros(ranks, 1)) {
    EXPECT_THAT(s, IsOk()) << "after a refused Join naming rank 0's session";
  }

  const std::string retried = Job("retried");
  std::vector<std::unique_ptr<RawSession>> again = JoinAll(retried, 2);
  ASSERT_EQ(again.size(), 2u);
  for (const absl::Status& s : AllReduceZeros(again, 0)) EXPECT_THAT(s, IsOk());
  // The retry's stream stays open while the job works on: a client that
  // retried its Join holds the stream it retried on.
  OpenJoin retry(stub.get(),
                 JoinRequestFor(retried, 0, 2, again[0]->session_id()), "",
                 absl::Seconds(10));
  EXPECT_THAT(retry.status(), IsOk());
  EXPECT_EQ(retry.epoch(), again[0]->epoch());
  for (const absl::Status& s : AllReduceZeros(again, 1)) {
    EXPECT_THAT(s, IsOk()) << "after rank 0 retried its own Join";
  }
}

}  // namespace
}  // namespace testing
}  // namespace reducer
