#include "server/log_gate.h"

#include <string>

#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace reducer {
namespace {

using ::testing::Field;
using ::testing::IsEmpty;

// A clock that moves only when told.
class FakeClock {
 public:
  LogGate::Clock clock() {
    return [this] { return now_; };
  }
  void Advance(absl::Duration d) { now_ += d; }

 private:
  absl::Time now_ = absl::FromUnixSeconds(1000);
};

TEST(LogGateTest, LetsOneLinePerSecondThroughAndCountsTheRest) {
  FakeClock clock;
  LogGate gate(clock.clock());
  EXPECT_TRUE(gate.Admit("a", "collective_failed").pass);
  for (int i = 0; i < 9; ++i) {
    clock.Advance(absl::Milliseconds(100));
    EXPECT_FALSE(gate.Admit("a", "collective_failed").pass) << i;
  }
  clock.Advance(absl::Milliseconds(150));  // 1.05 s after the first line
  const LogGate::Verdict next = gate.Admit("a", "collective_failed");
  EXPECT_TRUE(next.pass);
  EXPECT_EQ(next.suppressed, 9);
  EXPECT_EQ(next.over, absl::Milliseconds(1050));
  EXPECT_EQ(LogGate::SuppressedNote(next.suppressed, next.over),
            " (9 more like this suppressed in the last 1.1s)");
  // The count starts over after it was said.
  clock.Advance(absl::Seconds(2));
  const LogGate::Verdict after = gate.Admit("a", "collective_failed");
  EXPECT_TRUE(after.pass);
  EXPECT_EQ(after.suppressed, 0);
  EXPECT_EQ(LogGate::SuppressedNote(after.suppressed, after.over), "");
}

TEST(LogGateTest, TenantsAndKindsHaveGatesOfTheirOwn) {
  FakeClock clock;
  LogGate gate(clock.clock());
  EXPECT_TRUE(gate.Admit("a", "collective_failed").pass);
  EXPECT_FALSE(gate.Admit("a", "collective_failed").pass);
  // Tenant a's flood holds back none of b's lines, nor a's other kinds.
  EXPECT_TRUE(gate.Admit("b", "collective_failed").pass);
  EXPECT_TRUE(gate.Admit("a", "epoch_aborted").pass);
  EXPECT_FALSE(gate.Admit("b", "collective_failed").pass);
}

TEST(LogGateTest, ACountNoLaterLineSaysIsSummarizedOnce) {
  FakeClock clock;
  LogGate gate(clock.clock());
  EXPECT_TRUE(gate.Admit("a", "collective_failed").pass);
  EXPECT_FALSE(gate.Admit("a", "collective_failed").pass);
  EXPECT_FALSE(gate.Admit("a", "collective_failed").pass);
  // Tenant a goes quiet; the next line of anyone, past a's interval, hands
  // back a's count.
  clock.Advance(absl::Milliseconds(1500));
  const LogGate::Verdict other = gate.Admit("b", "epoch_aborted");
  EXPECT_TRUE(other.pass);
  ASSERT_EQ(other.quiet.size(), 1u);
  EXPECT_EQ(other.quiet[0].tenant, "a");
  EXPECT_EQ(other.quiet[0].kind, "collective_failed");
  EXPECT_EQ(other.quiet[0].suppressed, 2);
  EXPECT_EQ(other.quiet[0].over, absl::Milliseconds(1500));
  // The summary was a's line for this interval: a's next line within it
  // is held back, and no count is said twice.
  EXPECT_FALSE(gate.Admit("a", "collective_failed").pass);
  clock.Advance(absl::Milliseconds(1100));
  const LogGate::Verdict again = gate.Admit("a", "collective_failed");
  EXPECT_TRUE(again.pass);
  EXPECT_EQ(again.suppressed, 1);
  EXPECT_THAT(again.quiet, IsEmpty());
}

TEST(LogGateTest, TheOwnPairIsNotSummarizedBeforeItsLine) {
  FakeClock clock;
  LogGate gate(clock.clock());
  EXPECT_TRUE(gate.Admit("a", "k").pass);
  EXPECT_FALSE(gate.Admit("a", "k").pass);
  clock.Advance(absl::Seconds(3));
  // Its own line says the count: no summary besides.
  const LogGate::Verdict next = gate.Admit("a", "k");
  EXPECT_TRUE(next.pass);
  EXPECT_EQ(next.suppressed, 1);
  EXPECT_THAT(next.quiet, IsEmpty());
}

TEST(LogGateTest, ForgetsQuietPairsSoManyTenantsCostNoMoreThanTheRecentOnes) {
  FakeClock clock;
  LogGate gate(clock.clock());
  // A tenant per job name, 100 a second, each logging once.
  for (int second = 0; second < 50; ++second) {
    for (int i = 0; i < 100; ++i) {
      EXPECT_TRUE(
          gate.Admit(std::to_string(second * 100 + i), "collective_failed")
              .pass);
      clock.Advance(absl::Milliseconds(10));
    }
  }
  EXPECT_LE(gate.entries(), 200u);
}

TEST(LogGateTest, SummariesNameEveryQuietPair) {
  FakeClock clock;
  LogGate gate(clock.clock());
  for (const char* tenant : {"a", "b"}) {
    gate.Admit(tenant, "k");
    gate.Admit(tenant, "k");
  }
  clock.Advance(absl::Seconds(2));
  const LogGate::Verdict v = gate.Admit("c", "k");
  EXPECT_THAT(v.quiet, testing::UnorderedElementsAre(
                           Field(&LogGate::Quiet::tenant, "a"),
                           Field(&LogGate::Quiet::tenant, "b")));
  EXPECT_THAT(gate.Admit("c", "other").quiet, IsEmpty());
}

}  // namespace
}  // namespace reducer
