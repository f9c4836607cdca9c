// RelayCollective's streamed all-reduce result (relay_collective.h,
// "Streamed"): members get each message once its bytes landed in the
// relay's memory, in any order after the first, and the last (their call's
// OK) only once upstream's call ended OK. Expected bytes are written out
// here.
#include <memory>
#include <string>
#include <vector>

#include "core/fingerprint_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/engine/fake_rank_channel.h"
#include "server/relay/relay_collective_fixture.h"
#include "tests/status_matchers.h"

namespace reducer {
namespace {

using ::reducer::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// The offsets of the messages `ch` was sent, in the order sent.
std::vector<uint64_t> OffsetsSent(FakeRankChannel& ch) {
  std::vector<uint64_t> offsets;
  for (const SentMessage& m : ch.sent()) offsets.push_back(m.offset);
  return offsets;
}

class StreamedTest : public RelayCollectiveTest {
 protected:
  // Ranks 0 and 1 of a group of 4 all-reduce kN floats (kN * 4 = 256
  // bytes: 4 messages of 64), their payloads all in.
  static constexpr int kN = 64;
  void SetUp() override {
    fp_ = MakeFingerprint(CollectiveKind::kAllReduce,
                          {Spec(DataType::kFloat32, {kN})}, {0, 1, 2, 3});
    c_ = Make({0, 1});
    for (int r = 0; r < 2; ++r) {
      ch_.push_back(std::make_shared<FakeRankChannel>());
      ASSERT_TRUE(c_->Attach(ch_[r], r, HeaderOf(fp_, r), fp_));
      c_->OnData(r, 0, PayloadOf(Bytes(std::vector<float>(kN, 1.0f + r))));
      c_->OnInputEnd(r);
    }
    EXPECT_EQ(session_->Payload(), Bytes(std::vector<float>(kN, 3.0f)));
    for (int i = 0; i < kN; ++i) result_.push_back(0.25f * i);
    bytes_ = Bytes(result_);
  }
  // Acknowledges every message written so far to each member.
  void AcknowledgeAll() {
    for (int r = 0; r < 2; ++r) {
      for (int n = ch_[r]->TakeUnacknowledged(); n > 0; --n) {
        c_->OnWriteDone(r);
      }
    }
  }

  Fingerprint fp_;
  std::shared_ptr<RelayCollective> c_;
  std::vector<std::shared_ptr<FakeRankChannel>> ch_;
  std::vector<float> result_;
  std::string bytes_;
};

TEST_F(StreamedTest, MessagesGoAsTheirBytesLandAndTheLastOnceUpstreamSaysOk) {
  std::shared_ptr<const ResultInto> into = session_->into();
  ASSERT_NE(into, nullptr);
  EXPECT_EQ(into->specs, fp_.tensors);
  // The second half first: the first message (the specs) goes first, so
  // nothing goes yet.
  session_->Land(128, bytes_.substr(128));
  EXPECT_EQ(ch_[0]->message_count(), 0);
  // Then the first message, and one more of those landed (a window of 2):
  // the one at 128; the last (at 192) waits for upstream's OK.
  session_->Land(0, bytes_.substr(0, 64));
  for (int r = 0; r < 2; ++r) {
    EXPECT_THAT(OffsetsSent(*ch_[r]), ElementsAre(0, 128)) << "rank " << r;
  }
  AcknowledgeAll();
  EXPECT_EQ(ch_[0]->message_count(), 2);
  session_->Land(64, bytes_.substr(64, 64));
  for (int r = 0; r < 2; ++r) {
    EXPECT_THAT(OffsetsSent(*ch_[r]), ElementsAre(0, 128, 64));
    EXPECT_FALSE(ch_[r]->finished_ok());
  }
  session_->EndLanded();
  for (int r = 0; r < 2; ++r) {
    DrainWrites(*c_, r, *ch_[r]);
    ASSERT_TRUE(ch_[r]->WaitEnded());
    EXPECT_TRUE(ch_[r]->finished_ok()) << ch_[r]->failure();
    EXPECT_THAT(OffsetsSent(*ch_[r]), ElementsAre(0, 128, 64, 192));
    EXPECT_EQ(ch_[r]->result(), bytes_);
    EXPECT_EQ(ch_[r]->specs(), fp_.tensors);
  }
  // Still one copy for the host: the members' messages share their bytes.
  EXPECT_EQ(ch_[0]->sent()[1].pieces, ch_[1]->sent()[1].pieces);
  EXPECT_TRUE(c_->done());
}

TEST_F(StreamedTest, AFailureAfterPartOfTheResultFailsEveryMember) {
  session_->Land(0, bytes_.substr(0, 128));
  EXPECT_EQ(ch_[0]->message_count(), 2);
  session_->Refuse(absl::AbortedError("rank 3 was lost upstream"));
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(ch_[r]->WaitEnded());
    EXPECT_FALSE(ch_[r]->finished_ok());
    EXPECT_THAT(ch_[r]->failure(),
                StatusIs(absl::StatusCode::kAborted, HasSubstr("rank 3")));
  }
  EXPECT_TRUE(c_->done());
}

TEST_F(StreamedTest, AnOkWithBytesMissingFailsEveryMember) {
  session_->Land(0, bytes_.substr(0, 192));
  session_->EndLanded();
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(ch_[r]->WaitEnded());
    EXPECT_FALSE(ch_[r]->finished_ok());
    EXPECT_THAT(ch_[r]->failure(),
                StatusIs(absl::StatusCode::kInternal,
                         HasSubstr("before all of its result came")));
  }
}

TEST_F(RelayCollectiveTest,
       AStreamedResultOfSeveralTensorsCarriesTheirPadding) {
  // A float32[3] and an int64[2]: 12 bytes, padding, then 16 (the payload
  // layout aligns each tensor); the padding never lands, it is zeros.
  const Fingerprint fp = MakeFingerprint(
      CollectiveKind::kAllReduce,
      {Spec(DataType::kFloat32, {3}), Spec(DataType::kInt64, {2})}, {0, 1, 2});
  const PayloadLayout layout = *ComputePayloadLayout(fp.tensors);
  ASSERT_GT(layout.offsets[1], 12u);
  auto c = Make({0, 1});
  std::vector<std::shared_ptr<FakeRankChannel>> ch;
  for (int r = 0; r < 2; ++r) {
    ch.push_back(std::make_shared<FakeRankChannel>());
    ASSERT_TRUE(c->Attach(ch[r], r, HeaderOf(fp, r), fp));
    c->OnData(r, 0, PayloadOf(std::string(layout.total_bytes, '\0')));
    c->OnInputEnd(r);
  }
  session_->Payload();
  std::string expected(layout.total_bytes, '\0');
  const std::vector<float> f = {1.5f, -2.0f, 8.0f};
  const std::vector<int64_t> n = {-7, 1LL << 40};
  expected.replace(0, 12, Bytes(f));
  expected.replace(layout.offsets[1], 16, Bytes(n));
  std::string landed = expected;
  // What the fake lands of the padding is skipped: poison it.
  for (size_t i = 12; i < layout.offsets[1]; ++i) landed[i] = '\x5a';
  session_->Answer(fp.tensors[0], landed);
  for (int r = 0; r < 2; ++r) {
    DrainWrites(*c, r, *ch[r]);
    ASSERT_TRUE(ch[r]->WaitEnded());
    EXPECT_TRUE(ch[r]->finished_ok()) << ch[r]->failure();
    EXPECT_EQ(ch[r]->result(), expected);
  }
}

}  // namespace
}  // namespace reducer
