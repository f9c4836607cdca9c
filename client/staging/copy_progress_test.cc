#include "client/staging/copy_progress.h"

#include <thread>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/matchers.h"

namespace reducer {
namespace {

TEST(CopyProgressTest, AwaitReturnsOnceTheMarkCoversTheEnd) {
  CopyProgress progress(100);
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  std::thread copier([&] {
    absl::SleepFor(absl::Milliseconds(20));
    progress.Advance(40);
    absl::SleepFor(absl::Milliseconds(20));
    progress.Advance(100);
  });
  EXPECT_THAT(progress.Await(40, deadline), IsOk());
  EXPECT_GE(progress.ready_bytes(), 40u);
  EXPECT_THAT(progress.Await(100, deadline), IsOk());
  EXPECT_EQ(progress.ready_bytes(), 100u);
  copier.join();
}

TEST(CopyProgressTest, ASmallerMarkNeverTakesBytesBack) {
  CopyProgress progress(100);
  progress.Advance(60);
  progress.Advance(10);
  EXPECT_EQ(progress.ready_bytes(), 60u);
  progress.Advance(1000);  // clamped to the copy's size
  EXPECT_EQ(progress.ready_bytes(), 100u);
}

TEST(CopyProgressTest, AnEndPastTheCopyWaitsForAllOfIt) {
  CopyProgress progress(10);
  progress.Advance(10);
  EXPECT_THAT(progress.Await(1 << 20, absl::Now()), IsOk());
}

TEST(CopyProgressTest, AFailureWakesWaitersWithItsErrorAndTheFirstWins) {
  CopyProgress progress(100);
  progress.Advance(30);
  std::thread copier([&] {
    absl::SleepFor(absl::Milliseconds(20));
    progress.Fail(absl::InternalError("cudaMemcpyAsync failed: boom"));
    progress.Fail(absl::InternalError("second"));
  });
  const absl::Status s = progress.Await(80, absl::Now() + absl::Seconds(30));
  copier.join();
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kInternal, HasSubstr("boom")));
  // Bytes that were there before the failure still are.
  EXPECT_THAT(progress.Await(30, absl::Now()), IsOk());
}

TEST(CopyProgressTest, ADeadlineNamesHowFarTheCopyHadCome) {
  CopyProgress progress(100);
  progress.Advance(25);
  const absl::Status s =
      progress.Await(50, absl::Now() + absl::Milliseconds(20));
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kDeadlineExceeded,
                          HasSubstr("25 of 100 bytes")));
}

}  // namespace
}  // namespace reducer
