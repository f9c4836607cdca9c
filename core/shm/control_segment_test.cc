// ControlSegment's contract (control_segment.h): what Create writes is what
// Adopt reads through the descriptor, both mappings share the rings, and
// Adopt refuses a segment of another size, magic or version, naming which.
#include "core/shm/control_segment.h"

#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <set>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/shm/mapped_bytes.h"
#include "core/shm/shared_segment.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/matchers.h"

namespace reducer {
namespace {

const char kNonce[] = "0123456789abcdef";

TEST(ControlSegmentTest, AdoptReadsTheNonceAndSharesTheRings) {
  auto created = ControlSegment::Create(kNonce);
  ASSERT_TRUE(created.ok()) << created.status();
  auto adopted = ControlSegment::Adopt(dup((*created)->fd()));
  ASSERT_TRUE(adopted.ok()) << adopted.status();
  EXPECT_EQ((*adopted)->nonce(), kNonce);
  EXPECT_NE((*adopted)->fd(), (*created)->fd());

  ASSERT_TRUE((*created)->requests().Push("request", absl::Now()).ok());
  ASSERT_TRUE((*adopted)->responses().Push("response", absl::Now()).ok());
  std::string got;
  ASSERT_TRUE(*(*adopted)->requests().TryPop(&got));
  EXPECT_EQ(got, "request");
  ASSERT_TRUE(*(*created)->responses().TryPop(&got));
  EXPECT_EQ(got, "response");
  // Each ring held only its own record.
  EXPECT_FALSE(*(*adopted)->requests().TryPop(&got));
  EXPECT_FALSE(*(*created)->responses().TryPop(&got));
}

// Records walk through the rings: both sides map every page up front
// rather than faulting on each one at their first pass.
TEST(ControlSegmentTest, BothSidesMapEveryPageAtOnce) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t pages = (ControlSegment::kBytes + page - 1) / page * page;
  auto created = ControlSegment::Create(kNonce);
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_EQ(MappedBytes((*created)->data()).value_or(0), pages);
  auto adopted = ControlSegment::Adopt(dup((*created)->fd()));
  ASSERT_TRUE(adopted.ok()) << adopted.status();
  EXPECT_EQ(MappedBytes((*adopted)->data()).value_or(0), pages);
}

TEST(ControlSegmentTest, LayoutSizeIsTheHeaderPageAndTwoRings) {
  EXPECT_EQ(ControlSegment::kBytes,
            4096 + 2 * (MessageRing::kHeaderBytes + (size_t{1} << 20)));
}

TEST(ControlSegmentTest, CreateRefusesANonceOfAnotherLength) {
  auto created = ControlSegment::Create("short");
  EXPECT_THAT(created.status(), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(std::string(created.status().message()), HasSubstr("nonce"));
}

TEST(ControlSegmentTest, AdoptRefusesASegmentOfAnotherSize) {
  const size_t bytes = ControlSegment::kBytes - 4096;
  auto segment = SharedSegment::Create("small", bytes);
  ASSERT_TRUE(segment.ok()) << segment.status();
  std::memcpy(segment->data(), "RDCRCTL1", 8);
  auto adopted = ControlSegment::Adopt(dup(segment->fd()));
  EXPECT_THAT(adopted.status(), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(std::string(adopted.status().message()),
              AllOf(HasSubstr(absl::StrCat(bytes)),
                    HasSubstr(absl::StrCat(ControlSegment::kBytes))));
}

// Creates a control segment, writes the `size` bytes at `bytes` at `offset`
// through a second mapping of its fd, as a peer would, and adopts it: the
// adopting side must see what the peer wrote. The status of the first step
// that fails.
absl::Status AdoptAfterPeerWrites(size_t offset, const void* bytes,
                                  size_t size) {
  auto created = ControlSegment::Create(kNonce);
  if (!created.ok()) return created.status();
  auto writer = SharedSegment::Adopt(dup((*created)->fd()),
                                     SharedSegment::Access::kReadWrite);
  if (!writer.ok()) return writer.status();
  std::memcpy(static_cast<char*>(writer->data()) + offset, bytes, size);
  return ControlSegment::Adopt(dup((*created)->fd())).status();
}

TEST(ControlSegmentTest, AdoptRefusesAnotherMagic) {
  EXPECT_THAT(AdoptAfterPeerWrites(7, "2", 1),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("magic"), HasSubstr("RDCRCTL2"))));
}

TEST(ControlSegmentTest, AdoptRefusesAnotherVersion) {
  const uint32_t version = 7;
  EXPECT_THAT(AdoptAfterPeerWrites(8, &version, sizeof(version)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("version 7"), Not(HasSubstr("magic")))));
}

TEST(ControlSegmentTest, RandomBytesHaveTheLengthAndDiffer) {
  EXPECT_EQ(RandomBytes(0), "");
  const std::string a = RandomBytes(16), b = RandomBytes(16);
  EXPECT_EQ(a.size(), 16u);
  EXPECT_NE(a, b);  // equal with probability 2^-128
  // 4096 uniform bytes miss fewer than 10 of the 256 values with overwhelming
  // probability (each is missed with probability (255/256)^4096 < 1e-6).
  const std::string many = RandomBytes(4096);
  ASSERT_EQ(many.size(), 4096u);
  std::set<char> values(many.begin(), many.end());
  EXPECT_GE(values.size(), 246u);
}

}  // namespace
}  // namespace reducer
