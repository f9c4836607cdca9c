// RelayJob in process, against a fake upstream whose session records the
// calls the relay makes and ends when the test says: what happens to the
// calls of the relay's ranks when the upstream session ends on its own,
// and when the epoch here ends for it; a rank of this host lost, reported
// upstream as that rank's loss.
#include "server/relay/relay_job.h"

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "core/fingerprint_testing.h"
#include "core/point_to_point_name.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/reducer/v1/wire_conversion.h"
#include "server/engine/clock.h"
#include "server/engine/fake_rank_channel.h"
#include "server/engine/string_bytes.h"
#include "server/relay/fake_upstream_session.h"
#include "tests/status_matchers.h"

namespace reducer {
namespace {

using ::reducer::testing::StatusIs;
using ::testing::HasSubstr;

// What the relay holds of a FakeUpstreamSession the test keeps: the
// session outlives the relay's letting go of it.
class KeptSession final : public UpstreamSession {
 public:
  explicit KeptSession(std::shared_ptr<FakeUpstreamSession> kept)
      : kept_(std::move(kept)) {}
  void Start(
      v1::CollectiveHeader header, std::shared_ptr<UpstreamInput> input,
      std::shared_ptr<const ResultInto> into,
      std::function<void(absl::StatusOr<UpstreamResult>)> done) override {
    kept_->Start(std::move(header), std::move(input), std::move(into),
                 std::move(done));
  }
  void Leave(const std::string& cause) override { kept_->Leave(cause); }
  absl::Status LoseRanks(const std::vector<int>& ranks,
                         const std::string& cause) override {
    return kept_->LoseRanks(ranks, cause);
  }

 private:
  const std::shared_ptr<FakeUpstreamSession> kept_;
};

// Opens FakeUpstreamSessions, keeping each one (and the last one's `ended`)
// for the test.
class FakeUpstream final : public Upstream {
 public:
  absl::StatusOr<std::unique_ptr<UpstreamSession>> Open(
      const std::string& job, int world_size, const std::vector<int>& ranks,
      std::function<bool()> given_up,
      std::function<void(const absl::Status&)> ended) override {
    auto session = std::make_shared<FakeUpstreamSession>();
    absl::MutexLock lock(&mu_);
    sessions_.push_back(session);
    ended_ = std::move(ended);
    return std::unique_ptr<UpstreamSession>(
        std::make_unique<KeptSession>(std::move(session)));
  }
  // The last session opened.
  FakeUpstreamSession* session() {
    absl::MutexLock lock(&mu_);
    return sessions_.empty() ? nullptr : sessions_.back().get();
  }
  // The upstream session ends on its own, with `why`.
  void End(const absl::Status& why) {
    std::function<void(const absl::Status&)> ended;
    {
      absl::MutexLock lock(&mu_);
      ended = ended_;
    }
    ended(why);
  }

 private:
  absl::Mutex mu_;
  std::vector<std::shared_ptr<FakeUpstreamSession>> sessions_
      ABSL_GUARDED_BY(mu_);
  std::function<void(const absl::Status&)> ended_ ABSL_GUARDED_BY(mu_);
};

constexpr uint64_t kEpoch = 7;
const std::vector<int> kGroup = {0, 1, 2, 3};

class RelayJobTest : public ::testing::Test {
 protected:
  RelayJobTest() : timers_(&Clock::Steady()) {
    RelayJobEnv env;
    env.upstream = &upstream_;
    env.collectives.timers = &timers_;
    env.collectives.memory = &memory_;
    env.collectives.metrics = &metrics_;
    env.log = &log_;
    env.name = "relay test-host";
    job_ = std::make_unique<RelayJob>(
        env, "j", 4,
        [this](uint64_t epoch_id, const std::string& reason) {
          absl::MutexLock lock(&mu_);
          ended_here_.emplace_back(epoch_id, reason);
        },
        [this](uint64_t epoch_id, int rank, const std::string& reason) {
          absl::MutexLock lock(&mu_);
          rank_ended_.push_back({epoch_id, rank, reason});
        });
  }

  // Ranks `ranks` (2 and 3 unless said) of the job's four join upstream.
  void Join(std::vector<int> ranks = {2, 3}) {
    absl::Notification ready;
    absl::Status joined;
    job_->JoinUpstream(kEpoch, ranks, [&](const absl::Status& status) {
      joined = status;
      ready.Notify();
    });
    ready.WaitForNotification();
    ASSERT_THAT(joined, ::reducer::testing::IsOk());
  }

  // Rank `rank`'s call of `fp`, sequence number `sequence`. The collective
  // it attached to is kept, as a rank's transport keeps it while the call
  // lasts (it holds the upstream session).
  absl::Status Call(const Fingerprint& fp, int rank, uint64_t sequence,
                    std::shared_ptr<FakeRankChannel> channel) {
    v1::CollectiveHeader h;
    h.set_job("j");
    h.set_rank(rank);
    h.set_sequence(sequence);
    h.set_timeout_ms(20000);
    for (int r : fp.group) h.add_group(r);
    h.set_root(fp.root);
    for (const TensorSpec& t : fp.tensors)
      *h.add_tensors() = TensorSpecToWire(t);
    for (int64_t rows : fp.send_rows) h.add_send_rows(rows);
    absl::StatusOr<std::shared_ptr<AttachedCollective>> attached =
        job_->Attach(h, fp, std::move(channel));
    if (!attached.ok()) return attached.status();
    attached_.push_back(*std::move(attached));
    return absl::OkStatus();
  }

  std::vector<std::pair<uint64_t, std::string>> ended_here() {
    absl::MutexLock lock(&mu_);
    return ended_here_;
  }
  struct RankEnded {
    uint64_t epoch_id;
    int rank;
    std::string reason;
  };
  std::vector<RankEnded> rank_ended() {
    absl::MutexLock lock(&mu_);
    return rank_ended_;
  }

  // Loses rank 3 (reported on the host's session) and joins it again
  // upstream on a session of its own.
  void LoseAndRejoin3() {
    FakeUpstreamSession* host = upstream_.session();
    ASSERT_TRUE(job_->LoseRanks(kEpoch, {3}, "killed"));
    ASSERT_EQ(host->lost(1).size(), 1u);
    absl::Notification ready;
    absl::StatusOr<uint64_t> first_step;
    ASSERT_TRUE(
        job_->RejoinUpstream(kEpoch, 3, [&](absl::StatusOr<uint64_t> s) {
          first_step = s;
          ready.Notify();
        }));
    ASSERT_TRUE(ready.WaitForNotificationWithTimeout(absl::Seconds(20)));
    ASSERT_THAT(first_step, ::reducer::testing::IsOk());
  }

  TimerQueue timers_;
  MemoryBudget memory_{1 << 30};
  MetricsSink metrics_;
  Logger log_;
  FakeUpstream upstream_;
  std::unique_ptr<RelayJob> job_;
  std::vector<std::shared_ptr<AttachedCollective>> attached_;  // see Call
  absl::Mutex mu_;
  // Each upstream_ended call: its epoch and reason.
  std::vector<std::pair<uint64_t, std::string>> ended_here_
      ABSL_GUARDED_BY(mu_);
  std::vector<RankEnded> rank_ended_ ABSL_GUARDED_BY(mu_);  // each call
};

// An all-to-all-v goes upstream rank by rank: rank 2's alone.
Fingerprint AllToAllV() {
  Fingerprint fp = MakeFingerprint(CollectiveKind::kAllToAllV,
                                   {Spec(DataType::kFloat32, {4})}, kGroup);
  fp.send_rows = {1, 1, 1, 1};
  return fp;
}

// An all-to-all takes ranks 2 and 3 together, as an all-reduce does.
Fingerprint AllToAll() {
  return MakeFingerprint(CollectiveKind::kAllToAll,
                         {Spec(DataType::kFloat32, {4})}, kGroup);
}

// An all-reduce takes ranks 2 and 3 together: one call upstream once both
// are in.
Fingerprint AllReduce() {
  return MakeFingerprint(CollectiveKind::kAllReduce,
                         {Spec(DataType::kFloat32, {4}, ReduceOp::kSum)},
                         kGroup);
}

TEST_F(RelayJobTest, ACallMadeUpstreamGetsItsResultBeforeTheEpochEndsHere) {
  ASSERT_NO_FATAL_FAILURE(Join());
  // Rank 2's all-to-all-v is upstream; the all-reduce waits for rank 3.
  auto exchanged = std::make_shared<FakeRankChannel>();
  ASSERT_THAT(Call(AllToAllV(), 2, 0, exchanged), ::reducer::testing::IsOk());
  auto waiting = std::make_shared<FakeRankChannel>();
  ASSERT_THAT(Call(AllReduce(), 2, 1, waiting), ::reducer::testing::IsOk());
  ASSERT_EQ(upstream_.session()->calls(), 1);

  upstream_.End(absl::UnavailableError("keepalive watchdog timeout"));
  // The call not made upstream fails at once, naming why; so does a later
  // call. The epoch here goes on while the all-to-all-v is upstream.
  ASSERT_TRUE(waiting->WaitEnded());
  EXPECT_THAT(waiting->failure(),
              StatusIs(absl::StatusCode::kAborted,
                       HasSubstr("keepalive watchdog timeout")));
  EXPECT_THAT(Call(AllToAllV(), 3, 0, std::make_shared<FakeRankChannel>()),
              StatusIs(absl::StatusCode::kAborted,
                       HasSubstr("upstream session ended")));
  EXPECT_TRUE(ended_here().empty());
  EXPECT_FALSE(exchanged->WaitEnded(absl::Milliseconds(50)));

  // Its result, replayed upstream, reaches rank 2; then the epoch ends here.
  const std::string answer(16, '\x11');
  upstream_.session()->Answer(Spec(DataType::kFloat32, {4}), answer, 0);
  ASSERT_TRUE(exchanged->WaitEnded());
  EXPECT_TRUE(exchanged->finished_ok()) << exchanged->failure();
  EXPECT_EQ(exchanged->result(), answer);
  const auto ended = ended_here();
  ASSERT_EQ(ended.size(), 1u);
  EXPECT_EQ(ended[0].first, kEpoch);
  EXPECT_THAT(ended[0].second, HasSubstr("keepalive watchdog timeout"));
}

TEST_F(RelayJobTest, AnAllToAllOfTheHostsRanksIsOneCallUpstream) {
  ASSERT_NO_FATAL_FAILURE(Join());
  auto two = std::make_shared<FakeRankChannel>();
  auto three = std::make_shared<FakeRankChannel>();
  ASSERT_THAT(Call(AllToAll(), 2, 0, two), ::reducer::testing::IsOk());
  FakeUpstreamSession* session = upstream_.session();
  EXPECT_EQ(session->calls(), 0u);  // waits for rank 3
  ASSERT_THAT(Call(AllToAll(), 3, 0, three), ::reducer::testing::IsOk());
  ASSERT_EQ(session->calls(), 1u);
  const v1::CollectiveHeader up = session->header();
  EXPECT_EQ(up.rank(), 2);
  EXPECT_THAT(up.ranks(), ::testing::ElementsAre(2, 3));
  EXPECT_EQ(up.tensors(0).shape(0), 8);
  // Rank r sends 10 r + d to rank d: upstream gets, per destination, rank
  // 2's element then rank 3's.
  for (int r : {2, 3}) {
    const std::vector<float> x = {10.0f * r, 10.0f * r + 1, 10.0f * r + 2,
                                  10.0f * r + 3};
    Payload payload;
    payload.Append(StringBytes(std::string(
        reinterpret_cast<const char*>(x.data()), sizeof(float) * x.size())));
    attached_.back()->OnData(r, 0, std::move(payload));
    attached_.back()->OnInputEnd(r);
  }
  const std::vector<float> want = {20, 30, 21, 31, 22, 32, 23, 33};
  EXPECT_EQ(session->Payload(),
            std::string(reinterpret_cast<const char*>(want.data()),
                        sizeof(float) * want.size()));
  // Upstream's answer: rank 2's rows, then rank 3's; each gets its own.
  const std::vector<float> answer = {2, 12, 22, 32, 3, 13, 23, 33};
  const std::string answer_bytes(reinterpret_cast<const char*>(answer.data()),
                                 sizeof(float) * answer.size());
  session->Answer(Spec(DataType::kFloat32, {8}), answer_bytes, 0);
  ASSERT_TRUE(two->WaitEnded());
  ASSERT_TRUE(three->WaitEnded());
  EXPECT_TRUE(two->finished_ok()) << two->failure();
  EXPECT_TRUE(three->finished_ok()) << three->failure();
  EXPECT_EQ(two->result(), answer_bytes.substr(0, 16));
  EXPECT_EQ(three->result(), answer_bytes.substr(16));
  // An all-to-all-v of both goes up rank by rank: two more calls.
  ASSERT_THAT(Call(AllToAllV(), 2, 1, std::make_shared<FakeRankChannel>()),
              ::reducer::testing::IsOk());
  ASSERT_THAT(Call(AllToAllV(), 3, 1, std::make_shared<FakeRankChannel>()),
              ::reducer::testing::IsOk());
  EXPECT_EQ(session->calls(), 3u);
  EXPECT_TRUE(session->header(2).ranks().empty());
}

TEST_F(RelayJobTest, WithNoCallUpstreamTheEpochEndsHereAtOnce) {
  ASSERT_NO_FATAL_FAILURE(Join());
  upstream_.End(absl::AbortedError("job j epoch 1 aborted: rank 0 left"));
  const auto ended = ended_here();
  ASSERT_EQ(ended.size(), 1u);
  EXPECT_EQ(ended[0].first, kEpoch);
  EXPECT_THAT(ended[0].second, HasSubstr("rank 0 left"));
}

TEST_F(RelayJobTest, AnEpochEndedHereFirstIsNotEndedAgainByUpstreamsEnd) {
  ASSERT_NO_FATAL_FAILURE(Join());
  auto exchanged = std::make_shared<FakeRankChannel>();
  ASSERT_THAT(Call(AllToAllV(), 2, 0, exchanged), ::reducer::testing::IsOk());
  upstream_.End(absl::UnavailableError("keepalive watchdog timeout"));
  // Rank 3 is lost here meanwhile: its Job ends the epoch.
  job_->EndEpoch(kEpoch, absl::AbortedError("rank 3's session was lost"),
                 "rank 3's session was lost");
  // The call made upstream still ends as upstream decides.
  upstream_.session()->Answer(Spec(DataType::kFloat32, {4}),
                              std::string(16, '\x22'), 0);
  ASSERT_TRUE(exchanged->WaitEnded());
  EXPECT_TRUE(exchanged->finished_ok()) << exchanged->failure();
  EXPECT_TRUE(ended_here().empty());
}

TEST_F(RelayJobTest, ARankLateForACollectiveSplitWithoutItGoesUpstreamAlone) {
  // Ranks 1-3 here. Rank 3 disagrees with rank 1, so their all-reduce goes
  // upstream rank by rank, and upstream fails it; rank 2 comes after that.
  // It goes upstream at once, alone (upstream answers it as it answers a
  // late rank connected directly), instead of waiting here for ranks 1
  // and 3, which are done with it.
  ASSERT_NO_FATAL_FAILURE(Join({1, 2, 3}));
  auto sum = [](int64_t n) {
    return MakeFingerprint(CollectiveKind::kAllReduce,
                           {Spec(DataType::kFloat32, {n}, ReduceOp::kSum)},
                           kGroup);
  };
  auto one = std::make_shared<FakeRankChannel>();
  auto three = std::make_shared<FakeRankChannel>();
  ASSERT_THAT(Call(sum(4), 1, 1, one), ::reducer::testing::IsOk());
  ASSERT_THAT(Call(sum(5), 3, 1, three), ::reducer::testing::IsOk());
  FakeUpstreamSession* session = upstream_.session();
  ASSERT_EQ(session->calls(), 2);
  const absl::Status mismatch = absl::FailedPreconditionError(
      "allreduce #1 in job j: mismatched shapes: rank 1 sent [4] float32, "
      "rank 3 sent [5] float32");
  session->Refuse(mismatch, 0);
  session->Refuse(mismatch, 1);
  ASSERT_TRUE(one->WaitEnded());
  ASSERT_TRUE(three->WaitEnded());
  EXPECT_EQ(one->failure(), mismatch);

  auto two = std::make_shared<FakeRankChannel>();
  ASSERT_THAT(Call(sum(4), 2, 1, two), ::reducer::testing::IsOk());
  ASSERT_EQ(session->calls(), 3) << "rank 2's call waits here";
  EXPECT_EQ(session->header(2).rank(), 2);
  EXPECT_TRUE(session->header(2).ranks().empty());
  session->Refuse(mismatch, 2);
  ASSERT_TRUE(two->WaitEnded());
  EXPECT_EQ(two->failure(), mismatch);
  // The next all-reduce takes the three together again.
  for (int r : {1, 2, 3}) {
    ASSERT_THAT(Call(sum(4), r, 2, std::make_shared<FakeRankChannel>()),
                ::reducer::testing::IsOk());
  }
  ASSERT_EQ(session->calls(), 4);
  EXPECT_EQ(session->header(3).ranks_size(), 3);
}

// A rank lost here is reported upstream as its own loss, naming the relay;
// the collective waiting for it here goes upstream without it, and so do
// the later ones. Neither the epoch here nor the session upstream ends.
TEST_F(RelayJobTest, ALostRankIsReportedUpstreamAndLeftOutOfCombinedCalls) {
  ASSERT_NO_FATAL_FAILURE(Join({1, 2, 3}));
  auto one = std::make_shared<FakeRankChannel>();
  ASSERT_THAT(Call(AllReduce(), 1, 1, one), ::reducer::testing::IsOk());
  ASSERT_TRUE(job_->LoseRanks(kEpoch, {3}, "its stream was cancelled"));
  FakeUpstreamSession* session = upstream_.session();
  const std::vector<FakeUpstreamSession::LostRanks> lost = session->lost(1);
  ASSERT_EQ(lost.size(), 1u);
  EXPECT_THAT(lost[0].ranks, ::testing::ElementsAre(3));
  EXPECT_EQ(lost[0].cause, "its stream was cancelled, on relay test-host");

  auto two = std::make_shared<FakeRankChannel>();
  ASSERT_THAT(Call(AllReduce(), 2, 1, two), ::reducer::testing::IsOk());
  ASSERT_EQ(session->calls(), 1) << "ranks 1 and 2 go without rank 3";
  EXPECT_THAT(session->header(0).ranks(), ::testing::ElementsAre(1, 2));
  for (int r : {1, 2}) {
    ASSERT_THAT(Call(AllReduce(), r, 2, std::make_shared<FakeRankChannel>()),
                ::reducer::testing::IsOk());
  }
  ASSERT_EQ(session->calls(), 2);
  EXPECT_THAT(session->header(1).ranks(), ::testing::ElementsAre(1, 2));
  EXPECT_TRUE(ended_here().empty());
  EXPECT_EQ(session->lost(0).size(), 1u);
}

// Before the job is joined upstream, or for another epoch, the relay
// cannot take the loss upstream: its Job ends the epoch instead.
TEST_F(RelayJobTest, ALossWithoutAnUpstreamSessionIsNotTaken) {
  EXPECT_FALSE(job_->LoseRanks(kEpoch, {3}, "lost"));
  ASSERT_NO_FATAL_FAILURE(Join());
  EXPECT_FALSE(job_->LoseRanks(kEpoch + 1, {3}, "lost"));
  upstream_.End(absl::AbortedError("job j epoch 1 aborted"));
  EXPECT_FALSE(job_->LoseRanks(kEpoch, {3}, "lost"));
}

// A loss upstream cannot be told of would keep the shards waiting for the
// rank: the epoch ends here, which makes the relay leave upstream.
TEST_F(RelayJobTest, ALossThatCannotBeReportedEndsTheEpoch) {
  ASSERT_NO_FATAL_FAILURE(Join());
  upstream_.session()->AnswerLoseRanks(
      absl::UnavailableError("reducerd at s1 is down"));
  ASSERT_TRUE(job_->LoseRanks(kEpoch, {3}, "lost"));
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (ended_here().empty() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  const auto ended = ended_here();
  ASSERT_EQ(ended.size(), 1u);
  EXPECT_EQ(ended[0].first, kEpoch);
  EXPECT_THAT(ended[0].second,
              AllOf(HasSubstr("could not be reported upstream"),
                    HasSubstr("reducerd at s1 is down")));
}

// A lost rank that joins again goes upstream on a session of its own, its
// calls alone through it, while the host's others stay on the host's
// session; lost again, it is reported on its own session.
TEST_F(RelayJobTest, ALostRankJoinsAgainOnASessionOfItsOwn) {
  ASSERT_NO_FATAL_FAILURE(Join());
  FakeUpstreamSession* host = upstream_.session();
  auto never = [](absl::StatusOr<uint64_t>) { ADD_FAILURE() << "called"; };
  EXPECT_FALSE(job_->RejoinUpstream(kEpoch, 3, never)) << "3 is not lost";
  ASSERT_TRUE(job_->LoseRanks(kEpoch, {3}, "killed"));
  ASSERT_EQ(host->lost(1).size(), 1u);
  absl::Notification ready;
  absl::StatusOr<uint64_t> first_step;
  ASSERT_TRUE(job_->RejoinUpstream(kEpoch, 3, [&](absl::StatusOr<uint64_t> s) {
    first_step = s;
    ready.Notify();
  }));
  ASSERT_TRUE(ready.WaitForNotificationWithTimeout(absl::Seconds(20)));
  ASSERT_THAT(first_step, ::reducer::testing::IsOk());
  FakeUpstreamSession* own = upstream_.session();
  ASSERT_NE(own, host);

  for (int r : {2, 3}) {
    ASSERT_THAT(Call(AllReduce(), r, 1, std::make_shared<FakeRankChannel>()),
                ::reducer::testing::IsOk());
  }
  ASSERT_EQ(host->calls(), 1);
  EXPECT_EQ(host->header(0).rank(), 2);
  EXPECT_TRUE(host->header(0).ranks().empty());
  ASSERT_EQ(own->calls(), 1);
  EXPECT_EQ(own->header(0).rank(), 3);

  ASSERT_TRUE(job_->LoseRanks(kEpoch, {3}, "killed again"));
  // Reported on its own session, not on the host's.
  ASSERT_EQ(own->lost(1).size(), 1u);
  EXPECT_EQ(host->lost(0).size(), 1u);
  EXPECT_TRUE(ended_here().empty());
}

TEST_F(RelayJobTest, ARejoinedRanksOwnSessionEndingIsItsLossAlone) {
  // Rank 3's own session upstream ends on its own (upstream lost it): its
  // session here is to end, not the epoch; the host's session goes on
  // with rank 2, and rank 3 may join again.
  ASSERT_NO_FATAL_FAILURE(Join());
  FakeUpstreamSession* host = upstream_.session();
  ASSERT_NO_FATAL_FAILURE(LoseAndRejoin3());
  ASSERT_NE(upstream_.session(), host);
  upstream_.End(absl::UnavailableError("keepalive watchdog fired"));
  const std::vector<RankEnded> ended = rank_ended();
  ASSERT_EQ(ended.size(), 1u);
  EXPECT_EQ(ended[0].epoch_id, kEpoch);
  EXPECT_EQ(ended[0].rank, 3);
  EXPECT_THAT(ended[0].reason, HasSubstr("keepalive watchdog fired"));
  EXPECT_TRUE(ended_here().empty());
  ASSERT_THAT(Call(AllReduce(), 2, 1, std::make_shared<FakeRankChannel>()),
              ::reducer::testing::IsOk());
  ASSERT_EQ(host->calls(), 1);
  EXPECT_EQ(host->header(0).rank(), 2);
  // Lost here too (its session ends, Leave reports it): not reported on
  // the host's session, which no longer holds it.
  ASSERT_TRUE(job_->LoseRanks(kEpoch, {3}, "its session upstream ended"));
  absl::Notification ready;
  ASSERT_TRUE(job_->RejoinUpstream(
      kEpoch, 3, [&](absl::StatusOr<uint64_t>) { ready.Notify(); }));
  ASSERT_TRUE(ready.WaitForNotificationWithTimeout(absl::Seconds(20)));
  EXPECT_EQ(host->lost_now(), 1u);  // the first loss only
  EXPECT_TRUE(ended_here().empty());
}

// Rank `rank`'s call of message n from `source` to `destination` with
// `tag` (the source's send of `floats` floats, or the destination's
// receive), as a Job hands it over: its header and fingerprint.
struct MessageCall {
  v1::CollectiveHeader header;
  Fingerprint fp;
};
MessageCall Message(int rank, int source, int destination, int tag, uint64_t n,
                    int64_t floats = 4) {
  MessageCall call;
  std::vector<TensorSpec> tensors;
  if (rank == source) tensors.push_back(Spec(DataType::kFloat32, {floats}));
  call.fp = MakeFingerprint(
      CollectiveKind::kSendReceive, tensors,
      {std::min(source, destination), std::max(source, destination)}, source);
  call.header.set_job("j");
  call.header.set_rank(rank);
  call.header.set_name(PointToPointName(source, destination, tag, n));
  call.header.set_timeout_ms(20000);
  for (int r : call.fp.group) call.header.add_group(r);
  call.header.set_root(source);
  call.header.set_kind(v1::COLLECTIVE_KIND_SEND_RECEIVE);
  for (const TensorSpec& t : tensors)
    *call.header.add_tensors() = TensorSpecToWire(t);
  return call;
}

// Rank `rank`'s m-th match of `tag` (a ReceiveAny).
MessageCall Match(int rank, int tag, uint64_t m) {
  MessageCall call;
  call.fp = MakeFingerprint(CollectiveKind::kMatch, {}, {rank});
  call.fp.tag = tag;
  call.header.set_job("j");
  call.header.set_rank(rank);
  call.header.set_name(MatchName(rank, tag, m));
  call.header.set_timeout_ms(20000);
  call.header.add_group(rank);
  call.header.set_match_tag(tag);
  call.header.set_kind(v1::COLLECTIVE_KIND_MATCH);
  return call;
}

TEST_F(RelayJobTest, AMessageBetweenRanksOfThisHostNeverGoesUpstream) {
  ASSERT_NO_FATAL_FAILURE(Join());
  // 2 -> 3, the send first; 3 -> 2, the receive first: both stay here.
  MessageCall send = Message(2, 2, 3, 0, 0);
  EXPECT_TRUE(job_->KeepsHere(send.header, send.fp));
  MessageCall receive = Message(3, 2, 3, 0, 0);
  EXPECT_TRUE(job_->KeepsHere(receive.header, receive.fp));
  receive = Message(2, 3, 2, 1, 0);
  EXPECT_TRUE(job_->KeepsHere(receive.header, receive.fp));
  send = Message(3, 3, 2, 1, 0, 8);
  EXPECT_TRUE(job_->KeepsHere(send.header, send.fp));
  EXPECT_EQ(upstream_.session()->calls(), 0);
  EXPECT_EQ(job_->local_messages(), 2u);
  // 16 and 32 payload bytes, each neither sent up nor back down.
  EXPECT_EQ(job_->bytes_saved(), 2u * (16 + 32));

  // To rank 0, of another host: upstream, as before.
  send = Message(2, 2, 0, 0, 0);
  EXPECT_FALSE(job_->KeepsHere(send.header, send.fp));
  auto channel = std::make_shared<FakeRankChannel>();
  absl::StatusOr<std::shared_ptr<AttachedCollective>> attached =
      job_->Attach(send.header, send.fp, channel);
  ASSERT_THAT(attached, ::reducer::testing::IsOk());
  ASSERT_EQ(upstream_.session()->calls(), 1);
  EXPECT_EQ(upstream_.session()->header(0).name(), "p2p 2>0 tag 0 #0");
}

TEST_F(RelayJobTest, AMatchSendsTheMessagesHeldHereUpstreamFirst) {
  ASSERT_NO_FATAL_FAILURE(Join());
  MessageCall send = Message(2, 2, 3, 5, 0);
  ASSERT_TRUE(job_->KeepsHere(send.header, send.fp));
  absl::SleepFor(absl::Milliseconds(50));  // held here a while
  MessageCall match = Match(3, 5, 0);
  std::vector<JobRelay::HeldMessage> held =
      job_->BeforeMatch(match.header, match.fp);
  ASSERT_EQ(held.size(), 1u);
  EXPECT_EQ(held[0].send.name(), "p2p 2>3 tag 5 #0");
  // It went upstream as rank 2's send, its payload the bytes handed over,
  // its 20 s timeout less the time it was held here.
  FakeUpstreamSession* session = upstream_.session();
  ASSERT_EQ(session->calls(), 1);
  EXPECT_EQ(session->header(0).name(), "p2p 2>3 tag 5 #0");
  EXPECT_EQ(session->header(0).rank(), 2);
  EXPECT_LE(session->header(0).timeout_ms(), 20000 - 50);
  EXPECT_GT(session->header(0).timeout_ms(), 0);
  const std::string payload = "0123456789abcdef";
  ResultMessage first;
  first.data.push_back(StringBytes(payload.substr(0, 6)));
  ResultMessage rest;
  rest.offset = 6;
  rest.data.push_back(StringBytes(payload.substr(6)));
  held[0].channel->Send(std::move(first), false);
  held[0].channel->Send(std::move(rest), true);
  EXPECT_EQ(session->Payload(0), payload);

  // The match goes upstream after it; while it is there, its receive and
  // new sends to (3, 5) go upstream too.
  auto matching = std::make_shared<FakeRankChannel>();
  ASSERT_THAT(job_->Attach(match.header, match.fp, matching),
              ::reducer::testing::IsOk());
  ASSERT_EQ(session->calls(), 2);
  EXPECT_EQ(session->header(1).name(), "p2p *>3 tag 5 #0");
  MessageCall receive = Message(3, 2, 3, 5, 0);
  EXPECT_FALSE(job_->KeepsHere(receive.header, receive.fp));
  send = Message(2, 2, 3, 5, 1);
  EXPECT_FALSE(job_->KeepsHere(send.header, send.fp));
  // Answered: later sends stay here again.
  session->Answer(Spec(DataType::kInt64, {2}), std::string(16, '\0'), 1);
  ASSERT_TRUE(matching->WaitEnded());
  send = Message(2, 2, 3, 5, 2);
  EXPECT_TRUE(job_->KeepsHere(send.header, send.fp));
  EXPECT_EQ(job_->local_messages(), 0u);
}

TEST_F(RelayJobTest, ALostRanksHeldSendsGoUpstreamBeforeItsLossIsReported) {
  ASSERT_NO_FATAL_FAILURE(Join());
  MessageCall send = Message(2, 2, 3, 0, 0);
  ASSERT_TRUE(job_->KeepsHere(send.header, send.fp));
  std::vector<JobRelay::HeldMessage> held = job_->HeldFrom({2});
  ASSERT_EQ(held.size(), 1u);
  FakeUpstreamSession* session = upstream_.session();
  EXPECT_EQ(session->header(0).name(), "p2p 2>3 tag 0 #0");
  ASSERT_TRUE(job_->LoseRanks(kEpoch, {2}, "killed"));
  // Not reported while upstream has not taken the message.
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_EQ(session->lost_now(), 0u);
  session->AnswerNothing(0);
  ASSERT_EQ(session->lost(1).size(), 1u);
  EXPECT_THAT(session->lost(1)[0].ranks, ::testing::ElementsAre(2));
  // Its receive follows it upstream, and so does a message not decided.
  MessageCall receive = Message(3, 2, 3, 0, 0);
  EXPECT_FALSE(job_->KeepsHere(receive.header, receive.fp));
  send = Message(2, 2, 3, 0, 1);
  EXPECT_FALSE(job_->KeepsHere(send.header, send.fp));
}

// A message a match sent upstream, still unanswered there when its
// sender is lost: the loss is reported only once upstream answered it
// (upstream refuses a send from a rank it was told left).
TEST_F(RelayJobTest, ALossWaitsForTheSendsAMatchForwardedBeforeIt) {
  ASSERT_NO_FATAL_FAILURE(Join());
  MessageCall send = Message(2, 2, 3, 5, 0);
  ASSERT_TRUE(job_->KeepsHere(send.header, send.fp));
  MessageCall match = Match(3, 5, 0);
  ASSERT_EQ(job_->BeforeMatch(match.header, match.fp).size(), 1u);
  FakeUpstreamSession* session = upstream_.session();
  ASSERT_EQ(session->calls(), 1);
  // Rank 2 departs: nothing more of its is held, but its forwarded send
  // has no answer yet.
  EXPECT_TRUE(job_->HeldFrom({2}).empty());
  ASSERT_TRUE(job_->LoseRanks(kEpoch, {2}, ""));
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_EQ(session->lost_now(), 0u);
  session->AnswerNothing(0);
  ASSERT_EQ(session->lost(1).size(), 1u);
  EXPECT_THAT(session->lost(1)[0].ranks, ::testing::ElementsAre(2));
}

TEST_F(RelayJobTest, AMessageOfALostRankGoesUpstream) {
  ASSERT_NO_FATAL_FAILURE(Join());
  ASSERT_TRUE(job_->LoseRanks(kEpoch, {3}, "killed"));
  MessageCall send = Message(2, 2, 3, 0, 0);
  EXPECT_FALSE(job_->KeepsHere(send.header, send.fp));
}

}  // namespace
}  // namespace reducer
