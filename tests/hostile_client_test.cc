// Hostile clients: requests that try to make reducerd hold more than any job
// should (a world of forty million ranks, names as long as a message) are
// refused before anything is committed, with an error that names the bound
// and its flag; reducerd's resident memory stays put; and a healthy job
// running at the same time is unaffected.
//
// The hostile side is a raw gRPC client on the generated stubs, so it can
// send what the client library never would.
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/reducer/v1/reducer.grpc.pb.h"
#include "proto/reducer/v1/reducer.pb.h"
#include "proto/reducer/v1/status_conversion.h"
#include "tests/fault_test_base.h"
#include "tests/raw_client.h"
#include "tests/status_matchers.h"

namespace reducer {
namespace testing {
namespace {

using ::testing::HasSubstr;

// A refusal must come at once, not after some wait.
constexpr absl::Duration kFast = absl::Seconds(3);

// How a raw Join of `request` ended: OK once JobReady arrived, else the
// stream's status (DEADLINE_EXCEEDED when neither came within `timeout`).
absl::Status RawJoin(const std::string& address, const v1::JoinRequest& request,
                     absl::Duration timeout) {
  std::unique_ptr<v1::Reducer::Stub> stub = v1::Reducer::NewStub(
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  std::unique_ptr<grpc::ClientReader<v1::JoinEvent>> reader =
      stub->Join(&context, request);
  v1::JoinEvent event;
  // JoinWaiting events come before JobReady while the job gathers.
  bool read = reader->Read(&event);
  while (read && event.has_waiting()) read = reader->Read(&event);
  if (read && event.has_ready()) {
    context.TryCancel();
    reader->Finish();
    return absl::OkStatus();
  }
  return FromGrpcStatus(reader->Finish());
}

v1::JoinRequest JoinRequestFor(const std::string& job, int world_size) {
  v1::JoinRequest request;
  request.set_job(job);
  request.set_rank(0);
  request.set_world_size(world_size);
  request.set_session_id("0123456789abcdef0123456789abcdef");
  return request;
}

// Runs `request` on `raw` until reducerd admits it: a stream's slot goes
// back when reducerd is done with the stream, which may be just after its
// client saw it end. Gives up, returning the refusal, after 5 s.
RawCallResult CallOnceAdmitted(RawSession& raw,
                               const v1::CollectiveRequest& request) {
  const absl::Time give_up = absl::Now() + absl::Seconds(5);
  while (true) {
    RawCallResult result = raw.Call({request}, absl::Seconds(10));
    if (result.status.code() != absl::StatusCode::kResourceExhausted ||
        absl::Now() >= give_up) {
      return result;
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
}

// A silent Collective stream and a silent Collectives stream: opened, and
// nothing sent on them. Each ends when the test Finishes it (or cancels it
// first); the client's deadline is 20 s.
struct SilentStreams {
  explicit SilentStreams(const std::string& address)
      : stub(v1::Reducer::NewStub(grpc::CreateChannel(
            address, grpc::InsecureChannelCredentials()))) {
    for (grpc::ClientContext* c : {&one_context, &many_context}) {
      c->set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(20)));
    }
    one = stub->Collective(&one_context);
    many = stub->Collectives(&many_context);
  }

  std::unique_ptr<v1::Reducer::Stub> stub;
  grpc::ClientContext one_context;
  grpc::ClientContext many_context;
  std::unique_ptr<grpc::ClientReaderWriterInterface<v1::CollectiveRequest,
                                                    v1::CollectiveResponse>> one;
  std::unique_ptr<grpc::ClientReaderWriterInterface<v1::CollectiveRequest,
                                                    v1::CollectiveResponse>> many;
};

// A float32 [4] all-reduce of zeros on `raw`.
v1::CollectiveRequest ZerosRequest(RawSession& raw) {
  v1::CollectiveRequest request = raw.AllReduceRequest({4});
  request.set_data(std::string(16, '\0'));
  return request;
}

class HostileClientTest : public FaultTest {
 protected:
  // A raw session of a one-rank job named Job(`name`).
  absl::StatusOr<std::unique_ptr<RawSession>> JoinAlone(
      const std::string& name) {
    return RawSession::Join(server()->address(), Job(name), 0, 1,
                            absl::Seconds(30));
  }
};

TEST_F(HostileClientTest, HugeWorldSizeIsRefusedWithoutGrowingReducerd) {
  ASSERT_TRUE(StartServer());
  // A healthy two-rank job all-reduces throughout.
  std::vector<std::unique_ptr<ChildProcess>> healthy = StartJob(
      Job("healthy"), 2,
      {"allreduce:shape=1024,timeout_ms=20000;sleep:ms=300;"
       "allreduce:shape=1024,timeout_ms=20000;sleep:ms=300;"
       "allreduce:shape=1024,timeout_ms=20000"});
  const int64_t rss_before_kib = ServerRssKib();
  for (int i = 0; i < 3; ++i) {
    const absl::Time start = absl::Now();
    const absl::Status joined = RawJoin(
        server()->address(),
        JoinRequestFor(absl::StrCat(Job("huge"), i), 40000000),
        absl::Seconds(10));
    EXPECT_THAT(
        joined,
        StatusIs(absl::StatusCode::kInvalidArgument,
                 HasSubstr("JoinRequest.world_size 40000000 is over the limit "
                           "of 16384 ranks per job (--max_world_size)")));
    EXPECT_LE(absl::Now() - start, kFast);
  }
  // Three such Joins once took reducerd from 17 MiB to 2.2 GiB resident.
  // (Sanitizer builds keep their own heap accounting: no RSS bound there.)
  const int64_t rss_after_kib = ServerRssKib();
  if (RssChecksApply()) {
    EXPECT_LE(rss_after_kib - rss_before_kib, 16 * 1024)
        << "reducerd grew from " << rss_before_kib << " KiB to "
        << rss_after_kib << " KiB";
  }

  std::vector<ProcessResult> results = WaitWorkers(healthy);
  ASSERT_EQ(results.size(), 2u);
  for (const ProcessResult& r : results) {
    for (const char* step : {"0", "1", "3", "5"}) {
      ExpectStep(r, step, absl::StatusCode::kOk);
    }
  }
}

TEST_F(HostileClientTest, PerRankStateCountsAgainstTheMemoryBudget) {
  ASSERT_TRUE(StartServer(
      {"--max_world_size=1000000", "--memory_budget_bytes=1048576"}));
  // A million ranks' state does not fit in 1 MiB; the job is never created.
  const absl::Status joined =
      RawJoin(server()->address(), JoinRequestFor(Job("wide"), 1000000),
              absl::Seconds(10));
  EXPECT_THAT(joined, StatusIs(absl::StatusCode::kResourceExhausted,
                               HasSubstr(absl::StrCat(
                                   "cannot create job ", Job("wide"),
                                   " of 1000000 ranks: its per-rank state"))));
  EXPECT_THAT(joined.message(), HasSubstr("--memory_budget_bytes=1048576"));

  // A job that fits still runs, and so does the next one: the refused job
  // kept nothing of the budget.
  for (const char* name : {"small", "next"}) {
    std::vector<std::unique_ptr<ChildProcess>> workers =
        StartJob(Job(name), 2, {"allreduce:shape=1024,timeout_ms=20000"});
    std::vector<ProcessResult> results = WaitWorkers(workers);
    ASSERT_EQ(results.size(), 2u);
    for (const ProcessResult& r : results) ExpectStep(r, "1", absl::StatusCode::kOk);
  }
}

TEST_F(HostileClientTest, NamesOverTheLimitAreRefusedNamingTheField) {
  ASSERT_TRUE(StartServer());
  const std::string at_limit(512, 'j');
  const std::string over(513, 'x');

  // Join: the job's name and the session id.
  absl::Status joined =
      RawJoin(server()->address(), JoinRequestFor(over, 1), absl::Seconds(10));
  EXPECT_THAT(
      joined,
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("JoinRequest.job is 513 bytes long, over the limit of "
                         "512 bytes (--max_name_bytes)")));
  v1::JoinRequest long_session = JoinRequestFor(Job("session"), 1);
  long_session.set_session_id(over);
  joined = RawJoin(server()->address(), long_session, absl::Seconds(10));
  EXPECT_THAT(joined,
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("JoinRequest.session_id is 513 bytes long")));
  // A name of exactly the limit is fine.
  EXPECT_TRUE(RawJoin(server()->address(), JoinRequestFor(at_limit, 1),
                      absl::Seconds(10))
                  .ok());

  // A collective's name and attempt id, on a session of a one-rank job.
  absl::StatusOr<std::unique_ptr<RawSession>> raw = JoinAlone("calls");
  ASSERT_TRUE(raw.ok()) << raw.status();
  struct Case {
    const char* field;
    void (*breaks)(v1::CollectiveHeader*, const std::string&);
  };
  const Case cases[] = {
      {"CollectiveHeader.name",
       [](v1::CollectiveHeader* h, const std::string& v) { h->set_name(v); }},
      {"CollectiveHeader.attempt_id",
       [](v1::CollectiveHeader* h, const std::string& v) { h->set_attempt_id(v); }},
  };
  for (bool many_calls : {false, true}) {
    for (const Case& c : cases) {
      v1::CollectiveRequest request = ZerosRequest(**raw);
      if (many_calls) request.set_call_id(1);
      c.breaks(request.mutable_header(), over);
      const RawCallResult result = (*raw)->Call(
          {request}, absl::Seconds(10), /*half_close=*/true, many_calls);
      const std::string where =
          absl::StrCat(c.field, many_calls ? " (Collectives)" : " (Collective)");
      absl::Status status = result.status;
      if (many_calls && status.ok() && !result.responses.empty() &&
          result.responses.back().has_status()) {
        status = FromCallStatus(result.responses.back().status());
      }
      EXPECT_THAT(status,
                  StatusIs(absl::StatusCode::kInvalidArgument,
                           HasSubstr(absl::StrCat(c.field,
                                                  " is 513 bytes long, over "
                                                  "the limit of 512 bytes"))))
          << where;
      EXPECT_TRUE(result.data.empty()) << where;
    }
  }
  // The session goes on.
  v1::CollectiveRequest good = ZerosRequest(**raw);
  good.mutable_header()->set_name("after");
  const RawCallResult after = (*raw)->Call({good}, absl::Seconds(10));
  EXPECT_TRUE(after.status.ok()) << after.status;
  EXPECT_EQ(after.data, std::string(16, '\0'));
}

// Streams that open and never send are closed after --header_timeout,
// giving their slots of --max_concurrent_calls back: a job's call that found
// every slot taken by them gets in afterwards.
TEST_F(HostileClientTest, SilentStreamsAreClosedAndGiveTheirSlotsBack) {
  ASSERT_TRUE(StartServer({"--header_timeout=1s", "--max_concurrent_calls=2"}));
  const absl::Time opened = absl::Now();
  SilentStreams silent(server()->address());
  absl::SleepFor(absl::Milliseconds(300));

  absl::StatusOr<std::unique_ptr<RawSession>> raw = JoinAlone("busy");
  ASSERT_TRUE(raw.ok()) << raw.status();
  v1::CollectiveRequest request = ZerosRequest(**raw);
  const RawCallResult crowded = (*raw)->Call({request}, absl::Seconds(10));
  EXPECT_THAT(crowded.status, StatusIs(absl::StatusCode::kResourceExhausted,
                                       HasSubstr("--max_concurrent_calls=2")));

  for (auto* stream : {silent.one.get(), silent.many.get()}) {
    const grpc::Status closed = stream->Finish();
    EXPECT_EQ(closed.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED)
        << closed.error_message();
    EXPECT_THAT(closed.error_message(),
                HasSubstr("no message within --header_timeout=1s of opening"));
  }
  // Closed by reducerd near the timeout, well before the clients' deadline.
  EXPECT_LE(absl::Now() - opened, absl::Seconds(5));

  request.mutable_header()->set_attempt_id("after-the-silent-streams");
  const RawCallResult after = CallOnceAdmitted(**raw, request);
  EXPECT_TRUE(after.status.ok()) << after.status;
  EXPECT_EQ(after.data, std::string(16, '\0'));
}

// Without tokens, a peer's streams that have sent no call yet are bounded
// by --max_streams_per_tenant, with no timeout set: the next stream it
// opens is refused at once, and once a silent stream ends, a call gets in.
TEST_F(HostileClientTest, APeersSilentStreamsAreBoundedWithoutATimeout) {
  ASSERT_TRUE(
      StartServer({"--max_streams_per_tenant=2", "--stream_idle_timeout=0"}));
  SilentStreams silent(server()->address());
  absl::SleepFor(absl::Milliseconds(300));

  absl::StatusOr<std::unique_ptr<RawSession>> raw = JoinAlone("busy");
  ASSERT_TRUE(raw.ok()) << raw.status();
  v1::CollectiveRequest request = ZerosRequest(**raw);
  const absl::Time asked = absl::Now();
  const RawCallResult crowded = (*raw)->Call({request}, absl::Seconds(10));
  EXPECT_THAT(crowded.status,
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("collective streams that sent no call yet "
                                 "(--max_streams_per_tenant=2")));
  EXPECT_LE(absl::Now() - asked, kFast);

  silent.one_context.TryCancel();
  silent.one->Finish();  // CANCELLED, by the test
  request.mutable_header()->set_attempt_id("after-a-silent-stream-ended");
  const RawCallResult after = CallOnceAdmitted(**raw, request);
  EXPECT_TRUE(after.status.ok()) << after.status;
  EXPECT_EQ(after.data, std::string(16, '\0'));
  silent.many_context.TryCancel();
  silent.many->Finish();
}

// Without tokens each job is its own tenant, which may hold
// --max_streams_per_tenant collective streams (here under the flag's
// deprecated old name, --max_streams_per_job): its next stream is refused
// at once naming the flag, while another job's calls go on; once the job's
// streams end, its calls get in again.
TEST_F(HostileClientTest, AJobOverItsStreamShareIsRefusedAndOthersGoOn) {
  ASSERT_TRUE(StartServer({"--max_streams_per_job=2"}));
  const std::string hog_job = Job("hog");
  absl::StatusOr<std::unique_ptr<RawSession>> hog0;
  std::thread join0([&] {
    hog0 = RawSession::Join(server()->address(), hog_job, 0, 2,
                            absl::Seconds(30));
  });
  absl::StatusOr<std::unique_ptr<RawSession>> hog1 = RawSession::Join(
      server()->address(), hog_job, 1, 2, absl::Seconds(30));
  join0.join();
  ASSERT_TRUE(hog0.ok() && hog1.ok()) << hog0.status() << hog1.status();

  // Rank 0 of the hog opens two calls that wait for rank 1, which never
  // sends: each holds a stream until its 3 s deadline.
  auto waiting_call = [&](const std::string& name) {
    v1::CollectiveRequest request = ZerosRequest(**hog0);
    request.mutable_header()->set_name(name);
    request.mutable_header()->set_timeout_ms(3000);
    return request;
  };
  std::vector<std::thread> hogs;
  std::vector<RawCallResult> held(2);
  for (int i = 0; i < 2; ++i) {
    hogs.emplace_back([&, i] {
      held[i] = (*hog0)->Call({waiting_call(absl::StrCat("held-", i))},
                              absl::Seconds(20));
    });
  }
  absl::SleepFor(absl::Milliseconds(500));

  const absl::Time asked = absl::Now();
  const RawCallResult third =
      (*hog0)->Call({waiting_call("third")}, absl::Seconds(20));
  EXPECT_THAT(third.status,
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr(absl::StrCat("tenant ", hog_job,
                                              " already holds 2 "
                                              "collective streams "
                                              "(--max_streams_per_tenant=2"))));
  EXPECT_LE(absl::Now() - asked, kFast);
  EXPECT_TRUE(third.data.empty());

  // Another job is not held back by the hog's share.
  absl::StatusOr<std::unique_ptr<RawSession>> healthy = JoinAlone("healthy");
  ASSERT_TRUE(healthy.ok()) << healthy.status();
  v1::CollectiveRequest request = ZerosRequest(**healthy);
  const RawCallResult other = (*healthy)->Call({request}, absl::Seconds(10));
  EXPECT_TRUE(other.status.ok()) << other.status;
  EXPECT_EQ(other.data, std::string(16, '\0'));

  for (std::thread& hog : hogs) hog.join();
  for (const RawCallResult& result : held) {
    EXPECT_THAT(result.status, StatusIs(absl::StatusCode::kDeadlineExceeded));
  }
  // The held streams ended, so the hog's share is free again: both ranks'
  // next call gets in and completes.
  RawCallResult after;
  std::thread rank1([&] {
    v1::CollectiveRequest request = ZerosRequest(**hog1);
    request.mutable_header()->set_name("again");
    CallOnceAdmitted(**hog1, request);
  });
  v1::CollectiveRequest again = waiting_call("again");
  again.mutable_header()->set_timeout_ms(10000);
  after = CallOnceAdmitted(**hog0, again);
  rank1.join();
  EXPECT_TRUE(after.status.ok()) << after.status;
}

}  // namespace
}  // namespace testing
}  // namespace reducer
