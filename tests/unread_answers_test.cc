// A client that never reads its answers, against a real reducerd: a raw
// gRPC client sends 1 MiB all-gathers of a one-rank job on one Collectives
// stream, one after the other, and reads nothing. reducerd stops reading
// from the stream once the answers its client has not read exceed
// --window x --chunk_bytes, so the client's writes stall; the answers it
// holds unread keep their reservations in the memory budget (Admin.Status
// shows them); reducerd's resident memory stays within the budget plus a
// constant; and another job's all-reduce on the same reducerd completes.
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/reducer/v1/admin.grpc.pb.h"
#include "proto/reducer/v1/reducer.grpc.pb.h"
#include "proto/reducer/v1/reducer.pb.h"
#include "tests/fault_test_base.h"
#include "tests/raw_client.h"

namespace reducer {
namespace testing {
namespace {

constexpr int64_t kMiB = 1 << 20;
// The budget reducerd runs with: far below what the calls' answers add up
// to (kCalls MiB), so that answers held outside it show in its RSS.
constexpr int64_t kBudgetBytes = 256 * kMiB;
// What reducerd may grow by besides its budget while the client does not
// read: gRPC's buffers for the stream (what its flow-control windows let
// the client send before reducerd stopped reading, and the answer being
// written), its arenas' slack, and the healthy job's calls.
constexpr int64_t kUncountedBytes = 64 * kMiB;
constexpr int kCalls = 1024;
constexpr int64_t kFloats = kMiB / sizeof(float);  // 1 MiB per call
// One rank's reservation for such an all-gather on reducerd's defaults
// (--window=4, --chunk_bytes=1 MiB): min(1 MiB, 4 MiB) staged in and
// 4 MiB queued out.
constexpr int64_t kReservationBytes = kMiB + 4 * kMiB;

class UnreadAnswersTest : public FaultTest {
 protected:
  absl::Duration TimeLimit() const override { return absl::Seconds(120); }
};

// Admin.Status's memory_reserved_bytes (-1 if the call fails).
int64_t ReservedBytes(const std::string& address) {
  std::unique_ptr<v1::Admin::Stub> admin = v1::Admin::NewStub(
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
  v1::StatusResponse status;
  if (!admin->Status(&context, v1::StatusRequest(), &status).ok()) return -1;
  return static_cast<int64_t>(status.memory_reserved_bytes());
}

// Starts a thread that sends up to kCalls 1 MiB all-gathers of `session`'s
// one-rank job on `stream`, one after the other, counting those written,
// until a write fails (the stream ended).
std::thread SendAllGathers(
    grpc::ClientReaderWriter<v1::CollectiveRequest, v1::CollectiveResponse>*
        stream,
    const RawSession& session, std::atomic<int>* written) {
  return std::thread([stream, &session, written] {
    const std::string payload(kFloats * sizeof(float), 'x');
    for (int i = 0; i < kCalls; ++i) {
      v1::CollectiveRequest request;
      *request.mutable_header() =
          session.Header(v1::COLLECTIVE_KIND_ALL_GATHER);
      request.mutable_header()->set_sequence(i);
      v1::TensorSpec* spec = request.mutable_header()->add_tensors();
      spec->set_dtype(v1::DATA_TYPE_FLOAT32);
      spec->add_shape(kFloats);
      request.set_call_id(i + 1);
      request.set_data(payload);
      if (!stream->Write(request)) return;
      written->fetch_add(1);
    }
  });
}

TEST_F(UnreadAnswersTest, AClientThatNeverReadsIsSlowedAndHoldsOnlyBudget) {
  ASSERT_TRUE(
      StartServer({absl::StrCat("--memory_budget_bytes=", kBudgetBytes)}));
  absl::StatusOr<std::unique_ptr<RawSession>> hog = RawSession::Join(
      server()->address(), Job("hog"), 0, 1, absl::Seconds(30));
  ASSERT_TRUE(hog.ok()) << hog.status();
  const int64_t rss_before_kib = ServerRssKib();

  std::shared_ptr<grpc::Channel> channel = grpc::CreateCustomChannel(
      server()->address(), grpc::InsecureChannelCredentials(),
      RawChannelArguments());
  std::unique_ptr<v1::Reducer::Stub> stub = v1::Reducer::NewStub(channel);
  grpc::ClientContext context;
  std::unique_ptr<
      grpc::ClientReaderWriter<v1::CollectiveRequest, v1::CollectiveResponse>>
      stream = stub->Collectives(&context);
  std::atomic<int> written{0};
  std::thread writer = SendAllGathers(stream.get(), **hog, &written);

  // Until the client's writes stall (or all went): no write for 2 s.
  int last = -1;
  absl::Time last_change = absl::Now();
  const absl::Time give_up = absl::Now() + absl::Seconds(60);
  while (absl::Now() < give_up) {
    const int now_written = written.load();
    if (now_written == kCalls) break;
    if (now_written != last) {
      last = now_written;
      last_change = absl::Now();
    } else if (absl::Now() - last_change > absl::Seconds(2)) {
      break;
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
  const int64_t rss_after_kib = ServerRssKib();
  const int64_t reserved = ReservedBytes(server()->address());
  std::printf(
      "%d of %d calls written; reducerd VmRSS %lld KiB before, %lld "
      "KiB after; %lld bytes reserved\n",
      written.load(), kCalls, static_cast<long long>(rss_before_kib),
      static_cast<long long>(rss_after_kib), static_cast<long long>(reserved));

  // Slowed: reducerd stopped reading long before the last call.
  EXPECT_LT(written.load(), kCalls);
  // What the client makes reducerd hold is counted: at least the answer it
  // has not read keeps its rank's reservation.
  EXPECT_GE(reserved, kReservationBytes);
  // Nothing outside the budget grows without bound. (Sanitizer builds keep
  // their own heap accounting: no RSS bound there.)
  if (RssChecksApply()) {
    EXPECT_LE((rss_after_kib - rss_before_kib) * 1024,
              kBudgetBytes + kUncountedBytes)
        << "reducerd grew from " << rss_before_kib << " KiB to "
        << rss_after_kib << " KiB";
  }

  // Another job is unaffected.
  std::vector<std::unique_ptr<ChildProcess>> healthy =
      StartJob(Job("healthy"), 2, {"allreduce:shape=262144,timeout_ms=20000"});
  std::vector<ProcessResult> results = WaitWorkers(healthy);
  ASSERT_EQ(results.size(), 2u);
  for (const ProcessResult& r : results) {
    ExpectStep(r, "1", absl::StatusCode::kOk);
  }

  context.TryCancel();
  writer.join();
  stream->Finish();
}

// A client that takes none of its answers for --stream_idle_timeout is not
// slow but stopped: reducerd ends its stream (RESOURCE_EXHAUSTED, logged
// naming the bytes it has not read), and what they held goes back to the
// budget.
TEST_F(UnreadAnswersTest, AClientThatTakesNoAnswerForTheIdleTimeoutIsRefused) {
  ASSERT_TRUE(StartServer({absl::StrCat("--memory_budget_bytes=", kBudgetBytes),
                           "--stream_idle_timeout=2s"}));
  absl::StatusOr<std::unique_ptr<RawSession>> hog = RawSession::Join(
      server()->address(), Job("hog"), 0, 1, absl::Seconds(30));
  ASSERT_TRUE(hog.ok()) << hog.status();
  const int64_t reserved_before = ReservedBytes(server()->address());

  std::shared_ptr<grpc::Channel> channel = grpc::CreateCustomChannel(
      server()->address(), grpc::InsecureChannelCredentials(),
      RawChannelArguments());
  std::unique_ptr<v1::Reducer::Stub> stub = v1::Reducer::NewStub(channel);
  grpc::ClientContext context;
  // Ends the stream if reducerd never does, so that the test fails, not hangs.
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(60)));
  std::unique_ptr<
      grpc::ClientReaderWriter<v1::CollectiveRequest, v1::CollectiveResponse>>
      stream = stub->Collectives(&context);
  std::atomic<int> written{0};
  std::thread writer = SendAllGathers(stream.get(), **hog, &written);
  writer.join();  // its writes fail once reducerd ended the stream
  EXPECT_LT(written.load(), kCalls);
  v1::CollectiveResponse response;
  while (stream->Read(&response)) {
  }
  // The status waits behind the answers the client does not read, so
  // reducerd also cancels the stream; its log says why.
  const grpc::Status status = stream->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::CANCELLED)
      << status.error_message();
  EXPECT_THAT(
      server()->Stderr(),
      ::testing::AllOf(::testing::HasSubstr("answers its client has not read"),
                       ::testing::HasSubstr("--stream_idle_timeout=2s")));

  // What the unread answers held goes back: each held megabytes; what
  // stays is bookkeeping of the calls cut (bytes, kept for replays).
  constexpr int64_t kBookkeepingBytes = 64 << 10;
  int64_t reserved = ReservedBytes(server()->address());
  for (const absl::Time give_up = absl::Now() + absl::Seconds(10);
       reserved > reserved_before + kBookkeepingBytes && absl::Now() < give_up;
       reserved = ReservedBytes(server()->address())) {
    absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_LE(reserved, reserved_before + kBookkeepingBytes);
}

}  // namespace
}  // namespace testing
}  // namespace reducer
