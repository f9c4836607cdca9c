// Point-to-point messages (CollectiveKind::kSendReceive) through a
// Collective and its SendReceiveStrategy, with recording rank channels: the
// buffered send finishing before the destination attaches, the memory held
// for it and when it is given back, either arrival order, several chunks,
// a destination's declared spec that disagrees, and that only the
// destination gets bytes. Payloads are closed-form ramps built here.
#include "server/engine/send_receive_strategy.h"

#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/data_type.h"
#include "core/fingerprint.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/engine/collective.h"
#include "server/engine/collective_test_base.h"
#include "server/engine/fake_rank_channel.h"
#include "server/engine/kept_results.h"
#include "tests/matchers.h"

namespace reducer {
namespace {

// n float32 values, element i = 1000 * tag + i + 1: bytes that differ at
// every position and between messages.
std::string Message(int tag, int n) {
  std::vector<float> v(n);
  for (int i = 0; i < n; ++i) v[i] = static_cast<float>(1000 * tag + i + 1);
  return Bytes(v);
}

TensorSpec Floats(int64_t n) {
  TensorSpec t;
  t.dtype = DataType::kFloat32;
  t.shape = {n};
  return t;
}

// `rank`'s fingerprint in a message from `source` to `destination`;
// `declared`: its tensors (the source's input, the destination's buffer).
Fingerprint P2p(int source, int destination, std::vector<TensorSpec> declared) {
  Fingerprint fp;
  fp.kind = CollectiveKind::kSendReceive;
  fp.root = source;
  fp.group = source < destination ? std::vector<int>{source, destination}
                                  : std::vector<int>{destination, source};
  fp.tensors = std::move(declared);
  return fp;
}

class SendReceiveTest : public CollectiveTestBase {
 protected:
  SendReceiveTest() { options_.chunk_bytes = 64; }

  // The source's call and the destination's.
  const std::shared_ptr<FakeRankChannel> src_ =
      std::make_shared<FakeRankChannel>();
  const std::shared_ptr<FakeRankChannel> dst_ =
      std::make_shared<FakeRankChannel>();

  std::shared_ptr<Collective> Make(int source, int destination,
                                   absl::Duration timeout = absl::Seconds(60)) {
    std::vector<int> group = source < destination
                                 ? std::vector<int>{source, destination}
                                 : std::vector<int>{destination, source};
    return MakeCollective(CollectiveKind::kSendReceive, std::move(group),
                          absl::StrCat("sendreceive \"p2p ", source, ">",
                                       destination, " tag 0 #0\""),
                          timeout);
  }
};

TEST_F(SendReceiveTest, SendCompletesBeforeTheDestinationAttaches) {
  std::shared_ptr<Collective> c = Make(0, 1);
  const std::string payload = Message(1, 40);  // 160 bytes, 4 messages
  ASSERT_TRUE(c->Attach(src_, 0, P2p(0, 1, {Floats(40)}), "s0/0"));
  Feed(*c, 0, payload);
  ASSERT_TRUE(src_->WaitEnded());
  EXPECT_TRUE(src_->finished_ok());
  EXPECT_EQ(src_->byte_count(), 0u);
  EXPECT_EQ(src_->headers(), 1);
  EXPECT_THAT(src_->specs(), IsEmpty());
  EXPECT_TRUE(c->HasFinished(0));
  EXPECT_FALSE(c->done());
  // The whole payload stays reserved while reducerd holds it.
  EXPECT_EQ(memory_->used(), payload.size());

  ASSERT_TRUE(c->Attach(dst_, 1, P2p(0, 1, {}), "s1/0"));
  ASSERT_TRUE(dst_->WaitEnded());
  EXPECT_TRUE(dst_->finished_ok());
  EXPECT_EQ(dst_->result(), payload);
  ASSERT_THAT(dst_->specs(), SizeIs(1));
  EXPECT_EQ(dst_->specs()[0], Floats(40));
  EXPECT_TRUE(c->done());
  EXPECT_EQ(memory_->used(), 0u);
}

TEST_F(SendReceiveTest, DestinationAttachedFirstGetsTheBytesAsTheyArrive) {
  std::shared_ptr<Collective> c = Make(3, 1);
  const std::string payload = Message(2, 50);  // 200 bytes, several chunks
  ASSERT_TRUE(c->Attach(dst_, 1, P2p(3, 1, {}), ""));
  ASSERT_TRUE(c->Attach(src_, 3, P2p(3, 1, {Floats(50)}), ""));
  EXPECT_EQ(memory_->used(), payload.size());
  Feed(*c, 3, payload.substr(0, 96));
  // Forwarded at once, before the rest was sent.
  EXPECT_EQ(dst_->byte_count(), 96u);
  EXPECT_FALSE(dst_->finished_ok());
  EXPECT_FALSE(src_->finished_ok());
  Feed(*c, 3, payload.substr(96), 48, /*offset=*/96);
  ASSERT_TRUE(src_->WaitEnded());
  ASSERT_TRUE(dst_->WaitEnded());
  EXPECT_TRUE(src_->finished_ok());
  EXPECT_TRUE(dst_->finished_ok());
  EXPECT_EQ(dst_->result(), payload);
  EXPECT_GE(dst_->message_count(), 5);
  EXPECT_EQ(src_->byte_count(), 0u);
  EXPECT_THAT(src_->specs(), IsEmpty());
  EXPECT_EQ(memory_->used(), 0u);
}

TEST_F(SendReceiveTest, EmptyMessageCompletesBothSides) {
  std::shared_ptr<Collective> c = Make(0, 1);
  ASSERT_TRUE(c->Attach(src_, 0, P2p(0, 1, {Floats(0)}), ""));
  ASSERT_TRUE(src_->WaitEnded());
  EXPECT_TRUE(src_->finished_ok());
  ASSERT_TRUE(c->Attach(dst_, 1, P2p(0, 1, {}), ""));
  ASSERT_TRUE(dst_->WaitEnded());
  EXPECT_TRUE(dst_->finished_ok());
  EXPECT_EQ(dst_->byte_count(), 0u);
  ASSERT_THAT(dst_->specs(), SizeIs(1));
  EXPECT_EQ(dst_->specs()[0], Floats(0));
  EXPECT_TRUE(c->done());
}

TEST_F(SendReceiveTest, DeclaredSpecThatDisagreesFailsTheDestination) {
  std::shared_ptr<Collective> c = Make(0, 1);
  ASSERT_TRUE(c->Attach(src_, 0, P2p(0, 1, {Floats(8)}), ""));
  Feed(*c, 0, Message(3, 8));
  ASSERT_TRUE(src_->WaitEnded());
  EXPECT_TRUE(src_->finished_ok());  // already returned: its send was buffered
  EXPECT_FALSE(c->Attach(dst_, 1, P2p(0, 1, {Floats(9)}), ""));
  ExpectFailed(
      *dst_, absl::StatusCode::kFailedPrecondition,
      "mismatched shapes: rank 0 sent [8] float32, rank 1 sent [9] float32");
  EXPECT_EQ(dst_->byte_count(), 0u);
  EXPECT_TRUE(c->done());
  EXPECT_EQ(memory_->used(), 0u);
}

TEST_F(SendReceiveTest, DisagreementWhileTheSourceIsAttachedFailsBoth) {
  std::shared_ptr<Collective> c = Make(0, 1);
  ASSERT_TRUE(c->Attach(dst_, 1, P2p(0, 1, {Floats(9)}), ""));
  EXPECT_FALSE(c->Attach(src_, 0, P2p(0, 1, {Floats(8)}), ""));
  for (auto* ch : {src_.get(), dst_.get()}) {
    ExpectFailed(
        *ch, absl::StatusCode::kFailedPrecondition,
        "mismatched shapes: rank 1 sent [9] float32, rank 0 sent [8] float32");
  }
  EXPECT_EQ(dst_->byte_count(), 0u);
}

TEST_F(SendReceiveTest, HeldMessageWhoseReceiveNeverComesIsDroppedAtTheDeadline) {
  std::shared_ptr<Collective> c = Make(0, 1, absl::Milliseconds(200));
  ASSERT_TRUE(c->Attach(src_, 0, P2p(0, 1, {Floats(16)}), ""));
  Feed(*c, 0, Message(4, 16));
  ASSERT_TRUE(src_->WaitEnded());
  EXPECT_TRUE(src_->finished_ok());
  EXPECT_EQ(memory_->used(), 64u);
  const absl::Time give_up = absl::Now() + kWait;
  while (!c->done() && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_TRUE(c->done());
  EXPECT_EQ(memory_->used(), 0u);
  EXPECT_TRUE(src_->failure().ok());  // its call had already ended OK
  // A late destination gets the deadline's failure, naming itself missing.
  EXPECT_FALSE(c->Attach(dst_, 1, P2p(0, 1, {}), ""));
  EXPECT_THAT(dst_->failure(), StatusIs(absl::StatusCode::kDeadlineExceeded,
                                        HasSubstr("rank 1 never arrived")));
}

TEST_F(SendReceiveTest, ReceiveWhoseSendNeverComesNamesTheSource) {
  std::shared_ptr<Collective> c = Make(2, 0, absl::Milliseconds(200));
  ASSERT_TRUE(c->Attach(dst_, 0, P2p(2, 0, {}), ""));
  ExpectFailed(*dst_, absl::StatusCode::kDeadlineExceeded,
               "rank 2 never arrived (ranks 0 waited)");
}

TEST_F(SendReceiveTest, SendBeyondTheMemoryBudgetIsRefused) {
  memory_budget_bytes_ = 100;
  std::shared_ptr<Collective> c = Make(0, 1);
  EXPECT_FALSE(c->Attach(src_, 0, P2p(0, 1, {Floats(40)}), ""));
  ASSERT_TRUE(src_->WaitEnded());
  EXPECT_THAT(src_->failure(),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       AllOf(HasSubstr("--memory_budget_bytes"),
                             HasSubstr("rank 0 needs 160"))));
  EXPECT_EQ(memory_->used(), 0u);
}

TEST_F(SendReceiveTest, EpochEndOnceTheWholeMessageIsHeldStillDeliversIt) {
  std::shared_ptr<Collective> c = Make(0, 1);
  ASSERT_TRUE(c->Attach(dst_, 1, P2p(0, 1, {}), ""));
  ASSERT_TRUE(c->Attach(src_, 0, P2p(0, 1, {Floats(4)}), ""));
  Feed(*c, 0, Message(5, 4));
  c->FailUnlessDecided(absl::AbortedError("epoch ended"));
  ASSERT_TRUE(dst_->WaitEnded());
  EXPECT_TRUE(dst_->finished_ok());
  EXPECT_EQ(dst_->result(), Message(5, 4));
}

TEST_F(SendReceiveTest, EpochEndBeforeTheMessageIsWholeAbortsTheReceive) {
  std::shared_ptr<Collective> c = Make(0, 1);
  ASSERT_TRUE(c->Attach(dst_, 1, P2p(0, 1, {}), ""));
  c->FailUnlessDecided(absl::AbortedError("epoch ended: rank 0 was lost"));
  ASSERT_TRUE(dst_->WaitEnded());
  EXPECT_THAT(dst_->failure(), StatusIs(absl::StatusCode::kAborted,
                                        HasSubstr("rank 0 was lost")));
}

TEST_F(SendReceiveTest, SourceCancelledAfterItsSendEndedChangesNothing) {
  std::shared_ptr<Collective> c = Make(0, 1);
  ASSERT_TRUE(c->Attach(src_, 0, P2p(0, 1, {Floats(4)}), ""));
  Feed(*c, 0, Message(6, 4));
  ASSERT_TRUE(src_->WaitEnded());
  c->OnRankCancelled(0, src_.get());
  ASSERT_TRUE(c->Attach(dst_, 1, P2p(0, 1, {}), ""));
  ASSERT_TRUE(dst_->WaitEnded());
  EXPECT_TRUE(dst_->finished_ok());
  EXPECT_EQ(dst_->result(), Message(6, 4));
}

TEST_F(SendReceiveTest, ASourceThatFinishedAloneHasItsEmptyResultKept) {
  keep_results_ = true;
  std::shared_ptr<Collective> c = Make(0, 1);
  ASSERT_TRUE(c->Attach(src_, 0, P2p(0, 1, {Floats(4)}), "s0/7"));
  Feed(*c, 0, Message(7, 4));
  ASSERT_TRUE(src_->WaitEnded());
  EXPECT_TRUE(src_->finished_ok());
  std::optional<KeptResults::Kept> found = kept_->Find("s0/7", 0);
  ASSERT_TRUE(found.has_value());
  ASSERT_THAT(found->messages, SizeIs(1));
  ASSERT_NE(found->messages[0].result_specs, nullptr);
  EXPECT_THAT(*found->messages[0].result_specs, IsEmpty());
  EXPECT_THAT(found->messages[0].data, IsEmpty());
}

TEST_F(SendReceiveTest, SourceCancelledBeforeSendingIsDetachedAndGivesItsRoomBack) {
  keep_results_ = true;
  std::shared_ptr<Collective> c = Make(0, 1);
  auto first = std::make_shared<FakeRankChannel>();
  ASSERT_TRUE(c->Attach(first, 0, P2p(0, 1, {Floats(4)}), "s0/8"));
  EXPECT_EQ(memory_->used(), 16u);
  EXPECT_GT(kept_memory_.used(), 0u);
  c->OnRankCancelled(0, first.get());
  EXPECT_EQ(memory_->used(), 0u);
  EXPECT_EQ(kept_memory_.used(), 0u);
  // A new call of rank 0 takes its place, and the message goes through.
  ASSERT_TRUE(c->Attach(src_, 0, P2p(0, 1, {Floats(4)}), "s0/9"));
  Feed(*c, 0, Message(8, 4));
  ASSERT_TRUE(c->Attach(dst_, 1, P2p(0, 1, {}), ""));
  ASSERT_TRUE(dst_->WaitEnded());
  EXPECT_TRUE(dst_->finished_ok());
  EXPECT_EQ(dst_->result(), Message(8, 4));
}

TEST_F(SendReceiveTest, StrategyPlansTheSourcesTensorForTheDestinationOnly) {
  SendReceiveStrategy s(/*source_index=*/1);
  EXPECT_EQ(s.Reservation(1, 160), 160u);
  EXPECT_EQ(s.Reservation(0, 0), 0u);
  EXPECT_TRUE(s.GetsResult(0));
  EXPECT_FALSE(s.GetsResult(1));
  EXPECT_TRUE(s.FinishesAlone(1));
  EXPECT_FALSE(s.FinishesAlone(0));
  EXPECT_TRUE(s.HoldsBytesOf(1));
  EXPECT_FALSE(s.HoldsBytesOf(0));
  s.Clear();
  EXPECT_FALSE(s.HoldsBytesOf(1));
}

}  // namespace
}  // namespace reducer
