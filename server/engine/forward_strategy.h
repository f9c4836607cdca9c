// ForwardStrategy: AllGather, Broadcast and Gather. Nothing is reduced: once
// every rank's header is in (so every rank's place in the result is known),
// each received message is forwarded as is, sharing its bytes, to every rank
// (Gather: to the root only) at that rank's offset in the result. AllGather
// and Gather place rank i's bytes after those of ranks 0..i-1 (dim 0 may
// differ by rank); Broadcast's only sender is the root, at offset 0.
// Gather's other ranks get no result and finish once their payload is in.
// Payload that arrives before every header is in waits, and its rank stops
// reading until it is sent.
//
// Back-pressure: ranks may read while fewer than `window` messages per rank
// are queued across the group.
#ifndef REDUCER_SERVER_ENGINE_FORWARD_STRATEGY_H_
#define REDUCER_SERVER_ENGINE_FORWARD_STRATEGY_H_

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "server/engine/kind_strategy.h"

namespace reducer {

class ForwardStrategy final : public KindStrategy {
 public:
  enum class Mode { kAllGather, kBroadcast, kGather };

  // `root_index`: for kBroadcast and kGather, the root's position in the
  // group.
  ForwardStrategy(Mode mode, int root_index, int group_size,
                  size_t chunk_bytes, int window);

  size_t Reservation(int index, size_t input_bytes) const override;
  std::vector<TensorSpec> PlanResult(const Fingerprint& reference,
                                     std::vector<RankState>& ranks) override;
  bool GetsResult(int index) const override;
  void OnAllAttached(Output& out) override;
  void Accept(int index, const RankState& rank, uint64_t offset, Payload data,
              bool all_attached, Output& out,
              std::vector<StagedChunk>* ready) override;
  bool MayRead(int index, const std::vector<RankState>& ranks,
               bool all_attached) const override;
  void Clear() override;

 private:
  void Forward(int index, uint64_t offset, const Payload& data, Output& out);

  const Mode mode_;
  const int root_index_;
  const int group_size_;
  const size_t chunk_bytes_;
  const int window_;

  // Per rank: where its bytes land in the result (known once all attached),
  // and what it sent before then.
  std::vector<size_t> base_offset_;
  std::vector<std::vector<std::pair<uint64_t, Payload>>> early_;
};

}  // namespace reducer

#endif  // REDUCER_SERVER_ENGINE_FORWARD_STRATEGY_H_
