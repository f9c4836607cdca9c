// LocalMessages: the route of each point-to-point call of two ranks of one
// host (here, or upstream), the held messages a match sends upstream first
// and their order, and its memory. The expected routes follow the rules at
// the top of local_messages.h, worked by hand for each case.
#include "server/relay/local_messages.h"

#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace reducer {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

// The call of `rank` (the source's send, or the destination's receive) of
// message n from `source` to `destination` with `tag`.
struct Call {
  PointToPointNameParts message;
  v1::CollectiveHeader header;
};
Call MessageCall(int rank, int source, int destination, int64_t tag,
                 uint64_t n) {
  Call call;
  call.message.source = source;
  call.message.destination = destination;
  call.message.tag = tag;
  call.message.n = n;
  call.header.set_rank(rank);
  call.header.set_name(PointToPointName(source, destination, tag, n));
  return call;
}

// When every call of these tests comes, but where a case says otherwise.
const absl::Time kStart = absl::FromUnixSeconds(1000);

bool Send(LocalMessages& local, int source, int destination, int64_t tag,
          uint64_t n, uint64_t bytes = 16, bool may_stay = true) {
  Call call = MessageCall(source, source, destination, tag, n);
  return local.KeepsHere(call.message, call.header, bytes, may_stay, kStart);
}
bool Receive(LocalMessages& local, int source, int destination, int64_t tag,
             uint64_t n, bool may_stay = true) {
  Call call = MessageCall(destination, source, destination, tag, n);
  return local.KeepsHere(call.message, call.header, 0, may_stay, kStart);
}

std::vector<std::string> Names(const std::vector<v1::CollectiveHeader>& h) {
  std::vector<std::string> names;
  for (const auto& header : h) names.push_back(header.name());
  return names;
}

TEST(LocalMessagesTest, SendThenReceiveMeetHere) {
  LocalMessages local;
  EXPECT_TRUE(Send(local, 0, 1, 7, 0, 40));
  EXPECT_EQ(local.entries(), 1u);
  EXPECT_TRUE(Receive(local, 0, 1, 7, 0));
  // Both calls met: nothing is kept, and the payload never went up nor
  // came back down (2 x 40 bytes).
  EXPECT_EQ(local.entries(), 0u);
  EXPECT_EQ(local.kept(), 1u);
  EXPECT_EQ(local.bytes_saved(), 80u);
}

TEST(LocalMessagesTest, ReceiveThenSendMeetHere) {
  LocalMessages local;
  EXPECT_TRUE(Receive(local, 2, 3, 0, 0));
  // A match of (3, 0) now does not take the message rank 3 named itself.
  EXPECT_THAT(local.BeforeMatch(3, 0, {{2, 1}}, kStart), IsEmpty());
  EXPECT_TRUE(Send(local, 2, 3, 0, 0, 8));
  EXPECT_EQ(local.kept(), 1u);
  EXPECT_EQ(local.bytes_saved(), 16u);
  EXPECT_EQ(local.entries(), 0u);
}

TEST(LocalMessagesTest, MatchSendsHeldMessagesUpstreamFirstInArrivalOrder) {
  LocalMessages local;
  // To rank 1 with tag 5: from 2 (#0), from 0 (#0), from 2 (#1); with
  // another tag and to another rank, which stay.
  EXPECT_TRUE(Send(local, 2, 1, 5, 0));
  EXPECT_TRUE(Send(local, 0, 1, 5, 0));
  EXPECT_TRUE(Send(local, 0, 1, 6, 0));
  EXPECT_TRUE(Send(local, 2, 1, 5, 1));
  EXPECT_TRUE(Send(local, 1, 0, 5, 0));
  EXPECT_THAT(
      Names(local.BeforeMatch(1, 5, {}, kStart)),
      ElementsAre("p2p 2>1 tag 5 #0", "p2p 0>1 tag 5 #0", "p2p 2>1 tag 5 #1"));
  // Their receives follow them upstream; the others stay.
  EXPECT_FALSE(Receive(local, 0, 1, 5, 0));
  EXPECT_FALSE(Receive(local, 2, 1, 5, 0));
  EXPECT_TRUE(Receive(local, 0, 1, 6, 0));
  EXPECT_TRUE(Receive(local, 1, 0, 5, 0));
  // While the match is on its way, sends to (1, 5) go upstream too; a
  // receive coming first still stays (rank 1 named it before its match).
  EXPECT_FALSE(Send(local, 0, 1, 5, 1));
  EXPECT_FALSE(Receive(local, 0, 1, 5, 1));
  EXPECT_TRUE(Receive(local, 0, 1, 5, 2));
  EXPECT_TRUE(Send(local, 0, 1, 5, 2));
  local.MatchDone(1, 5);
  // Once it is answered, sends stay again.
  EXPECT_TRUE(Send(local, 0, 1, 5, 3));
  EXPECT_THAT(Names(local.BeforeMatch(1, 5, {}, kStart)),
              ElementsAre("p2p 0>1 tag 5 #3"));
  // Its second match sends nothing again.
  EXPECT_THAT(local.BeforeMatch(1, 5, {}, kStart), IsEmpty());
}

TEST(LocalMessagesTest, MatchLeavesTheMessagesItsRankNumbered) {
  LocalMessages local;
  EXPECT_TRUE(Send(local, 0, 1, 0, 0));
  EXPECT_TRUE(Send(local, 0, 1, 0, 1));
  EXPECT_TRUE(Send(local, 2, 1, 0, 0));
  // Rank 1 had numbered one receive from rank 0 (#0, its plain Receive,
  // not here yet): only #1 of rank 0 and #0 of rank 2 go upstream.
  EXPECT_THAT(Names(local.BeforeMatch(1, 0, {{0, 1}}, kStart)),
              ElementsAre("p2p 0>1 tag 0 #1", "p2p 2>1 tag 0 #0"));
  EXPECT_TRUE(Receive(local, 0, 1, 0, 0));
  EXPECT_EQ(local.kept(), 1u);
}

TEST(LocalMessagesTest, MatchesCountUntilEachIsDone) {
  LocalMessages local;
  EXPECT_THAT(local.BeforeMatch(1, 0, {}, kStart), IsEmpty());
  EXPECT_THAT(local.BeforeMatch(1, 0, {}, kStart), IsEmpty());
  local.MatchDone(1, 0);
  EXPECT_FALSE(Send(local, 0, 1, 0, 0));
  local.MatchDone(1, 0);
  EXPECT_TRUE(Send(local, 0, 1, 0, 1));
  // A match of another rank or tag changes nothing for (1, 0).
  EXPECT_THAT(local.BeforeMatch(1, 9, {}, kStart), IsEmpty());
  EXPECT_THAT(local.BeforeMatch(0, 0, {}, kStart), IsEmpty());
  EXPECT_TRUE(Send(local, 0, 1, 0, 2));
}

TEST(LocalMessagesTest, ARetriedSendTakesItsFirstRoute) {
  LocalMessages local;
  EXPECT_TRUE(Send(local, 0, 1, 0, 0));
  local.BeforeMatch(1, 0, {}, kStart);
  local.MatchDone(1, 0);
  // Sent upstream by the match: its retry goes there too, and so does
  // its receive.
  EXPECT_FALSE(Send(local, 0, 1, 0, 0));
  EXPECT_FALSE(Receive(local, 0, 1, 0, 0));
  EXPECT_EQ(local.kept(), 0u);
  EXPECT_EQ(local.entries(), 0u);
}

TEST(LocalMessagesTest, ADecidedRouteOutlivesARankLost) {
  LocalMessages local;
  // Rank 0 sent to 1 and to 2, then was lost: its message to 1 (held) and
  // the one to 2 (received first) keep their routes.
  EXPECT_TRUE(Send(local, 0, 1, 0, 0));
  EXPECT_TRUE(Receive(local, 0, 2, 0, 0));
  EXPECT_TRUE(Receive(local, 0, 1, 0, 0, /*may_stay=*/false));
  EXPECT_TRUE(Send(local, 0, 2, 0, 0, 16, /*may_stay=*/false));
  // One not decided goes upstream, keeping nothing.
  EXPECT_FALSE(Send(local, 0, 1, 0, 1, 16, /*may_stay=*/false));
  EXPECT_EQ(local.entries(), 0u);
  EXPECT_EQ(local.kept(), 2u);
}

TEST(LocalMessagesTest, ALostRanksHeldSendsGoUpstreamInOrder) {
  LocalMessages local;
  EXPECT_TRUE(Send(local, 0, 1, 3, 0));
  EXPECT_TRUE(Send(local, 2, 1, 3, 0));
  EXPECT_TRUE(Send(local, 0, 2, 9, 0));
  EXPECT_TRUE(Receive(local, 0, 1, 4, 0));  // waits here: stays
  EXPECT_TRUE(Send(local, 1, 0, 3, 0));     // to rank 0: stays
  EXPECT_THAT(Names(local.HeldFrom({0}, kStart)),
              ElementsAre("p2p 0>1 tag 3 #0", "p2p 0>2 tag 9 #0"));
  EXPECT_FALSE(Receive(local, 0, 1, 3, 0));
  EXPECT_FALSE(Receive(local, 0, 2, 9, 0));
  EXPECT_TRUE(Receive(local, 2, 1, 3, 0));
  EXPECT_TRUE(Send(local, 0, 1, 4, 0, 16, /*may_stay=*/false));
  EXPECT_THAT(local.HeldFrom({0}, kStart), IsEmpty());
}

// A held send goes up with its deadline where it was: 5 s asked, 1.2 s held
// here, 3.8 s left; one held past its timeout goes with the least upstream
// takes (1 ms), to fail there as it would have; one with no timeout of its
// own (0) keeps none.
TEST(LocalMessagesTest, AHeldSendGoesUpstreamWithWhatIsLeftOfItsTimeout) {
  LocalMessages local;
  for (auto [n, timeout_ms] :
       {std::pair<uint64_t, int64_t>{0, 5000}, {1, 1000}, {2, 0}}) {
    Call call = MessageCall(0, 0, 1, 6, n);
    call.header.set_timeout_ms(timeout_ms);
    ASSERT_TRUE(local.KeepsHere(call.message, call.header, 16,
                                /*may_stay=*/true, kStart));
  }
  Call late = MessageCall(0, 0, 1, 6, 3);
  late.header.set_timeout_ms(5000);
  ASSERT_TRUE(local.KeepsHere(late.message, late.header, 16,
                              /*may_stay=*/true, kStart + absl::Seconds(1)));
  const std::vector<v1::CollectiveHeader> up =
      local.HeldFrom({0}, kStart + absl::Milliseconds(1200));
  ASSERT_EQ(up.size(), 4u);
  EXPECT_EQ(up[0].timeout_ms(), 3800);
  EXPECT_EQ(up[1].timeout_ms(), 1);
  EXPECT_EQ(up[2].timeout_ms(), 0);
  EXPECT_EQ(up[3].timeout_ms(), 4800);
}

TEST(LocalMessagesTest, ClearForgetsMessagesAndMatches) {
  LocalMessages local;
  EXPECT_TRUE(Send(local, 0, 1, 0, 0));
  local.BeforeMatch(1, 3, {}, kStart);
  local.Clear();
  EXPECT_EQ(local.entries(), 0u);
  EXPECT_THAT(local.BeforeMatch(1, 0, {}, kStart), IsEmpty());
  local.MatchDone(1, 0);
  EXPECT_TRUE(Send(local, 0, 1, 3, 0));
}

}  // namespace
}  // namespace reducer
