// MessageRing's contract (message_ring.h): records round-trip in order at
// every size and every offset a wrap can leave, a full ring refuses and then
// accepts once the consumer moves, and whatever the peer writes into the
// header or the records is DATA_LOSS, never an access outside the ring (the
// ring sits against an inaccessible page, so an overrun would fault).
#include "core/shm/message_ring.h"

#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <deque>
#include <random>
#include <set>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/shm/peer_process_testing.h"
#include "core/shm/shared_segment.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/matchers.h"

namespace reducer {
namespace {

// Record `n` of `size` bytes: a pattern that differs from record to record.
std::string Record(uint64_t n, size_t size) {
  std::string bytes(size, '\0');
  for (size_t i = 0; i < size; ++i) {
    bytes[i] = static_cast<char>((n * 131 + i * 7 + 1) & 0xff);
  }
  return bytes;
}

// 64-byte aligned zeroed memory for a ring, freed with the fixture.
class RingMemory {
 public:
  explicit RingMemory(size_t capacity)
      : bytes_(MessageRing::FootprintBytes(capacity) + 64, '\0') {}
  void* base() {
    auto at = reinterpret_cast<uintptr_t>(bytes_.data());
    return bytes_.data() + ((64 - at % 64) % 64);
  }

 private:
  std::string bytes_;
};

// A ring whose last byte is the last byte before a PROT_NONE page, for tests
// that corrupt it: any read past its end faults.
class GuardedRing {
 public:
  explicit GuardedRing(size_t capacity) : capacity_(capacity) {
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    const size_t footprint = MessageRing::FootprintBytes(capacity);
    usable_ = (footprint + page - 1) / page * page;
    mapping_bytes_ = usable_ + page;
    mapping_ = mmap(nullptr, mapping_bytes_, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mapping_ == MAP_FAILED) {
      mapping_ = nullptr;
      return;
    }
    mprotect(static_cast<char*>(mapping_) + usable_, page, PROT_NONE);
    base_ = static_cast<char*>(mapping_) + usable_ - footprint;
  }
  ~GuardedRing() {
    if (mapping_ != nullptr) munmap(mapping_, mapping_bytes_);
  }

  bool ok() const {
    return mapping_ != nullptr && reinterpret_cast<uintptr_t>(base_) % 64 == 0;
  }
  char* base() const { return base_; }
  char* data() const { return base_ + MessageRing::kHeaderBytes; }
  // The header's indices, at the documented layout: head in the first cache
  // line, tail in the second.
  void SetHead(uint64_t head) { std::memcpy(base_, &head, 8); }
  void SetTail(uint64_t tail) { std::memcpy(base_ + 64, &tail, 8); }
  void SetLength(uint64_t at, uint64_t length) {
    std::memcpy(data() + at, &length, 8);
  }
  size_t capacity() const { return capacity_; }

 private:
  size_t capacity_;
  size_t usable_ = 0;
  size_t mapping_bytes_ = 0;
  void* mapping_ = nullptr;
  char* base_ = nullptr;
};

uint64_t HeadOf(void* base) {
  uint64_t head;
  std::memcpy(&head, base, 8);
  return head;
}

TEST(MessageRingTest, FootprintIsTheHeaderAndTheCapacity) {
  EXPECT_EQ(MessageRing::FootprintBytes(256), 192u + 256u);
  RingMemory memory(4096);
  MessageRing ring(memory.base(), 4096);
  EXPECT_EQ(ring.max_record_bytes(), 1024u);
}

TEST(MessageRingTest, RecordsOfEverySizeRoundTripInOrder) {
  constexpr size_t kCapacity = 4096;
  RingMemory memory(kCapacity);
  MessageRing ring(memory.base(), kCapacity);
  const size_t max = ring.max_record_bytes();
  std::string got;
  // One at a time, every size from 0 to the limit.
  for (size_t size = 0; size <= max; ++size) {
    absl::StatusOr<bool> pushed = ring.TryPush(Record(size, size));
    ASSERT_TRUE(pushed.ok()) << pushed.status();
    ASSERT_TRUE(*pushed) << size;
    absl::StatusOr<bool> popped = ring.TryPop(&got);
    ASSERT_TRUE(popped.ok()) << popped.status();
    ASSERT_TRUE(*popped) << size;
    ASSERT_EQ(got, Record(size, size)) << size;
  }
  // Several in flight at once come out in the order they went in.
  for (uint64_t n = 0; n < 3; ++n) {
    ASSERT_TRUE(*ring.TryPush(Record(100 + n, 10 * n + 1)));
  }
  for (uint64_t n = 0; n < 3; ++n) {
    ASSERT_TRUE(*ring.TryPop(&got));
    EXPECT_EQ(got, Record(100 + n, 10 * n + 1));
  }
  absl::StatusOr<bool> empty = ring.TryPop(&got);
  ASSERT_TRUE(empty.ok());
  EXPECT_FALSE(*empty);
}

TEST(MessageRingTest, WrapsAroundAtEveryAlignmentOfASmallRing) {
  constexpr size_t kCapacity = 256;
  RingMemory memory(kCapacity);
  MessageRing ring(memory.base(), kCapacity);
  const size_t max = ring.max_record_bytes();
  std::mt19937 random(7);
  std::deque<std::string> model;
  std::set<uint64_t> offsets_pushed_at;
  uint64_t n = 0;
  std::string got;
  for (int round = 0; round < 2000; ++round) {
    // Fill until the ring refuses, then drain a random number of records.
    while (true) {
      const size_t size = random() % (max + 1);
      const uint64_t at = HeadOf(memory.base()) % kCapacity;
      std::string record = Record(n, size);
      absl::StatusOr<bool> pushed = ring.TryPush(record);
      ASSERT_TRUE(pushed.ok()) << pushed.status();
      if (!*pushed) break;
      offsets_pushed_at.insert(at);
      model.push_back(std::move(record));
      ++n;
    }
    ASSERT_FALSE(model.empty());
    size_t drain = 1 + random() % model.size();
    if (round % 10 == 0) drain = model.size();
    for (size_t i = 0; i < drain; ++i) {
      absl::StatusOr<bool> popped = ring.TryPop(&got);
      ASSERT_TRUE(popped.ok()) << popped.status();
      ASSERT_TRUE(*popped);
      ASSERT_EQ(got, model.front()) << "record " << n - model.size();
      model.pop_front();
    }
  }
  // A push started at every 8-byte offset of the buffer.
  EXPECT_EQ(offsets_pushed_at.size(), kCapacity / 8);
}

TEST(MessageRingTest, BellsRingOnPushAndOnPop) {
  RingMemory memory(256);
  MessageRing ring(memory.base(), 256);
  const uint32_t data = ring.data_bell().value();
  const uint32_t space = ring.space_bell().value();
  ASSERT_TRUE(*ring.TryPush("x"));
  EXPECT_EQ(ring.data_bell().value(), data + 1);
  EXPECT_EQ(ring.space_bell().value(), space);
  std::string got;
  ASSERT_TRUE(*ring.TryPop(&got));
  EXPECT_EQ(ring.space_bell().value(), space + 1);
}

TEST(MessageRingTest, FullRingRefusesThenAcceptsOnceAnotherThreadPops) {
  constexpr size_t kCapacity = 256;
  RingMemory memory(kCapacity);
  MessageRing ring(memory.base(), kCapacity);
  const std::string record = Record(1, 40);  // 48 bytes a slot
  int stored = 0;
  while (true) {
    absl::StatusOr<bool> pushed = ring.TryPush(record);
    ASSERT_TRUE(pushed.ok()) << pushed.status();
    if (!*pushed) break;
    ++stored;
  }
  EXPECT_EQ(stored, static_cast<int>(kCapacity / 48));
  std::atomic<bool> consumer_started{false};
  std::thread consumer([&] {
    consumer_started = true;
    std::string got;
    EXPECT_TRUE(*ring.TryPop(&got));
    EXPECT_EQ(got, record);
  });
  const std::string last = Record(2, 40);
  absl::Status status = ring.Push(last, Soon());
  consumer.join();
  EXPECT_TRUE(consumer_started);
  ASSERT_TRUE(status.ok()) << status;
  std::string got;
  for (int i = 0; i < stored - 1; ++i) {
    ASSERT_TRUE(*ring.TryPop(&got));
    EXPECT_EQ(got, record);
  }
  ASSERT_TRUE(*ring.TryPop(&got));
  EXPECT_EQ(got, last);
  EXPECT_FALSE(*ring.TryPop(&got));
}

TEST(MessageRingTest, PushToARingNeverConsumedExceedsItsDeadline) {
  RingMemory memory(256);
  MessageRing ring(memory.base(), 256);
  while (*ring.TryPush(Record(0, 64))) {
  }
  absl::Status status =
      ring.Push(Record(0, 64), absl::Now() + absl::Milliseconds(20));
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kDeadlineExceeded));
  EXPECT_THAT(std::string(status.message()), HasSubstr("not consuming"));
}

TEST(MessageRingTest, RecordOverTheLimitIsInvalidArgument) {
  RingMemory memory(256);
  MessageRing ring(memory.base(), 256);
  ASSERT_EQ(ring.max_record_bytes(), 64u);
  absl::StatusOr<bool> pushed = ring.TryPush(std::string(65, 'a'));
  EXPECT_THAT(pushed.status(), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(std::string(pushed.status().message()), HasSubstr("65"));
  EXPECT_THAT(ring.Push(std::string(65, 'a'), Soon()),
              StatusIs(absl::StatusCode::kInvalidArgument));
  // Nothing was written; the limit itself fits.
  std::string got;
  EXPECT_FALSE(*ring.TryPop(&got));
  EXPECT_TRUE(*ring.TryPush(std::string(64, 'b')));
}

TEST(MessageRingTest, GuardPageFaultsJustPastTheRing) {
  GuardedRing guarded(256);
  ASSERT_TRUE(guarded.ok());
  // The page after the ring is inaccessible: a child touching it dies.
  pid_t child = fork();
  if (child == 0) {
    volatile char c = guarded.data()[guarded.capacity()];
    (void)c;
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFSIGNALED(status));
}

// Each corruption the consumer can see, one at a time on a fresh ring.
TEST(MessageRingTest, CorruptIndicesAndLengthsAreDataLossForTheConsumer) {
  constexpr size_t kCapacity = 256;  // max record 64
  struct Case {
    const char* what;
    uint64_t head, tail;
    uint64_t length_at, length;  // length written at data offset length_at
  };
  const Case cases[] = {
      {"head not a multiple of 8", 12, 0, 0, 4},
      {"more published than the capacity", 264, 0, 0, 4},
      {"tail past head", 0, 8, 0, 4},
      {"length over the limit", 80, 0, 0, 65},
      {"length past what is published", 16, 0, 0, 16},
      {"length of ~0 - 1", 80, 0, 0, ~uint64_t{0} - 1},
      {"wrap marker with nothing after it", 256, 240, 240, ~uint64_t{0}},
      {"wrap marker then a long record", 256 + 16, 240, 240, ~uint64_t{0}},
      // A record that fits the limit and the published bytes but would run
      // past the end of the buffer (a producer never writes one: it wraps).
      {"record across the buffer's end", 240 + 256, 240, 240, 64},
      {"record across the end, far into the wrap", 248 + 256, 248, 248, 8},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    GuardedRing guarded(kCapacity);
    ASSERT_TRUE(guarded.ok());
    MessageRing ring(guarded.base(), kCapacity);
    guarded.SetHead(c.head);
    guarded.SetTail(c.tail);
    // A long record at offset 0 (what follows a wrap marker), then the
    // case's own length.
    guarded.SetLength(0, 64);
    guarded.SetLength(c.length_at % kCapacity, c.length);
    std::string got = "unchanged";
    absl::StatusOr<bool> popped = ring.TryPop(&got);
    EXPECT_THAT(popped.status(), StatusIs(absl::StatusCode::kDataLoss));
    EXPECT_THAT(std::string(popped.status().message()), HasSubstr("corrupt"));
    EXPECT_EQ(got, "unchanged");
  }
}

TEST(MessageRingTest, CorruptTailIsDataLossForTheProducer) {
  constexpr size_t kCapacity = 256;
  const uint64_t tails[] = {8, 4, ~uint64_t{0}, 1000};  // head stays 0
  for (uint64_t tail : tails) {
    SCOPED_TRACE(tail);
    GuardedRing guarded(kCapacity);
    ASSERT_TRUE(guarded.ok());
    MessageRing ring(guarded.base(), kCapacity);
    guarded.SetTail(tail);
    absl::StatusOr<bool> pushed = ring.TryPush("abc");
    EXPECT_THAT(pushed.status(), StatusIs(absl::StatusCode::kDataLoss));
    EXPECT_THAT(ring.Push("abc", Soon()),
                StatusIs(absl::StatusCode::kDataLoss));
  }
}

// Random headers and records: every answer is a record, none, or DATA_LOSS,
// and no access leaves the ring (the guard page would fault).
TEST(MessageRingTest, RandomCorruptionNeverReadsOutsideTheRing) {
  constexpr size_t kCapacity = 256;
  GuardedRing guarded(kCapacity);
  ASSERT_TRUE(guarded.ok());
  MessageRing ring(guarded.base(), kCapacity);
  std::mt19937_64 random(11);
  int data_loss = 0, popped_records = 0;
  for (int i = 0; i < 20000; ++i) {
    const uint64_t tail = (random() % 4 == 0) ? random() : random() % 4096;
    const uint64_t head =
        (random() % 2 == 0) ? tail + random() % (kCapacity + 32) : random();
    guarded.SetTail(tail);
    guarded.SetHead(head);
    for (size_t at = 0; at < kCapacity; at += 8) {
      const uint64_t pick = random() % 4;
      guarded.SetLength(at, pick == 0   ? ~uint64_t{0}
                            : pick == 1 ? random()
                                        : random() % 80);
    }
    std::string got;
    absl::StatusOr<bool> popped = ring.TryPop(&got);
    if (!popped.ok()) {
      ASSERT_THAT(popped.status(), StatusIs(absl::StatusCode::kDataLoss));
      ++data_loss;
    } else if (*popped) {
      ASSERT_LE(got.size(), ring.max_record_bytes());
      ++popped_records;
    }
    absl::StatusOr<bool> pushed = ring.TryPush(Record(i, random() % 65));
    if (!pushed.ok()) {
      ASSERT_THAT(pushed.status(), StatusIs(absl::StatusCode::kDataLoss));
    }
  }
  // Both outcomes were exercised.
  EXPECT_GT(data_loss, 0);
  EXPECT_GT(popped_records, 0);
}

// Exit codes of the producing child: 0, or the step that failed.
int ProduceSequence(MessageRing* ring, uint64_t count) {
  for (uint64_t n = 0; n < count; ++n) {
    std::string record(8, '\0');
    std::memcpy(record.data(), &n, 8);
    record += Record(n, n % 57);
    if (!ring->Push(record, Soon()).ok()) return 2;
  }
  return 0;
}

TEST(MessageRingTest, TwoProcessesPassAHundredThousandRecordsInOrder) {
  constexpr size_t kCapacity = 4096;
  constexpr uint64_t kCount = 100000;
  auto segment =
      SharedSegment::Create("ring", MessageRing::FootprintBytes(kCapacity));
  ASSERT_TRUE(segment.ok()) << segment.status();
  pid_t child = fork();
  if (child == 0) {
    // The child maps the segment through its own descriptor.
    auto mine = SharedSegment::Adopt(dup(segment->fd()),
                                     SharedSegment::Access::kReadWrite);
    if (!mine.ok()) _exit(3);
    MessageRing ring(mine->data(), kCapacity);
    _exit(ProduceSequence(&ring, kCount));
  }
  ASSERT_GT(child, 0);
  MessageRing ring(segment->data(), kCapacity);
  std::string got;
  uint64_t next = 0, out_of_order = 0, wrong_bytes = 0;
  while (next < kCount) {
    const uint32_t seen = ring.data_bell().value();
    absl::StatusOr<bool> popped = ring.TryPop(&got);
    ASSERT_TRUE(popped.ok()) << popped.status();
    if (!*popped) {
      absl::StatusOr<uint32_t> rung = ring.data_bell().WaitChange(seen, Soon());
      ASSERT_TRUE(rung.ok()) << rung.status() << " after record " << next;
      continue;
    }
    uint64_t n = ~uint64_t{0};
    if (got.size() >= 8) std::memcpy(&n, got.data(), 8);
    out_of_order += n != next;
    wrong_bytes +=
        got.substr(got.size() < 8 ? 0 : 8) != Record(next, next % 57);
    ++next;
  }
  EXPECT_EQ(out_of_order, 0u);
  EXPECT_EQ(wrong_bytes, 0u);
  EXPECT_FALSE(*ring.TryPop(&got));
  EXPECT_EQ(ExitCodeOf(child), 0);
}

}  // namespace
}  // namespace reducer
