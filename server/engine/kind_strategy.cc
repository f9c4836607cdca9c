#include "server/engine/kind_strategy.h"

#include "server/engine/exchange_strategy.h"
#include "server/engine/forward_strategy.h"
#include "server/engine/quorum_barrier_strategy.h"
#include "server/engine/reduce_strategy.h"
#include "server/engine/send_receive_strategy.h"

namespace reducer {
namespace {

// Barrier: no payload, an empty result for every rank once all arrived.
class BarrierStrategy final : public KindStrategy {
 public:
  size_t Reservation(int /*index*/, size_t /*input_bytes*/) const override {
    return 0;
  }
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
  // A rank taking no part counts as arrived.
  bool Exclude(int, std::vector<StagedChunk>*) override { return true; }
};

}  // namespace

std::unique_ptr<KindStrategy> MakeKindStrategy(CollectiveKind kind,
                                               int group_size, int root_index,
                                               size_t chunk_bytes, int window,
                                               ChunkPool* chunks) {
  switch (kind) {
    case CollectiveKind::kAllReduce:
      return std::make_unique<ReduceStrategy>(ReduceStrategy::Mode::kAllReduce,
                                              -1, group_size, chunk_bytes,
                                              window, chunks);
    case CollectiveKind::kReduceScatter:
      return std::make_unique<ReduceStrategy>(
          ReduceStrategy::Mode::kReduceScatter, -1, group_size, chunk_bytes,
          window, chunks);
    case CollectiveKind::kReduce:
      return std::make_unique<ReduceStrategy>(ReduceStrategy::Mode::kReduce,
                                              root_index, group_size,
                                              chunk_bytes, window, chunks);
    case CollectiveKind::kAllGather:
      return std::make_unique<ForwardStrategy>(
          ForwardStrategy::Mode::kAllGather, -1, group_size, chunk_bytes,
          window);
    case CollectiveKind::kBroadcast:
      return std::make_unique<ForwardStrategy>(
          ForwardStrategy::Mode::kBroadcast, root_index, group_size,
          chunk_bytes, window);
    case CollectiveKind::kGather:
      return std::make_unique<ForwardStrategy>(ForwardStrategy::Mode::kGather,
                                               root_index, group_size,
                                               chunk_bytes, window);
    case CollectiveKind::kScatter:
      return std::make_unique<ExchangeStrategy>(
          ExchangeStrategy::Mode::kScatter, root_index, group_size,
          chunk_bytes, window);
    case CollectiveKind::kAllToAll:
      return std::make_unique<ExchangeStrategy>(
          ExchangeStrategy::Mode::kAllToAll, -1, group_size, chunk_bytes,
          window);
    case CollectiveKind::kSendReceive:
      return std::make_unique<SendReceiveStrategy>(root_index);
    case CollectiveKind::kQuorumBarrier:
      return std::make_unique<QuorumBarrierStrategy>();
    case CollectiveKind::kBarrier:
    case CollectiveKind::kDone:
      break;
  }
  return std::make_unique<BarrierStrategy>();
}

}  // namespace reducer
