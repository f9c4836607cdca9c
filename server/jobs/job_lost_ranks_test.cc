// Job::LoseRanks in process: a session that holds several ranks (a
// relay's) reports some of them lost (LeaveRequest.ranks). Each is lost as
// a directly connected rank's session would be: absent in quorum mode
// (quorum steps stop waiting for it, plain collectives that include it
// fail or are refused ABORTED naming it), the epoch ended naming it
// otherwise; the session keeps holding its other ranks. Without a cause
// they depart on purpose (Job::DepartRanks).
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/reducer/v1/reducer.pb.h"
#include "server/engine/string_bytes.h"
#include "server/jobs/fake_job_channels.h"
#include "server/jobs/job.h"
#include "tests/matchers.h"

namespace reducer {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr int kWorld = 4;
// Ranks 0 and 1 hold a session each; ranks 2 and 3 share the relay's.
constexpr char kRelay[] = "relay";

class JobLostRanksTest : public ::testing::Test {
 protected:
  JobLostRanksTest() : job_("j1", kWorld, server_.env()) {
    for (int r = 0; r < 2; ++r) {
      sessions_.push_back(std::make_shared<FakeSession>());
      EXPECT_TRUE(job_.Join(r, kWorld, Session(r), sessions_.back()).ok());
    }
    sessions_.push_back(std::make_shared<FakeSession>());
    EXPECT_TRUE(job_.Join({2, 3}, kWorld, kRelay, sessions_.back(), {}).ok());
  }

  // The session that holds `rank`.
  static std::string Session(int rank) {
    return rank >= 2 ? kRelay : absl::StrCat("s", rank);
  }

  static v1::CollectiveHeader Header(int rank, v1::CollectiveKind kind) {
    v1::CollectiveHeader h;
    h.set_job("j1");
    h.set_epoch(1);
    h.set_session_id(Session(rank));
    h.set_rank(rank);
    h.set_kind(kind);
    h.set_timeout_ms(10000);
    return h;
  }

  // Rank `rank`'s call of quorum step `step`, with a grace of a minute.
  static v1::CollectiveHeader Step(int rank, uint64_t step) {
    v1::CollectiveHeader h = Header(rank, v1::COLLECTIVE_KIND_QUORUM_BARRIER);
    h.set_name(absl::StrCat("quorum step ", step));
    h.set_sequence(step);
    h.set_quorum_min_ranks(2);
    h.set_quorum_grace_ms(60000);
    return h;
  }

  // A float32 [1] sum all-reduce of `group`, named `name`.
  static v1::CollectiveHeader Plain(int rank, std::vector<int> group,
                                    const std::string& name) {
    v1::CollectiveHeader h = Header(rank, v1::COLLECTIVE_KIND_ALL_REDUCE);
    h.set_name(name);
    for (int r : group) h.add_group(r);
    v1::TensorSpec* tensor = h.add_tensors();
    tensor->set_dtype(v1::DATA_TYPE_FLOAT32);
    tensor->add_shape(1);
    tensor->set_op(v1::REDUCE_OP_SUM);
    return h;
  }

  // Attaches `h` on a new channel, then feeds `value` as its float32 input
  // when it has tensors. A refused call fails its channel with the refusal.
  std::shared_ptr<FakeRankChannel> Attach(const v1::CollectiveHeader& h,
                                          float value = 0) {
    auto channel = std::make_shared<FakeRankChannel>();
    absl::StatusOr<std::shared_ptr<Collective>> c = job_.Attach(h, channel);
    if (!c.ok()) {
      if (!IsRefusedByCollective(c.status())) channel->Fail(c.status());
      return channel;
    }
    if (h.tensors_size() > 0) {
      std::string bytes(sizeof(float), '\0');
      std::memcpy(bytes.data(), &value, sizeof(float));
      Payload p;
      p.Append(StringBytes(bytes));
      (*c)->OnData(h.rank(), 0, std::move(p));
    }
    return channel;
  }

  // Quorum step `step` of every rank, all in time.
  void StepOfAll(uint64_t step) {
    std::vector<std::shared_ptr<FakeRankChannel>> calls;
    for (int r = 0; r < kWorld; ++r) calls.push_back(Attach(Step(r, step)));
    for (auto& call : calls)
      EXPECT_TRUE(call->finished_ok()) << call->failure();
  }

  bool AnyAborted() {
    for (auto& s : sessions_) {
      if (s->aborted_count() > 0) return true;
    }
    return false;
  }

  JobTestEnv server_;
  std::vector<std::shared_ptr<FakeSession>> sessions_;
  Job job_;
};

// In quorum mode, rank 3 lost on the relay is left out of the step under
// way at once (a grace of a minute notwithstanding); the relay's session
// still holds rank 2, whose calls go on, and nobody is told the job
// aborted.
TEST_F(JobLostRanksTest, InQuorumModeALostRankIsAbsentAndItsSeatKeepsTheRest) {
  StepOfAll(0);
  std::vector<std::shared_ptr<FakeRankChannel>> step1;
  for (int r = 0; r < 3; ++r) step1.push_back(Attach(Step(r, 1)));
  EXPECT_FALSE(step1[0]->finished_ok());
  job_.LoseRanks(kRelay, {3}, "its stream was cancelled, on relay h1");
  for (auto& call : step1) {
    ASSERT_TRUE(call->finished_ok()) << call->failure();
    EXPECT_THAT(ResultValues<int32_t>(*call), ElementsAre(1, 1, 1, 0));
  }
  EXPECT_FALSE(AnyAborted());
  EXPECT_TRUE(job_.InQuorumMode());
  const JobSnapshot snapshot = job_.Snapshot();
  EXPECT_EQ(snapshot.state, "running");
  EXPECT_THAT(snapshot.absent_ranks, ElementsAre(3));
  EXPECT_THAT(snapshot.joined_ranks, ElementsAre(0, 1, 2));

  // The step's data over the survivors: rank 2 through the relay's
  // session, which still holds it.
  std::vector<std::shared_ptr<FakeRankChannel>> data;
  for (int r = 0; r < 3; ++r) {
    data.push_back(Attach(Plain(r, {0, 1, 2}, "step 1 data"), r + 1.0f));
  }
  for (auto& call : data) {
    ASSERT_TRUE(call->finished_ok()) << call->failure();
    EXPECT_THAT(ResultValues<float>(*call), ElementsAre(6.0f));
  }
  // Rank 3's own calls are refused, and so is a plain collective that
  // includes it.
  auto of3 = Attach(Step(3, 2));
  EXPECT_THAT(of3->failure(),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("rank 3 of job j1 is absent")));
  auto all = Attach(Plain(0, {0, 1, 2, 3}, "everyone"), 1.0f);
  EXPECT_THAT(all->failure(), StatusIs(absl::StatusCode::kAborted,
                                       HasSubstr("rank 3 was lost")));
  EXPECT_FALSE(AnyAborted());
}

// A plain collective waiting for the rank when it is lost fails ABORTED
// naming it, for every rank (a quorum step's data then runs again).
TEST_F(JobLostRanksTest, APendingPlainCollectiveOfTheLostRankFailsNamingIt) {
  StepOfAll(0);
  auto r0 = Attach(Plain(0, {0, 1, 2, 3}, "step 0 data"), 1.0f);
  auto r2 = Attach(Plain(2, {0, 1, 2, 3}, "step 0 data"), 3.0f);
  job_.LoseRanks(kRelay, {3}, "killed");
  for (auto* call : {&r0, &r2}) {
    EXPECT_THAT((*call)->failure(), StatusIs(absl::StatusCode::kAborted,
                                             AllOf(HasSubstr("rank 3 was lost"),
                                                   HasSubstr("killed"))));
  }
  EXPECT_FALSE(AnyAborted());
}

// Outside quorum mode the rank's loss ends the epoch, naming that rank
// (not the first of its session) and the cause.
TEST_F(JobLostRanksTest, OutsideQuorumModeTheEpochEndsNamingTheRankAndCause) {
  auto waiting = Attach(Plain(0, {0, 1, 2, 3}, "x"), 1.0f);
  job_.LoseRanks(kRelay, {3}, "its stream was cancelled, on relay h1");
  EXPECT_THAT(waiting->failure(),
              StatusIs(absl::StatusCode::kAborted,
                       HasSubstr("rank 3's session was lost (its stream was "
                                 "cancelled, on relay h1)")));
  for (auto& s : sessions_) {
    ASSERT_EQ(s->aborted_count(), 1);
    EXPECT_THAT(s->events().back().aborted().reason(),
                HasSubstr("rank 3's session was lost"));
  }
  EXPECT_EQ(job_.Snapshot().state, "aborted");
}

// Only the session's own ranks count: another session, or an unknown one,
// naming them changes nothing.
TEST_F(JobLostRanksTest, RanksOfAnotherSessionAreIgnored) {
  StepOfAll(0);
  job_.LoseRanks(Session(0), {3}, "not its rank");
  job_.LoseRanks("unknown", {0, 1, 2, 3}, "no such session");
  job_.LoseRanks(kRelay, {0, 7, -1}, "not its ranks");
  const JobSnapshot snapshot = job_.Snapshot();
  EXPECT_EQ(snapshot.state, "running");
  EXPECT_TRUE(snapshot.absent_ranks.empty());
  EXPECT_THAT(snapshot.joined_ranks, ElementsAre(0, 1, 2, 3));
  StepOfAll(1);
}

// When the relay's stream ends later, the rank it still held is lost as
// well (absent in quorum mode), the one lost before is not lost twice.
TEST_F(JobLostRanksTest, TheSessionsEndLosesTheRanksItStillHeld) {
  StepOfAll(0);
  job_.LoseRanks(kRelay, {3}, "killed");
  EXPECT_FALSE(job_.Leave(kRelay, sessions_[2].get(), "relay gone",
                          EpochEndReason::kSessionCancelled));
  const JobSnapshot snapshot = job_.Snapshot();
  EXPECT_EQ(snapshot.state, "running");
  EXPECT_THAT(snapshot.absent_ranks, ElementsAre(2, 3));
  EXPECT_FALSE(AnyAborted());
  auto s0 = Attach(Step(0, 1));
  auto s1 = Attach(Step(1, 1));
  ASSERT_TRUE(s1->finished_ok()) << s1->failure();
  EXPECT_THAT(ResultValues<int32_t>(*s0), ElementsAre(1, 1, 0, 0));
}

// Without a cause the ranks depart on purpose (their clients were closed):
// in quorum mode they are absent, as lost ones; otherwise collectives that
// include them are refused FAILED_PRECONDITION, and the epoch goes on.
TEST_F(JobLostRanksTest, RanksThatDepartInQuorumModeAreAbsent) {
  StepOfAll(0);
  job_.DepartRanks(kRelay, {3});
  auto s0 = Attach(Step(0, 1));
  auto s1 = Attach(Step(1, 1));
  auto s2 = Attach(Step(2, 1));
  ASSERT_TRUE(s2->finished_ok()) << s2->failure();
  EXPECT_THAT(ResultValues<int32_t>(*s0), ElementsAre(1, 1, 1, 0));
  EXPECT_THAT(job_.Snapshot().absent_ranks, ElementsAre(3));
  EXPECT_FALSE(AnyAborted());
}

TEST_F(JobLostRanksTest, RanksThatDepartOutsideQuorumModeLeaveTheJob) {
  job_.DepartRanks(kRelay, {3});
  auto all = Attach(Plain(0, {0, 1, 2, 3}, "everyone"), 1.0f);
  EXPECT_THAT(all->failure(), StatusIs(absl::StatusCode::kFailedPrecondition,
                                       HasSubstr("rank 3 has left the job")));
  std::vector<std::shared_ptr<FakeRankChannel>> others;
  for (int r = 0; r < 3; ++r) {
    others.push_back(Attach(Plain(r, {0, 1, 2}, "others"), r + 1.0f));
  }
  for (auto& call : others) {
    ASSERT_TRUE(call->finished_ok()) << call->failure();
    EXPECT_THAT(ResultValues<float>(*call), ElementsAre(6.0f));
  }
  EXPECT_FALSE(AnyAborted());
  EXPECT_EQ(job_.Snapshot().state, "running");
}

}  // namespace
}  // namespace reducer
