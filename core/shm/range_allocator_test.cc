// RangeAllocator's contract (range_allocator.h): first fit by offset, every
// range 64-byte aligned and rounded up to 64 bytes, freed ranges merged with
// free neighbours, and no two live ranges overlapping; checked against a
// bitmap of 64-byte slots that computes first fit on its own.
#include "core/shm/range_allocator.h"

#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace reducer {
namespace {

TEST(RangeAllocatorTest, SizeIsRoundedDownToTheAlignment) {
  EXPECT_EQ(RangeAllocator(1000).size(), 960u);
  RangeAllocator none(63);
  EXPECT_EQ(none.size(), 0u);
  EXPECT_EQ(none.Allocate(1), std::nullopt);
}

TEST(RangeAllocatorTest, RangesAreAlignedAndRoundedUp) {
  RangeAllocator ranges(4096);
  EXPECT_EQ(ranges.Allocate(1), 0u);
  EXPECT_EQ(ranges.Allocate(65), 64u);  // takes 128
  EXPECT_EQ(ranges.Allocate(0), 192u);  // takes 64
  EXPECT_EQ(ranges.Allocate(64), 256u);
  EXPECT_EQ(ranges.used(), 64u + 128u + 64u + 64u);
}

TEST(RangeAllocatorTest, FirstFitTakesTheLowestSpanLargeEnough) {
  RangeAllocator ranges(1024);
  ASSERT_EQ(ranges.Allocate(64), 0u);
  ASSERT_EQ(ranges.Allocate(64), 64u);
  ASSERT_EQ(ranges.Allocate(128), 128u);
  ASSERT_TRUE(ranges.Free(0));
  // [0, 64) is free but too small for 128; the next span is at 256.
  EXPECT_EQ(ranges.Allocate(128), 256u);
  // A 64-byte request takes the lowest span, [0, 64).
  EXPECT_EQ(ranges.Allocate(64), 0u);
}

TEST(RangeAllocatorTest, FreeMergesWithBothNeighbours) {
  RangeAllocator ranges(256);
  ASSERT_EQ(ranges.Allocate(64), 0u);
  ASSERT_EQ(ranges.Allocate(64), 64u);
  ASSERT_EQ(ranges.Allocate(64), 128u);
  ASSERT_EQ(ranges.Allocate(64), 192u);
  ASSERT_TRUE(ranges.Free(0));
  ASSERT_TRUE(ranges.Free(128));
  EXPECT_EQ(ranges.Allocate(128), std::nullopt);  // two separate 64s
  ASSERT_TRUE(ranges.Free(64));  // joins [0, 64) and [128, 192)
  EXPECT_EQ(ranges.Allocate(192), 0u);
  ASSERT_TRUE(ranges.Free(0));
  ASSERT_TRUE(ranges.Free(192));
  EXPECT_EQ(ranges.used(), 0u);
  EXPECT_EQ(ranges.Allocate(256), 0u);
}

TEST(RangeAllocatorTest, FreeOfAnOffsetNoRangeStartsAtIsFalse) {
  RangeAllocator ranges(1024);
  ASSERT_EQ(ranges.Allocate(128), 0u);
  EXPECT_FALSE(ranges.Free(64));    // inside a live range
  EXPECT_FALSE(ranges.Free(512));   // in free space
  EXPECT_FALSE(ranges.Free(4096));  // outside the area
  EXPECT_EQ(ranges.used(), 128u);
  EXPECT_TRUE(ranges.Free(0));
  EXPECT_FALSE(ranges.Free(0));  // twice
  EXPECT_EQ(ranges.used(), 0u);
}

TEST(RangeAllocatorTest, FullAreaAndOversizedRequestsGiveNothing) {
  RangeAllocator ranges(1024);
  EXPECT_EQ(ranges.Allocate(1025), std::nullopt);
  EXPECT_EQ(ranges.Allocate(std::numeric_limits<size_t>::max()), std::nullopt);
  EXPECT_EQ(ranges.Allocate(std::numeric_limits<size_t>::max() - 62),
            std::nullopt);
  EXPECT_EQ(ranges.used(), 0u);
  ASSERT_EQ(ranges.Allocate(1024), 0u);
  EXPECT_EQ(ranges.Allocate(1), std::nullopt);
  EXPECT_EQ(ranges.Allocate(0), std::nullopt);
  EXPECT_EQ(ranges.used(), 1024u);
}

// A bitmap of 64-byte slots.
class SlotModel {
 public:
  explicit SlotModel(size_t slots) : taken_(slots, false) {}
  // The lowest slot starting `count` free ones, if any.
  std::optional<size_t> FirstFit(size_t count) const {
    size_t run = 0;
    for (size_t i = 0; i < taken_.size(); ++i) {
      run = taken_[i] ? 0 : run + 1;
      if (run == count) return i + 1 - count;
    }
    return std::nullopt;
  }
  size_t TakenIn(size_t first, size_t count) const {
    size_t taken = 0;
    for (size_t i = first; i < first + count; ++i) taken += taken_[i];
    return taken;
  }
  void Set(size_t first, size_t count, bool taken) {
    for (size_t i = first; i < first + count; ++i) taken_[i] = taken;
  }
  size_t slots() const { return taken_.size(); }

 private:
  std::vector<bool> taken_;
};

TEST(RangeAllocatorTest, RandomSequenceMatchesABitmapModel) {
  constexpr size_t kSlots = 256;
  RangeAllocator ranges(kSlots * 64);
  SlotModel model(kSlots);
  std::map<uint64_t, size_t> live;  // offset -> slots
  std::mt19937 random(3);
  size_t taken = 0, allocations = 0, refusals = 0;
  for (int step = 0; step < 20000; ++step) {
    if (live.empty() || random() % 2 == 0) {
      const size_t n = random() % 1500;
      const size_t count = n == 0 ? 1 : (n + 63) / 64;
      std::optional<uint64_t> at = ranges.Allocate(n);
      std::optional<size_t> expected = model.FirstFit(count);
      if (!expected.has_value()) {
        ASSERT_EQ(at, std::nullopt) << "step " << step;
        ++refusals;
        continue;
      }
      ASSERT_TRUE(at.has_value()) << "step " << step;
      ASSERT_EQ(*at % 64, 0u);
      ASSERT_LE(*at / 64 + count, kSlots);
      ASSERT_EQ(model.TakenIn(*at / 64, count), 0u) << "overlap at " << *at;
      ASSERT_EQ(*at, *expected * 64) << "step " << step;
      model.Set(*at / 64, count, true);
      live[*at] = count;
      taken += count;
      ++allocations;
    } else if (random() % 8 == 0) {
      // An offset no live range starts at.
      const uint64_t offset =
          (random() % kSlots) * 64 + 64 * kSlots * (step % 2);
      if (live.count(offset) == 0) {
        ASSERT_FALSE(ranges.Free(offset));
      }
    } else {
      auto it = live.begin();
      std::advance(it, random() % live.size());
      ASSERT_TRUE(ranges.Free(it->first));
      model.Set(it->first / 64, it->second, false);
      taken -= it->second;
      live.erase(it);
    }
    ASSERT_EQ(ranges.used(), taken * 64) << "step " << step;
  }
  EXPECT_GT(allocations, 1000u);
  EXPECT_GT(refusals, 100u);
}

TEST(RangeAllocatorTest, ConcurrentAllocationsNeverOverlap) {
  constexpr size_t kSlots = 4096;
  RangeAllocator ranges(kSlots * 64);
  constexpr int kThreads = 4;
  std::vector<std::vector<uint64_t>> got(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&ranges, &got, t] {
      for (int i = 0; i < 2000; ++i) {
        std::optional<uint64_t> at = ranges.Allocate(64);
        if (at.has_value()) got[t].push_back(*at);
        if (i % 2 == 1 && !got[t].empty()) {
          ranges.Free(got[t].back());
          got[t].pop_back();
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  SlotModel model(kSlots);
  size_t held = 0;
  for (const auto& offsets : got) {
    for (uint64_t at : offsets) {
      ASSERT_EQ(model.TakenIn(at / 64, 1), 0u) << "two threads hold " << at;
      model.Set(at / 64, 1, true);
      ++held;
    }
  }
  EXPECT_EQ(ranges.used(), held * 64);
}

}  // namespace
}  // namespace reducer
