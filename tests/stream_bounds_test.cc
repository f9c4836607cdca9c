// Collective streams against a real reducerd, from raw gRPC clients and
// the client library: the streams one tenant holds are bounded per tenant
// (a tenant opening streams that say nothing shuts no other tenant out,
// from the same client address too), and a stream on which nothing happens
// for --stream_idle_timeout is closed, while slow but live streams and
// calls waiting for a slow rank are not, and a job that pauses longer than
// the timeout goes on unharmed.
#include <cstring>
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

// Two tenants' tokens and their SHA-256 (computed apart, by `printf %s
// TOKEN | sha256sum`, as docs/security.md tells users to).
constexpr char kTokenA[] = "tenant-a-token";
constexpr char kHashA[] =
    "0abd0bed626543f48ed86bfeec88d632cbfe73ada770b3f9692f4d4afc9aa48f";
constexpr char kTokenB[] = "tenant-b-token";
constexpr char kHashB[] =
    "b1e3bab7b5eb7fd43c21839447bc86bebf7ce82cf5a973e36020ddad651a07bb";

// Collectives streams opened with one token that send nothing, on one
// channel (one client address): how many reducerd refused, and why.
class SilentStreamsOf {
 public:
  SilentStreamsOf(const std::string& address, const std::string& token,
                  int count)
      : stub_(v1::Reducer::NewStub(grpc::CreateCustomChannel(
            address, grpc::InsecureChannelCredentials(),
            RawChannelArguments()))),
        streams_(count) {
    for (int i = 0; i < count; ++i) {
      Stream& s = streams_[i];
      s.context.AddMetadata("authorization", absl::StrCat("Bearer ", token));
      s.context.set_deadline(
          absl::ToChronoTime(absl::Now() + absl::Seconds(50)));
      s.call = stub_->AsyncCollectives(&s.context, &queue_, StartTag(i));
      s.call->Finish(&s.status, FinishTag(i));
    }
  }

  // Cancels every stream and waits for each to end.
  ~SilentStreamsOf() {
    for (Stream& s : streams_) s.context.TryCancel();
    while (pending_ > 0 && Next(absl::InfiniteFuture())) {
    }
    queue_.Shutdown();
    void* tag;
    bool ok;
    while (queue_.Next(&tag, &ok)) {
    }
  }

  // Waits until `refusals` streams ended, or `deadline`; returns the
  // statuses of those that ended.
  std::vector<grpc::Status> AwaitEnded(int refusals, absl::Time deadline) {
    while (static_cast<int>(ended_.size()) < refusals && Next(deadline)) {
    }
    return ended_;
  }

 private:
  struct Stream {
    grpc::ClientContext context;
    std::unique_ptr<grpc::ClientAsyncReaderWriter<v1::CollectiveRequest,
                                                  v1::CollectiveResponse>>
        call;
    grpc::Status status;
  };
  // Tags: 2 i for stream i's start, 2 i + 1 for its end.
  static void* StartTag(int i) {
    return reinterpret_cast<void*>(intptr_t{2} * i);
  }
  static void* FinishTag(int i) {
    return reinterpret_cast<void*>(intptr_t{2} * i + 1);
  }

  // Handles one completion until `deadline`; false when none came.
  bool Next(absl::Time deadline) {
    void* tag;
    bool ok;
    if (queue_.AsyncNext(&tag, &ok, absl::ToChronoTime(deadline)) !=
        grpc::CompletionQueue::GOT_EVENT) {
      return false;
    }
    const intptr_t value = reinterpret_cast<intptr_t>(tag);
    --pending_;
    if (value % 2 == 1) ended_.push_back(streams_[value / 2].status);
    return true;
  }

  std::unique_ptr<v1::Reducer::Stub> stub_;
  grpc::CompletionQueue queue_;
  std::vector<Stream> streams_;
  int pending_ = 2 * static_cast<int>(streams_.size());  // tags not back
  std::vector<grpc::Status> ended_;
};

class StreamBoundsTest : public FaultTest {
 protected:
  // A tokens file of two tenants, Job("a") and Job("b"), with kTokenA's and
  // kTokenB's hashes.
  std::string WriteTokens() {
    const std::string path = absl::StrCat(scratch_dir_, "/tokens");
    FILE* out = fopen(path.c_str(), "w");
    EXPECT_NE(out, nullptr) << path;
    if (out == nullptr) return path;
    const std::string text =
        absl::StrCat(Job("a"), " ", kHashA, "\n", Job("b"), " ", kHashB, "\n");
    fwrite(text.data(), 1, text.size(), out);
    fclose(out);
    return path;
  }
};

// A float32 [4] all-reduce of zeros on `raw`.
v1::CollectiveRequest ZerosRequest(RawSession& raw) {
  v1::CollectiveRequest request = raw.AllReduceRequest({4});
  request.set_data(std::string(16, '\0'));
  return request;
}

// Tenant A opens 1100 Collectives streams from one address and sends
// nothing: past --max_streams_per_tenant (1024 by default) its streams are
// refused naming the tenant and the flag, while tenant B's stream from the
// same address is served, and so is B's all-reduce. (Counted per client
// address, A's silent streams once shut B out.)
TEST_F(StreamBoundsTest, ATenantsSilentStreamsLeaveAnotherTenantItsShare) {
  ASSERT_TRUE(StartServer({"--job_tokens_file=" + WriteTokens()}));
  constexpr int kSilent = 1100;
  constexpr int kShare = 1024;  // --max_streams_per_tenant's default
  SilentStreamsOf silent(server()->address(), kTokenA, kSilent);
  const std::vector<grpc::Status> refused =
      silent.AwaitEnded(kSilent - kShare, absl::Now() + absl::Seconds(20));
  ASSERT_EQ(refused.size(), static_cast<size_t>(kSilent - kShare));
  for (const grpc::Status& status : refused) {
    EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
        << status.error_message();
  }
  EXPECT_THAT(
      FromGrpcStatus(refused[0]),
      StatusIs(absl::StatusCode::kResourceExhausted,
               HasSubstr(absl::StrCat("tenant ", Job("a"),
                                      " already holds 1024 "
                                      "collective streams "
                                      "(--max_streams_per_tenant=1024"))));

  // B, from the same address (a raw session's channel is 127.0.0.1 too).
  absl::StatusOr<std::unique_ptr<RawSession>> b = RawSession::Join(
      server()->address(), Job("b"), 0, 1, absl::Seconds(30), kTokenB);
  ASSERT_TRUE(b.ok()) << b.status();
  for (bool many_calls : {true, false}) {
    v1::CollectiveRequest request = ZerosRequest(**b);
    request.mutable_header()->set_name(many_calls ? "shared" : "own");
    if (many_calls) request.set_call_id(1);
    const RawCallResult served = (*b)->Call({request}, absl::Seconds(10),
                                            /*half_close=*/true, many_calls);
    EXPECT_THAT(served.status, IsOk());
    EXPECT_EQ(served.data, std::string(16, '\0'))
        << (many_calls ? "Collectives" : "Collective");
  }
  // A's streams are all still open: none ended but those refused.
  EXPECT_EQ(silent.AwaitEnded(kSilent, absl::Now()).size(), refused.size());
}

// A stream that sends nothing is closed by reducerd once
// --stream_idle_timeout passed (UNAVAILABLE naming the flag), long before
// its client's own deadline would end it.
TEST_F(StreamBoundsTest, AStreamOnWhichNothingHappensIsClosed) {
  ASSERT_TRUE(StartServer({"--stream_idle_timeout=2s"}));
  std::unique_ptr<v1::Reducer::Stub> stub =
      v1::Reducer::NewStub(grpc::CreateChannel(
          server()->address(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext one_context;
  grpc::ClientContext many_context;
  for (grpc::ClientContext* context : {&one_context, &many_context}) {
    context->set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(45)));
  }
  auto one = stub->Collective(&one_context);
  auto many = stub->Collectives(&many_context);
  for (auto* stream : {one.get(), many.get()}) {
    v1::CollectiveResponse response;
    EXPECT_FALSE(stream->Read(&response));
    EXPECT_THAT(FromGrpcStatus(stream->Finish()),
                StatusIs(absl::StatusCode::kUnavailable,
                         HasSubstr("nothing happened on it for "
                                   "--stream_idle_timeout=2s")));
  }
}

// Slow but live: rank 0 sends its payload on a Collective stream one chunk
// a second, for three timeouts, and rank 1 waits on its Collectives
// stream for it all that while; neither stream is cut, and both get the
// sum.
TEST_F(StreamBoundsTest, SlowChunksAndACallWaitingForThemAreNotCut) {
  ASSERT_TRUE(StartServer({"--stream_idle_timeout=2s"}));
  absl::StatusOr<std::unique_ptr<RawSession>> ranks[2];
  std::thread join0([&] {
    ranks[0] =
        RawSession::Join(server()->address(), Job(), 0, 2, absl::Seconds(30));
  });
  ranks[1] =
      RawSession::Join(server()->address(), Job(), 1, 2, absl::Seconds(30));
  join0.join();
  ASSERT_TRUE(ranks[0].ok() && ranks[1].ok())
      << ranks[0].status() << " " << ranks[1].status();
  RawSession& slow = **ranks[0];
  RawSession& waiting = **ranks[1];

  // float32 [28]: seven chunks of 16 bytes; rank r's values are all r + 1.
  constexpr int kChunks = 7;
  constexpr int kChunkBytes = 16;
  auto ones_times = [](float value, int floats) {
    std::string bytes(floats * sizeof(float), '\0');
    for (int i = 0; i < floats; ++i) {
      std::memcpy(&bytes[i * sizeof(float)], &value, sizeof(float));
    }
    return bytes;
  };
  v1::CollectiveRequest whole = waiting.AllReduceRequest({4 * kChunks});
  whole.mutable_header()->set_timeout_ms(30000);
  whole.set_call_id(1);
  whole.set_data(ones_times(2, 4 * kChunks));
  RawCallResult waited;
  std::thread waiter([&] {
    waited = waiting.Call({whole}, absl::Seconds(40), /*half_close=*/true,
                          /*many_calls=*/true);
  });

  std::unique_ptr<v1::Reducer::Stub> stub =
      v1::Reducer::NewStub(grpc::CreateCustomChannel(
          server()->address(), grpc::InsecureChannelCredentials(),
          RawChannelArguments()));
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(40)));
  auto stream = stub->Collective(&context);
  for (int chunk = 0; chunk < kChunks; ++chunk) {
    v1::CollectiveRequest message;
    if (chunk == 0) {
      message = slow.AllReduceRequest({4 * kChunks});
      message.mutable_header()->set_timeout_ms(30000);
    } else {
      absl::SleepFor(absl::Seconds(1));
    }
    message.set_offset(chunk * kChunkBytes);
    message.set_data(ones_times(1, kChunkBytes / sizeof(float)));
    ASSERT_TRUE(stream->Write(message)) << "chunk " << chunk;
  }
  ASSERT_TRUE(stream->WritesDone());
  std::string sum;
  v1::CollectiveResponse response;
  while (stream->Read(&response)) sum += response.data();
  EXPECT_THAT(FromGrpcStatus(stream->Finish()), IsOk());
  EXPECT_EQ(sum, ones_times(3, 4 * kChunks));

  waiter.join();
  EXPECT_THAT(waited.status, IsOk());
  ASSERT_FALSE(waited.responses.empty());
  EXPECT_THAT(FromCallStatus(waited.responses.back().status()), IsOk());
  EXPECT_EQ(waited.data, ones_times(3, 4 * kChunks));
}

// A job of the client library that pauses for longer than the timeout
// between calls (an evaluation, a checkpoint) goes on unharmed: its shared
// stream was closed meanwhile, and its next call is sent again on a new
// one.
TEST_F(StreamBoundsTest, AJobThatPausesLongerThanTheTimeoutGoesOn) {
  ASSERT_TRUE(StartServer({"--stream_idle_timeout=1s"}));
  std::vector<std::unique_ptr<ChildProcess>> workers =
      StartJob(Job(), 2,
               {"allreduce;allreduce:shape=600000;sleep:ms=3000;allreduce;"
                "allreduce:shape=600000"});
  std::vector<ProcessResult> done = WaitWorkers(workers);
  ASSERT_EQ(done.size(), 2u);
  for (const ProcessResult& worker : done) {
    for (const char* step : {"1", "2", "4", "5"}) {
      ExpectStep(worker, step, absl::StatusCode::kOk);
    }
  }
}

}  // namespace
}  // namespace testing
}  // namespace reducer
