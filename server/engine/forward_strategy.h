// ForwardStrategy: AllGather, Broadcast and Gather. Nothing is reduced: once
// every rank's header is in (so every rank's place in the result is known),
// each received message is forwarded as is, sharing its bytes, to every rank
// (Gather: to the root only) at that rank's offset in the result. AllGather
// and Gather place rank i's bytes after those of ranks 0..i-1 (dim 0 may
// differ by rank); Broadcast's only sender is the root, at offset 0.
// Gather's other ranks get no result.
// Holding back early payload, memory and back-pressure: HeldBackForwarding.
#ifndef REDUCER_SERVER_ENGINE_FORWARD_STRATEGY_H_
#define REDUCER_SERVER_ENGINE_FORWARD_STRATEGY_H_

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "server/engine/held_back_forwarding.h"

namespace reducer {

class ForwardStrategy final : public HeldBackForwarding {
 public:
  enum class Mode { kAllGather, kBroadcast, kGather };

  // `root_index`: for kBroadcast and kGather, the root's position in the
  // group.
  ForwardStrategy(Mode mode, int root_index, int group_size,
                  size_t chunk_bytes, int window);

  // AllGather and Gather: INVALID_ARGUMENT when `fp`'s dimension 0 and that
  // of the ranks attached before it (not left out) sum past INT64_MAX, as
  // they can for tensors of no bytes ([INT64_MAX, 0]); names this rank,
  // the attached rank of the largest dimension 0 (`*other`) and both
  // shapes.
  absl::Status CheckAttached(int index, const Fingerprint& fp,
                             const std::vector<RankState>& ranks,
                             const std::vector<int>& group,
                             int* other) const override;
  std::vector<TensorSpec> PlanResult(const Fingerprint& reference,
                                     std::vector<RankState>& ranks) override;
  bool GetsResult(int index) const override;
  // AllGather (an empty part), and Broadcast and Gather when it is not the
  // root.
  bool Exclude(int index, std::vector<StagedChunk>* ready) override;

 private:
  void Forward(int index, uint64_t offset, const Payload& data,
               Output& out) override;

  const Mode mode_;
  const int root_index_;
  // Per rank: where its bytes land in the result (known once all attached).
  std::vector<size_t> base_offset_;
};

}  // namespace reducer

#endif  // REDUCER_SERVER_ENGINE_FORWARD_STRATEGY_H_
