#include "server/engine/kind_strategy.h"

#include <algorithm>

#include "server/engine/exchange_strategy.h"
#include "server/engine/forward_strategy.h"
#include "server/engine/match_strategy.h"
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

// Done: a barrier whose every rank gets one int64, the value the job set
// last (Job::Attach sets it before each rank's attach).
class DoneStrategy final : public KindStrategy {
 public:
  size_t Reservation(int /*index*/, size_t /*input_bytes*/) const override {
    return 0;
  }
  std::vector<TensorSpec> PlanResult(const Fingerprint& /*reference*/,
                                     std::vector<RankState>& ranks) override {
    for (RankState& r : ranks) r.output_bytes = r.left_out ? 0 : sizeof(value_);
    TensorSpec spec;
    spec.dtype = DataType::kInt64;
    spec.shape = {1};
    return {spec};
  }
  void OnAllAttached(Output& out) override {
    auto owner = std::make_shared<const ValueOwner>(value_);
    const SharedBytes bytes(owner, owner->data(), sizeof(value_));
    for (int i = 0; i < group_size_; ++i) out.SendTo(i, 0, {bytes});
  }
  void SetResultValues(const std::vector<int64_t>& values,
                       bool /*all_attached*/, Output& /*out*/) override {
    if (!values.empty()) value_ = values[0];
  }
  void Accept(int, const RankState&, uint64_t, Payload, bool, Output&,
              std::vector<StagedChunk>*) override {}
  bool MayRead(int, const std::vector<RankState>&, bool) const override {
    return true;
  }
  explicit DoneStrategy(int group_size) : group_size_(group_size) {}

 private:
  class ValueOwner final : public ByteOwner {
   public:
    explicit ValueOwner(int64_t value) : value_(value) {}
    const char* data() const { return reinterpret_cast<const char*>(&value_); }

   private:
    const int64_t value_;
  };
  const int group_size_;
  int64_t value_ = 0;
};

}  // namespace

KindTraits TraitsOf(CollectiveKind kind) {
  KindTraits traits;
  switch (kind) {
    case CollectiveKind::kAllReduce:
    case CollectiveKind::kReduce:
    case CollectiveKind::kReduceScatter:
      traits.takes_several_ranks = true;
      traits.paced_chunks = true;
      break;
    case CollectiveKind::kBroadcast:
    case CollectiveKind::kScatter:
      traits.takes_several_ranks = true;
      traits.only_root_sends = true;
      break;
    case CollectiveKind::kSendReceive:
      traits.only_root_sends = true;
      break;
    case CollectiveKind::kAllGather:
    case CollectiveKind::kGather:
    case CollectiveKind::kBarrier:
    case CollectiveKind::kAllToAll:
      traits.takes_several_ranks = true;
      break;
    case CollectiveKind::kAllToAllV:
    case CollectiveKind::kMatch:
    case CollectiveKind::kQuorumBarrier:
    case CollectiveKind::kDone:
      break;
  }
  return traits;
}

Fingerprint OneRanksFingerprint(Fingerprint fp, int ranks) {
  if (fp.kind == CollectiveKind::kAllToAll && ranks > 1 &&
      !fp.tensors.empty() && !fp.tensors[0].shape.empty()) {
    fp.tensors[0].shape[0] /= ranks;
  }
  return fp;
}

CoveredSpan SpanOf(const std::vector<RankState>& ranks, int index) {
  CoveredSpan span{index, index};
  for (int j = 0; j < static_cast<int>(ranks.size()); ++j) {
    if (ranks[j].covered_by != index) continue;
    span.first = std::min(span.first, j);
    span.last = std::max(span.last, j);
  }
  return span;
}

std::unique_ptr<KindStrategy> MakeKindStrategy(const Fingerprint& reference,
                                               int group_size, int root_index,
                                               size_t chunk_bytes, int window,
                                               ChunkPool* chunks) {
  switch (reference.kind) {
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
    case CollectiveKind::kAllToAllV:
      return std::make_unique<ExchangeStrategy>(
          ExchangeStrategy::Mode::kAllToAllV, -1, group_size, chunk_bytes,
          window);
    case CollectiveKind::kSendReceive:
      return std::make_unique<SendReceiveStrategy>(root_index);
    case CollectiveKind::kMatch:
      return std::make_unique<MatchStrategy>(reference);
    case CollectiveKind::kQuorumBarrier:
      return std::make_unique<QuorumBarrierStrategy>();
    case CollectiveKind::kDone:
      return std::make_unique<DoneStrategy>(group_size);
    case CollectiveKind::kBarrier:
      break;
  }
  return std::make_unique<BarrierStrategy>();
}

}  // namespace reducer
