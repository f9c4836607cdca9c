// reducerd's side of the same-host shared-memory path (docs/same_host.md),
// against a real Server started in this process: ranks Join with a raw gRPC
// client, then the test speaks the protocol by hand (memfds, the hello over
// the abstract socket JobReady names, records in the control segment's
// rings). Covered: the handshake and its refusals; a two-rank float32
// all-reduce with the payload inline and in the input segment (several
// chunks), its result inline and in the result segment, checked against
// tests/closed_form.h; the job's one result segment (an all-reduce's
// result is one range both ranks get, reused only once both released it; a
// reduce-scatter's parts are ranges of their own; a session that ends
// drops what it held); a corrupt ring and a closed socket, each of which
// ends the session and fails the collective for the other rank at once;
// a client that never pops its responses, whose requests reducerd stops
// taking while another job goes on.
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/data_type.h"
#include "core/shm/control_segment.h"
#include "core/shm/fd_passing.h"
#include "core/shm/message_ring.h"
#include "core/shm/shared_segment.h"
#include "core/shm/unique_fd.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/reducer/v1/admin.grpc.pb.h"
#include "proto/reducer/v1/reducer.pb.h"
#include "proto/reducer/v1/status_conversion.h"
#include "server/server.h"
#include "tests/closed_form.h"
#include "tests/matchers.h"
#include "tests/raw_client.h"

namespace reducer {
namespace testing {
namespace {

using ::testing::StartsWith;

constexpr size_t kChunkBytes = 64 << 10;
constexpr size_t kSegmentBytes = 4 << 20;
// Bounds every wait, so that a hang fails the test instead of stalling it.
constexpr absl::Duration kPatience = absl::Seconds(20);

std::string Bytes(const std::vector<uint8_t>& v) {
  return std::string(v.begin(), v.end());
}

std::string Input(int rank, int64_t n, uint64_t seed) {
  return Bytes(ClosedFormInput(ReduceOp::kSum, DataType::kFloat32, rank, n, seed));
}

std::string Expected(int64_t n, uint64_t seed) {
  return Bytes(ClosedFormExpected(ReduceOp::kSum, DataType::kFloat32, {0, 1}, n,
                                  seed));
}

// What the hello says, for tests that break one field.
struct HelloTweak {
  std::string nonce;       // empty: the control segment's
  std::string session_id;  // empty: the raw session's
  std::string token;       // empty: none
  size_t input_bytes = 0;  // 0: kSegmentBytes
};

// The client half of the protocol, by hand.
class ShmClient {
 public:
  // A connection to `socket` that says nothing (invalid if it fails).
  static UniqueFd ConnectOnly(const std::string& socket) {
    return UniqueFd(socket_fd(socket));
  }

  // Creates the segments, connects to `raw`'s same-host socket and says
  // hello as its rank. The welcome's status (the refusal, or OK) is in
  // `*welcome`; the client is null unless it is OK.
  static std::unique_ptr<ShmClient> Connect(const RawSession& raw,
                                            absl::Status* welcome,
                                            const HelloTweak& tweak = {}) {
    auto client = std::unique_ptr<ShmClient>(new ShmClient());
    const std::string nonce = RandomBytes(ControlSegment::kNonceBytes);
    absl::StatusOr<std::unique_ptr<ControlSegment>> control =
        ControlSegment::Create(nonce);
    absl::StatusOr<SharedSegment> input =
        SharedSegment::Create("test-input", tweak.input_bytes == 0
                                                ? kSegmentBytes
                                                : tweak.input_bytes);
    if (!control.ok() || !input.ok()) {
      *welcome = control.ok() ? input.status() : control.status();
      return nullptr;
    }
    client->control_ = *std::move(control);
    client->input_ = std::make_unique<SharedSegment>(*std::move(input));
    client->socket_.reset(socket_fd(raw.shared_memory_socket()));
    if (!client->socket_.valid()) {
      *welcome = absl::UnavailableError(absl::StrCat("connect: ", strerror(errno)));
      return nullptr;
    }
    v1::SharedMemoryHello hello;
    hello.set_job(raw.job());
    hello.set_session_id(tweak.session_id.empty() ? raw.session_id()
                                                  : tweak.session_id);
    hello.set_rank(raw.rank());
    hello.set_nonce(tweak.nonce.empty() ? nonce : tweak.nonce);
    hello.set_token(tweak.token);
    *welcome = SendWithFds(client->socket_.get(), hello.SerializeAsString(),
                           {client->control_->fd(), client->input_->fd()});
    // A refusal sent before reducerd read the hello is read even when the
    // send failed (reducerd closed the socket after it).
    absl::StatusOr<Received> answer = ReceiveWithFds(
        client->socket_.get(), 1 << 16, 1, absl::Now() + kPatience);
    if (!answer.ok() && !welcome->ok()) return nullptr;
    if (!answer.ok()) {
      *welcome = answer.status();
      return nullptr;
    }
    v1::SharedMemoryWelcome parsed;
    if (!parsed.ParseFromString(answer->bytes)) {
      *welcome = absl::DataLossError("the welcome does not parse");
      return nullptr;
    }
    *welcome = FromCallStatus(parsed.status());
    if (!welcome->ok()) return nullptr;
    if (answer->fds.size() != 1) {
      *welcome = absl::DataLossError("the welcome carries no result memfd");
      return nullptr;
    }
    absl::StatusOr<SharedSegment> result = SharedSegment::Adopt(
        answer->fds[0].release(), SharedSegment::Access::kReadOnly);
    if (!result.ok()) {
      *welcome = result.status();
      return nullptr;
    }
    client->result_ = std::make_unique<SharedSegment>(*std::move(result));
    if (parsed.nonce().size() != ControlSegment::kNonceBytes ||
        std::memcmp(client->result_->data(), parsed.nonce().data(),
                    parsed.nonce().size()) != 0) {
      *welcome = absl::DataLossError(
          "the result segment does not start with the welcome's nonce");
      return nullptr;
    }
    return client;
  }

  absl::Status PushRaw(const std::string& record) {
    return control_->requests().Push(record, absl::Now() + kPatience);
  }

  // Push, waiting at most `patience` for room.
  absl::Status PushWithin(const std::string& record, absl::Duration patience) {
    return control_->requests().Push(record, absl::Now() + patience);
  }

  absl::Status Push(const v1::CollectiveRequest& request) {
    return control_->requests().Push(request.SerializeAsString(),
                                     absl::Now() + kPatience);
  }

  // The next response record, waiting for it until kPatience.
  absl::StatusOr<v1::CollectiveResponse> Next() {
    MessageRing& ring = control_->responses();
    const absl::Time deadline = absl::Now() + kPatience;
    std::string record;
    while (true) {
      const uint32_t seen = ring.data_bell().value();
      absl::StatusOr<bool> popped = ring.TryPop(&record);
      if (!popped.ok()) return popped.status();
      if (*popped) break;
      if (!ring.data_bell().WaitChange(seen, deadline).ok()) {
        return absl::DeadlineExceededError("no response record");
      }
    }
    v1::CollectiveResponse response;
    if (!response.ParseFromString(record)) {
      return absl::DataLossError("a response record does not parse");
    }
    return response;
  }

  // The result bytes a response carries, inline or in the result segment.
  std::string ResultOf(const v1::CollectiveResponse& response) const {
    if (!response.has_data_range()) return response.data();
    const v1::SegmentRange& r = response.data_range();
    if (r.offset() > result_->size() || r.size() > result_->size() - r.offset()) {
      return "<range outside the result segment>";
    }
    return std::string(static_cast<const char*>(result_->data()) + r.offset(),
                       r.size());
  }

  // Copies `bytes` to the input segment at `offset`.
  void WriteInput(uint64_t offset, const std::string& bytes) {
    std::memcpy(static_cast<char*>(input_->data()) + offset, bytes.data(),
                bytes.size());
  }

  // Publishes a request record whose length field says 2^40 bytes: a
  // corrupt ring, as a client's stray write would leave it.
  void CorruptRequestRing() {
    char* ring = RequestRing();
    ASSERT_NE(ring, nullptr);
    auto* head = reinterpret_cast<std::atomic<uint64_t>*>(ring);
    const uint64_t at = head->load();
    const uint64_t length = uint64_t{1} << 40;
    std::memcpy(ring + MessageRing::kHeaderBytes +
                    at % MessageRing::kDefaultCapacity,
                &length, sizeof(length));
    head->store(at + 16, std::memory_order_release);
    control_->requests().data_bell().Ring();
  }

  // Waits (until kPatience) for reducerd to have taken every request record
  // pushed so far; true once it has.
  bool WaitConsumed() {
    char* ring = RequestRing();
    if (ring == nullptr) return false;
    // The ring's header: the head line, then the tail line (64 bytes each).
    auto* head = reinterpret_cast<std::atomic<uint64_t>*>(ring);
    auto* tail = reinterpret_cast<std::atomic<uint64_t>*>(ring + 64);
    const absl::Time deadline = absl::Now() + kPatience;
    while (true) {
      const uint32_t seen = control_->requests().space_bell().value();
      if (tail->load() == head->load()) return true;
      if (!control_->requests().space_bell().WaitChange(seen, deadline).ok()) {
        return false;
      }
    }
  }

  // True once reducerd has closed its end of the socket (within kPatience).
  bool ClosedByServer() {
    pollfd p{socket_.get(), POLLIN | POLLRDHUP, 0};
    if (poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(kPatience))) <= 0) {
      return false;
    }
    char byte;
    return (p.revents & (POLLHUP | POLLRDHUP)) != 0 ||
           recv(socket_.get(), &byte, 1, MSG_DONTWAIT) == 0;
  }

  void CloseSocket() { socket_.reset(); }
  // Shuts the socket's sending side: reducerd sees the client gone, and
  // this client still sees reducerd close its end.
  void ShutDownSending() { ::shutdown(socket_.get(), SHUT_WR); }

  // Whether this client could map its result segment writable (it must
  // not: the segment is reducerd's to write alone).
  bool ResultMapsWritable() const {
    absl::StatusOr<SharedSegment> writable = SharedSegment::Adopt(
        dup(result_->fd()), SharedSegment::Access::kReadWrite);
    return writable.ok();
  }

  // The result segment's inode: equal for two clients that map one memfd.
  ino_t ResultInode() const {
    struct stat st {};
    return fstat(result_->fd(), &st) == 0 ? st.st_ino : 0;
  }

 private:
  ShmClient() = default;

  // The request ring as bytes, through a second mapping of the control
  // segment (null if it cannot be mapped).
  char* RequestRing() {
    if (view_ == nullptr) {
      absl::StatusOr<SharedSegment> view = SharedSegment::Adopt(
          dup(control_->fd()), SharedSegment::Access::kReadWrite);
      if (!view.ok()) return nullptr;
      view_ = std::make_unique<SharedSegment>(*std::move(view));
    }
    return static_cast<char*>(view_->data()) + ControlSegment::kRingsOffset;
  }

  static int socket_fd(const std::string& name) {
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path + 1, name.data(), name.size());
    const socklen_t len =
        static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
    if (connect(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0) {
      close(fd);
      return -1;
    }
    return fd;
  }

  std::unique_ptr<ControlSegment> control_;
  std::unique_ptr<SharedSegment> input_;
  std::unique_ptr<SharedSegment> result_;
  std::unique_ptr<SharedSegment> view_;  // the control segment, again
  UniqueFd socket_;
};

// A float32 [n] SUM all-reduce, number `sequence` of `raw`'s job; the
// payload set by the caller.
v1::CollectiveRequest AllReduce(const RawSession& raw, uint64_t call_id,
                                uint64_t sequence, int64_t n) {
  v1::CollectiveRequest m = raw.AllReduceRequest({n});
  m.mutable_header()->set_sequence(sequence);
  m.set_call_id(call_id);
  return m;
}

v1::CollectiveRequest InRange(v1::CollectiveRequest m, uint64_t offset,
                              uint64_t size) {
  m.mutable_data_range()->set_offset(offset);
  m.mutable_data_range()->set_size(size);
  return m;
}

class ShmServerTest : public ::testing::Test {
 protected:
  // What the server is started with; a fixture may add to it.
  virtual ServerOptions Options() {
    ServerOptions options;
    options.listen = "127.0.0.1:0";
    options.chunk_bytes = kChunkBytes;
    options.shared_memory = true;
    return options;
  }

  void SetUp() override {
    ServerOptions options = Options();
    absl::StatusOr<std::unique_ptr<Server>> server = Server::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
  }
  void TearDown() override {
    if (server_ != nullptr) server_->Shutdown();
  }

  // Ranks 0 and 1 of `job`, joined (each waits for the other).
  std::vector<std::unique_ptr<RawSession>> JoinTwo(
      const std::string& job, const std::string& token = "") {
    absl::StatusOr<std::unique_ptr<RawSession>> joined[2];
    std::thread other([&] {
      joined[1] =
          RawSession::Join(server_->address(), job, 1, 2, kPatience, token);
    });
    joined[0] =
        RawSession::Join(server_->address(), job, 0, 2, kPatience, token);
    other.join();
    std::vector<std::unique_ptr<RawSession>> sessions;
    for (auto& j : joined) {
      EXPECT_TRUE(j.ok()) << j.status();
      if (j.ok()) sessions.push_back(*std::move(j));
    }
    return sessions;
  }

  std::unique_ptr<ShmClient> Connect(const RawSession& raw) {
    absl::Status welcome;
    std::unique_ptr<ShmClient> client = ShmClient::Connect(raw, &welcome);
    EXPECT_TRUE(welcome.ok()) << welcome;
    return client;
  }

  // Ranks 0 and 1 of `job` joined (JoinTwo) into *s, then each connected
  // to its same-host session into c[rank]; fatal failures when any fails.
  void JoinAndConnectTwo(const std::string& job,
                         std::vector<std::unique_ptr<RawSession>>* s,
                         std::unique_ptr<ShmClient> (&c)[2]) {
    *s = JoinTwo(job);
    ASSERT_EQ(s->size(), 2u);
    for (int r = 0; r < 2; ++r) c[r] = Connect(*(*s)[r]);
    ASSERT_NE(c[0], nullptr);
    ASSERT_NE(c[1], nullptr);
  }

  // Rank 0 on the same-host path and rank 1 on gRPC start a 1 MiB
  // all-reduce; rank 1 sends only its first chunk, rank 0 all of it, so
  // that the collective cannot complete. Then `break_rank0` ends rank 0's
  // session, and rank 1's call must end ABORTED naming rank 0.
  void ExpectPeerFailsWhen(const std::string& job,
                           void (*break_rank0)(ShmClient&)) {
    std::vector<std::unique_ptr<RawSession>> s = JoinTwo(job);
    ASSERT_EQ(s.size(), 2u);
    std::unique_ptr<ShmClient> rank0 = Connect(*s[0]);
    ASSERT_NE(rank0, nullptr);
    const int64_t n = (1 << 20) / 4;
    const std::string in0 = Input(0, n, 5);
    const std::string in1 = Input(1, n, 5);

    RawCallResult rank1;
    std::thread peer([&] {
      v1::CollectiveRequest first = AllReduce(*s[1], 0, 0, n);
      first.clear_call_id();
      first.set_data(in1.substr(0, kChunkBytes));
      rank1 = s[1]->Call({first}, kPatience, /*half_close=*/false);
    });
    rank0->WriteInput(0, in0);
    ASSERT_TRUE(rank0->Push(InRange(AllReduce(*s[0], 1, 0, n), 0, in0.size())).ok());
    // Taken means attached and fed as far as it goes: the call is live.
    ASSERT_TRUE(rank0->WaitConsumed());
    break_rank0(*rank0);
    peer.join();
    EXPECT_THAT(rank1.status,
                StatusIs(absl::StatusCode::kAborted, HasSubstr("rank 0")));
  }

  std::unique_ptr<Server> server_;
};

TEST_F(ShmServerTest, JobReadyNamesTheSocketAndTheHandshakeIsAccepted) {
  std::vector<std::unique_ptr<RawSession>> s = JoinTwo("shm-hello");
  ASSERT_EQ(s.size(), 2u);
  EXPECT_THAT(s[0]->shared_memory_socket(), StartsWith("reducerd-"));
  EXPECT_EQ(s[0]->shared_memory_socket(), server_->shared_memory_socket());
  EXPECT_EQ(s[1]->shared_memory_socket(), s[0]->shared_memory_socket());
  absl::Status welcome;
  std::unique_ptr<ShmClient> client = ShmClient::Connect(*s[0], &welcome);
  EXPECT_TRUE(welcome.ok()) << welcome;
  ASSERT_NE(client, nullptr);
  // The job's result segment, which every rank of the job maps, is
  // reducerd's alone to write: no rank can change what another reads.
  EXPECT_FALSE(client->ResultMapsWritable());
}

TEST_F(ShmServerTest, ANonceThatDiffersFromTheControlSegmentsIsRefused) {
  std::vector<std::unique_ptr<RawSession>> s = JoinTwo("shm-nonce");
  ASSERT_EQ(s.size(), 2u);
  absl::Status welcome;
  HelloTweak tweak;
  tweak.nonce = std::string(ControlSegment::kNonceBytes, 'x');
  std::unique_ptr<ShmClient> client =
      ShmClient::Connect(*s[0], &welcome, tweak);
  EXPECT_EQ(client, nullptr);
  EXPECT_THAT(welcome, StatusIs(absl::StatusCode::kFailedPrecondition,
                                HasSubstr("nonce")));
}

TEST_F(ShmServerTest, ASessionIdThatHoldsNoRankIsRefused) {
  std::vector<std::unique_ptr<RawSession>> s = JoinTwo("shm-session");
  ASSERT_EQ(s.size(), 2u);
  absl::Status welcome;
  HelloTweak tweak;
  tweak.session_id = "not-a-session";
  std::unique_ptr<ShmClient> client =
      ShmClient::Connect(*s[0], &welcome, tweak);
  EXPECT_EQ(client, nullptr);
  EXPECT_THAT(welcome, StatusIs(absl::StatusCode::kFailedPrecondition,
                                HasSubstr("not-a-session")));
  EXPECT_THAT(welcome.message(), HasSubstr("does not hold rank 0"));

  // The other rank's session id does not hold rank 0 either.
  tweak.session_id = s[1]->session_id();
  client = ShmClient::Connect(*s[0], &welcome, tweak);
  EXPECT_EQ(client, nullptr);
  EXPECT_THAT(welcome, StatusIs(absl::StatusCode::kFailedPrecondition));
}

TEST_F(ShmServerTest, AllReduceInlineAndThroughTheSegments) {
  std::vector<std::unique_ptr<RawSession>> s;
  std::unique_ptr<ShmClient> c[2];
  ASSERT_NO_FATAL_FAILURE(JoinAndConnectTwo("shm-allreduce", &s, c));
  const int64_t small = 1000;     // 4000 bytes: inline both ways
  const int64_t large = 300000;   // 1.2 MB: 19 chunks, through the segments
  for (int r = 0; r < 2; ++r) {
    v1::CollectiveRequest inline_call = AllReduce(*s[r], 1, 0, small);
    inline_call.set_data(Input(r, small, 1));
    ASSERT_TRUE(c[r]->Push(inline_call).ok());
    const std::string in = Input(r, large, 2);
    c[r]->WriteInput(0, in);
    ASSERT_TRUE(c[r]->Push(InRange(AllReduce(*s[r], 2, 1, large), 0, in.size())).ok());
  }
  v1::SegmentRange held[2];
  for (int r = 0; r < 2; ++r) {
    for (int k = 0; k < 2; ++k) {
      absl::StatusOr<v1::CollectiveResponse> got = c[r]->Next();
      ASSERT_TRUE(got.ok()) << got.status();
      ASSERT_THAT(FromCallStatus(got->status()), IsOk())
          << "rank " << r << " call " << got->call_id();
      ASSERT_EQ(got->result_size(), 1);
      if (got->call_id() == 1) {
        EXPECT_FALSE(got->has_data_range());
        EXPECT_EQ(got->data(), Expected(small, 1)) << "rank " << r;
      } else {
        ASSERT_EQ(got->call_id(), 2u);
        ASSERT_TRUE(got->has_data_range());
        EXPECT_GE(got->data_range().offset(), 64u);
        EXPECT_EQ(c[r]->ResultOf(*got), Expected(large, 2)) << "rank " << r;
        held[r] = got->data_range();
      }
    }
  }

  // The result ranges handed back, the same again (id 2 reused), and the
  // second result is right too.
  for (int r = 0; r < 2; ++r) {
    v1::CollectiveRequest release;
    *release.add_released() = held[r];
    ASSERT_TRUE(c[r]->Push(release).ok());
    const std::string in = Input(r, large, 3);
    c[r]->WriteInput(0, in);
    ASSERT_TRUE(c[r]->Push(InRange(AllReduce(*s[r], 2, 2, large), 0, in.size())).ok());
  }
  for (int r = 0; r < 2; ++r) {
    absl::StatusOr<v1::CollectiveResponse> got = c[r]->Next();
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_THAT(FromCallStatus(got->status()), IsOk());
    EXPECT_EQ(c[r]->ResultOf(*got), Expected(large, 3)) << "rank " << r;
  }
}

// The job's thread wakes every 50 ms (SharedMemorySession::kSocketCheck) to
// look at its sessions' sockets; that wake-up is not the kernel refusing to sleep,
// which would make the thread stop watching its bells (a futex wake on every
// later call) and log that it cannot sleep.
TEST_F(ShmServerTest, AJobIdlePastItsSocketChecksStillWatchesItsBells) {
  ::testing::internal::CaptureStderr();
  std::vector<std::unique_ptr<RawSession>> s;
  std::unique_ptr<ShmClient> c[2];
  ASSERT_NO_FATAL_FAILURE(JoinAndConnectTwo("shm-idle", &s, c));
  absl::SleepFor(absl::Milliseconds(200));  // four socket checks
  const int64_t n = 16;
  for (int r = 0; r < 2; ++r) {
    v1::CollectiveRequest call = AllReduce(*s[r], 1, 0, n);
    call.set_data(Input(r, n, 1));
    ASSERT_TRUE(c[r]->Push(call).ok());
  }
  for (int r = 0; r < 2; ++r) {
    absl::StatusOr<v1::CollectiveResponse> got = c[r]->Next();
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->data(), Expected(n, 1)) << "rank " << r;
  }
  const std::string logged = ::testing::internal::GetCapturedStderr();
  EXPECT_THAT(logged, HasSubstr("same-host session of job shm-idle rank 1 started"));
  EXPECT_THAT(logged, Not(HasSubstr("cannot sleep on doorbells")));
}

TEST_F(ShmServerTest, AWholeSegmentsResultFitsAndAHeldOneLeavesNoRoom) {
  std::vector<std::unique_ptr<RawSession>> s;
  std::unique_ptr<ShmClient> c[2];
  ASSERT_NO_FATAL_FAILURE(JoinAndConnectTwo("shm-room", &s, c));
  const int64_t n = kSegmentBytes / 4;  // the whole input segment
  for (int r = 0; r < 2; ++r) {
    c[r]->WriteInput(0, Input(r, n, 10));
    ASSERT_TRUE(c[r]->Push(InRange(AllReduce(*s[r], 1, 0, n), 0, n * 4)).ok());
  }
  v1::SegmentRange held[2];
  for (int r = 0; r < 2; ++r) {
    absl::StatusOr<v1::CollectiveResponse> got = c[r]->Next();
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_THAT(FromCallStatus(got->status()), IsOk());
    EXPECT_TRUE(c[r]->ResultOf(*got) == Expected(n, 10)) << "rank " << r;
    held[r] = got->data_range();
  }
  // One result, one range, both ranks' (the segment holds only one).
  EXPECT_EQ(held[0].offset(), held[1].offset());
  // Rank 1 hands the range back; rank 0 keeps it, so that the range stays
  // and the next result has no room.
  v1::CollectiveRequest release;
  *release.add_released() = held[1];
  ASSERT_TRUE(c[1]->Push(release).ok());
  for (int r = 0; r < 2; ++r) {
    c[r]->WriteInput(0, Input(r, n, 11));
    ASSERT_TRUE(c[r]->Push(InRange(AllReduce(*s[r], 2, 1, n), 0, n * 4)).ok());
  }
  // Both calls fail, neither with a result (the range rank 1 released is
  // still rank 0's): the rank whose result the job's thread came to first
  // is out of room; the other is out of room too, or its collective was
  // aborted for that rank's call, which counts as cancelled.
  int out_of_room = 0;
  for (int r = 0; r < 2; ++r) {
    absl::StatusOr<v1::CollectiveResponse> got = c[r]->Next();
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_FALSE(got->has_data_range()) << "rank " << r;
    if (got->status().code() ==
        static_cast<int>(absl::StatusCode::kResourceExhausted)) {
      ++out_of_room;
      EXPECT_THAT(got->status().message(),
                  HasSubstr("ClientOptions::shared_memory_bytes"));
    } else {
      EXPECT_THAT(FromCallStatus(got->status()),
                  StatusIs(absl::StatusCode::kAborted,
                           HasSubstr("call was cancelled")));
    }
  }
  EXPECT_GE(out_of_room, 1);
}

// Both ranks' all-reduce of `n` floats (seed `seed`) as call `call_id`,
// number `sequence`, from the start of each input segment; each rank's
// result range, once checked against the closed form.
void AllReduceInRanges(std::unique_ptr<ShmClient> (&c)[2],
                       std::vector<std::unique_ptr<RawSession>>& s,
                       uint64_t call_id, uint64_t sequence, int64_t n,
                       uint64_t seed, v1::SegmentRange (&ranges)[2]) {
  for (int r = 0; r < 2; ++r) {
    c[r]->WriteInput(0, Input(r, n, seed));
    ASSERT_TRUE(
        c[r]->Push(InRange(AllReduce(*s[r], call_id, sequence, n), 0, n * 4))
            .ok());
  }
  for (int r = 0; r < 2; ++r) {
    absl::StatusOr<v1::CollectiveResponse> got = c[r]->Next();
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_THAT(FromCallStatus(got->status()), IsOk());
    ASSERT_TRUE(got->has_data_range()) << "rank " << r;
    EXPECT_TRUE(c[r]->ResultOf(*got) == Expected(n, seed)) << "rank " << r;
    ranges[r] = got->data_range();
  }
}

v1::CollectiveRequest Released(const v1::SegmentRange& range) {
  v1::CollectiveRequest release;
  *release.add_released() = range;
  return release;
}

TEST_F(ShmServerTest, AnAllReducesResultIsOneRangeReusedOnlyOnceBothReleasedIt) {
  std::vector<std::unique_ptr<RawSession>> s;
  std::unique_ptr<ShmClient> c[2];
  ASSERT_NO_FATAL_FAILURE(JoinAndConnectTwo("shm-one-result", &s, c));
  const int64_t n = (1 << 20) / 4;  // 1 MiB, 16 chunks
  v1::SegmentRange first[2], second[2], third[2];
  // One memfd for the job, one range in it for the result.
  EXPECT_NE(c[0]->ResultInode(), 0u);
  EXPECT_EQ(c[0]->ResultInode(), c[1]->ResultInode());
  AllReduceInRanges(c, s, 1, 0, n, 21, first);
  EXPECT_EQ(first[0].offset(), first[1].offset());
  EXPECT_EQ(first[0].size(), first[1].size());
  // Rank 1 still holds the first range: the second result goes elsewhere,
  // though the allocator takes the lowest free offset.
  ASSERT_TRUE(c[0]->Push(Released(first[0])).ok());
  AllReduceInRanges(c, s, 2, 1, n, 22, second);
  EXPECT_EQ(second[0].offset(), second[1].offset());
  EXPECT_NE(second[0].offset(), first[0].offset());
  // Both released both: the third result takes the first one's place.
  ASSERT_TRUE(c[1]->Push(Released(first[1])).ok());
  for (int r = 0; r < 2; ++r) ASSERT_TRUE(c[r]->Push(Released(second[r])).ok());
  AllReduceInRanges(c, s, 3, 2, n, 23, third);
  EXPECT_EQ(third[0].offset(), first[0].offset());
  EXPECT_EQ(third[1].offset(), first[0].offset());
  // A range released once more than it was handed to that rank ends the
  // session: rank 0 held the first range once.
  ASSERT_TRUE(c[0]->Push(Released(third[0])).ok());
  ASSERT_TRUE(c[0]->Push(Released(third[0])).ok());
  EXPECT_TRUE(c[0]->ClosedByServer());
}

TEST_F(ShmServerTest, AReduceScattersPartsAreRangesOfTheirOwn) {
  std::vector<std::unique_ptr<RawSession>> s;
  std::unique_ptr<ShmClient> c[2];
  ASSERT_NO_FATAL_FAILURE(JoinAndConnectTwo("shm-scatter", &s, c));
  const int64_t n = (1 << 20) / 4;  // each part: 512 KiB
  for (int r = 0; r < 2; ++r) {
    v1::CollectiveRequest m = AllReduce(*s[r], 1, 0, n);
    m.mutable_header()->set_kind(v1::COLLECTIVE_KIND_REDUCE_SCATTER);
    c[r]->WriteInput(0, Input(r, n, 31));
    ASSERT_TRUE(c[r]->Push(InRange(m, 0, n * 4)).ok());
  }
  const std::string sum = Expected(n, 31);
  v1::SegmentRange part[2];
  for (int r = 0; r < 2; ++r) {
    absl::StatusOr<v1::CollectiveResponse> got = c[r]->Next();
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_THAT(FromCallStatus(got->status()), IsOk());
    ASSERT_TRUE(got->has_data_range()) << "rank " << r;
    // Rank r's part: slice r of the sum along dim 0.
    EXPECT_TRUE(c[r]->ResultOf(*got) == sum.substr(r * n * 2, n * 2))
        << "rank " << r;
    part[r] = got->data_range();
  }
  EXPECT_NE(part[0].offset(), part[1].offset());
  // Neither overlaps the other.
  EXPECT_TRUE(part[0].offset() + part[0].size() <= part[1].offset() ||
              part[1].offset() + part[1].size() <= part[0].offset());
}

// A session that ends while its client is still connected (here on a
// record that does not parse; in life also a seat lost while the client
// was stopped) keeps the ranges handed to it: that client may yet copy a
// result whose response is in its ring, so the next result must not be
// written there.
TEST_F(ShmServerTest, ASessionEndedWhileItsClientIsConnectedKeepsItsResult) {
  std::vector<std::unique_ptr<RawSession>> s;
  std::unique_ptr<ShmClient> c[2];
  ASSERT_NO_FATAL_FAILURE(JoinAndConnectTwo("shm-end-keeps", &s, c));
  const int64_t n = kSegmentBytes / 4 / 2;  // half the segment
  v1::SegmentRange held[2];
  AllReduceInRanges(c, s, 1, 0, n, 41, held);
  ASSERT_TRUE(c[1]->Push(Released(held[1])).ok());
  ASSERT_TRUE(c[0]->PushRaw("not a CollectiveRequest \xff\xff").ok());
  ASSERT_TRUE(c[0]->ClosedByServer());
  std::unique_ptr<ShmClient> ended = std::move(c[0]);  // still mapped
  c[0] = Connect(*s[0]);
  ASSERT_NE(c[0], nullptr);
  v1::SegmentRange again[2];
  AllReduceInRanges(c, s, 2, 1, n, 42, again);
  EXPECT_TRUE(again[0].offset() + again[0].size() <= held[0].offset() ||
              held[0].offset() + held[0].size() <= again[0].offset());
  v1::CollectiveResponse first;
  *first.mutable_data_range() = held[0];
  EXPECT_TRUE(ended->ResultOf(first) == Expected(n, 41));
}

// A client that shut its socket (or died) reads nothing more: the session's
// end frees the ranges handed to it, and the next result may take them.
TEST_F(ShmServerTest, ASessionWhoseClientClosedFreesItsResult) {
  std::vector<std::unique_ptr<RawSession>> s;
  std::unique_ptr<ShmClient> c[2];
  ASSERT_NO_FATAL_FAILURE(JoinAndConnectTwo("shm-end-frees", &s, c));
  const int64_t n = kSegmentBytes / 4;  // the whole segment
  v1::SegmentRange held[2];
  AllReduceInRanges(c, s, 1, 0, n, 41, held);
  ASSERT_TRUE(c[1]->Push(Released(held[1])).ok());
  // Shutting its writing down is closing, as reducerd sees it; the test
  // still sees reducerd close its end once the session ended.
  c[0]->ShutDownSending();
  ASSERT_TRUE(c[0]->ClosedByServer());
  c[0] = Connect(*s[0]);
  ASSERT_NE(c[0], nullptr);
  v1::SegmentRange again[2];
  AllReduceInRanges(c, s, 2, 1, n, 42, again);
  EXPECT_EQ(again[0].offset(), held[0].offset());
}

TEST_F(ShmServerTest, AllGatherForwardsEachRanksSegmentBytes) {
  std::vector<std::unique_ptr<RawSession>> s;
  std::unique_ptr<ShmClient> c[2];
  ASSERT_NO_FATAL_FAILURE(JoinAndConnectTwo("shm-allgather", &s, c));
  const int64_t n = 150000;  // 600 KB each, 1.2 MB gathered
  std::string in[2];
  for (int r = 0; r < 2; ++r) {
    in[r] = Input(r, n, 6);
    c[r]->WriteInput(0, in[r]);
    v1::CollectiveRequest m;
    *m.mutable_header() = s[r]->Header(v1::COLLECTIVE_KIND_ALL_GATHER);
    v1::TensorSpec* spec = m.mutable_header()->add_tensors();
    spec->set_dtype(v1::DATA_TYPE_FLOAT32);
    spec->add_shape(n);
    m.set_call_id(1);
    ASSERT_TRUE(c[r]->Push(InRange(m, 0, in[r].size())).ok());
  }
  v1::SegmentRange range[2];
  for (int r = 0; r < 2; ++r) {
    absl::StatusOr<v1::CollectiveResponse> got = c[r]->Next();
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_THAT(FromCallStatus(got->status()), IsOk());
    ASSERT_EQ(got->result_size(), 1);
    EXPECT_EQ(got->result(0).shape(0), 2 * n);
    EXPECT_TRUE(got->has_data_range());
    EXPECT_TRUE(c[r]->ResultOf(*got) == in[0] + in[1]) << "rank " << r;
    range[r] = got->data_range();
  }
  // The gathered result is the same for both ranks: one range.
  EXPECT_EQ(range[0].offset(), range[1].offset());
}

TEST_F(ShmServerTest, AllReduceWithAPeerOnGrpc) {
  std::vector<std::unique_ptr<RawSession>> s = JoinTwo("shm-mixed");
  ASSERT_EQ(s.size(), 2u);
  std::unique_ptr<ShmClient> c = Connect(*s[0]);
  ASSERT_NE(c, nullptr);
  const int64_t n = 300000;
  RawCallResult grpc_rank;
  std::thread peer([&] {
    const std::string in = Input(1, n, 8);
    std::vector<v1::CollectiveRequest> chunks;
    for (size_t at = 0; at < in.size(); at += kChunkBytes) {
      v1::CollectiveRequest m;
      if (at == 0) {
        m = AllReduce(*s[1], 0, 0, n);
        m.clear_call_id();
      }
      m.set_offset(at);
      m.set_data(in.substr(at, kChunkBytes));
      chunks.push_back(std::move(m));
    }
    grpc_rank = s[1]->Call(chunks, kPatience);
  });
  const std::string in = Input(0, n, 8);
  c->WriteInput(0, in);
  ASSERT_TRUE(c->Push(InRange(AllReduce(*s[0], 1, 0, n), 0, in.size())).ok());
  absl::StatusOr<v1::CollectiveResponse> got = c->Next();
  peer.join();
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_THAT(FromCallStatus(got->status()), IsOk());
  EXPECT_TRUE(c->ResultOf(*got) == Expected(n, 8));
  EXPECT_TRUE(grpc_rank.status.ok()) << grpc_rank.status;
  // Chunks may be answered out of order: each lands at its offset.
  std::string result(n * 4, '\0');
  for (const v1::CollectiveResponse& r : grpc_rank.responses) {
    ASSERT_LE(r.offset() + r.data().size(), result.size());
    result.replace(r.offset(), r.data().size(), r.data());
  }
  EXPECT_TRUE(result == Expected(n, 8));
}

TEST_F(ShmServerTest, ACancelRecordEndsTheCallCancelledAndFreesItsRange) {
  std::vector<std::unique_ptr<RawSession>> s = JoinTwo("shm-cancel");
  ASSERT_EQ(s.size(), 2u);
  std::unique_ptr<ShmClient> c = Connect(*s[0]);
  ASSERT_NE(c, nullptr);
  // Rank 1 never comes: rank 0's call waits, fed as far as the window goes.
  const int64_t n = (1 << 20) / 4;
  c->WriteInput(0, Input(0, n, 4));
  ASSERT_TRUE(c->Push(InRange(AllReduce(*s[0], 7, 0, n), 0, n * 4)).ok());
  ASSERT_TRUE(c->WaitConsumed());
  v1::CollectiveRequest cancel;
  cancel.set_call_id(7);
  ASSERT_TRUE(c->Push(cancel).ok());
  absl::StatusOr<v1::CollectiveResponse> got = c->Next();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->call_id(), 7u);
  EXPECT_THAT(FromCallStatus(got->status()),
              StatusIs(absl::StatusCode::kCancelled));
  EXPECT_FALSE(got->has_data_range());

  // The session goes on: a call naming the other rank fails alone.
  v1::CollectiveRequest foreign = AllReduce(*s[1], 8, 0, 4);
  foreign.set_data(std::string(16, '\0'));
  ASSERT_TRUE(c->Push(foreign).ok());
  got = c->Next();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->call_id(), 8u);
  EXPECT_THAT(
      FromCallStatus(got->status()),
      StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("rank 1")));
}

TEST_F(ShmServerTest, ASilentPeerDoesNotHoldUpAnotherHandshake) {
  std::vector<std::unique_ptr<RawSession>> s = JoinTwo("shm-silent");
  ASSERT_EQ(s.size(), 2u);
  // Connected, and never says hello.
  UniqueFd silent(socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const std::string& name = s[0]->shared_memory_socket();
  std::memcpy(addr.sun_path + 1, name.data(), name.size());
  ASSERT_EQ(connect(silent.get(), reinterpret_cast<sockaddr*>(&addr),
                    static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 +
                                           name.size())),
            0);
  std::unique_ptr<ShmClient> c = Connect(*s[0]);
  EXPECT_NE(c, nullptr);
  // The silent one is still waiting for its deadline: nothing came back.
  pollfd p{silent.get(), POLLIN | POLLRDHUP, 0};
  EXPECT_EQ(poll(&p, 1, 0), 0);
}

// A client that never pops its response ring: once the answers waiting for
// room there pass --window x --chunk_bytes, reducerd takes none of its
// requests (its request ring stays full), the answers waiting keep their
// reservations in the memory budget, and another job's all-reduce on the
// same reducerd completes. Once the client pops, every call is answered.
TEST_F(ShmServerTest, AClientThatNeverPopsItsResponsesIsNoLongerTaken) {
  absl::StatusOr<std::unique_ptr<RawSession>> hog =
      RawSession::Join(server_->address(), "hog", 0, 1, kPatience);
  ASSERT_TRUE(hog.ok()) << hog.status();
  std::unique_ptr<ShmClient> client = Connect(**hog);
  ASSERT_NE(client, nullptr);
  // 32 KiB per call, inline both ways; about 32 such records fill a ring.
  constexpr int64_t kN = 8 << 10;
  constexpr uint64_t kMostCalls = 2000;
  const std::string payload = Input(0, kN, 3);
  auto call = [&](uint64_t id) {
    v1::CollectiveRequest m = AllReduce(**hog, id, id - 1, kN);
    m.set_data(payload);
    return m.SerializeAsString();
  };
  uint64_t pushed = 0;
  while (pushed < kMostCalls) {
    const absl::Status s =
        client->PushWithin(call(pushed + 1), absl::Seconds(1));
    if (s.code() == absl::StatusCode::kDeadlineExceeded) break;
    ASSERT_TRUE(s.ok()) << s;
    ++pushed;
  }
  // Taken: a response ring's worth answered, the bound's worth waiting, a
  // ring's worth of records in the pass that went over; a ring's worth
  // more waits in the request ring.
  EXPECT_LT(pushed, 200u) << "reducerd took every call";

  std::unique_ptr<v1::Admin::Stub> admin =
      v1::Admin::NewStub(grpc::CreateChannel(
          server_->address(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  v1::StatusResponse status;
  ASSERT_TRUE(admin->Status(&context, v1::StatusRequest(), &status).ok());
  // At least the bound's worth of answers waits, each with its rank's
  // reservation: 32 KiB staged in and 32 KiB queued out.
  EXPECT_GE(status.memory_reserved_bytes(), 4 * 2 * kN * sizeof(float));

  // Another job goes on, on gRPC.
  absl::StatusOr<std::unique_ptr<RawSession>> other =
      RawSession::Join(server_->address(), "other", 0, 1, kPatience);
  ASSERT_TRUE(other.ok()) << other.status();
  v1::CollectiveRequest theirs = AllReduce(**other, 0, 0, 4);
  theirs.clear_call_id();
  theirs.set_data(Input(0, 4, 9));
  RawCallResult result = (*other)->Call({theirs}, kPatience);
  EXPECT_TRUE(result.status.ok()) << result.status;
  EXPECT_EQ(result.data, Input(0, 4, 9));

  // The client pops: every call is answered, the ones still in its request
  // ring included.
  std::vector<bool> answered(pushed + 1, false);
  for (uint64_t i = 0; i < pushed; ++i) {
    absl::StatusOr<v1::CollectiveResponse> response = client->Next();
    ASSERT_TRUE(response.ok()) << response.status() << " after " << i;
    ASSERT_GE(response->call_id(), 1u);
    ASSERT_LE(response->call_id(), pushed);
    EXPECT_FALSE(answered[response->call_id()]);
    answered[response->call_id()] = true;
    EXPECT_THAT(FromCallStatus(response->status()), IsOk());
    EXPECT_EQ(response->data(), payload);
  }
}

TEST_F(ShmServerTest, RecordsThatBreakTheProtocolEndTheSession) {
  std::vector<std::unique_ptr<RawSession>> s = JoinTwo("shm-bad");
  ASSERT_EQ(s.size(), 2u);
  {
    std::unique_ptr<ShmClient> c = Connect(*s[0]);
    ASSERT_NE(c, nullptr);
    ASSERT_TRUE(c->PushRaw("\xff\xff\xff").ok());  // not a CollectiveRequest
    EXPECT_TRUE(c->ClosedByServer());
  }
  {
    std::unique_ptr<ShmClient> c = Connect(*s[0]);
    ASSERT_NE(c, nullptr);
    v1::CollectiveRequest release;  // a range never handed out
    release.add_released()->set_offset(4096);
    release.mutable_released(0)->set_size(64);
    ASSERT_TRUE(c->Push(release).ok());
    EXPECT_TRUE(c->ClosedByServer());
  }
  {
    std::unique_ptr<ShmClient> c = Connect(*s[0]);
    ASSERT_NE(c, nullptr);
    v1::CollectiveRequest outside =
        InRange(AllReduce(*s[0], 1, 0, 16), kSegmentBytes - 32, 64);
    ASSERT_TRUE(c->Push(outside).ok());
    EXPECT_TRUE(c->ClosedByServer());
  }
}

TEST_F(ShmServerTest, ACorruptRingEndsTheSessionAndFailsThePeer) {
  ExpectPeerFailsWhen("shm-corrupt", [](ShmClient& rank0) {
    rank0.CorruptRequestRing();
    EXPECT_TRUE(rank0.ClosedByServer());
  });
}

TEST_F(ShmServerTest, TheClientClosingItsSocketFailsThePeer) {
  ExpectPeerFailsWhen("shm-closed", [](ShmClient& rank0) { rank0.CloseSocket(); });
}

// Writes TEST_TMPDIR/job_tokens, granting the token "secret" to `job` alone;
// returns its path.
std::string WriteJobTokens(const std::string& job) {
  const std::string path =
      absl::StrCat(std::getenv("TEST_TMPDIR"), "/job_tokens");
  std::FILE* f = std::fopen(path.c_str(), "w");
  // printf %s secret | sha256sum
  std::fputs(absl::StrCat(job,
                          " 2bb80d537b1da3e38bd30361aa855686bde0eacd7162"
                          "fef6a25fe97bf527a25b\n")
                 .c_str(),
             f);
  std::fclose(f);
  return path;
}

// reducerd requiring job tokens: the hello's token is checked as a call's.
class ShmTokenTest : public ShmServerTest {
 protected:
  ServerOptions Options() override {
    ServerOptions options = ShmServerTest::Options();
    options.job_tokens_file = WriteJobTokens("shm-token");
    options.job_tokens_refresh_interval = absl::Milliseconds(100);
    return options;
  }
};

// A session whose peer lost its seat is ended by reducerd, within a second
// of reducerd seeing the change (kSeatCheck, 250 ms): the bound asserted
// below leaves room for a loaded machine.
constexpr absl::Duration kSeatLossNoticed = absl::Seconds(2);

TEST_F(ShmTokenTest, RemovingTheJobsTokenEndsItsSessions) {
  std::vector<std::unique_ptr<RawSession>> s = JoinTwo("shm-token", "secret");
  ASSERT_EQ(s.size(), 2u);
  absl::Status welcome;
  HelloTweak tweak;
  tweak.token = "secret";
  std::unique_ptr<ShmClient> client =
      ShmClient::Connect(*s[0], &welcome, tweak);
  ASSERT_TRUE(welcome.ok()) << welcome;
  absl::SleepFor(absl::Milliseconds(300));  // the session is being served

  WriteJobTokens("another-job");
  const absl::Time revoked = absl::Now();
  EXPECT_TRUE(client->ClosedByServer());
  EXPECT_LE(absl::Now() - revoked, kSeatLossNoticed);
}

TEST_F(ShmTokenTest, TheHelloMustCarryTheJobsToken) {
  std::vector<std::unique_ptr<RawSession>> s = JoinTwo("shm-token", "secret");
  ASSERT_EQ(s.size(), 2u);
  absl::Status welcome;
  HelloTweak tweak;
  std::unique_ptr<ShmClient> client =
      ShmClient::Connect(*s[0], &welcome, tweak);
  EXPECT_EQ(client, nullptr);
  EXPECT_THAT(welcome, StatusIs(absl::StatusCode::kUnauthenticated));

  tweak.token = "not-the-secret";
  client = ShmClient::Connect(*s[0], &welcome, tweak);
  EXPECT_EQ(client, nullptr);
  EXPECT_THAT(welcome, StatusIs(absl::StatusCode::kUnauthenticated,
                                Not(HasSubstr("not-the-secret"))));

  tweak.token = "secret";
  client = ShmClient::Connect(*s[0], &welcome, tweak);
  EXPECT_TRUE(welcome.ok()) << welcome;
  EXPECT_NE(client, nullptr);
}

// When a rank's session is lost, the epoch ends: the other rank's same-host
// session is ended by reducerd, and the next epoch's sessions are handed a
// new result segment, which no peer of the old epoch maps.
TEST_F(ShmServerTest, AnEndedEpochEndsItsSessionsAndTheNextGetsAFreshSegment) {
  std::vector<std::unique_ptr<RawSession>> s = JoinTwo("shm-epoch");
  ASSERT_EQ(s.size(), 2u);
  std::unique_ptr<ShmClient> old_session = Connect(*s[0]);
  ASSERT_NE(old_session, nullptr);
  const ino_t old_segment = old_session->ResultInode();
  absl::SleepFor(absl::Milliseconds(300));  // the session is being served

  s[1].reset();  // rank 1's session stream is cancelled: the epoch ends
  const absl::Time ended = absl::Now();
  EXPECT_TRUE(old_session->ClosedByServer());
  EXPECT_LE(absl::Now() - ended, kSeatLossNoticed);

  s.clear();
  std::vector<std::unique_ptr<RawSession>> next = JoinTwo("shm-epoch");
  ASSERT_EQ(next.size(), 2u);
  std::unique_ptr<ShmClient> new_session = Connect(*next[0]);
  ASSERT_NE(new_session, nullptr);
  EXPECT_NE(new_session->ResultInode(), old_segment);
}

// The job's result segment is sized by its first same-host session; a later
// session with a larger input segment is refused, naming the option.
TEST_F(ShmServerTest, ALaterSessionsLargerInputSegmentIsRefused) {
  std::vector<std::unique_ptr<RawSession>> s = JoinTwo("shm-sizes");
  ASSERT_EQ(s.size(), 2u);
  std::unique_ptr<ShmClient> first = Connect(*s[0]);
  ASSERT_NE(first, nullptr);
  absl::Status welcome;
  HelloTweak larger;
  larger.input_bytes = 2 * kSegmentBytes;
  std::unique_ptr<ShmClient> second =
      ShmClient::Connect(*s[1], &welcome, larger);
  EXPECT_EQ(second, nullptr);
  EXPECT_THAT(welcome,
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("ClientOptions::shared_memory_bytes")));
  // The same size is fine.
  second = Connect(*s[1]);
  EXPECT_NE(second, nullptr);
}

// A peer of another uid is refused, naming the flag that would allow it.
// The peer is a child process that drops to uid 65534 and speaks only
// system calls (it is forked from a threaded process).
TEST_F(ShmServerTest, APeerOfAnotherUidIsRefusedUnlessAllowed) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to run a peer as uid 65534";
  v1::SharedMemoryHello hello;
  hello.set_job("shm-other-uid");
  const std::string hello_bytes = hello.SerializeAsString();
  const std::string socket_name = server_->shared_memory_socket();
  int out[2];
  ASSERT_EQ(pipe(out), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(out[0]);
    if (syscall(SYS_setresgid, 65534, 65534, 65534) != 0 ||
        syscall(SYS_setresuid, 65534, 65534, 65534) != 0) {
      _exit(2);
    }
    const int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path + 1, socket_name.data(), socket_name.size());
    const socklen_t len = static_cast<socklen_t>(
        offsetof(sockaddr_un, sun_path) + 1 + socket_name.size());
    if (fd < 0 || connect(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
        send(fd, hello_bytes.data(), hello_bytes.size(), MSG_NOSIGNAL) < 0) {
      _exit(3);
    }
    pollfd p{fd, POLLIN, 0};
    char answer[1 << 12];
    ssize_t n = poll(&p, 1, 10000) == 1 ? recv(fd, answer, sizeof(answer), 0) : -1;
    if (n <= 0) _exit(4);
    (void)!write(out[1], answer, static_cast<size_t>(n));
    _exit(0);
  }
  close(out[1]);
  std::string answer;
  char buffer[1 << 12];
  for (ssize_t n; (n = read(out[0], buffer, sizeof(buffer))) > 0;) {
    answer.append(buffer, static_cast<size_t>(n));
  }
  close(out[0]);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "the peer exited with " << status;
  v1::SharedMemoryWelcome welcome;
  ASSERT_TRUE(welcome.ParseFromString(answer));
  const absl::Status refused = FromCallStatus(welcome.status());
  EXPECT_THAT(refused, StatusIs(absl::StatusCode::kPermissionDenied,
                                HasSubstr("runs as uid 65534")));
  EXPECT_THAT(refused.message(), HasSubstr("--shared_memory_allowed_uids=65534"));
}

class ShmHandshakeLimitTest : public ShmServerTest {
 protected:
  ServerOptions Options() override {
    ServerOptions options = ShmServerTest::Options();
    options.max_same_host_handshakes = 2;
    return options;
  }
};

// Connections that say nothing hold a handshake thread each until their
// handshake times out; beyond the bound, a connection is refused at once
// (no thread), and once the silent ones go, handshakes are served again.
TEST_F(ShmHandshakeLimitTest, ConnectionsBeyondTheBoundAreRefusedAtOnce) {
  std::vector<std::unique_ptr<RawSession>> s = JoinTwo("shm-crowd");
  ASSERT_EQ(s.size(), 2u);
  std::vector<UniqueFd> silent;
  for (int i = 0; i < 2; ++i) {
    silent.emplace_back(ShmClient::ConnectOnly(s[0]->shared_memory_socket()));
    ASSERT_TRUE(silent.back().valid()) << strerror(errno);
  }
  absl::SleepFor(absl::Milliseconds(300));  // both accepted, both waiting
  absl::Status welcome;
  const absl::Time start = absl::Now();
  std::unique_ptr<ShmClient> crowded = ShmClient::Connect(*s[0], &welcome);
  EXPECT_EQ(crowded, nullptr);
  EXPECT_THAT(welcome, StatusIs(absl::StatusCode::kResourceExhausted,
                                HasSubstr("--max_same_host_handshakes=2")));
  EXPECT_LE(absl::Now() - start, absl::Seconds(2));

  silent.clear();  // their handshakes end at once
  std::unique_ptr<ShmClient> served;
  for (int attempt = 0; attempt < 30 && served == nullptr; ++attempt) {
    absl::SleepFor(absl::Milliseconds(100));
    served = ShmClient::Connect(*s[0], &welcome);
  }
  EXPECT_NE(served, nullptr) << welcome;
}

}  // namespace
}  // namespace testing
}  // namespace reducer
