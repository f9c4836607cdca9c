// Point to point on a relay, in process: a Job whose JobRelay keeps a
// message between two of its ranks here (JobRelay::KeepsHere) matches it
// itself, and its ranks get exactly what a directly connected reducerd
// gives them. The reference is a Job without a relay, the same calls made
// of it: the bytes delivered, a receive's deadline, a mismatch, a send
// over the memory budget. A rank lost on the relay fails the messages
// waiting for it, naming it; and a held message a match needs is handed
// over to the relay's channel (JobRelay::BeforeMatch). And a rank whose
// own session upstream ended has its session here ended, the others not
// (Job::EndRankFromUpstream).
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/reducer/v1/reducer.pb.h"
#include "server/engine/fake_rank_channel.h"
#include "server/engine/string_bytes.h"
#include "server/jobs/fake_job_channels.h"
#include "server/jobs/job.h"
#include "tests/status_matchers.h"

namespace reducer {
namespace {

using ::reducer::testing::StatusIs;
using ::testing::HasSubstr;

constexpr int kWorld = 3;
constexpr int64_t kTag = 7;

// A relay that keeps every message here, takes every other call upstream
// (refused: no test makes one but the match), and hands a match the held
// messages the test names.
class KeepingRelay final : public JobRelay {
 public:
  void JoinUpstream(uint64_t, std::vector<int>,
                    std::function<void(const absl::Status&)> ready) override {
    ready(absl::OkStatus());  // the Job calls it without its lock
  }
  absl::StatusOr<std::shared_ptr<AttachedCollective>> Attach(
      const v1::CollectiveHeader& header, const Fingerprint&,
      std::shared_ptr<RankChannel>) override {
    absl::MutexLock lock(&mu_);
    upstream_.push_back(header.name());
    return absl::UnavailableError("upstream (a test relay)");
  }
  void EndEpoch(uint64_t, const absl::Status&, const std::string&) override {}
  bool LoseRanks(uint64_t, const std::vector<int>&,
                 const std::string&) override {
    return true;
  }
  bool RejoinUpstream(uint64_t, int,
                      std::function<void(absl::StatusOr<uint64_t>)>) override {
    return false;
  }
  uint64_t bytes_saved() const override { return 0; }
  bool KeepsHere(const v1::CollectiveHeader&, const Fingerprint&) override {
    return true;
  }
  std::vector<HeldMessage> BeforeMatch(const v1::CollectiveHeader&,
                                       const Fingerprint&) override {
    absl::MutexLock lock(&mu_);
    return std::move(held_);
  }

  // The next match gets `held`.
  void Hold(HeldMessage held) {
    absl::MutexLock lock(&mu_);
    held_.push_back(std::move(held));
  }
  // The names of the calls taken upstream.
  std::vector<std::string> upstream() {
    absl::MutexLock lock(&mu_);
    return upstream_;
  }

 private:
  absl::Mutex mu_;
  std::vector<HeldMessage> held_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> upstream_ ABSL_GUARDED_BY(mu_);
};

std::string Session(int rank) { return absl::StrCat("s", rank); }

// A job of kWorld ranks, every rank joined; on a relay, or not.
class JoinedJob {
 public:
  JoinedJob(std::shared_ptr<KeepingRelay> relay, size_t budget)
      : server_(EngineOptions(), budget), job_("j1", kWorld, server_.env()) {
    if (relay != nullptr) job_.SetRelay(std::move(relay));
    for (int r = 0; r < kWorld; ++r) {
      sessions_.push_back(std::make_shared<FakeSession>());
      EXPECT_THAT(job_.Join(r, kWorld, Session(r), sessions_.back()),
                  ::reducer::testing::IsOk());
    }
  }

  // `rank`'s call of message n from `source` to `destination` with kTag:
  // the source's send of `payload` (float32 [payload.size() / 4]), or the
  // destination's receive, expecting float32 [expect] when expect > 0.
  std::shared_ptr<FakeRankChannel> Call(int rank, int source, int destination,
                                        uint64_t n,
                                        const std::string& payload = "",
                                        int64_t timeout_ms = 10000,
                                        int64_t expect = 0) {
    v1::CollectiveHeader h = Header(rank, source, destination, n, timeout_ms);
    const int64_t floats =
        rank == source ? static_cast<int64_t>(payload.size() / 4) : expect;
    if (floats > 0) {
      v1::TensorSpec* t = h.add_tensors();
      t->set_dtype(v1::DATA_TYPE_FLOAT32);
      t->add_shape(floats);
    }
    auto channel = std::make_shared<FakeRankChannel>();
    absl::StatusOr<std::shared_ptr<AttachedCollective>> c =
        job_.AttachCall(h, channel);
    if (!c.ok()) {
      if (!IsRefusedByCollective(c.status())) channel->Fail(c.status());
      return channel;
    }
    if (!payload.empty()) {
      Payload p;
      p.Append(StringBytes(payload));
      (*c)->OnData(rank, 0, std::move(p));
    }
    return channel;
  }

  static v1::CollectiveHeader Header(int rank, int source, int destination,
                                     uint64_t n, int64_t timeout_ms = 10000) {
    v1::CollectiveHeader h;
    h.set_job("j1");
    h.set_epoch(1);
    h.set_session_id(Session(rank));
    h.set_rank(rank);
    h.set_kind(v1::COLLECTIVE_KIND_SEND_RECEIVE);
    h.set_timeout_ms(timeout_ms);
    h.set_name(
        absl::StrCat("p2p ", source, ">", destination, " tag ", kTag, " #", n));
    h.set_root(source);
    h.add_group(std::min(source, destination));
    h.add_group(std::max(source, destination));
    return h;
  }

  Job& job() { return job_; }
  FakeSession& session(int rank) { return *sessions_[rank]; }
  bool Lose(int rank) {
    return job_.Leave(Session(rank), sessions_[rank].get(), "killed",
                      EpochEndReason::kSessionCancelled);
  }

 private:
  JobTestEnv server_;
  Job job_;
  std::vector<std::shared_ptr<FakeSession>> sessions_;
};

constexpr size_t kBudget = 1 << 20;

class JobRelayMessagesTest : public ::testing::Test {
 protected:
  std::shared_ptr<KeepingRelay> relay_ = std::make_shared<KeepingRelay>();
  JoinedJob relayed_{relay_, kBudget};
  JoinedJob direct_{nullptr, kBudget};
};

// `channel`'s outcome once it ended: OK, or its failure.
absl::Status Outcome(FakeRankChannel& channel) {
  if (!channel.WaitEnded()) return absl::UnknownError("never ended");
  return channel.failure();
}

TEST_F(JobRelayMessagesTest, AMessageKeptHereIsDeliveredAsDirectly) {
  const std::string payload = "0123456789abcdef";
  for (JoinedJob* job : {&relayed_, &direct_}) {
    auto send = job->Call(0, 0, 1, 0, payload);
    ASSERT_TRUE(send->WaitEnded());
    EXPECT_TRUE(send->finished_ok()) << send->failure();
    auto receive = job->Call(1, 0, 1, 0);
    ASSERT_TRUE(receive->WaitEnded());
    EXPECT_TRUE(receive->finished_ok()) << receive->failure();
    EXPECT_EQ(receive->result(), payload);
  }
  EXPECT_THAT(relay_->upstream(), ::testing::IsEmpty());
}

TEST_F(JobRelayMessagesTest, AReceiveWhoseSendNeverComesFailsAsDirectly) {
  const absl::Status relayed = Outcome(*relayed_.Call(1, 0, 1, 0, "", 200));
  const absl::Status direct = Outcome(*direct_.Call(1, 0, 1, 0, "", 200));
  EXPECT_THAT(direct, StatusIs(absl::StatusCode::kDeadlineExceeded,
                               HasSubstr("rank 0 never arrived")));
  EXPECT_EQ(relayed, direct);
}

TEST_F(JobRelayMessagesTest, AMismatchedShapeFailsAsDirectly) {
  std::vector<absl::Status> outcomes;
  for (JoinedJob* job : {&relayed_, &direct_}) {
    auto send = job->Call(0, 0, 1, 0, std::string(16, 'x'));
    ASSERT_TRUE(send->WaitEnded());
    // Expects float32 [3]; four came.
    outcomes.push_back(Outcome(*job->Call(1, 0, 1, 0, "", 10000, 3)));
  }
  EXPECT_THAT(outcomes[1], StatusIs(absl::StatusCode::kFailedPrecondition,
                                    HasSubstr("rank 1")));
  EXPECT_EQ(outcomes[0], outcomes[1]);
}

TEST_F(JobRelayMessagesTest, ASendOverTheBudgetIsRefusedAsDirectly) {
  const std::string too_big(2 * kBudget, 'x');
  const absl::Status relayed = Outcome(*relayed_.Call(0, 0, 1, 0, too_big));
  const absl::Status direct = Outcome(*direct_.Call(0, 0, 1, 0, too_big));
  EXPECT_THAT(direct, StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_EQ(relayed, direct);
}

TEST_F(JobRelayMessagesTest, ARankLostOnTheRelayFailsItsMessagesNamingIt) {
  auto receive = relayed_.Call(1, 2, 1, 0);
  auto send = relayed_.Call(0, 0, 2, 0, "abcdefgh");
  ASSERT_TRUE(send->WaitEnded());
  relayed_.Lose(2);
  EXPECT_THAT(Outcome(*receive), StatusIs(absl::StatusCode::kAborted,
                                          HasSubstr("rank 2 was lost")));
}

TEST_F(JobRelayMessagesTest, ARankWhoseOwnUpstreamSessionEndedIsCutOffAlone) {
  Job& job = relayed_.job();
  const std::optional<Job::Seat> seat = job.RunningSeat(Session(1));
  ASSERT_TRUE(seat.has_value());
  job.EndRankFromUpstream(seat->epoch_id + 1, 1, "another epoch's");
  EXPECT_THAT(relayed_.session(1).failure(), ::reducer::testing::IsOk());
  job.EndRankFromUpstream(seat->epoch_id, 1, "keepalive watchdog fired");
  EXPECT_THAT(relayed_.session(1).failure(),
              StatusIs(absl::StatusCode::kAborted,
                       HasSubstr("rank 1's own session upstream ended "
                                 "(keepalive watchdog fired)")));
  for (int r : {0, 2}) {
    EXPECT_THAT(relayed_.session(r).failure(), ::reducer::testing::IsOk());
  }
}

TEST_F(JobRelayMessagesTest, AMatchTakesTheHeldMessagesUpstreamFirst) {
  const std::string payload = "ABCDEFGHIJKLMNOP";
  auto send = relayed_.Call(0, 0, 1, 0, payload);
  ASSERT_TRUE(send->WaitEnded());
  auto forwarded = std::make_shared<FakeRankChannel>();
  v1::CollectiveHeader sent = JoinedJob::Header(0, 0, 1, 0);
  v1::TensorSpec* t = sent.add_tensors();
  t->set_dtype(v1::DATA_TYPE_FLOAT32);
  t->add_shape(4);
  relay_->Hold({sent, forwarded});
  // Rank 1's ReceiveAny of kTag.
  v1::CollectiveHeader match;
  match.set_job("j1");
  match.set_epoch(1);
  match.set_session_id(Session(1));
  match.set_rank(1);
  match.set_kind(v1::COLLECTIVE_KIND_MATCH);
  match.set_timeout_ms(10000);
  match.set_name(absl::StrCat("p2p *>1 tag ", kTag, " #0"));
  match.set_root(-1);
  match.add_group(1);
  match.set_match_tag(kTag);
  EXPECT_THAT(
      relayed_.job().AttachCall(match, std::make_shared<FakeRankChannel>()),
      StatusIs(absl::StatusCode::kUnavailable));
  // The held message went to the relay's channel, whole, before the match
  // went upstream.
  ASSERT_TRUE(forwarded->WaitEnded());
  EXPECT_TRUE(forwarded->finished_ok()) << forwarded->failure();
  EXPECT_EQ(forwarded->result(), payload);
  EXPECT_THAT(relay_->upstream(), ::testing::ElementsAre(absl::StrCat(
                                      "p2p *>1 tag ", kTag, " #0")));
}

}  // namespace
}  // namespace reducer
