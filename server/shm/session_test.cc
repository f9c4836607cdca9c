// SharedMemorySession in process, stepped by the test as its job's thread
// would, over a real JobDoor and JobRegistry (JobDoorTestEnv): the test is
// the client, pushing request records into the control segment and reading
// the response records back. Covered: a call answered inline, one whose
// payload and result lie in the segments (and the release of its result
// range), a header naming another rank failing only its call, a cancel,
// and the session ending on a record that does not parse, a release of a
// range never handed out, a closed socket and Stop(); the result ranges of
// a session that ends, kept while its client is connected and freed once
// it is not; and a client that takes no responses, whose requests the
// session stops taking.
#include "server/shm/session.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/shm/control_segment.h"
#include "core/shm/message_ring.h"
#include "core/shm/shared_segment.h"
#include "core/shm/unique_fd.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/reducer/v1/call_status.h"
#include "proto/reducer/v1/reducer.pb.h"
#include "server/jobs/attempt_cache.h"
#include "server/jobs/fake_job_channels.h"
#include "server/jobs/job_door_test_env.h"
#include "server/log.h"
#include "server/shm/results.h"
#include "tests/matchers.h"

namespace reducer {
namespace {

using Env = JobDoorTestEnv;

constexpr size_t kSegmentBytes = 1 << 20;
constexpr size_t kChunkBytes = 64 << 10;

// `n` float32 values i + 1, as bytes.
std::string Ramp(int n) {
  std::string bytes(n * sizeof(float), '\0');
  for (int i = 0; i < n; ++i) {
    const float v = i + 1;
    std::memcpy(bytes.data() + i * sizeof(float), &v, sizeof(v));
  }
  return bytes;
}

class SharedMemorySessionTest : public ::testing::Test {
 protected:
  // Joins job j (rank 0 as session s0) of `world` ranks and opens rank 0's
  // same-host session.
  void Open(int world = 1) {
    for (int rank = 0; rank < world; ++rank) {
      ASSERT_THAT(env_.Join("j", rank, world, absl::StrCat("s", rank)), IsOk());
    }
    absl::StatusOr<std::unique_ptr<SharedMemoryResults>> results =
        SharedMemoryResults::Create(kSegmentBytes);
    ASSERT_THAT(results, IsOk());
    results_ = *std::move(results);
    int sockets[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sockets), 0);
    client_socket_.reset(sockets[1]);
    absl::StatusOr<std::unique_ptr<ControlSegment>> control =
        ControlSegment::Create(std::string(ControlSegment::kNonceBytes, 'n'));
    ASSERT_THAT(control, IsOk());
    absl::StatusOr<std::unique_ptr<ControlSegment>> mine =
        ControlSegment::Adopt(dup((*control)->fd()));
    ASSERT_THAT(mine, IsOk());
    control_ = *std::move(mine);
    absl::StatusOr<SharedSegment> input =
        SharedSegment::Create("input", kSegmentBytes);
    ASSERT_THAT(input, IsOk());
    absl::StatusOr<SharedSegment> read_only = SharedSegment::Adopt(
        dup(input->fd()), SharedSegment::Access::kReadOnly);
    ASSERT_THAT(read_only, IsOk());
    input_.emplace(*std::move(input));
    SharedMemorySession::Parts parts{
        SharedMemoryPeer{"j", "s0", 0, getpid(), getuid(), 0},
        UniqueFd(sockets[0]), *std::move(control), *std::move(read_only),
        /*check_seat=*/nullptr};
    session_ = SharedMemorySession::Create(
        std::move(parts), results_.get(),
        env_.door().AttachWithToken(PresentedToken{}), kChunkBytes,
        max_unread_answer_bytes_, &log_);
  }
  void TearDown() override {
    if (session_ != nullptr) session_->End(absl::CancelledError("test over"));
  }

  void Push(const v1::CollectiveRequest& request) {
    ASSERT_THAT(control_->requests().TryPush(request.SerializeAsString()),
                IsOk());
  }
  // Rank 0's all-reduce call `call_id` of `data`, inline.
  static v1::CollectiveRequest Call(uint64_t call_id, const std::string& data) {
    v1::CollectiveRequest request;
    request.set_call_id(call_id);
    *request.mutable_header() = Env::AllReduce("j", "s0", 0);
    request.set_data(data);
    return request;
  }
  // Rank 0's all-reduce call 1 of `payload`, from the input segment's
  // start; its response (the result in a range of the result segment).
  v1::CollectiveResponse RangeCall(const std::string& payload,
                                   absl::Status* stepped) {
    std::memcpy(input_->data(), payload.data(), payload.size());
    v1::CollectiveRequest request = Call(1, "");
    request.mutable_header()->mutable_tensors(0)->set_shape(
        0, payload.size() / sizeof(float));
    request.mutable_data_range()->set_offset(0);
    request.mutable_data_range()->set_size(payload.size());
    Push(request);
    return NextResponse(stepped);
  }
  // Steps the session until a response record comes; the last Step's
  // status in `*stepped`.
  v1::CollectiveResponse NextResponse(absl::Status* stepped) {
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    std::string record;
    while (absl::Now() < deadline) {
      bool again = false;
      *stepped = session_->Step(absl::Now(), &again);
      absl::StatusOr<bool> popped = control_->responses().TryPop(&record);
      if (popped.ok() && *popped) break;
      if (!stepped->ok()) break;
      absl::SleepFor(absl::Milliseconds(1));
    }
    v1::CollectiveResponse response;
    EXPECT_TRUE(response.ParseFromString(record));
    return response;
  }
  absl::Status StepOnce(absl::Time now = absl::Now()) {
    bool again = false;
    return session_->Step(now, &again);
  }

  // Set before Open(): the session's bound on answers not taken.
  size_t max_unread_answer_bytes_ = 4 << 20;
  Env env_;
  Logger log_;
  std::unique_ptr<SharedMemoryResults> results_;
  UniqueFd client_socket_;
  std::unique_ptr<ControlSegment> control_;  // the client's mapping
  std::optional<SharedSegment> input_;       // the client's, writable
  std::shared_ptr<SharedMemorySession> session_;
};

TEST_F(SharedMemorySessionTest, InlineCallIsAnsweredInline) {
  Open();
  Push(Call(1, Ramp(Env::kFloats)));
  absl::Status stepped;
  const v1::CollectiveResponse response = NextResponse(&stepped);
  EXPECT_THAT(stepped, IsOk());
  EXPECT_EQ(response.call_id(), 1);
  EXPECT_THAT(FromCallStatus(response.status()), IsOk());
  EXPECT_EQ(response.result_size(), 1);
  EXPECT_EQ(response.data(), Ramp(Env::kFloats));
  EXPECT_FALSE(response.has_data_range());
}

TEST_F(SharedMemorySessionTest, LargeCallTravelsInTheSegmentsAndIsReleased) {
  Open();
  const size_t unused = results_->used();  // the nonce's first 64 bytes
  // 128 KiB: above kInlineResultBytes, and two chunks.
  constexpr int kFloats = 32 << 10;
  const std::string payload = Ramp(kFloats);
  std::memcpy(input_->data(), payload.data(), payload.size());
  v1::CollectiveRequest request = Call(1, "");
  request.mutable_header()->mutable_tensors(0)->set_shape(0, kFloats);
  request.mutable_data_range()->set_offset(0);
  request.mutable_data_range()->set_size(payload.size());
  Push(request);
  absl::Status stepped;
  const v1::CollectiveResponse response = NextResponse(&stepped);
  EXPECT_THAT(stepped, IsOk());
  ASSERT_THAT(FromCallStatus(response.status()), IsOk());
  ASSERT_TRUE(response.has_data_range());
  ASSERT_EQ(response.data_range().size(), payload.size());
  EXPECT_EQ(std::string(results_->data() + response.data_range().offset(),
                        payload.size()),
            payload);
  EXPECT_EQ(results_->used(), unused + payload.size());
  v1::CollectiveRequest release;
  *release.add_released() = response.data_range();
  Push(release);
  EXPECT_THAT(StepOnce(), IsOk());
  EXPECT_EQ(results_->used(), unused);
  // The same range again: reducerd no longer hands it out.
  Push(release);
  EXPECT_THAT(StepOnce(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("which reducerd did not hand out")));
}

TEST_F(SharedMemorySessionTest, HeaderOfAnotherRankFailsOnlyThatCall) {
  Open();
  v1::CollectiveRequest request = Call(1, Ramp(Env::kFloats));
  request.mutable_header()->set_rank(1);
  Push(request);
  absl::Status stepped;
  v1::CollectiveResponse response = NextResponse(&stepped);
  EXPECT_THAT(stepped, IsOk());
  EXPECT_EQ(response.call_id(), 1);
  EXPECT_THAT(FromCallStatus(response.status()),
              StatusIs(absl::StatusCode::kPermissionDenied,
                       HasSubstr("carries only the calls of job j rank 0")));
  Push(Call(2, Ramp(Env::kFloats)));
  response = NextResponse(&stepped);
  EXPECT_EQ(response.call_id(), 2);
  EXPECT_THAT(FromCallStatus(response.status()), IsOk());
}

TEST_F(SharedMemorySessionTest, CancelAnswersAWaitingCallCancelled) {
  Open(/*world=*/2);  // rank 1 never calls
  Push(Call(1, Ramp(Env::kFloats)));
  EXPECT_THAT(StepOnce(), IsOk());
  v1::CollectiveRequest cancel;
  cancel.set_call_id(1);
  Push(cancel);
  absl::Status stepped;
  const v1::CollectiveResponse response = NextResponse(&stepped);
  EXPECT_EQ(response.call_id(), 1);
  EXPECT_THAT(FromCallStatus(response.status()),
              StatusIs(absl::StatusCode::kCancelled,
                       HasSubstr("call 1 was cancelled by its client")));
}

TEST_F(SharedMemorySessionTest, RecordThatDoesNotParseEndsTheSession) {
  Open();
  ASSERT_THAT(control_->requests().TryPush("\xff\xff\xff"), IsOk());
  EXPECT_THAT(StepOnce(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("does not parse as a CollectiveRequest")));
}

TEST_F(SharedMemorySessionTest, ClosedSocketEndsTheSession) {
  Open();
  EXPECT_THAT(StepOnce(), IsOk());
  client_socket_.reset();
  EXPECT_THAT(StepOnce(absl::Now() + SharedMemorySession::kSocketCheck),
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr("the client closed its socket")));
}

// A client whose session ends while it is still connected (its seat was
// lost while it was stopped) may yet read the response in its ring and copy
// its result: the range stays taken, so no later result is written there.
TEST_F(SharedMemorySessionTest, RangeHandedToAConnectedClientOutlivesItsEnd) {
  Open();
  const size_t unused = results_->used();
  const std::string payload = Ramp(32 << 10);  // 128 KiB: a range
  absl::Status stepped;
  const v1::CollectiveResponse response =
      RangeCall(payload, &stepped);  // read, not released
  ASSERT_THAT(stepped, IsOk());
  ASSERT_TRUE(response.has_data_range());
  session_->End(absl::FailedPreconditionError("the peer lost its seat"));
  session_.reset();
  EXPECT_EQ(results_->live_ranges(), 1u);
  EXPECT_EQ(results_->used(), unused + payload.size());
  EXPECT_TRUE(std::string(results_->data() + response.data_range().offset(),
                          payload.size()) == payload);
}

// A client that closed its socket (or died) reads nothing more: the ranges
// handed to it are free again.
TEST_F(SharedMemorySessionTest, RangeHandedToAClosedClientIsFreedAtItsEnd) {
  Open();
  const size_t unused = results_->used();
  absl::Status stepped;
  const v1::CollectiveResponse response = RangeCall(Ramp(32 << 10), &stepped);
  ASSERT_THAT(stepped, IsOk());
  ASSERT_TRUE(response.has_data_range());
  client_socket_.reset();
  session_->End(absl::UnavailableError("the client closed its socket"));
  session_.reset();
  EXPECT_EQ(results_->live_ranges(), 0u);
  EXPECT_EQ(results_->used(), unused);
}

TEST_F(SharedMemorySessionTest, StopEndsTheSessionCancelled) {
  Open();
  session_->Stop();
  EXPECT_THAT(StepOnce(), StatusIs(absl::StatusCode::kCancelled,
                                   HasSubstr("reducerd is shutting down")));
}

// A client that never pops its response ring: once the answers waiting
// for room there pass the bound, the session takes none of its requests
// (its request ring stays full however often the session steps), and the
// answers waiting keep their reservations in the memory budget. Once the
// client pops, every call is answered.
TEST_F(SharedMemorySessionTest, AClientThatTakesNoAnswersIsNoLongerTaken) {
  // 32 KiB per call: answered inline, reduced on the calling thread.
  constexpr int kFloats = 8 << 10;
  constexpr size_t kCallBytes = kFloats * sizeof(float);
  // Each ring holds about this many such records.
  constexpr int kRecordsPerRing = MessageRing::kDefaultCapacity / kCallBytes;
  max_unread_answer_bytes_ = 4 * kCallBytes;
  Open();
  auto call = [](uint64_t id) {
    v1::CollectiveRequest request = Call(id, Ramp(kFloats));
    v1::CollectiveHeader& header = *request.mutable_header();
    header.mutable_tensors(0)->set_shape(0, kFloats);
    header.set_sequence(id - 1);
    header.set_attempt_id(absl::StrCat("s0/", id));
    return request.SerializeAsString();
  };
  absl::Status stepped;
  ASSERT_TRUE(control_->requests().TryPush(call(1)).value_or(false));
  ASSERT_THAT(FromCallStatus(NextResponse(&stepped).status()), IsOk());
  const size_t settled_bytes = env_.memory().used();

  // The client pushes whatever its request ring takes, and pops nothing.
  uint64_t pushed = 1;
  for (int round = 0; round < 20; ++round) {
    while (control_->requests().TryPush(call(pushed + 1)).value_or(false)) {
      ++pushed;
    }
    ASSERT_THAT(StepOnce(), IsOk());
  }
  EXPECT_FALSE(control_->requests().TryPush(call(pushed + 1)).value_or(true));
  // Taken: a response ring's worth answered, the bound's worth waiting, and
  // the records of the pass that went over; one ring more waits unread.
  EXPECT_LE(pushed, 4u * kRecordsPerRing) << "of 20 rings' worth";
  // Each answer waiting keeps its rank's reservation: 32 KiB staged in and
  // 32 KiB queued out.
  EXPECT_GE(env_.memory().used(), settled_bytes + 4 * 2 * kCallBytes);

  // The client pops: every call is answered, in whatever order.
  std::vector<bool> answered(pushed + 1, false);
  uint64_t answers = 1;  // call 1's, above
  std::string record;
  const absl::Time give_up = absl::Now() + absl::Seconds(20);
  while (answers < pushed && absl::Now() < give_up) {
    ASSERT_THAT(StepOnce(), IsOk());
    while (control_->responses().TryPop(&record).value_or(false)) {
      v1::CollectiveResponse response;
      ASSERT_TRUE(response.ParseFromString(record));
      ASSERT_GT(response.call_id(), 1u);
      ASSERT_LE(response.call_id(), pushed);
      EXPECT_FALSE(answered[response.call_id()]) << response.call_id();
      answered[response.call_id()] = true;
      ++answers;
      EXPECT_THAT(FromCallStatus(response.status()), IsOk());
      EXPECT_EQ(response.data(), Ramp(kFloats)) << response.call_id();
    }
  }
  EXPECT_EQ(answers, pushed);
  // Every answer went: only each call's attempt id stays remembered, for a
  // retry.
  size_t remembered_ids = 0;
  for (uint64_t id = 2; id <= pushed; ++id) {
    remembered_ids += AttemptCache::EntryBytes(absl::StrCat("s0/", id));
  }
  EXPECT_LE(env_.memory().used(), settled_bytes + remembered_ids);
}

}  // namespace
}  // namespace reducer
