// ExchangeStrategy: Scatter and AllToAll. Nothing is reduced: each sender's
// input is cut along dim 0 into one part per rank of the group (part_bytes =
// its input bytes / group size), and the bytes of part j go to rank j only,
// shared, not copied, as they are received. Scatter's only sender is the
// root, and part j lands at offset 0 of rank j's result; in AllToAll every
// rank sends, and part j of rank i lands at offset i * part_bytes of rank j's
// result (shapes agree exactly across ranks, so every rank's result has the
// shape of its input). A received message that spans parts is split at
// their boundaries. Payload that arrives before every header is in waits,
// and its rank stops reading until it is sent.
//
// Back-pressure and memory as ForwardStrategy: ranks may read while fewer
// than `window` messages per rank are queued across the group.
#ifndef REDUCER_SERVER_ENGINE_EXCHANGE_STRATEGY_H_
#define REDUCER_SERVER_ENGINE_EXCHANGE_STRATEGY_H_

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "server/engine/kind_strategy.h"

namespace reducer {

class ExchangeStrategy final : public KindStrategy {
 public:
  enum class Mode { kScatter, kAllToAll };

  // `root_index`: for kScatter, the root's position in the group.
  ExchangeStrategy(Mode mode, int root_index, int group_size,
                   size_t chunk_bytes, int window);

  size_t Reservation(int index, size_t input_bytes) const override;
  std::vector<TensorSpec> PlanResult(const Fingerprint &reference,
                                     std::vector<RankState> &ranks) override;
  void OnAllAttached(Output &out) override;
  void Accept(int index, const RankState &rank, uint64_t offset, Payload data,
              bool all_attached, Output &out,
              std::vector<StagedChunk> *ready) override;
  bool MayRead(int index, const std::vector<RankState> &ranks,
               bool all_attached) const override;
  void Clear() override;

 private:
  // Sends bytes [offset, offset + data.size()) of ranks[index]'s input,
  // part by part, to the ranks the parts belong to.
  void Forward(int index, uint64_t offset, const Payload &data, Output &out);

  const Mode mode_;
  const int root_index_;
  const int group_size_;
  const size_t chunk_bytes_;
  const int window_;

  // Per rank: the bytes of one part of its input (known once all attached),
  // and what it sent before then.
  std::vector<size_t> part_bytes_;
  std::vector<std::vector<std::pair<uint64_t, Payload>>> early_;
};

}  // namespace reducer

#endif  // REDUCER_SERVER_ENGINE_EXCHANGE_STRATEGY_H_
