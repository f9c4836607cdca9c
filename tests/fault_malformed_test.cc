// Fault tests: malformed requests. A malformed call must get
// INVALID_ARGUMENT naming the field at fault, fast; the collective it
// belonged to must fail for every rank (not hang until its timeout); and
// the job must go on afterwards.
//
// Two kinds of sender: fault_worker ranks through the client library (ops
// not allowed on a dtype, ReduceScatter shapes that do not divide, roots
// outside the group, groups without the caller), and a raw gRPC client on
// the generated stubs (tests/raw_client.h) with hand-made CollectiveRequest
// messages the library would never send: wrong payload sizes, unknown enum
// values, ranks outside the world, impossible shapes, chunks out of order.
#include <cstdint>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/reducer/v1/reducer.pb.h"
#include "tests/closed_form.h"
#include "tests/fault_test_base.h"
#include "tests/raw_client.h"
#include "tests/status_matchers.h"

namespace reducer {
namespace testing {
namespace {

using ::testing::HasSubstr;

// The collective timeout of these tests, and how soon a malformed request
// and the failure of its collective must be reported (well before it).
constexpr int kTimeoutMs = 5000;
constexpr absl::Duration kFast = absl::Milliseconds(2500);

// A named all-reduce every rank runs after the malformed one: the job goes
// on. Named, so that it matches whatever sequence numbers were consumed.
constexpr char kFollowUp[] =
    "allreduce:name=after,shape=5,seed=7,timeout_ms=20000";

class MalformedTest : public FaultTest {};

// ---------------------------------------------------------------------------
// Through the client library.

TEST_F(MalformedTest, OpNotAllowedOnDtypeIsRejectedOnEveryRank) {
  ASSERT_TRUE(StartServer());
  std::vector<std::unique_ptr<ChildProcess>> workers = StartJob(
      Job(), 2,
      {absl::StrCat("allreduce:dtype=int32,op=avg,timeout_ms=5000;"
                    "allreduce_inplace:dtype=float32,op=bit_xor,timeout_ms=5000;",
                    kFollowUp)});
  std::vector<ProcessResult> results = WaitWorkers(workers);
  ASSERT_EQ(results.size(), 2u);
  for (const ProcessResult& r : results) {
    ExpectStep(r, "1", absl::StatusCode::kInvalidArgument,
               {"avg is defined for floating-point dtypes only, not int32"},
               kFast);
    // In-place: rejected, and the buffer keeps its bytes (else check=bad).
    ExpectStep(r, "2", absl::StatusCode::kInvalidArgument,
               {"bit_xor is defined for integer and bool dtypes only, not "
                "float32"},
               kFast);
    ExpectStep(r, "3", absl::StatusCode::kOk);
  }
}

TEST_F(MalformedTest, ReduceScatterDimensionNotDivisibleByGroupSize) {
  ASSERT_TRUE(StartServer());
  std::vector<std::unique_ptr<ChildProcess>> workers = StartJob(
      Job(), 3,
      {absl::StrCat("reducescatter:shape=4x2,timeout_ms=5000;", kFollowUp)});
  std::vector<ProcessResult> results = WaitWorkers(workers);
  ASSERT_EQ(results.size(), 3u);
  for (const ProcessResult& r : results) {
    ExpectStep(r, "1", absl::StatusCode::kInvalidArgument,
               {"reducescatter dimension 0 of shape [4,2] is not divisible by "
                "the group size 3"},
               kFast);
    ExpectStep(r, "2", absl::StatusCode::kOk);
  }
}

TEST_F(MalformedTest, BroadcastRootOutsideTheGroup) {
  ASSERT_TRUE(StartServer());
  // Ranks 0 and 1 broadcast in group [0,1] from rank 2; then from rank 7,
  // outside the world. Rank 2 only takes part in the follow-up.
  std::vector<std::unique_ptr<ChildProcess>> workers = StartJob(
      Job(), 3,
      {absl::StrCat("broadcast:root=2,group=0+1,timeout_ms=5000;"
                    "broadcast:root=7,timeout_ms=5000;",
                    kFollowUp),
       absl::StrCat("broadcast:root=2,group=0+1,noinput=1,timeout_ms=5000;"
                    "broadcast:root=7,noinput=1,timeout_ms=5000;",
                    kFollowUp),
       absl::StrCat("sleep:ms=0;broadcast:root=7,noinput=1,timeout_ms=5000;",
                    kFollowUp)});
  std::vector<ProcessResult> results = WaitWorkers(workers);
  ASSERT_EQ(results.size(), 3u);
  for (int r = 0; r < 2; ++r) {
    ExpectStep(results[r], "1", absl::StatusCode::kInvalidArgument,
               {"broadcast root 2 is not in group [0,1]"}, kFast);
  }
  for (int r = 0; r < 3; ++r) {
    ExpectStep(results[r], "2", absl::StatusCode::kInvalidArgument,
               {"broadcast root 7 is not in group [0,1,2]"}, kFast);
    ExpectStep(results[r], "3", absl::StatusCode::kOk);
  }
}

TEST_F(MalformedTest, GroupWithoutTheCallerIsRejectedAndOthersGoOn) {
  ASSERT_TRUE(StartServer());
  // Rank 0 names group [1,2], which it is not in: rejected at once. Ranks 1
  // and 2 run their own collective on [1,2], undisturbed.
  std::vector<std::unique_ptr<ChildProcess>> workers = StartJob(
      Job(), 3,
      {absl::StrCat("allreduce:group=1+2,timeout_ms=5000;"
                    "allreduce:group=0+5,timeout_ms=5000;",
                    kFollowUp),
       absl::StrCat("allreduce:group=1+2,timeout_ms=5000;sleep:ms=0;", kFollowUp),
       absl::StrCat("allreduce:group=1+2,timeout_ms=5000;sleep:ms=0;",
                    kFollowUp)});
  std::vector<ProcessResult> results = WaitWorkers(workers);
  ASSERT_EQ(results.size(), 3u);
  ExpectStep(results[0], "1", absl::StatusCode::kInvalidArgument,
             {"group [1,2] does not contain this rank (0)"}, kFast);
  ExpectStep(results[0], "2", absl::StatusCode::kInvalidArgument,
             {"group names rank 5, outside the world of 3"}, kFast);
  ExpectStep(results[1], "1", absl::StatusCode::kOk);
  ExpectStep(results[2], "1", absl::StatusCode::kOk);
  for (const ProcessResult& r : results) {
    ExpectStep(r, "3", absl::StatusCode::kOk);
  }
}

// Only rank 2 asks for an op its dtype does not allow; ranks 0 and 1 make a
// valid call. Rank 2 is rejected, and the collective fails for all.
TEST_F(MalformedTest, OneRankWithDisallowedOpFailsTheCollectiveForAll) {
  ASSERT_TRUE(StartServer());
  std::vector<std::unique_ptr<ChildProcess>> workers = StartJob(
      Job(), 3,
      {absl::StrCat("sleep:ms=0;allreduce:dtype=int32,op=sum,timeout_ms=5000;",
                    kFollowUp),
       absl::StrCat("sleep:ms=0;allreduce:dtype=int32,op=sum,timeout_ms=5000;",
                    kFollowUp),
       absl::StrCat("sleep:ms=300;allreduce:dtype=int32,op=avg,timeout_ms=5000;",
                    kFollowUp)});
  std::vector<ProcessResult> results = WaitWorkers(workers);
  ASSERT_EQ(results.size(), 3u);
  ExpectStep(results[2], "2", absl::StatusCode::kInvalidArgument,
             {"avg is defined for floating-point dtypes only, not int32"},
             kFast);
  for (int r = 0; r < 2; ++r) {
    // Fast, not DEADLINE_EXCEEDED "rank 2 never arrived": the rejected
    // header still fails the collective it names.
    ExpectStep(results[r], "2", absl::StatusCode::kInvalidArgument,
               {"rank 2", "avg"}, kFast);
  }
  for (const ProcessResult& r : results) ExpectStep(r, "3", absl::StatusCode::kOk);
}

// ---------------------------------------------------------------------------
// Through a raw gRPC client.

// float32 [n] of ClosedFormInput(kSum, rank, seed) as wire bytes.
std::string RawPayload(int rank, int64_t n, uint64_t seed) {
  std::vector<uint8_t> bytes =
      ClosedFormInput(ReduceOp::kSum, DataType::kFloat32, rank, n, seed);
  return std::string(bytes.begin(), bytes.end());
}

// One malformed contribution of the raw rank (rank 1 of 2) to the first
// all-reduce of the job, for which rank 0 (a fault_worker) sends a valid
// float32 [4].
struct RawCase {
  std::string label;
  // Builds the messages of the raw rank's stream.
  std::function<std::vector<v1::CollectiveRequest>(const RawSession&)> build;
  absl::StatusCode raw_code;
  std::vector<std::string> raw_want;  // in the raw rank's message
  // Whether the collective is known to the server (so rank 0 must fail
  // too, with `peer_want` in its message), or not (a stream without a
  // header, or one claiming another rank: nothing ties it to the
  // collective; then the raw rank sends its valid contribution next, and
  // rank 0's collective must succeed, undisturbed).
  bool peer_fails = true;
  absl::StatusCode peer_code = absl::StatusCode::kInvalidArgument;
  std::vector<std::string> peer_want;
};

void PrintTo(const RawCase& c, std::ostream* os) { *os << c.label; }

v1::CollectiveRequest FirstMessage(const RawSession& raw,
                                   std::vector<int64_t> shape,
                                   std::string data) {
  v1::CollectiveRequest m = raw.AllReduceRequest(shape);
  m.mutable_header()->set_timeout_ms(kTimeoutMs);
  m.set_offset(0);
  m.set_data(std::move(data));
  return m;
}

class RawMalformedTest : public FaultTest,
                         public ::testing::WithParamInterface<RawCase> {};

TEST_P(RawMalformedTest, IsRejectedAndItsCollectiveFailsForAll) {
  const RawCase& c = GetParam();
  ASSERT_TRUE(StartServer());
  const std::string job = Job();
  WorkerSpec peer;
  peer.job = job;
  peer.rank = 0;
  peer.world_size = 2;
  peer.steps = absl::StrCat("allreduce:shape=4,timeout_ms=", kTimeoutMs, ";",
                            kFollowUp);
  if (!c.peer_fails) {  // it will succeed: give the raw rank time
    peer.steps = absl::StrCat("allreduce:shape=4,timeout_ms=20000;", kFollowUp);
  }
  std::vector<std::unique_ptr<ChildProcess>> workers;
  workers.push_back(StartWorker(peer));
  absl::StatusOr<std::unique_ptr<RawSession>> raw =
      RawSession::Join(server()->address(), job, 1, 2, absl::Seconds(30));
  ASSERT_TRUE(raw.ok()) << raw.status();
  ASSERT_TRUE(WaitForOutput(*workers[0], "BEGIN 1 "));

  const RawCallResult bad = (*raw)->Call(c.build(**raw), absl::Seconds(20));
  std::string where = absl::StrCat(c.label, ": raw rank 1 got ",
                                   bad.status.ToString(), " after ",
                                   absl::FormatDuration(bad.elapsed));
  EXPECT_THAT(bad.status, StatusIs(c.raw_code)) << where;
  for (const std::string& s : c.raw_want) {
    EXPECT_THAT(bad.status.message(), HasSubstr(s)) << where;
  }
  EXPECT_LE(bad.elapsed, kFast) << where;
  EXPECT_TRUE(bad.data.empty()) << where << ": and result bytes";

  if (!c.peer_fails) {
    // Rank 1's real contribution to the first all-reduce (worker seed 1).
    const RawCallResult real = (*raw)->Call(
        {FirstMessage(**raw, {4}, RawPayload(1, 4, 1000))}, absl::Seconds(20));
    const std::vector<uint8_t> want =
        ClosedFormExpected(ReduceOp::kSum, DataType::kFloat32, {0, 1}, 4, 1000);
    EXPECT_TRUE(real.status.ok()) << c.label << ": " << real.status;
    EXPECT_EQ(real.data, std::string(want.begin(), want.end())) << c.label;
  }

  // The job goes on: the raw rank takes part in the named follow-up (with
  // a timeout long enough to wait for a rank 0 still in its first call).
  const int64_t n = 5;
  const uint64_t seed = 7 * 1000;
  v1::CollectiveRequest after = FirstMessage(**raw, {n}, RawPayload(1, n, seed));
  after.mutable_header()->set_name("after");
  after.mutable_header()->set_timeout_ms(20000);
  const RawCallResult good = (*raw)->Call({after}, absl::Seconds(20));
  EXPECT_TRUE(good.status.ok()) << c.label << ": follow-up " << good.status;
  const std::vector<uint8_t> want =
      ClosedFormExpected(ReduceOp::kSum, DataType::kFloat32, {0, 1}, n, seed);
  EXPECT_EQ(good.data, std::string(want.begin(), want.end()))
      << c.label << ": follow-up result";

  std::vector<ProcessResult> results = WaitWorkers(workers);
  ASSERT_EQ(results.size(), 1u);
  if (c.peer_fails) {
    // Headers Job::Attach rejects (unknown enums, impossible shapes) still
    // fail the collective they name, so rank 0 does not wait for its timeout.
    ExpectStep(results[0], "1", c.peer_code, c.peer_want, kFast);
  } else {
    ExpectStep(results[0], "1", absl::StatusCode::kOk);
  }
  ExpectStep(results[0], "2", absl::StatusCode::kOk);
}

INSTANTIATE_TEST_SUITE_P(
    Requests, RawMalformedTest,
    ::testing::Values(
        RawCase{"payload_longer_than_shape",
                [](const RawSession& raw) {
                  return std::vector<v1::CollectiveRequest>{
                      FirstMessage(raw, {4}, std::string(20, '\1'))};
                },
                absl::StatusCode::kInvalidArgument,
                {"rank 1 sent 20 payload bytes or more, but its tensors ([4] "
                 "float32) hold 16"},
                true,
                absl::StatusCode::kInvalidArgument,
                {"rank 1 sent 20 payload bytes or more"}},
        RawCase{"payload_shorter_than_shape",
                [](const RawSession& raw) {
                  return std::vector<v1::CollectiveRequest>{
                      FirstMessage(raw, {4}, std::string(12, '\1'))};
                },
                absl::StatusCode::kInvalidArgument,
                {"rank 1 closed its stream after 12 of 16 payload bytes"},
                true,
                absl::StatusCode::kInvalidArgument,
                {"rank 1 closed its stream after 12 of 16 payload bytes"}},
        RawCase{"chunks_out_of_order",
                [](const RawSession& raw) {
                  v1::CollectiveRequest second;
                  second.set_offset(12);  // skips bytes [8, 12)
                  second.set_data(std::string(4, '\2'));
                  return std::vector<v1::CollectiveRequest>{
                      FirstMessage(raw, {4}, std::string(8, '\1')), second};
                },
                absl::StatusCode::kInvalidArgument,
                {"rank 1 sent payload bytes at offset 12, expected offset 8 "
                 "(chunks must come in order)"},
                true,
                absl::StatusCode::kInvalidArgument,
                {"expected offset 8"}},
        RawCase{"second_header_on_a_stream",
                [](const RawSession& raw) {
                  v1::CollectiveRequest first = FirstMessage(raw, {4}, "");
                  v1::CollectiveRequest again = first;
                  again.set_data(std::string(16, '\1'));
                  return std::vector<v1::CollectiveRequest>{first, again};
                },
                absl::StatusCode::kInvalidArgument,
                {"rank 1 sent a second header on the same stream"},
                true,
                absl::StatusCode::kInvalidArgument,
                {"second header"}},
        RawCase{"unknown_dtype_enum",
                [](const RawSession& raw) {
                  v1::CollectiveRequest m =
                      FirstMessage(raw, {4}, std::string(16, '\1'));
                  m.mutable_header()->mutable_tensors(0)->set_dtype(
                      static_cast<v1::DataType>(42));
                  return std::vector<v1::CollectiveRequest>{m};
                },
                absl::StatusCode::kInvalidArgument,
                {"header.tensors[0].dtype", "42"},
                true,
                absl::StatusCode::kInvalidArgument,
                {"rank 1", "dtype"}},
        RawCase{"unknown_op_enum",
                [](const RawSession& raw) {
                  v1::CollectiveRequest m =
                      FirstMessage(raw, {4}, std::string(16, '\1'));
                  m.mutable_header()->mutable_tensors(0)->set_op(
                      static_cast<v1::ReduceOp>(99));
                  return std::vector<v1::CollectiveRequest>{m};
                },
                absl::StatusCode::kInvalidArgument,
                {"header.tensors[0].op", "99"},
                true,
                absl::StatusCode::kInvalidArgument,
                {"rank 1", "op"}},
        RawCase{"unknown_kind_enum",
                [](const RawSession& raw) {
                  v1::CollectiveRequest m =
                      FirstMessage(raw, {4}, std::string(16, '\1'));
                  m.mutable_header()->set_kind(
                      static_cast<v1::CollectiveKind>(17));
                  return std::vector<v1::CollectiveRequest>{m};
                },
                absl::StatusCode::kInvalidArgument,
                {"header.kind", "17"},
                true,
                absl::StatusCode::kInvalidArgument,
                {"rank 1", "kind"}},
        RawCase{"rank_outside_world",
                [](const RawSession& raw) {
                  v1::CollectiveRequest m =
                      FirstMessage(raw, {4}, std::string(16, '\1'));
                  m.mutable_header()->set_rank(5);
                  return std::vector<v1::CollectiveRequest>{m};
                },
                absl::StatusCode::kInvalidArgument,
                {"rank 5 outside world of 2"},
                // The stream claims a rank no collective has; the server
                // cannot know which collective rank 1 meant.
                false},
        RawCase{"negative_dimension",
                [](const RawSession& raw) {
                  return std::vector<v1::CollectiveRequest>{
                      FirstMessage(raw, {2, -3}, "")};
                },
                absl::StatusCode::kInvalidArgument,
                {"negative dimension -3 in shape [2,-3]"},
                true,
                absl::StatusCode::kInvalidArgument,
                {"rank 1", "negative dimension"}},
        RawCase{"overflowing_shape",
                [](const RawSession& raw) {
                  return std::vector<v1::CollectiveRequest>{FirstMessage(
                      raw, {int64_t{1} << 40, int64_t{1} << 40}, "")};
                },
                absl::StatusCode::kInvalidArgument,
                {"overflows int64"},
                true,
                absl::StatusCode::kInvalidArgument,
                {"rank 1", "overflows int64"}},
        RawCase{"byte_size_overflowing",
                [](const RawSession& raw) {
                  // 2^62 elements fit in int64, their bytes do not.
                  return std::vector<v1::CollectiveRequest>{
                      FirstMessage(raw, {int64_t{1} << 62}, "")};
                },
                absl::StatusCode::kInvalidArgument,
                {"byte size of shape [4611686018427387904] float32 overflows "
                 "int64"},
                true,
                absl::StatusCode::kInvalidArgument,
                {"rank 1", "overflows int64"}},
        RawCase{"first_message_without_header",
                [](const RawSession&) {
                  v1::CollectiveRequest m;
                  m.set_data(std::string(16, '\1'));
                  return std::vector<v1::CollectiveRequest>{m};
                },
                absl::StatusCode::kInvalidArgument,
                {"the first message of a Collective stream must carry "
                 "`header`"},
                false}),
    [](const ::testing::TestParamInfo<RawCase>& info) {
      return info.param.label;
    });

// A stream that claims a rank its session does not hold, or an epoch that
// is not the job's, is refused without touching the collective: the real
// rank 1 then takes part, and rank 0's collective succeeds.
TEST_F(MalformedTest, ForeignSessionOrEpochIsRefusedAndTheRealRankStillWorks) {
  ASSERT_TRUE(StartServer());
  const std::string job = Job();
  // Rank 0 a fault_worker, rank 1 the raw client.
  std::vector<std::unique_ptr<ChildProcess>> workers;
  workers.push_back(StartWorker(
      WorkerSpec{job, 0, 2, "allreduce:shape=5,seed=3,timeout_ms=15000"}));
  absl::StatusOr<std::unique_ptr<RawSession>> raw =
      RawSession::Join(server()->address(), job, 1, 2, absl::Seconds(30));
  ASSERT_TRUE(raw.ok()) << raw.status();

  const int64_t n = 5;
  const uint64_t seed = 3 * 1000;
  v1::CollectiveRequest wrong_session =
      FirstMessage(**raw, {n}, RawPayload(1, n, seed));
  wrong_session.mutable_header()->set_session_id("not-a-session");
  RawCallResult r = (*raw)->Call({wrong_session}, absl::Seconds(10));
  EXPECT_THAT(
      r.status,
      StatusIs(absl::StatusCode::kFailedPrecondition,
               HasSubstr("session not-a-session does not hold rank 1")));

  v1::CollectiveRequest future_epoch =
      FirstMessage(**raw, {n}, RawPayload(1, n, seed));
  future_epoch.mutable_header()->set_epoch((*raw)->epoch() + 1);
  r = (*raw)->Call({future_epoch}, absl::Seconds(10));
  EXPECT_THAT(r.status, StatusIs(absl::StatusCode::kFailedPrecondition,
                                 HasSubstr("has not started")));

  const RawCallResult good =
      (*raw)->Call({FirstMessage(**raw, {n}, RawPayload(1, n, seed))},
                   absl::Seconds(20));
  EXPECT_TRUE(good.status.ok()) << good.status;
  const std::vector<uint8_t> want =
      ClosedFormExpected(ReduceOp::kSum, DataType::kFloat32, {0, 1}, n, seed);
  EXPECT_EQ(good.data, std::string(want.begin(), want.end()));
  std::vector<ProcessResult> results = WaitWorkers(workers);
  ASSERT_EQ(results.size(), 1u);
  ExpectStep(results[0], "1", absl::StatusCode::kOk);
}

}  // namespace
}  // namespace testing
}  // namespace reducer
