#include "server/engine/kind_strategy.h"

#include "server/engine/forward_strategy.h"
#include "server/engine/reduce_strategy.h"

namespace reducer {
namespace {

// Barrier: no payload, an empty result for every rank once all arrived.
class BarrierStrategy final : public KindStrategy {
 public:
  size_t Reservation(size_t /*input_bytes*/) const override { return 0; }
  std::vector<TensorSpec> PlanResult(const Fingerprint& /*reference*/,
                                     std::vector<RankState>& /*ranks*/) override {
    return {};
  }
  // Never called: a barrier's input is empty, so the Collective's bounds
  // check refuses any payload first.
  void Accept(int, const RankState&, uint64_t, Payload, bool, Output&,
              std::vector<StagedChunk>*) override {}
  bool MayRead(int, const std::vector<RankState>&, bool) const override {
    return true;
  }
};

}  // namespace

std::unique_ptr<KindStrategy> MakeKindStrategy(CollectiveKind kind,
                                               int group_size,
                                               size_t chunk_bytes, int window,
                                               ChunkPool* chunks) {
  switch (kind) {
    case CollectiveKind::kAllReduce:
    case CollectiveKind::kReduceScatter:
      return std::make_unique<ReduceStrategy>(
          kind == CollectiveKind::kReduceScatter, group_size, chunk_bytes,
          window, chunks);
    case CollectiveKind::kAllGather:
    case CollectiveKind::kBroadcast:
      return std::make_unique<ForwardStrategy>(
          kind == CollectiveKind::kBroadcast, group_size, chunk_bytes, window);
    case CollectiveKind::kBarrier:
      break;
  }
  return std::make_unique<BarrierStrategy>();
}

}  // namespace reducer
