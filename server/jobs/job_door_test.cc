// JobDoor in process, over a real JobRegistry (JobDoorTestEnv): names over
// --max_name_bytes and tokens refused before anything is looked up or kept,
// each refusal counted; joins, attaches, seats and leaves reaching the
// jobs.
#include "server/jobs/job_door.h"

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/reducer/v1/reducer.pb.h"
#include "server/engine/string_bytes.h"
#include "server/jobs/fake_job_channels.h"
#include "server/jobs/job_door_test_env.h"
#include "server/jobs/stream_shares.h"
#include "server/metrics/metrics_sink.h"
#include "tests/matchers.h"

namespace reducer {
namespace {

using Env = JobDoorTestEnv;
using ::testing::ElementsAre, ::testing::HasSubstr, ::testing::IsEmpty,
    ::testing::Not;

const PresentedToken kNoToken{};

TEST(JobDoorTest, JoinReachesTheRegistry) {
  Env env;
  auto session = std::make_shared<FakeSession>();
  EXPECT_THAT(env.Join("j", 0, 1, "s", session), IsOk());
  EXPECT_EQ(session->ready_count(), 1);
  EXPECT_THAT(env.registry().Find("j"), IsOk());
  EXPECT_THAT(env.refused(), IsEmpty());
}

TEST(JobDoorTest, JoinNamingAJobOverTheLimitIsRefusedAndCounted) {
  Env env;
  const std::string job(Env::kMaxNameBytes + 1, 'j');
  EXPECT_THAT(
      env.Join(job, 0, 1, "s"),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("JoinRequest.job is 65 bytes long, over the limit "
                         "of 64 bytes (--max_name_bytes)")));
  EXPECT_THAT(env.registry().Find(job), Not(IsOk()));
  EXPECT_THAT(env.refused(), ElementsAre(absl::StatusCode::kInvalidArgument));
}

// `request` through `door` for a fresh session: the door's answer.
absl::Status JoinThrough(JobDoor& door, const v1::JoinRequest& request) {
  return door.Join(request, kNoToken, std::make_shared<FakeSession>());
}

TEST(JobDoorTest, AJoinNamingTooManyShardsIsRefusedNamingTheBound) {
  Env env;
  v1::JoinRequest request = Env::JoinRequest("j", 0, 1, "s");
  for (int i = 0; i <= JobDoor::kMaxJoinShards; ++i) {
    request.add_shards(absl::StrCat("r", i, ":1"));
  }
  EXPECT_THAT(JoinThrough(env.door(), request),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("JoinRequest.shards names 1025 addresses, "
                                 "over the limit of 1024 shards")));
  // One fewer is taken.
  request.mutable_shards()->RemoveLast();
  EXPECT_THAT(JoinThrough(env.door(), request), IsOk());
  EXPECT_THAT(env.refused(), ElementsAre(absl::StatusCode::kInvalidArgument));
}

TEST(JobDoorTest, AJoinNamingAShardOverTheNameLimitIsRefusedNamingIt) {
  Env env;
  v1::JoinRequest request = Env::JoinRequest("j", 0, 1, "s");
  request.add_shards("r0:1");
  request.add_shards(std::string(Env::kMaxNameBytes + 1, 'r'));
  EXPECT_THAT(JoinThrough(env.door(), request),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("JoinRequest.shards[1] is 65 bytes long, "
                                 "over the limit of 64 bytes "
                                 "(--max_name_bytes)")));
  EXPECT_THAT(env.registry().Find("j"), Not(IsOk()));
}

TEST(JobDoorTest, AJoinsShardListIsBoundedInAll) {
  Env env;
  RefusalRecorder refusals;
  // Names of up to 512 bytes: 1024 of them would be 512 KiB.
  JobDoor door(&env.registry(), &refusals, nullptr, 512);
  v1::JoinRequest request = Env::JoinRequest("j", 0, 1, "s");
  for (int i = 0; i < 129; ++i) request.add_shards(std::string(512, 'r'));
  EXPECT_THAT(JoinThrough(door, request),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("JoinRequest.shards holds 66048 bytes of "
                                 "addresses, over the limit of 65536 bytes")));
  EXPECT_THAT(refusals.refused(),
              ElementsAre(absl::StatusCode::kInvalidArgument));
}

TEST(JobDoorTest, AJoinOverItsSizeIsRefusedCountingFieldsNotKnown) {
  Env env;
  v1::JoinRequest request = Env::JoinRequest("j", 0, 1, "s");
  // A field this reducerd does not know, of 100 KB.
  request.GetReflection()->MutableUnknownFields(&request)->AddLengthDelimited(
      99, std::string(100000, 'x'));
  const absl::Status refused = JoinThrough(env.door(), request);
  EXPECT_THAT(refused,
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr(absl::StrCat(
                           "JoinRequest is ", request.ByteSizeLong(),
                           " bytes, over the limit of ",
                           env.door().max_join_request_bytes(), " bytes"))));
  EXPECT_THAT(env.registry().Find("j"), Not(IsOk()));
  // The limit admits the largest well-formed Join: both names and 1024
  // addresses at their limits (64 bytes each here).
  v1::JoinRequest largest =
      Env::JoinRequest(std::string(Env::kMaxNameBytes, 'j'), 0, 1,
                       std::string(Env::kMaxNameBytes, 's'));
  largest.set_rank(0);
  largest.set_world_size(std::numeric_limits<int32_t>::max());
  for (int i = 0; i < JobDoor::kMaxJoinShards; ++i) {
    largest.add_shards(std::string(Env::kMaxNameBytes, 'r'));
  }
  EXPECT_LE(largest.ByteSizeLong(), env.door().max_join_request_bytes());
}

TEST(JobDoorTest, AttachNamesTheHeaderFieldOverTheLimit) {
  Env env;
  ASSERT_THAT(env.Join("j", 0, 1, "s"), IsOk());
  v1::CollectiveHeader header = Env::AllReduce("j", "s", 0);
  header.set_attempt_id(std::string(Env::kMaxNameBytes + 1, 'a'));
  auto channel = std::make_shared<FakeRankChannel>();
  EXPECT_THAT(env.door().Attach(header, kNoToken, channel),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("CollectiveHeader.attempt_id is 65 bytes")));
  EXPECT_THAT(env.refused(), ElementsAre(absl::StatusCode::kInvalidArgument));
}

TEST(JobDoorTest, AttachOfBothRanksRunsTheCollective) {
  Env env;
  for (int rank = 0; rank < 2; ++rank) {
    ASSERT_THAT(env.Join("j", rank, 2, rank == 0 ? "a" : "b"), IsOk());
  }
  std::shared_ptr<FakeRankChannel> channels[2];
  for (int rank = 0; rank < 2; ++rank) {
    channels[rank] = std::make_shared<FakeRankChannel>();
    absl::StatusOr<std::shared_ptr<AttachedCollective>> collective =
        env.door().Attach(Env::AllReduce("j", rank == 0 ? "a" : "b", rank),
                          kNoToken, channels[rank]);
    ASSERT_THAT(collective, IsOk());
    ASSERT_NE(*collective, nullptr);
    const float input[Env::kFloats] = {1.0f * (rank + 1), 2, 3, 4};
    Payload payload;
    payload.Append(StringBytes(
        std::string(reinterpret_cast<const char*>(input), sizeof(input))));
    (*collective)->OnData(rank, 0, std::move(payload));
    (*collective)->OnInputEnd(rank);
  }
  const float expected[Env::kFloats] = {3, 4, 6, 8};
  const std::string expected_bytes(reinterpret_cast<const char*>(expected),
                                   sizeof(expected));
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_TRUE(channels[rank]->finished_ok()) << "rank " << rank;
    EXPECT_EQ(channels[rank]->bytes(), expected_bytes) << "rank " << rank;
  }
}

TEST(JobDoorTest, AttachToAJobNoSessionHoldsIsRefusedAndCounted) {
  Env env;
  EXPECT_THAT(env.door().Attach(Env::AllReduce("j", "s", 0), kNoToken,
                                std::make_shared<FakeRankChannel>()),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(env.refused(),
              ElementsAre(absl::StatusCode::kFailedPrecondition));
}

TEST(JobDoorTest, WithTokensOnlyTheJobsTokenEnters) {
  Env env(/*tokens=*/true);
  const v1::JoinRequest join = Env::JoinRequest(Env::kTokenJob, 0, 1, "s");
  EXPECT_TRUE(env.door().tokens_required());
  EXPECT_THAT(env.door().Join(join, kNoToken, std::make_shared<FakeSession>()),
              StatusIs(absl::StatusCode::kUnauthenticated));
  EXPECT_THAT(env.door().Join(join, Env::Bearer("not-the-token"),
                              std::make_shared<FakeSession>()),
              StatusIs(absl::StatusCode::kUnauthenticated));
  EXPECT_THAT(env.registry().Find(Env::kTokenJob), Not(IsOk()));
  EXPECT_THAT(env.door().Join(join, Env::Bearer(Env::kToken),
                              std::make_shared<FakeSession>()),
              IsOk());
  EXPECT_THAT(env.refused(), ElementsAre(absl::StatusCode::kUnauthenticated,
                                         absl::StatusCode::kUnauthenticated));
}

TEST(JobDoorTest, WithTokensAnotherJobsTokenIsDenied) {
  Env env(/*tokens=*/true);
  EXPECT_THAT(env.door().Authorize("other", Env::Bearer(Env::kToken)),
              StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_THAT(env.door().Authorize(Env::kTokenJob, Env::Bearer(Env::kToken)),
              IsOk());
  EXPECT_THAT(env.refused(), ElementsAre(absl::StatusCode::kPermissionDenied));
}

TEST(JobDoorTest, AuthorizeAnyJobTakesAnyKnownToken) {
  Env open;
  EXPECT_FALSE(open.door().tokens_required());
  EXPECT_THAT(open.door().AuthorizeAnyJob(kNoToken), IsOk());
  Env env(/*tokens=*/true);
  EXPECT_THAT(env.door().AuthorizeAnyJob(Env::Bearer("not-the-token")),
              StatusIs(absl::StatusCode::kUnauthenticated));
  EXPECT_THAT(env.door().AuthorizeAnyJob(Env::Bearer(Env::kToken)), IsOk());
  EXPECT_THAT(env.refused(), ElementsAre(absl::StatusCode::kUnauthenticated));
}

TEST(JobDoorTest, TenantOfTokenNamesTheTokensLine) {
  Env open;
  EXPECT_EQ(open.door().TenantOfToken(Env::Bearer(Env::kToken)), "");
  Env env(/*tokens=*/true);
  EXPECT_EQ(env.door().TenantOfToken(Env::Bearer(Env::kToken)), Env::kTokenJob);
  EXPECT_EQ(env.door().TenantOfToken(Env::Bearer("not-the-token")), "");
  EXPECT_EQ(env.door().TenantOfToken(kNoToken), "");
}

// A stream's calls hold a share of their job's tenant: the line governing
// the job, whatever the job's own name. A call that does not attach (its
// job has no session) holds nothing.
TEST(JobDoorTest, AStreamsCallsHoldTheirTenantsShareIfTheyAttach) {
  Env env(/*tokens=*/true);
  const std::string job = absl::StrCat(Env::kTokenJob, "/group-1");
  ASSERT_THAT(env.door().Join(Env::JoinRequest(job, 0, 1, "s"),
                              Env::Bearer(Env::kToken),
                              std::make_shared<FakeSession>()),
              IsOk());
  MetricsSink metrics;
  StreamShares tenants(StreamShares::Holder::kTenant, 4, &metrics);
  auto held =
      std::make_shared<HeldStreamShares>(&tenants, StreamShares::Share());
  JobDoor::AttachFn attach =
      env.door().AttachForStream(Env::Bearer(Env::kToken), held);
  const std::string unjoined = absl::StrCat(Env::kTokenJob, "/nobody");
  EXPECT_THAT(attach(Env::AllReduce(unjoined, "s", 0),
                     std::make_shared<FakeRankChannel>()),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_EQ(tenants.StreamsOf(Env::kTokenJob), 0);
  EXPECT_EQ(tenants.StreamsOf(unjoined), 0);
  EXPECT_THAT(
      attach(Env::AllReduce(job, "s", 0), std::make_shared<FakeRankChannel>()),
      IsOk());
  EXPECT_EQ(tenants.StreamsOf(Env::kTokenJob), 1);
  EXPECT_EQ(tenants.StreamsOf(job), 0);
  held->GiveBack();
  EXPECT_EQ(tenants.StreamsOf(Env::kTokenJob), 0);
}

TEST(JobDoorTest, CheckSeatHoldsOnlyTheSessionsOwnRank) {
  Env env;
  ASSERT_THAT(env.Join("j", 0, 1, "s"), IsOk());
  absl::StatusOr<uint64_t> epoch_id =
      env.door().CheckSeat("j", "s", 0, kNoToken);
  EXPECT_THAT(epoch_id, IsOk());
  EXPECT_THAT(env.door().CheckSeat("j", "s", 1, kNoToken),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("session s does not hold rank 1 in the "
                                 "running epoch of job j")));
  EXPECT_THAT(env.door().CheckSeat("j", "other", 0, kNoToken),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(env.door().CheckSeat("gone", "s", 0, kNoToken),
              StatusIs(absl::StatusCode::kFailedPrecondition));
}

TEST(JobDoorTest, LeaveWithoutCauseDepartsAndFreesTheJob) {
  Env env;
  auto stream = std::make_shared<FakeSession>();
  ASSERT_THAT(env.Join("j", 0, 1, "s", stream), IsOk());
  v1::LeaveRequest leave;
  leave.set_job("j");
  leave.set_session_id("s");
  EXPECT_THAT(env.door().Leave(leave, kNoToken), IsOk());
  env.door().Leave("j", "s", stream.get(), "closed",
                   EpochEndReason::kSessionEnded);
  EXPECT_THAT(env.registry().Find("j"), Not(IsOk()));
}

TEST(JobDoorTest, LeaveWithCauseAbortsTheEpochWithItsFirst2KiB) {
  Env env;
  auto other = std::make_shared<FakeSession>();
  ASSERT_THAT(env.Join("j", 0, 2, "a"), IsOk());
  ASSERT_THAT(env.Join("j", 1, 2, "b", other), IsOk());
  // 2047 bytes, then a 2-byte UTF-8 sequence across the 2 KiB limit.
  const std::string kept(2047, 'x');
  v1::LeaveRequest leave;
  leave.set_job("j");
  leave.set_session_id("a");
  leave.set_cause(kept + "\xc3\xa9" + "tail");
  EXPECT_THAT(env.door().Leave(leave, kNoToken), IsOk());
  std::string reason;
  for (const v1::JoinEvent& event : other->events()) {
    if (event.has_aborted()) reason = event.aborted().reason();
  }
  EXPECT_THAT(reason, HasSubstr(kept));
  EXPECT_THAT(reason, Not(HasSubstr("\xc3")));
  EXPECT_THAT(reason, Not(HasSubstr("tail")));
}

TEST(JobDoorTest, LeaveNamingASessionOverTheLimitIsRefused) {
  Env env;
  v1::LeaveRequest leave;
  leave.set_job("j");
  leave.set_session_id(std::string(Env::kMaxNameBytes + 1, 's'));
  EXPECT_THAT(env.door().Leave(leave, kNoToken),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("LeaveRequest.session_id is 65 bytes")));
}

// With ranks, the Leave loses those ranks of a session that holds several
// (a relay's): outside quorum mode the epoch ends naming the rank lost and
// the cause, not the session's first rank.
TEST(JobDoorTest, LeaveWithRanksLosesThoseRanksOfTheSession) {
  Env env;
  auto other = std::make_shared<FakeSession>();
  ASSERT_THAT(env.Join("j", 0, 3, "a", other), IsOk());
  v1::JoinRequest relay = Env::JoinRequest("j", 1, 3, "relay");
  relay.add_ranks(1);
  relay.add_ranks(2);
  ASSERT_THAT(env.door().Join(relay, kNoToken, std::make_shared<FakeSession>()),
              IsOk());
  v1::LeaveRequest leave;
  leave.set_job("j");
  leave.set_session_id("relay");
  leave.add_ranks(2);
  leave.set_cause("its stream was cancelled, on relay h1");
  EXPECT_THAT(env.door().Leave(leave, kNoToken), IsOk());
  ASSERT_EQ(other->aborted_count(), 1);
  EXPECT_THAT(other->events().back().aborted().reason(),
              HasSubstr("rank 2's session was lost (its stream was "
                        "cancelled, on relay h1)"));
}

TEST(JobDoorTest, LeaveNamingTooManyRanksIsRefused) {
  Env env;
  v1::LeaveRequest leave;
  leave.set_job("j");
  leave.set_session_id("s");
  for (int r = 0; r <= JobDoor::kMaxJoinRanks; ++r) leave.add_ranks(r);
  EXPECT_THAT(env.door().Leave(leave, kNoToken),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("LeaveRequest.ranks names 1025 ranks")));
}

}  // namespace
}  // namespace reducer
