// The client's half of the same-host path against a fake reducerd played by
// the test itself on a real abstract socket, with real memfds: the
// handshake's checks, inline and segment payloads both ways, the release of
// result ranges, results lent from the segment to a waiting in-place call,
// cancellation, and a reducerd that misbehaves or goes away.
#include "client/transport/shm/backend.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstddef>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/transport/shm/handshake.h"
#include "core/data_type.h"
#include "core/payload_layout.h"
#include "core/shm/control_segment.h"
#include "core/shm/fd_passing.h"
#include "core/shm/shared_segment.h"
#include "core/shm/unique_fd.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/reducer/v1/reducer.pb.h"
#include "tests/matchers.h"

namespace reducer {
namespace {

constexpr size_t kSegmentBytes = 8 << 20;

// reducerd's side, played by the test: listens on an abstract socket,
// answers one hello, then reads requests and writes responses by hand.
class FakeReducerd {
 public:
  FakeReducerd() {
    name_ = absl::StrCat("reducer-test-", getpid(), "-",
                         reinterpret_cast<uintptr_t>(this));
    listener_.reset(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path + 1, name_.data(), name_.size());
    const socklen_t len = offsetof(sockaddr_un, sun_path) + 1 + name_.size();
    EXPECT_EQ(::bind(listener_.get(), reinterpret_cast<sockaddr*>(&addr), len),
              0);
    EXPECT_EQ(::listen(listener_.get(), 4), 0);
  }

  const std::string& name() const { return name_; }

  // Accepts one client and answers its hello: with `refusal` when not OK,
  // else OK with a result segment holding `nonce_in_segment` (the welcome
  // names `nonce_named`; they differ only to test the client's check).
  void AnswerHello(absl::Status refusal = absl::OkStatus(),
                   std::string nonce_named = std::string(16, 'r'),
                   std::string nonce_in_segment = std::string(16, 'r')) {
    conn_.reset(::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
    ASSERT_TRUE(conn_.valid());
    absl::StatusOr<Received> hello = ReceiveWithFds(
        conn_.get(), 1 << 16, 2, absl::Now() + absl::Seconds(10));
    ASSERT_THAT(hello, IsOk());
    ASSERT_TRUE(hello_.ParseFromString(hello->bytes));
    ASSERT_EQ(hello->fds.size(), 2u);
    absl::StatusOr<std::unique_ptr<ControlSegment>> control =
        ControlSegment::Adopt(hello->fds[0].release());
    ASSERT_THAT(control, IsOk());
    control_ = *std::move(control);
    absl::StatusOr<SharedSegment> input = SharedSegment::Adopt(
        hello->fds[1].release(), SharedSegment::Access::kReadOnly);
    ASSERT_THAT(input, IsOk());
    input_ = std::make_unique<SharedSegment>(*std::move(input));
    v1::SharedMemoryWelcome welcome;
    if (!refusal.ok()) {
      welcome.mutable_status()->set_code(static_cast<int>(refusal.code()));
      welcome.mutable_status()->set_message(std::string(refusal.message()));
      ASSERT_THAT(SendWithFds(conn_.get(), welcome.SerializeAsString(), {}),
                  IsOk());
      return;
    }
    absl::StatusOr<SharedSegment> result =
        SharedSegment::Create("reducer-result", kSegmentBytes);
    ASSERT_THAT(result, IsOk());
    result_ = std::make_unique<SharedSegment>(*std::move(result));
    std::memcpy(result_->data(), nonce_in_segment.data(),
                nonce_in_segment.size());
    welcome.set_nonce(nonce_named);
    const int fds[] = {result_->fd()};
    ASSERT_THAT(SendWithFds(conn_.get(), welcome.SerializeAsString(), fds),
                IsOk());
  }

  // The next request record, parsed; waits up to 10 s.
  v1::CollectiveRequest NextRequest() {
    v1::CollectiveRequest request;
    std::string record;
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (absl::Now() < deadline) {
      const uint32_t seen = control_->requests().data_bell().value();
      absl::StatusOr<bool> popped = control_->requests().TryPop(&record);
      EXPECT_THAT(popped, IsOk());
      if (popped.ok() && *popped) {
        EXPECT_TRUE(request.ParseFromString(record));
        return request;
      }
      (void)control_->requests().data_bell().WaitChange(
          seen, absl::Now() + absl::Milliseconds(100));
    }
    ADD_FAILURE() << "no request record within 10 s";
    return request;
  }

  // True when no request record comes within `wait`.
  bool NoRequestWithin(absl::Duration wait) {
    const absl::Time deadline = absl::Now() + wait;
    std::string record;
    while (absl::Now() < deadline) {
      absl::StatusOr<bool> popped = control_->requests().TryPop(&record);
      EXPECT_THAT(popped, IsOk());
      if (!popped.ok() || *popped) return false;
      absl::SleepFor(absl::Milliseconds(5));
    }
    return true;
  }

  void Respond(const v1::CollectiveResponse& response) {
    ASSERT_THAT(control_->responses().Push(response.SerializeAsString(),
                                           absl::Now() + absl::Seconds(10)),
                IsOk());
  }

  void CloseConnection() { conn_.reset(); }

  const v1::SharedMemoryHello& hello() const { return hello_; }
  ControlSegment& control() { return *control_; }
  const SharedSegment& input() const { return *input_; }
  SharedSegment& result() { return *result_; }

 private:
  std::string name_;
  UniqueFd listener_;
  UniqueFd conn_;
  v1::SharedMemoryHello hello_;
  std::unique_ptr<ControlSegment> control_;
  std::unique_ptr<SharedSegment> input_;
  std::unique_ptr<SharedSegment> result_;
};

v1::SharedMemoryHello Hello() {
  v1::SharedMemoryHello hello;
  hello.set_job("j");
  hello.set_session_id("s-1");
  hello.set_rank(3);
  hello.set_token("t0k3n");
  return hello;
}

// A float32 contribution of `values`.
struct FloatContribution {
  explicit FloatContribution(std::vector<float> v) : values(std::move(v)) {
    const TensorSpec spec{DataType::kFloat32,
                          {static_cast<int64_t>(values.size())},
                          ReduceOp::kSum};
    contribution.layout = *ComputePayloadLayout({spec});
    contribution.inputs.push_back(values.data());
    contribution.header.set_job("j");
    contribution.header.set_rank(3);
    contribution.deadline = absl::Now() + absl::Seconds(20);
  }
  std::vector<float> values;
  Contribution contribution;
};

v1::CollectiveResponse FloatResult(uint64_t call_id, size_t elements) {
  v1::CollectiveResponse response;
  response.set_call_id(call_id);
  response.mutable_status();  // OK
  v1::TensorSpec* spec = response.add_result();
  spec->set_dtype(v1::DATA_TYPE_FLOAT32);
  spec->add_shape(static_cast<int64_t>(elements));
  return response;
}

// A result range of `elements` floats at `at` in the fake's result segment,
// element i holding `scale` * i, announced as the response to `call_id`.
v1::CollectiveResponse RangeResult(FakeReducerd& fake, uint64_t call_id,
                                   uint64_t at, size_t elements, float scale) {
  float* out =
      reinterpret_cast<float*>(static_cast<char*>(fake.result().data()) + at);
  for (size_t i = 0; i < elements; ++i) out[i] = scale * i;
  v1::CollectiveResponse response = FloatResult(call_id, elements);
  response.mutable_data_range()->set_offset(at);
  response.mutable_data_range()->set_size(elements * 4);
  return response;
}

// A channel to `fake` through the real handshake.
absl::StatusOr<SharedMemoryChannel> Connect(FakeReducerd& fake,
                                            std::function<void()> answer) {
  std::thread server(std::move(answer));
  absl::StatusOr<SharedMemoryChannel> channel = ShakeHands(
      fake.name(), Hello(), kSegmentBytes, absl::Now() + absl::Seconds(10));
  server.join();
  return channel;
}

TEST(SharedMemoryHandshakeTest,
     HelloCarriesTheSessionAndTheControlSegmentsNonce) {
  FakeReducerd fake;
  absl::StatusOr<SharedMemoryChannel> channel =
      Connect(fake, [&] { fake.AnswerHello(); });
  ASSERT_THAT(channel, IsOk());
  EXPECT_EQ(fake.hello().job(), "j");
  EXPECT_EQ(fake.hello().session_id(), "s-1");
  EXPECT_EQ(fake.hello().rank(), 3);
  EXPECT_EQ(fake.hello().token(), "t0k3n");
  ASSERT_EQ(fake.hello().nonce().size(), ControlSegment::kNonceBytes);
  // reducerd reads the same nonce in its own mapping of the control segment.
  EXPECT_EQ(fake.control().nonce(), fake.hello().nonce());
  EXPECT_EQ(channel->input->size(), kSegmentBytes);
  EXPECT_EQ(channel->result->access(), SharedSegment::Access::kReadOnly);
}

TEST(SharedMemoryHandshakeTest, RefusalKeepsReducerdsCodeAndReason) {
  FakeReducerd fake;
  absl::StatusOr<SharedMemoryChannel> channel = Connect(fake, [&] {
    fake.AnswerHello(absl::PermissionDeniedError("token of another job"));
  });
  EXPECT_THAT(channel,
              StatusIs(absl::StatusCode::kPermissionDenied,
                       HasSubstr("reducerd refused the same-host path: "
                                 "token of another job")));
}

TEST(SharedMemoryHandshakeTest, ResultSegmentWithoutTheNamedNonceIsRefused) {
  FakeReducerd fake;
  absl::StatusOr<SharedMemoryChannel> channel = Connect(fake, [&] {
    fake.AnswerHello(absl::OkStatus(), std::string(16, 'a'),
                     std::string(16, 'b'));
  });
  EXPECT_THAT(channel, StatusIs(absl::StatusCode::kDataLoss,
                                HasSubstr("does not map the same memory")));
}

TEST(SharedMemoryHandshakeTest, UnreachableSocketIsUnavailableNamingIt) {
  absl::StatusOr<SharedMemoryChannel> channel =
      ShakeHands("reducer-test-nobody-listens-here", Hello(), kSegmentBytes,
                 absl::Now() + absl::Seconds(5));
  EXPECT_THAT(channel,
              StatusIs(absl::StatusCode::kUnavailable,
                       AllOf(HasSubstr("@reducer-test-nobody-listens-here"),
                             HasSubstr("another host"))));
}

TEST(SharedMemoryHandshakeTest,
     SegmentThatDoesNotFitIsRefusedBeforeConnecting) {
  absl::StatusOr<SharedMemoryChannel> channel =
      ShakeHands("reducer-test-never-reached", Hello(), size_t{1} << 50,
                 absl::Now() + absl::Seconds(5));
  EXPECT_THAT(channel, StatusIs(absl::StatusCode::kResourceExhausted));
}

class SharedMemoryBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<SharedMemoryChannel> channel =
        Connect(fake_, [&] { fake_.AnswerHello(); });
    ASSERT_THAT(channel, IsOk());
    backend_ = std::make_unique<SharedMemoryBackend>(*std::move(channel),
                                                     "127.0.0.1:1", nullptr);
  }

  // The float32 elements of the all-reduce whose result may be lent.
  static constexpr size_t kLentFloats = 100000;

  // Starts `c` through TryStart; the request the fake received for it in
  // request_. Null if the backend declined it.
  std::unique_ptr<CollectiveAttempt> Start(FloatContribution& c) {
    std::unique_ptr<CollectiveAttempt> attempt =
        backend_->TryStart(c.contribution);
    if (attempt != nullptr) request_ = fake_.NextRequest();
    return attempt;
  }
  // Starts lendable_, an all-reduce whose result may be lent, as Start.
  std::unique_ptr<CollectiveAttempt> StartLendable() {
    lendable_.contribution.result_may_be_lent = true;
    return Start(lendable_);
  }
  // The response to lendable_'s request: its result in the fake's result
  // segment at `at`, element i holding `scale` * i.
  v1::CollectiveResponse LendableResult(uint64_t at, float scale) {
    return RangeResult(fake_, request_.call_id(), at, kLentFloats, scale);
  }
  // Checks that the fake's next request hands back the result range of
  // `bytes` at `at`, and nothing else.
  void ExpectReleased(uint64_t at, size_t bytes) {
    v1::CollectiveRequest release = fake_.NextRequest();
    EXPECT_EQ(release.call_id(), 0u);
    ASSERT_EQ(release.released_size(), 1);
    EXPECT_EQ(release.released(0).offset(), at);
    EXPECT_EQ(release.released(0).size(), bytes);
  }
  // What Wait() returns when `response` comes while a caller waits.
  absl::StatusOr<std::vector<Tensor>> WaitWhileAnswered(
      CollectiveAttempt& attempt, const v1::CollectiveResponse& response) {
    absl::StatusOr<std::vector<Tensor>> result;
    std::thread waiter([&] { result = attempt.Wait(); });
    absl::SleepFor(absl::Milliseconds(300));  // the caller is in Wait() now
    fake_.Respond(response);
    waiter.join();
    return result;
  }
  // Float `i` of the result range at `at`, in the fake's result segment.
  float& ResultFloatAt(uint64_t at, size_t i) {
    return static_cast<float*>(
        static_cast<void*>(static_cast<char*>(fake_.result().data()) + at))[i];
  }

  FloatContribution lendable_{std::vector<float>(kLentFloats, 1.0f)};
  v1::CollectiveRequest request_;  // of the last call Start started
  FakeReducerd fake_;
  std::unique_ptr<SharedMemoryBackend> backend_;  // last: gone first
};

TEST_F(SharedMemoryBackendTest, SmallCallTravelsInlineBothWays) {
  FloatContribution c({1.5f, -2.0f});
  std::unique_ptr<CollectiveAttempt> attempt = Start(c);
  ASSERT_NE(attempt, nullptr);
  EXPECT_NE(request_.call_id(), 0u);
  EXPECT_EQ(request_.header().job(), "j");
  EXPECT_FALSE(request_.has_data_range());
  ASSERT_EQ(request_.data().size(), 8u);
  float sent[2];
  std::memcpy(sent, request_.data().data(), 8);
  EXPECT_EQ(sent[0], 1.5f);
  EXPECT_EQ(sent[1], -2.0f);

  v1::CollectiveResponse response = FloatResult(request_.call_id(), 2);
  const float reduced[2] = {6.0f, -8.0f};
  response.set_data(reduced, sizeof(reduced));
  fake_.Respond(response);
  absl::StatusOr<std::vector<Tensor>> result = attempt->Wait();
  ASSERT_THAT(result, IsOk());
  ASSERT_EQ(result->size(), 1u);
  const absl::Span<const float> got = result->at(0).values<float>();
  EXPECT_EQ(std::vector<float>(got.begin(), got.end()),
            (std::vector<float>{6.0f, -8.0f}));
  EXPECT_TRUE(attempt->received_any());
}

TEST_F(SharedMemoryBackendTest,
       LargeCallTravelsThroughTheSegmentsAndReleasesItsResult) {
  std::vector<float> values(100000);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i);
  FloatContribution c(values);
  std::unique_ptr<CollectiveAttempt> attempt = Start(c);
  ASSERT_NE(attempt, nullptr);
  ASSERT_TRUE(request_.has_data_range());
  EXPECT_TRUE(request_.data().empty());
  ASSERT_EQ(request_.data_range().size(), values.size() * 4);
  ASSERT_LE(request_.data_range().offset() + request_.data_range().size(),
            fake_.input().size());
  EXPECT_EQ(std::memcmp(static_cast<const char*>(fake_.input().data()) +
                            request_.data_range().offset(),
                        values.data(), values.size() * 4),
            0);

  // The "result": each input doubled, at offset 4096 of the result segment.
  constexpr uint64_t kAt = 4096;
  fake_.Respond(
      RangeResult(fake_, request_.call_id(), kAt, values.size(), 2.0f));
  absl::StatusOr<std::vector<Tensor>> result = attempt->Wait();
  ASSERT_THAT(result, IsOk());
  const absl::Span<const float> got = result->at(0).values<float>();
  ASSERT_EQ(got.size(), values.size());
  for (size_t i = 0; i < values.size(); i += 997) EXPECT_EQ(got[i], 2.0f * i);

  ExpectReleased(kAt, values.size() * 4);
}

TEST_F(SharedMemoryBackendTest,
       ResultMayBeLentToAWaitingCallerWhichHandsTheRangeBackOnDrop) {
  std::unique_ptr<CollectiveAttempt> attempt = StartLendable();
  ASSERT_NE(attempt, nullptr);
  constexpr uint64_t kAt = 8192;
  absl::StatusOr<std::vector<Tensor>> result =
      WaitWhileAnswered(*attempt, LendableResult(kAt, 3.0f));
  ASSERT_THAT(result, IsOk());
  ASSERT_EQ(result->size(), 1u);
  EXPECT_EQ(result->at(0).values<float>()[kLentFloats - 1],
            3.0f * (kLentFloats - 1));
  // Lent: the tensor shows what reducerd's segment holds, and the range is
  // not handed back while the tensor lives.
  ResultFloatAt(kAt, 7) = -1.0f;
  EXPECT_EQ(result->at(0).values<float>()[7], -1.0f);
  EXPECT_TRUE(fake_.NoRequestWithin(absl::Milliseconds(100)));
  // A copy is the caller's own.
  Tensor copy(result->at(0));
  EXPECT_EQ(copy.values<float>()[7], -1.0f);

  result = absl::UnknownError("dropped");
  ASSERT_NO_FATAL_FAILURE(ExpectReleased(kAt, kLentFloats * 4));
  EXPECT_EQ(copy.values<float>()[8], 3.0f * 8);
}

TEST_F(SharedMemoryBackendTest,
       ResultThatMayBeLentIsCopiedWhenItComesBeforeTheCallerWaits) {
  std::unique_ptr<CollectiveAttempt> attempt = StartLendable();
  ASSERT_NE(attempt, nullptr);
  constexpr uint64_t kAt = 4096;
  fake_.Respond(LendableResult(kAt, 2.0f));
  // Nobody waits: the reader thread takes the response, copies the result
  // out and hands its range back at once.
  ASSERT_NO_FATAL_FAILURE(ExpectReleased(kAt, kLentFloats * 4));
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (!attempt->Ready() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  absl::StatusOr<std::vector<Tensor>> result = attempt->Wait();
  ASSERT_THAT(result, IsOk());
  ResultFloatAt(kAt, 7) = -1.0f;
  EXPECT_EQ(result->at(0).values<float>()[7], 2.0f * 7);  // a copy
}

TEST_F(SharedMemoryBackendTest, LentResultOutlivingTheBackendStaysReadable) {
  std::unique_ptr<CollectiveAttempt> attempt = StartLendable();
  ASSERT_NE(attempt, nullptr);
  absl::StatusOr<std::vector<Tensor>> result =
      WaitWhileAnswered(*attempt, LendableResult(4096, 5.0f));
  ASSERT_THAT(result, IsOk());
  attempt.reset();
  backend_.reset();  // the session ends: nothing is handed back any more
  EXPECT_EQ(result->at(0).values<float>()[kLentFloats - 1],
            5.0f * (kLentFloats - 1));
  result = absl::UnknownError("dropped");
}

TEST_F(SharedMemoryBackendTest, ReducerdsErrorIsTheCallsOutcome) {
  FloatContribution c({1.0f});
  std::unique_ptr<CollectiveAttempt> attempt = Start(c);
  ASSERT_NE(attempt, nullptr);
  v1::CollectiveResponse response;
  response.set_call_id(request_.call_id());
  response.mutable_status()->set_code(
      static_cast<int>(absl::StatusCode::kAborted));
  response.mutable_status()->set_message("rank 1's session was lost");
  fake_.Respond(response);
  absl::StatusOr<std::vector<Tensor>> result = attempt->Wait();
  EXPECT_THAT(result, StatusIs(absl::StatusCode::kAborted,
                               HasSubstr("rank 1's session was lost")));
  EXPECT_TRUE(attempt->received_any());
}

TEST_F(SharedMemoryBackendTest, ResultRangeOutsideTheSegmentIsDataLoss) {
  FloatContribution c({1.0f});
  std::unique_ptr<CollectiveAttempt> attempt = Start(c);
  ASSERT_NE(attempt, nullptr);
  v1::CollectiveResponse response = FloatResult(request_.call_id(), 1);
  response.mutable_data_range()->set_offset(kSegmentBytes - 2);
  response.mutable_data_range()->set_size(4);
  fake_.Respond(response);
  absl::StatusOr<std::vector<Tensor>> result = attempt->Wait();
  EXPECT_THAT(result,
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("outside its")));
}

TEST_F(SharedMemoryBackendTest, CancelSendsTheCancelRecordAndReturnsAtOnce) {
  FloatContribution c({1.0f});
  std::unique_ptr<CollectiveAttempt> attempt = Start(c);
  ASSERT_NE(attempt, nullptr);
  attempt->Cancel();
  absl::StatusOr<std::vector<Tensor>> result = attempt->Wait();
  EXPECT_THAT(result, StatusIs(absl::StatusCode::kCancelled));
  v1::CollectiveRequest cancel = fake_.NextRequest();
  EXPECT_EQ(cancel.call_id(), request_.call_id());
  EXPECT_FALSE(cancel.has_header());
  EXPECT_TRUE(cancel.data().empty());
  EXPECT_EQ(cancel.released_size(), 0);
}

TEST_F(SharedMemoryBackendTest,
       ReducerdGoneFailsCallsInFlightAsRetryableAndDeclinesNewOnes) {
  FloatContribution c({1.0f});
  std::unique_ptr<CollectiveAttempt> attempt = Start(c);
  ASSERT_NE(attempt, nullptr);
  fake_.CloseConnection();
  absl::StatusOr<std::vector<Tensor>> result = attempt->Wait();
  EXPECT_THAT(result, StatusIs(absl::StatusCode::kUnavailable,
                               HasSubstr("socket closed")));
  EXPECT_FALSE(attempt->received_any());
  EXPECT_THAT(backend_->status(), Not(IsOk()));
  EXPECT_EQ(backend_->TryStart(c.contribution), nullptr);
}

TEST_F(SharedMemoryBackendTest, PayloadLargerThanTheSegmentIsDeclined) {
  FloatContribution c(std::vector<float>(kSegmentBytes / 4 + 1, 1.0f));
  EXPECT_EQ(backend_->TryStart(c.contribution), nullptr);
  std::unique_ptr<CollectiveAttempt> forced = backend_->Start(c.contribution);
  absl::StatusOr<std::vector<Tensor>> result = forced->Wait();
  EXPECT_THAT(result,
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("ClientOptions::shared_memory_bytes")));
}

}  // namespace
}  // namespace reducer
