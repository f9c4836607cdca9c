#include "client/transport/grpc/async_stream.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/transport/grpc/completion_driver.h"
#include "gmock/gmock.h"
#include "grpcpp/generic/async_generic_service.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/reducer/v1/byte_buffer_testing.h"

namespace reducer {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::UnorderedElementsAre;

constexpr char kEchoMethod[] = "/test.Echo/Echo";
// Echoes the first message, then ends the call with kRefusal.
constexpr char kRefuseMethod[] = "/test.Echo/Refuse";
constexpr absl::Duration kLimit = absl::Seconds(20);

grpc::ByteBuffer Bytes(const std::string& text) {
  grpc::Slice slice(text);
  return grpc::ByteBuffer(&slice, 1);
}

// The server side, in process: echoes each message back; on kRefuseMethod
// it ends the call with FAILED_PRECONDITION after the first echo. Finishes
// OK once the client half-closes. Self-deleting.
class EchoReactor final : public grpc::ServerGenericBidiReactor {
 public:
  explicit EchoReactor(bool refuse) : refuse_(refuse) { StartRead(&in_); }
  void OnReadDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status::OK);
      return;
    }
    out_ = in_;
    StartWrite(&out_);
  }
  void OnWriteDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status::OK);
    } else if (refuse_) {
      Finish(grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "refused"));
    } else {
      StartRead(&in_);
    }
  }
  void OnDone() override { delete this; }

 private:
  const bool refuse_;
  grpc::ByteBuffer in_;
  grpc::ByteBuffer out_;
};

class EchoService final : public grpc::CallbackGenericService {
 public:
  grpc::ServerGenericBidiReactor* CreateReactor(
      grpc::GenericCallbackServerContext* context) override {
    return new EchoReactor(context->method() == kRefuseMethod);
  }
};

// An owner of one AsyncStream that records every callback, in order.
class Recorder final : public AsyncStream::Observer {
 public:
  explicit Recorder(CompletionDriver* driver) : stream_(driver, &mu_, this) {}

  void OnStarted(bool ok) override {
    mu_.AssertHeld();
    events_.push_back(ok ? "started" : "start failed");
  }
  void OnRead(grpc::ByteBuffer* message) override {
    mu_.AssertHeld();
    reads_.push_back(FlattenByteBuffer(*message));
  }
  bool WantsMoreReads() override {
    mu_.AssertHeld();
    return static_cast<int>(reads_.size()) < reads_wanted_;
  }
  void OnReadsEnded() override {
    mu_.AssertHeld();
    events_.push_back("reads ended");
  }
  void OnWritten(uint64_t id, bool ok) override {
    mu_.AssertHeld();
    (ok ? written_ : dropped_).push_back(id);
  }
  void OnFinished(const grpc::Status& status) override {
    mu_.AssertHeld();
    events_.push_back("finished");
    status_ = status;
  }
  void OnDone() override {
    mu_.AssertHeld();
    events_.push_back("done");
    // The stream is done here: the owner could destroy it.
    EXPECT_TRUE(stream_.done());
  }

  absl::Mutex mu_;
  AsyncStream stream_;
  std::vector<std::string> events_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> reads_ ABSL_GUARDED_BY(mu_);
  std::vector<uint64_t> written_ ABSL_GUARDED_BY(mu_);
  std::vector<uint64_t> dropped_ ABSL_GUARDED_BY(mu_);
  grpc::Status status_ ABSL_GUARDED_BY(mu_);
  // With reads on demand: how many messages it wants read in all.
  int reads_wanted_ ABSL_GUARDED_BY(mu_) = 0;
};

class AsyncStreamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    builder.RegisterCallbackGenericService(&service_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    channel_ = server_->InProcessChannel(grpc::ChannelArguments());
    stub_ = std::make_unique<grpc::GenericStub>(channel_);
  }
  void TearDown() override { server_->Shutdown(); }

  // Drives the queue until `recorder`'s stream is done; false after kLimit.
  bool DriveUntilDone(Recorder* recorder) {
    return driver_.DriveUntil(
        [recorder] {
          absl::MutexLock lock(&recorder->mu_);
          return recorder->stream_.done();
        },
        absl::Now() + kLimit);
  }

  EchoService service_;
  std::unique_ptr<grpc::Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<grpc::GenericStub> stub_;
  CompletionDriver driver_;  // after the stub: destroyed before it
};

TEST_F(AsyncStreamTest, WritesInOrderReadsEveryAnswerAndReportsEachOnce) {
  Recorder recorder(&driver_);
  {
    absl::MutexLock lock(&recorder.mu_);
    EXPECT_FALSE(recorder.stream_.started());
    recorder.stream_.Start(stub_.get(), kEchoMethod);
    EXPECT_TRUE(recorder.stream_.started());
    // Queued behind the start, written one at a time, in order.
    EXPECT_TRUE(recorder.stream_.Write(7, Bytes("a"), false));
    EXPECT_TRUE(recorder.stream_.Write(8, Bytes("bb"), false));
    EXPECT_TRUE(recorder.stream_.Write(9, Bytes("ccc"), /*last=*/true));
  }
  ASSERT_TRUE(DriveUntilDone(&recorder));
  absl::MutexLock lock(&recorder.mu_);
  EXPECT_THAT(recorder.reads_, ElementsAre("a", "bb", "ccc"));
  EXPECT_THAT(recorder.written_, ElementsAre(7, 8, 9));
  EXPECT_THAT(recorder.dropped_, IsEmpty());
  EXPECT_THAT(recorder.events_,
              ElementsAre("started", "reads ended", "finished", "done"));
  EXPECT_TRUE(recorder.status_.ok()) << recorder.status_.error_message();
  EXPECT_TRUE(recorder.stream_.status().ok());
  // After the half-close nothing more is taken.
  EXPECT_FALSE(recorder.stream_.Write(10, Bytes("late"), false));
}

TEST_F(AsyncStreamTest, UnqueuedMessagesAreNeitherSentNorReported) {
  Recorder recorder(&driver_);
  {
    absl::MutexLock lock(&recorder.mu_);
    recorder.stream_.Start(stub_.get(), kEchoMethod);
    ASSERT_TRUE(recorder.stream_.Write(1, Bytes("one"), false));
    ASSERT_TRUE(recorder.stream_.Write(2, Bytes("two"), false));
    ASSERT_TRUE(recorder.stream_.Write(3, Bytes("three"), /*last=*/true));
    // The start holds the write slot (its completion needs mu_, held here),
    // so every message is still queued.
    EXPECT_EQ(recorder.stream_.Unqueue(2), AsyncStream::Unqueued::kRemoved);
    EXPECT_EQ(recorder.stream_.Unqueue(2), AsyncStream::Unqueued::kAbsent);
    EXPECT_EQ(recorder.stream_.Unqueue(42), AsyncStream::Unqueued::kAbsent);
  }
  ASSERT_TRUE(DriveUntilDone(&recorder));
  absl::MutexLock lock(&recorder.mu_);
  EXPECT_THAT(recorder.reads_, ElementsAre("one", "three"));
  EXPECT_THAT(recorder.written_, ElementsAre(1, 3));
  EXPECT_THAT(recorder.dropped_, IsEmpty());
}

TEST_F(AsyncStreamTest, ServerStatusEndsTheStreamAndUnwrittenMessagesAreDropped) {
  Recorder recorder(&driver_);
  {
    absl::MutexLock lock(&recorder.mu_);
    recorder.stream_.Start(stub_.get(), kRefuseMethod);
    ASSERT_TRUE(recorder.stream_.Write(1, Bytes("first"), false));
  }
  // The echo of the first message arrives before the server's refusal.
  ASSERT_TRUE(driver_.DriveUntil(
      [&recorder] {
        absl::MutexLock lock(&recorder.mu_);
        return !recorder.reads_.empty();
      },
      absl::Now() + kLimit));
  ASSERT_TRUE(DriveUntilDone(&recorder));
  absl::MutexLock lock(&recorder.mu_);
  EXPECT_THAT(recorder.reads_, ElementsAre("first"));
  EXPECT_THAT(recorder.written_, ElementsAre(1));
  EXPECT_EQ(recorder.status_.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(recorder.status_.error_message(), "refused");
  EXPECT_EQ(recorder.stream_.status().error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(recorder.events_.back(), "done");
  // Once finished, a message is refused rather than queued forever.
  EXPECT_FALSE(recorder.stream_.Write(2, Bytes("second"), false));
}

TEST_F(AsyncStreamTest, CancelEndsTheCallAndReportsEveryQueuedMessageOnce) {
  Recorder recorder(&driver_);
  {
    absl::MutexLock lock(&recorder.mu_);
    recorder.stream_.Start(stub_.get(), kEchoMethod);
    for (uint64_t id = 0; id < 5; ++id) {
      ASSERT_TRUE(recorder.stream_.Write(id, Bytes("x"), false));
    }
    recorder.stream_.Cancel();
  }
  ASSERT_TRUE(DriveUntilDone(&recorder));
  absl::MutexLock lock(&recorder.mu_);
  EXPECT_EQ(recorder.status_.error_code(), grpc::StatusCode::CANCELLED);
  // Each message either went out or was dropped, never both, never lost.
  std::vector<uint64_t> all = recorder.written_;
  all.insert(all.end(), recorder.dropped_.begin(), recorder.dropped_.end());
  EXPECT_THAT(all, UnorderedElementsAre(0, 1, 2, 3, 4));
  EXPECT_EQ(recorder.events_.back(), "done");
  EXPECT_EQ(std::count(recorder.events_.begin(), recorder.events_.end(), "done"),
            1);
}

TEST_F(AsyncStreamTest, DeadlineOnTheContextEndsACallTheServerNeverEnds) {
  Recorder recorder(&driver_);
  {
    absl::MutexLock lock(&recorder.mu_);
    recorder.stream_.context()->set_deadline(
        absl::ToChronoTime(absl::Now() + absl::Milliseconds(200)));
    recorder.stream_.Start(stub_.get(), kEchoMethod);
    // No half-close: the echo server would wait for more.
    ASSERT_TRUE(recorder.stream_.Write(1, Bytes("ping"), false));
  }
  const absl::Time start = absl::Now();
  ASSERT_TRUE(DriveUntilDone(&recorder));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(150));
  absl::MutexLock lock(&recorder.mu_);
  EXPECT_EQ(recorder.status_.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_THAT(recorder.reads_, ElementsAre("ping"));
}

// Reads on demand: a message waits in gRPC until a read is asked for, and
// one read is posted at a time, never one nobody wants.
TEST_F(AsyncStreamTest, ReadsOnDemandReadOnlyWhatIsWanted) {
  Recorder recorder(&driver_);
  // Writes `text` as message `id` and drives until it is written.
  auto write = [&](uint64_t id, const std::string& text, bool last) {
    {
      absl::MutexLock lock(&recorder.mu_);
      ASSERT_TRUE(recorder.stream_.Write(id, Bytes(text), last));
    }
    ASSERT_TRUE(driver_.DriveUntil(
        [&recorder, id] {
          absl::MutexLock lock(&recorder.mu_);
          return !recorder.written_.empty() && recorder.written_.back() == id;
        },
        absl::Now() + kLimit));
  };
  // Drives for a while, then returns what was read.
  auto reads_after_a_while = [&] {
    driver_.DriveUntil([] { return false; }, absl::Now() + absl::Milliseconds(100));
    absl::MutexLock lock(&recorder.mu_);
    return recorder.reads_;
  };
  {
    absl::MutexLock lock(&recorder.mu_);
    recorder.stream_.set_reads_on_demand();
    recorder.stream_.Start(stub_.get(), kEchoMethod);
    recorder.reads_wanted_ = 1;
  }
  write(1, "one", false);
  // Its echo is not read before a read is asked for.
  EXPECT_THAT(reads_after_a_while(), IsEmpty());
  {
    absl::MutexLock lock(&recorder.mu_);
    recorder.stream_.ReadIfIdle();
    recorder.stream_.ReadIfIdle();  // one read at a time: no-op
  }
  EXPECT_THAT(reads_after_a_while(), ElementsAre("one"));
  // One message wanted: the next echo stays unread.
  write(2, "two", false);
  EXPECT_THAT(reads_after_a_while(), ElementsAre("one"));
  {
    absl::MutexLock lock(&recorder.mu_);
    // The rest, and the server's end, learned at the read after the last.
    recorder.reads_wanted_ = 4;
    recorder.stream_.ReadIfIdle();
  }
  write(3, "three", /*last=*/true);
  ASSERT_TRUE(DriveUntilDone(&recorder));
  absl::MutexLock lock(&recorder.mu_);
  EXPECT_THAT(recorder.reads_, ElementsAre("one", "two", "three"));
  EXPECT_TRUE(recorder.status_.ok()) << recorder.status_.error_message();
}

// A stream with no read in flight still ends when cancelled: Cancel issues
// the read that brings its status.
TEST_F(AsyncStreamTest, CancellingAStreamThatIsNotReadingEndsIt) {
  Recorder recorder(&driver_);
  {
    absl::MutexLock lock(&recorder.mu_);
    recorder.stream_.set_reads_on_demand();
    recorder.stream_.Start(stub_.get(), kEchoMethod);
    ASSERT_TRUE(recorder.stream_.Write(1, Bytes("one"), false));
  }
  ASSERT_TRUE(driver_.DriveUntil(
      [&recorder] {
        absl::MutexLock lock(&recorder.mu_);
        return recorder.written_.size() == 1;
      },
      absl::Now() + kLimit));
  {
    absl::MutexLock lock(&recorder.mu_);
    recorder.stream_.Cancel();
  }
  ASSERT_TRUE(DriveUntilDone(&recorder));
  absl::MutexLock lock(&recorder.mu_);
  EXPECT_EQ(recorder.status_.error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_EQ(recorder.events_.back(), "done");
}

}  // namespace
}  // namespace reducer
