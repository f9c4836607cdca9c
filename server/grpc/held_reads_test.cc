// HeldReads (held_reads.h): every hold is released once its deadline is
// past and not before, in one batch per wake-up, and a holder that is gone
// is skipped. Times are measured with absl::Now() around the calls.
#include "server/grpc/held_reads.h"

#include <memory>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace reducer {
namespace {

// Records when each release came.
class RecordingHolder final : public HeldReads::Holder {
 public:
  void ReleaseHeldRead() override {
    absl::MutexLock lock(&mu_);
    released_.push_back(absl::Now());
  }
  // Waits up to `timeout` for `n` releases; returns them.
  std::vector<absl::Time> WaitFor(size_t n, absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    auto enough = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return released_.size() >= n;
    };
    mu_.AwaitWithTimeout(absl::Condition(&enough), timeout);
    return released_;
  }

 private:
  absl::Mutex mu_;
  std::vector<absl::Time> released_ ABSL_GUARDED_BY(mu_);
};

constexpr absl::Duration kDeadline = absl::Milliseconds(50);

TEST(HeldReadsTest, AHoldIsReleasedOnceItsDeadlineIsPast) {
  HeldReads held(kDeadline);
  auto holder = std::make_shared<RecordingHolder>();
  const absl::Time before = absl::Now();
  held.Hold(holder);
  std::vector<absl::Time> released = holder->WaitFor(1, absl::Seconds(10));
  ASSERT_EQ(released.size(), 1u);
  EXPECT_GE(released[0] - before, kDeadline);
  // Nothing more comes for that hold.
  absl::SleepFor(2 * kDeadline);
  EXPECT_EQ(holder->WaitFor(2, absl::ZeroDuration()).size(), 1u);
}

TEST(HeldReadsTest, HoldsDueTogetherAreReleasedTogether) {
  HeldReads held(kDeadline);
  auto holder = std::make_shared<RecordingHolder>();
  const absl::Time first = absl::Now();
  for (int i = 0; i < 20; ++i) held.Hold(holder);
  std::vector<absl::Time> released = holder->WaitFor(20, absl::Seconds(10));
  ASSERT_EQ(released.size(), 20u);
  for (absl::Time t : released) {
    EXPECT_GE(t - first, kDeadline);
    // One wake-up released them all, in one go.
    EXPECT_LT(t - released.front(), kDeadline);
  }
}

TEST(HeldReadsTest, WakeUpsAreHalfADeadlineApart) {
  HeldReads held(kDeadline);
  auto holder = std::make_shared<RecordingHolder>();
  // A hold every 5 ms for 100 ms: one due every 5 ms, but released in
  // batches at least 25 ms apart.
  const absl::Time first = absl::Now();
  for (int i = 0; i < 20; ++i) {
    held.Hold(holder);
    absl::SleepFor(absl::Milliseconds(5));
  }
  std::vector<absl::Time> released = holder->WaitFor(20, absl::Seconds(10));
  ASSERT_EQ(released.size(), 20u);
  EXPECT_GE(released.front() - first, kDeadline);
  // One wake-up releases its batch within microseconds; releases further
  // apart than a tenth of the 5 ms between holds belong to different
  // wake-ups: about 100 ms / 25 ms of them, where a wake-up per hold would
  // make 20.
  int batches = 1;
  for (size_t i = 1; i < released.size(); ++i) {
    if (released[i] - released[i - 1] > absl::Microseconds(500)) ++batches;
  }
  EXPECT_LE(batches, 6);
}

TEST(HeldReadsTest, AHolderGoneBeforeItsDeadlineIsSkipped) {
  HeldReads held(kDeadline);
  auto gone = std::make_shared<RecordingHolder>();
  auto kept = std::make_shared<RecordingHolder>();
  held.Hold(gone);
  held.Hold(kept);
  std::weak_ptr<RecordingHolder> watch = gone;
  gone.reset();
  EXPECT_TRUE(watch.expired());  // the hold kept no reference
  EXPECT_EQ(kept->WaitFor(1, absl::Seconds(10)).size(), 1u);
}

TEST(HeldReadsTest, DestroyingDropsHoldsNotYetDue) {
  auto holder = std::make_shared<RecordingHolder>();
  {
    HeldReads held(absl::Seconds(30));
    held.Hold(holder);
  }  // joins at once, not 30 s later
  EXPECT_TRUE(holder->WaitFor(1, absl::ZeroDuration()).empty());
}

}  // namespace
}  // namespace reducer
