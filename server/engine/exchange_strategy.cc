#include "server/engine/exchange_strategy.h"

#include <algorithm>
#include <utility>
#include <vector>

namespace reducer {
ExchangeStrategy::ExchangeStrategy(Mode mode, int root_index, int group_size,
                                   size_t chunk_bytes, int window)
    : HeldBackForwarding(group_size, chunk_bytes, window),
      mode_(mode),
      root_index_(root_index),
      part_bytes_(group_size, 0) {}

std::vector<TensorSpec> ExchangeStrategy::PlanResult(
    const Fingerprint& reference, std::vector<RankState>& ranks) {
  const size_t n = ranks.size();
  for (size_t i = 0; i < n; ++i) part_bytes_[i] = ranks[i].input_bytes / n;
  if (mode_ == Mode::kScatter) {
    // The reference is the root's (the first fingerprint naming a tensor).
    TensorSpec part = reference.tensors[0];
    part.shape[0] /= static_cast<int64_t>(n);
    for (RankState& r : ranks) r.output_bytes = part_bytes_[root_index_];
    return {part};
  }
  // AllToAll: every rank sends as many bytes as it gets, one part from each.
  for (RankState& r : ranks) r.output_bytes = r.input_bytes;
  return {reference.tensors[0]};
}

void ExchangeStrategy::Forward(int index, uint64_t offset, const Payload& data,
                               Output& out) {
  const size_t part = part_bytes_[index];
  // A sender's place in every receiver's result.
  const uint64_t base = mode_ == Mode::kAllToAll ? index * part : 0;
  size_t consumed = 0;
  while (consumed < data.size()) {
    const uint64_t pos = offset + consumed;
    const int to = static_cast<int>(pos / part);
    const size_t in_part = pos - static_cast<uint64_t>(to) * part;
    const size_t n = std::min(part - in_part, data.size() - consumed);
    std::vector<SharedBytes> pieces;
    data.AppendPiecesWithin(consumed, n, &pieces);
    out.SendTo(to, base + in_part, std::move(pieces));
    consumed += n;
  }
}

}  // namespace reducer
