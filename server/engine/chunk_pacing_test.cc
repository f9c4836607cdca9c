#include "server/engine/chunk_pacing.h"

#include "gtest/gtest.h"

namespace reducer {
namespace {

constexpr size_t kKiB = 1024;
constexpr size_t kMiB = 1024 * kKiB;
const absl::Duration k20ms = absl::Milliseconds(20);

// No size in use yet: 0 never holds a pace.
constexpr size_t kNone = 0;

TEST(PacedChunkBytesTest, FollowsTheLinkBetweenTheBounds) {
  // 100 Mbit/s: 250 000 B in 20 ms, nearest power of two 256 KiB.
  EXPECT_EQ(PacedChunkBytes(12.5e6, k20ms, kMiB, kNone), 256 * kKiB);
  // 200 Mbit/s: 500 000 B, 512 KiB.
  EXPECT_EQ(PacedChunkBytes(25e6, k20ms, kMiB, kNone), 512 * kKiB);
  // 1 Gbit/s and loopback: capped at --chunk_bytes.
  EXPECT_EQ(PacedChunkBytes(125e6, k20ms, kMiB, kNone), kMiB);
  EXPECT_EQ(PacedChunkBytes(4e9, k20ms, kMiB, kNone), kMiB);
  // 10 Mbit/s: 25 000 B, at the floor.
  EXPECT_EQ(PacedChunkBytes(1.25e6, k20ms, kMiB, kNone), 64 * kKiB);
  // 180 KB is nearer 128 KiB than 256 KiB; 200 KB nearer 256 KiB.
  EXPECT_EQ(PacedChunkBytes(9e6, k20ms, kMiB, kNone), 128 * kKiB);
  EXPECT_EQ(PacedChunkBytes(10e6, k20ms, kMiB, kNone), 256 * kKiB);
}

TEST(PacedChunkBytesTest, TheMaximumWithoutAPaceOrAChunkTime) {
  EXPECT_EQ(PacedChunkBytes(0, k20ms, kMiB, kNone), kMiB);
  EXPECT_EQ(PacedChunkBytes(-1, k20ms, kMiB, kNone), kMiB);
  EXPECT_EQ(PacedChunkBytes(12.5e6, absl::ZeroDuration(), kMiB, kNone), kMiB);
}

TEST(PacedChunkBytesTest, ASmallMaximumBoundsEverything) {
  // --chunk_bytes below the floor, or not a power of two.
  EXPECT_EQ(PacedChunkBytes(1e3, k20ms, 4096, kNone), 4096u);
  EXPECT_EQ(PacedChunkBytes(1e12, k20ms, 3 * kMiB / 2, kNone), 3 * kMiB / 2);
  EXPECT_EQ(PacedChunkBytes(12.5e6, k20ms, 200 * kKiB, kNone), 200 * kKiB);
}

TEST(PacedChunkBytesTest, TheSizeInUseStaysWithinAFactorOfTwo) {
  // 90 KB and 102 KB in 20 ms (4.5 and 5.1 MB/s) round to 64 KiB and
  // 128 KiB; with either in use, both keep it.
  EXPECT_EQ(PacedChunkBytes(4.5e6, k20ms, kMiB, kNone), 64 * kKiB);
  EXPECT_EQ(PacedChunkBytes(5.1e6, k20ms, kMiB, kNone), 128 * kKiB);
  for (size_t in_use : {64 * kKiB, 128 * kKiB}) {
    EXPECT_EQ(PacedChunkBytes(4.5e6, k20ms, kMiB, in_use), in_use);
    EXPECT_EQ(PacedChunkBytes(5.1e6, k20ms, kMiB, in_use), in_use);
  }
  // 1 MiB in use: 600 KB stays, 500 KB moves to the nearest, 512 KiB.
  EXPECT_EQ(PacedChunkBytes(30e6, k20ms, kMiB, kMiB), kMiB);
  EXPECT_EQ(PacedChunkBytes(25e6, k20ms, kMiB, kMiB), 512 * kKiB);
  // Far off moves at once, both ways.
  EXPECT_EQ(PacedChunkBytes(1.25e6, k20ms, kMiB, kMiB), 64 * kKiB);
  EXPECT_EQ(PacedChunkBytes(125e6, k20ms, kMiB, 64 * kKiB), kMiB);
}

TEST(InitialChunkBytesTest, SmallEnoughToTimeAPartitionUnlessPacingIsOff) {
  EXPECT_EQ(InitialChunkBytes(k20ms, kMiB), 256 * kKiB);
  EXPECT_EQ(InitialChunkBytes(k20ms, 128 * kKiB), 128 * kKiB);
  EXPECT_EQ(InitialChunkBytes(absl::ZeroDuration(), kMiB), kMiB);
  // From there a fast job moves to the most at its first timed call.
  EXPECT_EQ(PacedChunkBytes(100e6, k20ms, kMiB, InitialChunkBytes(k20ms, kMiB)), kMiB);
}

TEST(PaceEstimateTest, AveragesHalfOldHalfNew) {
  PaceEstimate pace;
  EXPECT_EQ(pace.bytes_per_second(), 0);
  pace.Note(100);
  EXPECT_EQ(pace.bytes_per_second(), 100);
  pace.Note(300);
  EXPECT_EQ(pace.bytes_per_second(), 200);
  pace.Note(0);  // nothing measured: ignored
  EXPECT_EQ(pace.bytes_per_second(), 200);
}

}  // namespace
}  // namespace reducer
