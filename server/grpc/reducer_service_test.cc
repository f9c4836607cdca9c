// ReducerService and its reactors (SessionStream, CollectiveReactor,
// CollectivesReactor) in process: a grpc::Server serving the service over
// a real JobDoor and JobRegistry (JobDoorTestEnv), and the generated stub
// on the server's in-process channel, as gRPC's own end2end callback tests
// do. What a client sees: the Join stream's JobReady and JobAborted, a
// collective's result on both stream kinds, malformed requests refused
// with INVALID_ARGUMENT, and a stream cut failing the other rank at once.
#include "server/grpc/reducer_service.h"

#include <atomic>
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
#include "proto/reducer/v1/call_status.h"
#include "proto/reducer/v1/reducer.grpc.pb.h"
#include "proto/reducer/v1/reducer.pb.h"
#include "server/engine/timer_queue.h"
#include "server/grpc/collectives_reactor.h"
#include "server/jobs/attempt_cache.h"
#include "server/jobs/job_door_test_env.h"
#include "server/metrics/metrics_sink.h"
#include "tests/matchers.h"

namespace reducer {
namespace {

using Env = JobDoorTestEnv;

// Answers a Collectives stream may leave unread before it stops reading:
// a few small answers' worth.
constexpr size_t kMaxUnreadAnswerBytes = 1024;
using Stream =
    grpc::ClientReaderWriter<v1::CollectiveRequest, v1::CollectiveResponse>;
using Method =
    std::unique_ptr<Stream> (v1::Reducer::Stub::*)(grpc::ClientContext*);
constexpr Method kCollective = &v1::Reducer::Stub::Collective;
constexpr Method kCollectives = &v1::Reducer::Stub::Collectives;

// Env::kFloats float32 values as bytes.
std::string Floats(float a, float b, float c, float d) {
  const float values[Env::kFloats] = {a, b, c, d};
  return std::string(reinterpret_cast<const char*>(values), sizeof(values));
}

// One rank's request: `header` and the whole payload `data`.
v1::CollectiveRequest Request(const v1::CollectiveHeader& header,
                              const std::string& data, uint64_t call_id = 0) {
  v1::CollectiveRequest request;
  *request.mutable_header() = header;
  request.set_data(data);
  request.set_call_id(call_id);
  return request;
}

// `header` as the `sequence`-th all-reduce of its rank (from 0), with an
// attempt id of its own.
v1::CollectiveHeader Numbered(v1::CollectiveHeader header, int sequence) {
  header.set_sequence(sequence);
  header.set_attempt_id(absl::StrCat(header.session_id(), "/", sequence + 1));
  return header;
}

// One rank's open Join stream.
struct JoinedRank {
  grpc::ClientContext context;
  std::unique_ptr<grpc::ClientReader<v1::JoinEvent>> events;
  bool finished = false;  // Finish() was called (at most once)
};

// Reads `rank`'s next event other than JoinWaiting (those come while the
// job gathers its ranks); false once the stream ended.
bool NextEvent(JoinedRank& rank, v1::JoinEvent* event) {
  bool read = rank.events->Read(event);
  while (read && event->has_waiting()) read = rank.events->Read(event);
  return read;
}

class ReducerServiceTest : public ::testing::Test {
 protected:
  // With `tokens`, job Env::kTokenJob and its jobs require Env::kToken.
  explicit ReducerServiceTest(
      absl::Duration stream_idle_timeout = absl::ZeroDuration(),
      bool tokens = false, int max_streams_per_tenant = 16)
      : env_(tokens),
        service_(&env_.door(), /*max_concurrent_calls=*/16,
                 max_streams_per_tenant,
                 /*header_timeout=*/absl::ZeroDuration(), stream_idle_timeout,
                 &timers_, &metrics_, /*grpc_metrics=*/nullptr,
                 kMaxUnreadAnswerBytes) {
    grpc::ServerBuilder builder;
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    stub_ = v1::Reducer::NewStub(
        server_->InProcessChannel(grpc::ChannelArguments()));
  }
  ~ReducerServiceTest() override {
    for (std::unique_ptr<JoinedRank>& rank : joined_) {
      rank->context.TryCancel();
      if (!rank->finished) rank->events->Finish().IgnoreError();
    }
    server_->Shutdown();
  }

  // Opens the Join stream of `session` for rank `rank` of `world`.
  JoinedRank& Join(const std::string& job, int rank, int world,
                   const std::string& session) {
    joined_.push_back(std::make_unique<JoinedRank>());
    JoinedRank& joined = *joined_.back();
    joined.events = stub_->Join(&joined.context,
                                Env::JoinRequest(job, rank, world, session));
    return joined;
  }
  // Joins ranks 0..world-1 of `job` (sessions s0, s1, ...) and reads each
  // one's JobReady.
  void JoinAll(const std::string& job, int world) {
    std::vector<JoinedRank*> ranks;
    for (int rank = 0; rank < world; ++rank) {
      ranks.push_back(&Join(job, rank, world, absl::StrCat("s", rank)));
    }
    for (JoinedRank* rank : ranks) {
      v1::JoinEvent event;
      ASSERT_TRUE(NextEvent(*rank, &event));
      ASSERT_TRUE(event.has_ready()) << event.DebugString();
    }
  }

  // Opens rank `rank`'s stream of `method` (session s<rank> of job j) and
  // sends its all-reduce of `data` as call `call_id`.
  std::unique_ptr<Stream> SendAllReduce(Method method,
                                        grpc::ClientContext* context, int rank,
                                        const std::string& data,
                                        uint64_t call_id = 0) {
    std::unique_ptr<Stream> stream = ((*stub_).*method)(context);
    EXPECT_TRUE(stream->Write(Request(
        Env::AllReduce("j", absl::StrCat("s", rank), rank), data, call_id)))
        << "rank " << rank;
    return stream;
  }

  // Both ranks' calls of one all-reduce of job j, on streams of their own.
  struct CallsOfBoth {
    grpc::ClientContext contexts[2];
    std::unique_ptr<Stream> streams[2];
  };
  // Opens both ranks' streams of `method`: rank r sends Floats(r + 1, 2, 3,
  // 4) as call `first_call_id` + r, or with `header_only` nothing but its
  // header.
  void SendAllReduceOfBoth(Method method, CallsOfBoth& calls,
                           bool header_only = false,
                           uint64_t first_call_id = 0) {
    for (int rank = 0; rank < 2; ++rank) {
      calls.streams[rank] =
          SendAllReduce(method, &calls.contexts[rank], rank,
                        header_only ? "" : Floats(rank + 1, 2, 3, 4),
                        first_call_id == 0 ? 0 : first_call_id + rank);
    }
  }

  // Both ranks of job j (sessions s0 and s1, joined) all-reduce on
  // Collective streams: each gets the sum.
  void ExpectAllReduceOfBothSums() {
    CallsOfBoth calls;
    SendAllReduceOfBoth(kCollective, calls);
    std::unique_ptr<Stream>* streams = calls.streams;
    for (int rank = 0; rank < 2; ++rank) {
      ASSERT_TRUE(streams[rank]->WritesDone());
    }
    for (int rank = 0; rank < 2; ++rank) {
      std::string data;
      v1::CollectiveResponse response;
      int specs = 0;
      while (streams[rank]->Read(&response)) {
        EXPECT_EQ(response.offset(), data.size()) << "rank " << rank;
        specs += response.result_size();
        data += response.data();
      }
      const grpc::Status status = streams[rank]->Finish();
      EXPECT_TRUE(status.ok())
          << "rank " << rank << ": " << status.error_message();
      EXPECT_EQ(specs, 1) << "rank " << rank;
      EXPECT_EQ(data, Floats(3, 4, 6, 8)) << "rank " << rank;
    }
  }

  Env env_;
  TimerQueue timers_;
  MetricsSink metrics_;
  ReducerService service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::Reducer::Stub> stub_;
  std::vector<std::unique_ptr<JoinedRank>> joined_;
};

TEST_F(ReducerServiceTest, JoinSendsJobReadyOnceEveryRankJoined) {
  JoinedRank& rank0 = Join("j", 0, 2, "s0");
  // Before the other rank joins, rank 0 hears who joined.
  v1::JoinEvent first;
  ASSERT_TRUE(rank0.events->Read(&first));
  ASSERT_TRUE(first.has_waiting()) << first.DebugString();
  EXPECT_THAT(first.waiting().joined(), ElementsAre(0));
  JoinedRank& rank1 = Join("j", 1, 2, "s1");
  for (JoinedRank* rank : {&rank0, &rank1}) {
    v1::JoinEvent event;
    ASSERT_TRUE(NextEvent(*rank, &event));
    ASSERT_TRUE(event.has_ready()) << event.DebugString();
    EXPECT_EQ(event.ready().epoch(), 1);
  }
}

TEST_F(ReducerServiceTest, JoinRefusedEndsTheStreamWithWhy) {
  JoinedRank& rank = Join(std::string(Env::kMaxNameBytes + 1, 'j'), 0, 1, "s0");
  v1::JoinEvent event;
  EXPECT_FALSE(NextEvent(rank, &event));
  const grpc::Status status = rank.events->Finish();
  rank.finished = true;
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(),
              HasSubstr("JoinRequest.job is 65 bytes long"));
}

// A Join over its size (here a field reducerd does not know, of 100 KB,
// well within gRPC's own receive limit) is refused on arrival.
TEST_F(ReducerServiceTest, AJoinOverItsSizeIsRefusedOnArrival) {
  v1::JoinRequest request = Env::JoinRequest("j", 0, 1, "s0");
  request.GetReflection()->MutableUnknownFields(&request)->AddLengthDelimited(
      99, std::string(100000, 'x'));
  grpc::ClientContext context;
  std::unique_ptr<grpc::ClientReader<v1::JoinEvent>> events =
      stub_->Join(&context, request);
  v1::JoinEvent event;
  EXPECT_FALSE(events->Read(&event));
  const grpc::Status status = events->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(),
              HasSubstr(absl::StrCat("JoinRequest is ", request.ByteSizeLong(),
                                     " bytes, over the limit of")));
  EXPECT_THAT(env_.registry().Find("j"), Not(IsOk()));
}

TEST_F(ReducerServiceTest, ACutJoinStreamAbortsTheEpochForTheOtherRank) {
  JoinAll("j", 2);
  joined_[0]->context.TryCancel();
  v1::JoinEvent event;
  ASSERT_TRUE(NextEvent(*joined_[1], &event));
  ASSERT_TRUE(event.has_aborted()) << event.DebugString();
  EXPECT_EQ(event.aborted().epoch(), 1);
  EXPECT_THAT(event.aborted().reason(), HasSubstr("rank 0"));
}

TEST_F(ReducerServiceTest, CollectiveStreamsReturnTheSumToEveryRank) {
  JoinAll("j", 2);
  ExpectAllReduceOfBothSums();
}

// A Join naming rank 0's session id with another world size is refused,
// and neither it nor the end of its stream touches rank 0's session: the
// job of two ranks runs on.
TEST_F(ReducerServiceTest, AJoinNamingAnotherSessionIsRefusedAndTheJobRunsOn) {
  JoinAll("j", 2);
  JoinedRank& hostile = Join("j", 0, 3, "s0");
  v1::JoinEvent event;
  EXPECT_FALSE(NextEvent(hostile, &event));
  const grpc::Status refused = hostile.events->Finish();
  hostile.finished = true;
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(refused.error_message(),
              HasSubstr("job j has world size 2 (set by the ranks already "
                        "joined), but rank 0 asked for 3"));
  ExpectAllReduceOfBothSums();
  EXPECT_EQ((*env_.registry().Find("j"))->Snapshot().state, "running");
}

// A client's exact retry of its Join is answered as the first was; the
// stream it replaces is ended ABORTED, and the job runs on.
TEST_F(ReducerServiceTest, AnExactRetryOfAJoinIsAnsweredAndTheJobRunsOn) {
  JoinAll("j", 2);
  JoinedRank& retry = Join("j", 0, 2, "s0");
  v1::JoinEvent event;
  ASSERT_TRUE(NextEvent(retry, &event));
  ASSERT_TRUE(event.has_ready()) << event.DebugString();
  EXPECT_EQ(event.ready().epoch(), 1);
  // The first stream (its JobReady read by JoinAll) ends, saying why.
  JoinedRank& first = *joined_[0];
  EXPECT_FALSE(NextEvent(first, &event));
  const grpc::Status replaced = first.events->Finish();
  first.finished = true;
  EXPECT_EQ(replaced.error_code(), grpc::StatusCode::ABORTED);
  EXPECT_THAT(replaced.error_message(),
              HasSubstr("session s0 of job j was replaced by a retry of its "
                        "Join"));
  ExpectAllReduceOfBothSums();
  EXPECT_EQ((*env_.registry().Find("j"))->Snapshot().state, "running");
}

TEST_F(ReducerServiceTest, CollectiveStreamWithoutHeaderIsInvalid) {
  grpc::ClientContext context;
  std::unique_ptr<Stream> stream = stub_->Collective(&context);
  v1::CollectiveRequest request;
  request.set_data(Floats(1, 2, 3, 4));
  ASSERT_TRUE(stream->Write(request));
  stream->WritesDone();
  v1::CollectiveResponse response;
  EXPECT_FALSE(stream->Read(&response));
  const grpc::Status status = stream->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(),
              HasSubstr("the first message of a Collective stream must "
                        "carry `header`"));
}

TEST_F(ReducerServiceTest, CollectiveOfAJobNotJoinedIsRefused) {
  grpc::ClientContext context;
  std::unique_ptr<Stream> stream = stub_->Collective(&context);
  ASSERT_TRUE(stream->Write(
      Request(Env::AllReduce("unjoined", "s0", 0), Floats(1, 2, 3, 4))));
  stream->WritesDone();
  v1::CollectiveResponse response;
  EXPECT_FALSE(stream->Read(&response));
  EXPECT_EQ(stream->Finish().error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
}

TEST_F(ReducerServiceTest, ACutCollectiveStreamFailsTheOtherRankAtOnce) {
  JoinAll("j", 2);
  CallsOfBoth calls;
  // The header only: the payload never comes.
  SendAllReduceOfBoth(kCollective, calls, /*header_only=*/true);
  std::unique_ptr<Stream>* streams = calls.streams;
  // Both headers in first (before that, a cancelled call is only detached,
  // for its retry): the collective then waits for no rank.
  const absl::Time until = absl::Now() + absl::Seconds(10);
  while (absl::Now() < until) {
    const std::vector<CollectiveSnapshot> pending =
        (*env_.registry().Find("j"))->Snapshot().pending;
    if (!pending.empty() && pending[0].missing_ranks.empty()) break;
    absl::SleepFor(absl::Milliseconds(1));
  }
  calls.contexts[0].TryCancel();
  v1::CollectiveResponse response;
  EXPECT_FALSE(streams[1]->Read(&response));
  const grpc::Status status = streams[1]->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::ABORTED);
  EXPECT_THAT(status.error_message(),
              HasSubstr("allreduce #0 in job j: rank 0's call was cancelled"));
  EXPECT_EQ(streams[0]->Finish().error_code(), grpc::StatusCode::CANCELLED);
}

TEST_F(ReducerServiceTest, CollectivesStreamAnswersEachCallByItsId) {
  JoinAll("j", 2);
  CallsOfBoth calls;
  SendAllReduceOfBoth(kCollectives, calls, /*header_only=*/false,
                      /*first_call_id=*/7);
  std::unique_ptr<Stream>* streams = calls.streams;
  for (int rank = 0; rank < 2; ++rank) {
    v1::CollectiveResponse response;
    ASSERT_TRUE(streams[rank]->Read(&response)) << "rank " << rank;
    EXPECT_EQ(response.call_id(), 7 + rank);
    EXPECT_THAT(FromCallStatus(response.status()), IsOk());
    EXPECT_EQ(response.result_size(), 1);
    EXPECT_EQ(response.data(), Floats(3, 4, 6, 8)) << "rank " << rank;
    ASSERT_TRUE(streams[rank]->WritesDone());
    EXPECT_FALSE(streams[rank]->Read(&response));
    const grpc::Status status = streams[rank]->Finish();
    EXPECT_TRUE(status.ok()) << status.error_message();
  }
}

TEST_F(ReducerServiceTest, CollectivesCallRefusedFailsOnlyThatCall) {
  JoinAll("j", 1);
  grpc::ClientContext context;
  std::unique_ptr<Stream> stream = stub_->Collectives(&context);
  ASSERT_TRUE(stream->Write(Request(Env::AllReduce("unjoined", "s0", 0),
                                    Floats(1, 2, 3, 4), /*call_id=*/1)));
  v1::CollectiveResponse response;
  ASSERT_TRUE(stream->Read(&response));
  EXPECT_EQ(response.call_id(), 1);
  EXPECT_THAT(FromCallStatus(response.status()),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  // The stream goes on: the next call is answered.
  ASSERT_TRUE(stream->Write(Request(Env::AllReduce("j", "s0", 0),
                                    Floats(1, 2, 3, 4), /*call_id=*/2)));
  ASSERT_TRUE(stream->Read(&response));
  EXPECT_EQ(response.call_id(), 2);
  EXPECT_THAT(FromCallStatus(response.status()), IsOk());
  EXPECT_EQ(response.data(), Floats(1, 2, 3, 4));
  stream->WritesDone();
  EXPECT_TRUE(stream->Finish().ok());
}

TEST_F(ReducerServiceTest, CollectivesMessageWithoutCallIdEndsTheStream) {
  grpc::ClientContext context;
  std::unique_ptr<Stream> stream =
      SendAllReduce(kCollectives, &context, 0, Floats(1, 2, 3, 4));
  v1::CollectiveResponse response;
  EXPECT_FALSE(stream->Read(&response));
  const grpc::Status status = stream->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(),
              HasSubstr("must carry a nonzero call_id"));
}

// A client that stops reading its Collectives stream: once the answers not
// yet written pass the stream's bound, the stream reads none of the client's
// next calls (its writes stall), and the answers it holds stay in the
// memory budget. Once the client reads, every call is answered, in order.
TEST_F(ReducerServiceTest, CollectivesStreamStopsReadingWhileAnswersAreUnread) {
  JoinAll("j", 1);
  grpc::ClientContext context;
  std::unique_ptr<Stream> stream = stub_->Collectives(&context);
  auto call = [&stream](int i) {
    v1::CollectiveHeader header = Env::AllReduce("j", "s0", 0);
    header.set_sequence(i);
    header.set_attempt_id(absl::StrCat("s0/", i + 1));
    return stream->Write(Request(header, Floats(i, 2, 3, 4), i + 1));
  };
  // A first call, read at once: what the job holds with no answer unread
  // (or that one, if its write is not seen complete yet).
  ASSERT_TRUE(call(0));
  v1::CollectiveResponse response;
  ASSERT_TRUE(stream->Read(&response));
  const size_t settled_bytes = env_.memory().used();

  constexpr int kCalls = 24;
  std::atomic<int> written{0};
  std::thread writer([&] {
    for (int i = 1; i <= kCalls; ++i) {
      if (!call(i)) return;
      ++written;
    }
    stream->WritesDone();
  });
  // Each answer counts its bytes and kQueuedMessageOverheadBytes: the
  // stream reads about kMaxUnreadAnswerBytes / that many calls, then none.
  const int most_read =
      kMaxUnreadAnswerBytes / CollectivesReactor::kQueuedMessageOverheadBytes +
      1;
  const absl::Time give_up = absl::Now() + absl::Seconds(20);
  while (written.load() < most_read - 1 && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  absl::SleepFor(absl::Milliseconds(300));  // time to read more, were it to
  EXPECT_GE(written.load(), 1);
  EXPECT_LE(written.load(), most_read + 1) << "of " << kCalls << " calls";
  // Each unread answer keeps its rank's reservation: 16 bytes staged in and
  // 16 queued out.
  EXPECT_GE(env_.memory().used(),
            settled_bytes + 2 * Env::kFloats * sizeof(float));

  for (int i = 1; i <= kCalls; ++i) {
    ASSERT_TRUE(stream->Read(&response)) << "call " << i + 1;
    EXPECT_EQ(response.call_id(), i + 1u);
    EXPECT_THAT(FromCallStatus(response.status()), IsOk());
    EXPECT_EQ(response.data(), Floats(i, 2, 3, 4));
  }
  writer.join();
  EXPECT_FALSE(stream->Read(&response));
  const grpc::Status status = stream->Finish();
  EXPECT_TRUE(status.ok()) << status.error_message();
  // Every answer was written: none holds anything any more (the last one
  // lets go just after the stream ends), but the job remembers each call's
  // attempt id for a retry.
  size_t remembered_ids = 0;
  for (int i = 1; i <= kCalls; ++i) {
    remembered_ids += AttemptCache::EntryBytes(absl::StrCat("s0/", i + 1));
  }
  const absl::Time settle = absl::Now() + absl::Seconds(10);
  while (env_.memory().used() > settled_bytes + remembered_ids &&
         absl::Now() < settle) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_LE(env_.memory().used(), settled_bytes + remembered_ids);
}

// A service whose collective streams are closed after 1 s with nothing on
// them (--stream_idle_timeout=1s).
class StreamIdleTimeoutTest : public ReducerServiceTest {
 protected:
  StreamIdleTimeoutTest() : ReducerServiceTest(absl::Seconds(1)) {}

  // Expects `stream` to end, closed as idle.
  static void ExpectClosedAsIdle(Stream& stream, const char* what) {
    v1::CollectiveResponse response;
    EXPECT_FALSE(stream.Read(&response)) << what;
    const grpc::Status status = stream.Finish();
    EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE) << what;
    EXPECT_THAT(status.error_message(), HasSubstr("nothing happened on it for "
                                                  "--stream_idle_timeout=1s"))
        << what;
  }
};

TEST_F(StreamIdleTimeoutTest, AStreamThatSendsNothingIsClosed) {
  for (Method method : {kCollective, kCollectives}) {
    grpc::ClientContext context;
    // Well past the timeout: reducerd, not the deadline, ends it.
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
    std::unique_ptr<Stream> stream = ((*stub_).*method)(&context);
    ExpectClosedAsIdle(*stream,
                       method == kCollective ? "Collective" : "Collectives");
  }
}

// A call that waits for a slow rank longer than the timeout is in flight
// all along: its stream stays, and it completes.
TEST_F(StreamIdleTimeoutTest, ACallWaitingForASlowRankIsNotCut) {
  JoinAll("j", 2);
  int sequence = 0;
  for (Method method : {kCollective, kCollectives}) {
    grpc::ClientContext contexts[2];
    std::unique_ptr<Stream> streams[2];
    const uint64_t call_id = method == kCollectives ? 1 : 0;
    for (int rank = 0; rank < 2; ++rank) {
      // Rank 1 comes 2.5 timeouts after rank 0.
      if (rank == 1) absl::SleepFor(absl::Milliseconds(2500));
      streams[rank] = ((*stub_).*method)(&contexts[rank]);
      ASSERT_TRUE(streams[rank]->Write(
          Request(Numbered(Env::AllReduce("j", absl::StrCat("s", rank), rank),
                           sequence),
                  Floats(rank + 1, 2, 3, 4), call_id)));
    }
    ++sequence;
    for (int rank = 0; rank < 2; ++rank) {
      v1::CollectiveResponse response;
      ASSERT_TRUE(streams[rank]->Read(&response)) << "rank " << rank;
      EXPECT_EQ(response.data(), Floats(3, 4, 6, 8)) << "rank " << rank;
      ASSERT_TRUE(streams[rank]->WritesDone());
      while (streams[rank]->Read(&response)) {
      }
      const grpc::Status status = streams[rank]->Finish();
      EXPECT_TRUE(status.ok())
          << "rank " << rank << ": " << status.error_message();
    }
  }
}

// Calls that keep coming, each answered at once, keep their stream for
// longer than the timeout; once they stop, the stream is closed.
TEST_F(StreamIdleTimeoutTest, AStreamWhoseCallsKeepComingIsNotCut) {
  JoinAll("j", 1);
  grpc::ClientContext context;
  std::unique_ptr<Stream> stream = stub_->Collectives(&context);
  const absl::Time until = absl::Now() + absl::Milliseconds(2500);
  uint64_t call_id = 0;
  while (absl::Now() < until) {
    ++call_id;
    ASSERT_TRUE(stream->Write(
        Request(Numbered(Env::AllReduce("j", "s0", 0), call_id - 1),
                Floats(1, 2, 3, 4), call_id)))
        << "call " << call_id;
    v1::CollectiveResponse response;
    ASSERT_TRUE(stream->Read(&response)) << "call " << call_id;
    EXPECT_EQ(response.call_id(), call_id);
    EXPECT_THAT(FromCallStatus(response.status()), IsOk());
    absl::SleepFor(absl::Milliseconds(200));
  }
  EXPECT_GE(call_id, 5u);
  ExpectClosedAsIdle(*stream, "after its last call");
}

// A service requiring tokens, whose tenants may hold 2 streams each.
class TenantStreamsTest : public ReducerServiceTest {
 protected:
  TenantStreamsTest()
      : ReducerServiceTest(absl::ZeroDuration(), /*tokens=*/true,
                           /*max_streams_per_tenant=*/2) {}
};

// A stream is its token's tenant's from the moment it opens: of three that
// open with one tenant's token and send nothing, one is refused naming the
// tenant and the flag.
TEST_F(TenantStreamsTest, SilentStreamsCountForTheirTokensTenant) {
  // Each stream's end is asked for at once, so that the refused one's
  // comes as soon as reducerd sends it.
  grpc::CompletionQueue queue;
  grpc::ClientContext contexts[3];
  std::unique_ptr<grpc::ClientAsyncReaderWriter<v1::CollectiveRequest,
                                                v1::CollectiveResponse>>
      streams[3];
  grpc::Status statuses[3];
  for (intptr_t i = 0; i < 3; ++i) {
    contexts[i].AddMetadata("authorization",
                            absl::StrCat("Bearer ", Env::kToken));
    contexts[i].set_deadline(
        absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
    streams[i] = stub_->AsyncCollectives(&contexts[i], &queue,
                                         reinterpret_cast<void*>(2 * i));
    streams[i]->Finish(&statuses[i], reinterpret_cast<void*>(2 * i + 1));
  }
  for (int events = 0; events < 6; ++events) {
    void* tag;
    bool ok;
    ASSERT_TRUE(queue.Next(&tag, &ok));
  }
  int refused = 0;
  for (const grpc::Status& status : statuses) {
    if (status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
      ++refused;
      EXPECT_THAT(status.error_message(),
                  HasSubstr(absl::StrCat("tenant ", Env::kTokenJob,
                                         " already holds 2 collective streams "
                                         "(--max_streams_per_tenant=2")));
    } else {
      // Admitted: it ended at its client's deadline.
      EXPECT_EQ(status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED)
          << status.error_message();
    }
  }
  EXPECT_EQ(refused, 1);
  queue.Shutdown();
}

}  // namespace
}  // namespace reducer
