#include "client/internal/collective_router.h"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "client/internal/settled_attempt.h"
#include "core/data_type.h"
#include "core/fingerprint.h"
#include "core/payload_layout.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace reducer {
namespace {

using ::testing::ElementsAre;

// An attempt that is never sent: its outcome is no tensor, at once.
std::unique_ptr<CollectiveAttempt> UnsentAttempt() {
  return std::make_unique<SettledAttempt>(std::vector<Tensor>{},
                                          /*received_any=*/false);
}

// Records the contributions it was asked to start.
class RecordingBackend final : public CollectiveBackend {
 public:
  std::unique_ptr<CollectiveAttempt> Start(
      const Contribution& contribution) override {
    started.push_back(&contribution);
    return UnsentAttempt();
  }
  std::vector<const Contribution*> started;
};

// A contribution of `elements` float32 values (4 bytes each).
Contribution FloatsOf(int64_t elements, bool send_payload = true) {
  Contribution c;
  const TensorSpec spec{DataType::kFloat32, {elements}, ReduceOp::kSum};
  c.layout = *ComputePayloadLayout({spec});
  c.inputs.push_back(nullptr);  // never read: the fakes send nothing
  c.send_payload = send_payload;
  return c;
}

class CollectiveRouterTest : public ::testing::Test {
 protected:
  CollectiveRouter Router(CollectiveRouter::Transport transport) {
    return CollectiveRouter(&shared_, &per_call_, &chunk_bytes_, transport);
  }

  RecordingBackend shared_;
  RecordingBackend per_call_;
  std::atomic<size_t> chunk_bytes_{1024};
};

TEST_F(CollectiveRouterTest, PayloadUpToOneChunkGoesOnTheSharedStream) {
  const CollectiveRouter router = Router(CollectiveRouter::Transport::kAuto);
  const Contribution one_element = FloatsOf(1);
  const Contribution exactly_one_chunk = FloatsOf(256);  // 1024 bytes
  const Contribution empty = FloatsOf(0);
  EXPECT_EQ(router.Route(one_element), &shared_);
  EXPECT_EQ(router.Route(exactly_one_chunk), &shared_);
  EXPECT_EQ(router.Route(empty), &shared_);
}

TEST_F(CollectiveRouterTest, PayloadAboveOneChunkGetsAStreamOfItsOwn) {
  const CollectiveRouter router = Router(CollectiveRouter::Transport::kAuto);
  const Contribution one_element_over = FloatsOf(257);  // 1028 bytes
  const Contribution large = FloatsOf(1 << 20);
  EXPECT_EQ(router.Route(one_element_over), &per_call_);
  EXPECT_EQ(router.Route(large), &per_call_);
}

TEST_F(CollectiveRouterTest, DeclaredShapesWithoutPayloadCountAsNoBytes) {
  // A Broadcast non-root declares a large shape but sends nothing.
  const CollectiveRouter router = Router(CollectiveRouter::Transport::kAuto);
  const Contribution declared = FloatsOf(1 << 20, /*send_payload=*/false);
  EXPECT_EQ(router.Route(declared), &shared_);
}

TEST_F(CollectiveRouterTest, TheChunkSizeIsReadAtEveryRoute) {
  // The chunk size agreed at Connect arrives after the router was built.
  const CollectiveRouter router = Router(CollectiveRouter::Transport::kAuto);
  const Contribution c = FloatsOf(1000);  // 4000 bytes
  EXPECT_EQ(router.Route(c), &per_call_);
  chunk_bytes_.store(4000);
  EXPECT_EQ(router.Route(c), &shared_);
  chunk_bytes_.store(3999);
  EXPECT_EQ(router.Route(c), &per_call_);
}

TEST_F(CollectiveRouterTest, PerCallTransportSendsEveryCollectiveOnItsOwnStream) {
  const CollectiveRouter router = Router(CollectiveRouter::Transport::kPerCall);
  const Contribution tiny = FloatsOf(1);
  const Contribution empty = FloatsOf(0);
  const Contribution large = FloatsOf(1 << 20);
  EXPECT_EQ(router.Route(tiny), &per_call_);
  EXPECT_EQ(router.Route(empty), &per_call_);
  EXPECT_EQ(router.Route(large), &per_call_);
}

TEST_F(CollectiveRouterTest, StartHandsTheSameContributionToTheChosenBackend) {
  CollectiveRouter router = Router(CollectiveRouter::Transport::kAuto);
  const Contribution small = FloatsOf(2);
  const Contribution large = FloatsOf(4096);
  EXPECT_NE(router.Start(small), nullptr);
  EXPECT_NE(router.Start(large), nullptr);
  EXPECT_NE(router.Start(small), nullptr);
  EXPECT_THAT(shared_.started, ElementsAre(&small, &small));
  EXPECT_THAT(per_call_.started, ElementsAre(&large));
}

// Takes the contributions up to `max_bytes` of payload and declines the rest.
class DecliningBackend final : public CollectiveBackend {
 public:
  explicit DecliningBackend(size_t max_bytes) : max_bytes_(max_bytes) {}
  std::unique_ptr<CollectiveAttempt> Start(
      const Contribution& contribution) override {
    ADD_FAILURE() << "the router must offer, not force, shared memory";
    return nullptr;
  }
  std::unique_ptr<CollectiveAttempt> TryStart(
      const Contribution& contribution) override {
    if (contribution.payload_bytes() > max_bytes_) return nullptr;
    taken.push_back(&contribution);
    return UnsentAttempt();
  }
  std::vector<const Contribution*> taken;

 private:
  const size_t max_bytes_;
};

TEST_F(CollectiveRouterTest, SharedMemoryIsOfferedEveryCallFirstAndMayDecline) {
  CollectiveRouter router = Router(CollectiveRouter::Transport::kAuto);
  DecliningBackend shared_memory(/*max_bytes=*/8192);
  router.UseSharedMemory(&shared_memory);
  const Contribution small = FloatsOf(2);
  const Contribution large = FloatsOf(2048);   // 8192 bytes: taken
  const Contribution larger = FloatsOf(4096);  // declined: per call
  EXPECT_NE(router.Start(small), nullptr);
  EXPECT_NE(router.Start(large), nullptr);
  EXPECT_NE(router.Start(larger), nullptr);
  EXPECT_THAT(shared_memory.taken, ElementsAre(&small, &large));
  EXPECT_TRUE(shared_.started.empty());
  EXPECT_THAT(per_call_.started, ElementsAre(&larger));

  router.UseSharedMemory(nullptr);  // gRPC alone again
  EXPECT_NE(router.Start(small), nullptr);
  EXPECT_EQ(shared_memory.taken.size(), 2u);
  EXPECT_EQ(shared_.started.size(), 1u);
}

TEST(CollectiveRouterTransportTest, OnlyPerCallSelectsPerCallStreams) {
  using Transport = CollectiveRouter::Transport;
  EXPECT_EQ(CollectiveRouter::ParseTransport("per_call"), Transport::kPerCall);
  EXPECT_EQ(CollectiveRouter::ParseTransport(nullptr), Transport::kAuto);
  EXPECT_EQ(CollectiveRouter::ParseTransport("auto"), Transport::kAuto);
  EXPECT_EQ(CollectiveRouter::ParseTransport(""), Transport::kAuto);
  EXPECT_EQ(CollectiveRouter::ParseTransport("PER_CALL"), Transport::kAuto);
  EXPECT_EQ(CollectiveRouter::ParseTransport("per_call "), Transport::kAuto);
}

}  // namespace
}  // namespace reducer
