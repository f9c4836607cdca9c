// UpstreamInput: its memory, from a pool or malloc, and what Await says as
// bytes are marked ready or the input is abandoned.
#include "server/relay/upstream.h"

#include <cstdint>
#include <cstring>
#include <memory>

#include "absl/time/clock.h"
#include "core/buffer_cache.h"
#include "gtest/gtest.h"
#include "tests/status_matchers.h"

namespace reducer {
namespace {

using ::reducer::testing::IsOk;
using ::reducer::testing::StatusIs;

TEST(UpstreamInputTest, ItsMemoryGoesBackToItsPoolAndIsReusedWarm) {
  auto cache = std::make_shared<BufferCache>(size_t{64} << 20);
  constexpr size_t kBytes = size_t{4} << 20;
  void* first = nullptr;
  {
    UpstreamInput input(kBytes, cache.get());
    first = input.data();
    EXPECT_EQ(reinterpret_cast<uintptr_t>(first) % 64, 0u);
    std::memset(input.data(), 1, input.size());
    EXPECT_EQ(cache->idle_bytes(), 0u);
  }
  EXPECT_GE(cache->idle_bytes(), kBytes);
  UpstreamInput again(kBytes, cache.get());
  EXPECT_EQ(static_cast<void*>(again.data()), first);
  EXPECT_EQ(cache->idle_bytes(), 0u);
}

TEST(UpstreamInputTest, WithoutAPoolItHasItsOwnMemory) {
  UpstreamInput input(1000);
  EXPECT_EQ(input.size(), 1000u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(input.data()) % 64, 0u);
  std::memset(input.data(), 2, input.size());
}

TEST(UpstreamInputTest, AwaitSaysWhatIsReadyOrWhyNot) {
  UpstreamInput input(100);
  EXPECT_THAT(input.Await(10, absl::Now()),
              StatusIs(absl::StatusCode::kDeadlineExceeded));
  input.MarkReady(40);
  input.MarkReady(20);  // never goes back
  EXPECT_EQ(input.ready(), 40u);
  EXPECT_THAT(input.Await(40, absl::Now()), IsOk());
  input.Abandon(absl::AbortedError("rank 2 cancelled"));
  EXPECT_THAT(input.Await(41, absl::InfiniteFuture()),
              StatusIs(absl::StatusCode::kAborted));
}

}  // namespace
}  // namespace reducer
