// Point-to-point matches in a Job, in process, through fake sessions and
// rank channels: a match (ReceiveAny) is answered with the message that
// arrived first, or the first to arrive; the receiver then gets it with
// a plain receive of that number; a plain receive after it takes the
// source's next message; a waiting match fails with the epoch when the
// only other rank is lost, naming it; and an uneven all-to-all whose
// expected rows disagree fails every rank. Messages are float32 vectors
// whose values name their source and number.
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/jobs/job.h"
#include "server/jobs/joined_job_test.h"
#include "tests/matchers.h"

namespace reducer {
namespace {

constexpr int64_t kTag = 7;

class JobMatchTest : public JoinedJobTest {
 protected:
  // Message n of `source` to `destination`: float32 [2] {source, n}.
  static std::string Message(int source, uint64_t n) {
    const float v[2] = {static_cast<float>(source), static_cast<float>(n)};
    return std::string(reinterpret_cast<const char*>(v), sizeof(v));
  }

  // `rank`'s header of message n of `source` to `destination` with kTag.
  static v1::CollectiveHeader MessageHeader(int rank, int source,
                                            int destination, uint64_t n) {
    v1::CollectiveHeader h = Header(rank, v1::COLLECTIVE_KIND_SEND_RECEIVE);
    h.set_name(absl::StrCat("p2p ", source, ">", destination, " tag ", kTag,
                            " #", n));
    h.set_root(source);
    h.add_group(std::min(source, destination));
    h.add_group(std::max(source, destination));
    return h;
  }

  // `source`'s send n to `destination`.
  std::shared_ptr<FakeRankChannel> Send(int source, int destination,
                                        uint64_t n) {
    v1::CollectiveHeader h = MessageHeader(source, source, destination, n);
    v1::TensorSpec* t = h.add_tensors();
    t->set_dtype(v1::DATA_TYPE_FLOAT32);
    t->add_shape(2);
    return Attach(h, Message(source, n));
  }

  // `destination`'s plain receive of message n of `source`.
  std::shared_ptr<FakeRankChannel> Receive(int source, int destination,
                                           uint64_t n) {
    return Attach(MessageHeader(destination, source, destination, n));
  }

  // `destination`'s match m of kTag, from any rank (`source` -1) or one.
  std::shared_ptr<FakeRankChannel> Match(
      int destination, uint64_t m, int source = -1,
      std::vector<std::pair<int, uint64_t>> received = {}) {
    v1::CollectiveHeader h = Header(destination, v1::COLLECTIVE_KIND_MATCH);
    h.set_name(absl::StrCat("p2p *>", destination, " tag ", kTag, " #", m));
    h.set_root(source);
    h.add_group(destination);
    h.set_match_tag(kTag);
    for (const auto& [from, count] : received) {
      v1::ReceivedCount* c = h.add_match_received();
      c->set_source(from);
      c->set_count(count);
    }
    return Attach(h);
  }

  // The answer a match got: {source, n}.
  static std::pair<int64_t, int64_t> Answer(FakeRankChannel& channel) {
    int64_t v[2] = {-1, -1};
    const std::string bytes = channel.bytes();
    if (bytes.size() == sizeof(v)) std::memcpy(v, bytes.data(), sizeof(v));
    return {v[0], v[1]};
  }
};

TEST_F(JobMatchTest, AMatchTakesTheMessageThatArrivedFirst) {
  EXPECT_TRUE(Send(2, 1, 0)->finished_ok());
  EXPECT_TRUE(Send(0, 1, 0)->finished_ok());
  std::shared_ptr<FakeRankChannel> match = Match(1, 0);
  ASSERT_TRUE(match->finished_ok()) << match->failure();
  EXPECT_EQ(Answer(*match), std::make_pair(int64_t{2}, int64_t{0}));
  std::shared_ptr<FakeRankChannel> got = Receive(2, 1, 0);
  ASSERT_TRUE(got->finished_ok()) << got->failure();
  EXPECT_EQ(got->bytes(), Message(2, 0));
  // The next match takes rank 0's, held all along.
  match = Match(1, 1);
  EXPECT_EQ(Answer(*match), std::make_pair(int64_t{0}, int64_t{0}));
}

TEST_F(JobMatchTest, AMatchWaitsForTheFirstSendToArrive) {
  std::shared_ptr<FakeRankChannel> match = Match(1, 0);
  EXPECT_EQ(match->message_count(), 0);
  EXPECT_TRUE(Send(0, 2, 0)->finished_ok());  // to another rank
  EXPECT_EQ(match->message_count(), 0);
  EXPECT_TRUE(Send(0, 1, 0)->finished_ok());
  ASSERT_TRUE(match->finished_ok()) << match->failure();
  EXPECT_EQ(Answer(*match), std::make_pair(int64_t{0}, int64_t{0}));
}

TEST_F(JobMatchTest, APlainReceiveAfterAMatchTakesTheSourcesNextMessage) {
  for (uint64_t n = 0; n < 3; ++n) EXPECT_TRUE(Send(0, 1, n)->finished_ok());
  // Rank 1 received message 0 of rank 0 by its own count, then matches.
  EXPECT_EQ(Receive(0, 1, 0)->bytes(), Message(0, 0));
  std::shared_ptr<FakeRankChannel> match = Match(1, 0, -1, {{0, 1}});
  EXPECT_EQ(Answer(*match), std::make_pair(int64_t{0}, int64_t{1}));
  EXPECT_EQ(Receive(0, 1, 1)->bytes(), Message(0, 1));
  // Its client counts that message: its next receive is #2.
  EXPECT_EQ(Receive(0, 1, 2)->bytes(), Message(0, 2));
}

TEST_F(JobMatchTest, AWaitingMatchFailsWhenItsJobLosesARankNamingIt) {
  std::shared_ptr<FakeRankChannel> match = Match(1, 0);
  EXPECT_FALSE(Lose(0, "connection reset"));
  EXPECT_THAT(
      match->failure(),
      StatusIs(absl::StatusCode::kAborted,
               HasSubstr("rank 0's session was lost (connection reset)")));
}

TEST_F(JobMatchTest, ExpectedRowsThatDisagreeFailEveryRankOfAnUnevenAllToAll) {
  std::vector<std::shared_ptr<FakeRankChannel>> channels;
  const std::vector<std::vector<int64_t>> send = {{1, 2, 0}, {0, 0, 3}, {1, 1, 1}};
  for (int r = 0; r < kWorld; ++r) {
    v1::CollectiveHeader h = Header(r, v1::COLLECTIVE_KIND_ALL_TO_ALL_V);
    h.set_sequence(0);
    v1::TensorSpec* t = h.add_tensors();
    t->set_dtype(v1::DATA_TYPE_FLOAT32);
    t->add_shape(send[r][0] + send[r][1] + send[r][2]);
    t->add_shape(2);
    for (int64_t rows : send[r]) h.add_send_rows(rows);
    if (r == 2) {
      for (int64_t rows : {0, 4, 1}) h.add_recv_rows(rows);  // rank 1 sends 3
    }
    channels.push_back(Attach(h));
  }
  for (int r = 0; r < kWorld; ++r) {
    SCOPED_TRACE(absl::StrCat("rank ", r));
    EXPECT_THAT(
        channels[r]->failure(),
        StatusIs(absl::StatusCode::kFailedPrecondition,
                 HasSubstr("alltoallv #0 in job j1: mismatched rows: rank 1 "
                           "sends 3 rows to rank 2, but rank 2 expects 4 from "
                           "rank 1")));
  }
}

}  // namespace
}  // namespace reducer
