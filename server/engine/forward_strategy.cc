#include "server/engine/forward_strategy.h"

#include <algorithm>

namespace reducer {

ForwardStrategy::ForwardStrategy(Mode mode, int root_index, int group_size,
                                 size_t chunk_bytes, int window)
    : HeldBackForwarding(group_size, chunk_bytes, window),
      mode_(mode),
      root_index_(root_index),
      base_offset_(group_size, 0) {}

bool ForwardStrategy::GetsResult(int index) const {
  return mode_ != Mode::kGather || index == root_index_;
}

bool ForwardStrategy::Exclude(int index, std::vector<StagedChunk>* /*ready*/) {
  return mode_ == Mode::kAllGather || index != root_index_;
}

std::vector<TensorSpec> ForwardStrategy::PlanResult(
    const Fingerprint& reference, std::vector<RankState>& ranks) {
  if (mode_ == Mode::kBroadcast) {
    for (RankState& r : ranks) {
      r.output_bytes = r.left_out ? 0 : ranks[root_index_].input_bytes;
    }
    return {ranks[root_index_].fp.tensors[0]};
  }
  // No overflow: each rank's payload is within --max_tensor_bytes and the
  // group within --max_world_size, whose product reducerd keeps below 2^62.
  TensorSpec gathered = reference.tensors[0];
  gathered.shape[0] = 0;
  size_t offset = 0;
  for (size_t i = 0; i < ranks.size(); ++i) {
    base_offset_[i] = offset;
    if (ranks[i].left_out) continue;  // an empty part
    gathered.shape[0] += ranks[i].fp.tensors[0].shape[0];
    offset += ranks[i].input_bytes;
  }
  for (size_t i = 0; i < ranks.size(); ++i) {
    ranks[i].output_bytes =
        GetsResult(static_cast<int>(i)) && !ranks[i].left_out ? offset : 0;
  }
  return {gathered};
}

void ForwardStrategy::Forward(int index, uint64_t offset, const Payload& data,
                              Output& out) {
  const uint64_t out_offset = base_offset_[index] + offset;
  if (mode_ == Mode::kGather) {
    out.SendTo(root_index_, out_offset, data.pieces());
    return;
  }
  for (int j = 0; j < group_size_; ++j) {
    out.SendTo(j, out_offset, data.pieces());
  }
}

}  // namespace reducer
