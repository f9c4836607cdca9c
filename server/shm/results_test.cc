// SharedMemoryResults (server/shm/results.h): which calls share a range, and when
// a range is free again. Expected offsets follow from the allocator's
// contract (first fit, 64-byte aligned, the nonce's 64 bytes first).
#include "server/shm/results.h"

#include <cstring>
#include <memory>
#include <string>

#include "core/shm/control_segment.h"
#include "gtest/gtest.h"

namespace reducer {
namespace {

constexpr size_t kSegmentBytes = 64 + 4096;

struct Bytes final : ByteOwner {
  std::string text = std::string(1024, 'x');
};

SharedMemoryResults::Identity Of(const std::shared_ptr<const Bytes>& owner,
                                 size_t at, size_t result_bytes,
                                 uint64_t offset = 0) {
  SharedMemoryResults::Identity id;
  id.bytes = result_bytes;
  id.offset = offset;
  id.owner = owner;
  id.data = owner->text.data() + at;
  return id;
}

std::unique_ptr<SharedMemoryResults> Make(size_t bytes = kSegmentBytes) {
  absl::StatusOr<std::unique_ptr<SharedMemoryResults>> made =
      SharedMemoryResults::Create(bytes);
  EXPECT_TRUE(made.ok()) << made.status();
  return made.ok() ? *std::move(made) : nullptr;
}

TEST(SharedResultsTest, TheNonceFillsTheFirst64BytesAndNoRangeStartsThere) {
  std::unique_ptr<SharedMemoryResults> r = Make();
  ASSERT_NE(r, nullptr);
  ASSERT_EQ(r->nonce().size(), ControlSegment::kNonceBytes);
  EXPECT_EQ(std::memcmp(r->data(), r->nonce().data(), r->nonce().size()), 0);
  auto owner = std::make_shared<const Bytes>();
  std::shared_ptr<SharedMemoryResults::Writing> w = r->Open(Of(owner, 0, 100));
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->range, 64u);
}

TEST(SharedResultsTest, TheSameFirstPieceSharesARangeWhileItLives) {
  std::unique_ptr<SharedMemoryResults> r = Make(64 + 8 * 1024);  // room for 8
  ASSERT_NE(r, nullptr);
  auto owner = std::make_shared<const Bytes>();
  auto a = r->Open(Of(owner, 0, 1000));
  auto b = r->Open(Of(owner, 0, 1000));
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a, b);
  EXPECT_EQ(a->writers, 2);
  EXPECT_EQ(r->live_ranges(), 1u);
  // Another piece, another size, another message offset or another owner
  // with the same bytes at the same place: another result.
  auto other_piece = r->Open(Of(owner, 8, 1000));
  auto other_size = r->Open(Of(owner, 0, 999));
  auto other_offset = r->Open(Of(owner, 0, 1000, 64));
  auto twin = std::make_shared<const Bytes>();
  SharedMemoryResults::Identity same_place = Of(owner, 0, 1000);
  same_place.owner = twin;
  auto other_owner = r->Open(same_place);
  for (const auto& w : {other_piece, other_size, other_offset, other_owner}) {
    ASSERT_NE(w, nullptr);
    EXPECT_NE(w->range, a->range);
  }
  EXPECT_EQ(r->live_ranges(), 5u);
  // A call of the same result that comes once the others wrote it still
  // shares it while some rank holds it (the ranks of a relay get the same
  // result one after another)...
  a->MarkCopied(0, 1000);
  r->Close(a);
  r->Close(b);
  auto later = r->Open(Of(owner, 0, 1000));
  ASSERT_NE(later, nullptr);
  EXPECT_EQ(later->range, a->range);
  EXPECT_EQ(later->writers, 1);
  EXPECT_TRUE(later->Holds(0, 1000)) << "it copies nothing again";
  r->Close(later);
  // ... and not once every rank released it: that range may be another's.
  const uint64_t range = a->range;
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(r->Unref(range));
  auto after = r->Open(Of(owner, 0, 1000));
  ASSERT_NE(after, nullptr);
  EXPECT_EQ(after->writers, 1);
  EXPECT_NE(after, a);
  EXPECT_FALSE(after->Holds(0, 1)) << "a new range holds nothing yet";
}

// A call skips only a message whose bytes another call of the range copied
// from the same offset at least as far; a longer message or one cut
// elsewhere is copied again (the same bytes).
TEST(SharedResultsTest, AMessageIsSkippedOnlyWhereItsBytesWereCopied) {
  std::unique_ptr<SharedMemoryResults> r = Make();
  ASSERT_NE(r, nullptr);
  auto owner = std::make_shared<const Bytes>();
  auto w = r->Open(Of(owner, 0, 1000));
  ASSERT_NE(w, nullptr);
  EXPECT_FALSE(w->Holds(0, 400));  // nothing copied yet
  w->MarkCopied(0, 400);
  EXPECT_TRUE(w->Holds(0, 400));
  EXPECT_TRUE(w->Holds(0, 300));     // a shorter message from there
  EXPECT_FALSE(w->Holds(0, 401));    // one reaching further
  EXPECT_FALSE(w->Holds(200, 400));  // one cut elsewhere, inside the copy
  EXPECT_FALSE(w->Holds(400, 800));  // the next one
  // A shorter copy later never shrinks what the range holds.
  w->MarkCopied(0, 100);
  EXPECT_TRUE(w->Holds(0, 400));
  w->MarkCopied(0, 1000);
  EXPECT_TRUE(w->Holds(0, 1000));
}

TEST(SharedResultsTest, ARangeIsFreeOnlyOnceEveryReferenceWent) {
  std::unique_ptr<SharedMemoryResults> r = Make();
  ASSERT_NE(r, nullptr);
  auto owner = std::make_shared<const Bytes>();
  // The whole segment but the nonce: one such range fits, not two.
  const size_t whole = kSegmentBytes - 64;
  auto a = r->Open(Of(owner, 0, whole));
  auto b = r->Open(Of(owner, 0, whole));
  ASSERT_NE(a, nullptr);
  ASSERT_EQ(a, b);
  r->Close(a);
  r->Close(b);
  EXPECT_EQ(r->Open(Of(owner, 4, whole)), nullptr);  // no room
  EXPECT_TRUE(r->Unref(a->range));
  EXPECT_EQ(r->Open(Of(owner, 4, whole)), nullptr);  // one reference left
  EXPECT_TRUE(r->Unref(a->range));
  EXPECT_FALSE(r->Unref(a->range));  // gone already
  auto again = r->Open(Of(owner, 4, whole));
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(again->range, 64u);
}

}  // namespace
}  // namespace reducer
