// ExchangeStrategy: Scatter and AllToAll. Nothing is reduced: each sender's
// input is cut along dim 0 into one part per rank of the group (part_bytes =
// its input bytes / group size), and the bytes of part j go to rank j only,
// shared, not copied, as they are received. Scatter's only sender is the
// root, and part j lands at offset 0 of rank j's result; in AllToAll every
// rank sends, and part j of rank i lands at offset i * part_bytes of rank j's
// result (shapes agree exactly across ranks, so every rank's result has the
// shape of its input). A received message that spans parts is split at
// their boundaries. Holding back early payload, memory and back-pressure:
// HeldBackForwarding.
#ifndef REDUCER_SERVER_ENGINE_EXCHANGE_STRATEGY_H_
#define REDUCER_SERVER_ENGINE_EXCHANGE_STRATEGY_H_

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "server/engine/held_back_forwarding.h"

namespace reducer {

class ExchangeStrategy final : public HeldBackForwarding {
 public:
  enum class Mode { kScatter, kAllToAll };

  // `root_index`: for kScatter, the root's position in the group.
  ExchangeStrategy(Mode mode, int root_index, int group_size,
                   size_t chunk_bytes, int window);

  std::vector<TensorSpec> PlanResult(const Fingerprint& reference,
                                     std::vector<RankState>& ranks) override;

 private:
  // Sends bytes [offset, offset + data.size()) of ranks[index]'s input,
  // part by part, to the ranks the parts belong to.
  void Forward(int index, uint64_t offset, const Payload& data,
               Output& out) override;

  const Mode mode_;
  const int root_index_;
  // Per rank: the bytes of one part of its input (known once all attached).
  std::vector<size_t> part_bytes_;
};

}  // namespace reducer

#endif  // REDUCER_SERVER_ENGINE_EXCHANGE_STRATEGY_H_
