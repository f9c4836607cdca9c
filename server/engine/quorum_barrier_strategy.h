// QuorumBarrierStrategy: the kind strategy of a quorum step's decision
// (CollectiveKind::kQuorumBarrier). No payload. The Collective's QuorumStep
// (server/engine/quorum_step.h) decides the step and marks each rank left
// out or joining before PlanResult is called; every rank not left out then
// gets one int32 tensor with an entry per position of the group: 1 for a
// contributor, 2 for a joining rank that arrived, 0 for a rank left out.
#ifndef REDUCER_SERVER_ENGINE_QUORUM_BARRIER_STRATEGY_H_
#define REDUCER_SERVER_ENGINE_QUORUM_BARRIER_STRATEGY_H_

#include <cstdint>
#include <vector>

#include "server/engine/kind_strategy.h"

namespace reducer {

// The entries of a quorum barrier's result.
enum QuorumMark : int32_t {
  kQuorumLeftOut = 0,
  kQuorumContributor = 1,
  kQuorumJoined = 2,
};

class QuorumBarrierStrategy final : public KindStrategy {
 public:
  size_t Reservation(int /*index*/, size_t /*input_bytes*/) const override {
    return 0;
  }
  std::vector<TensorSpec> PlanResult(const Fingerprint& reference,
                                     std::vector<RankState>& ranks) override;
  bool GetsResult(int index) const override;
  void OnAllAttached(Output& out) override;
  // Never called: the Collective's bounds check refuses any payload first.
  void Accept(int, const RankState&, uint64_t, Payload, bool, Output&,
              std::vector<StagedChunk>*) override {}
  bool MayRead(int, const std::vector<RankState>&, bool) const override {
    return true;
  }
  // Marked left out by PlanResult.
  bool Exclude(int, std::vector<StagedChunk>*) override { return true; }

 private:
  std::vector<int32_t> marks_;  // set by PlanResult
};

}  // namespace reducer

#endif  // REDUCER_SERVER_ENGINE_QUORUM_BARRIER_STRATEGY_H_
