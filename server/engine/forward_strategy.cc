#include "server/engine/forward_strategy.h"

#include <algorithm>

namespace reducer {

ForwardStrategy::ForwardStrategy(Mode mode, int root_index, int group_size,
                                 size_t chunk_bytes, int window)
    : mode_(mode),
      root_index_(root_index),
      group_size_(group_size),
      chunk_bytes_(chunk_bytes),
      window_(window),
      base_offset_(group_size, 0),
      early_(group_size) {}

size_t ForwardStrategy::Reservation(int /*index*/, size_t input_bytes) const {
  // In: a window of messages held back before every header is in. Out: the
  // rank's share of the group's queued messages (for Gather, all queued for
  // the root, at most `window` per rank of the group).
  const size_t window_bytes = static_cast<size_t>(window_) * chunk_bytes_;
  return std::min(input_bytes, window_bytes) + window_bytes;
}

bool ForwardStrategy::GetsResult(int index) const {
  return mode_ != Mode::kGather || index == root_index_;
}

std::vector<TensorSpec> ForwardStrategy::PlanResult(
    const Fingerprint& reference, std::vector<RankState>& ranks) {
  if (mode_ == Mode::kBroadcast) {
    const std::vector<int>& group = reference.group;
    const size_t root = std::lower_bound(group.begin(), group.end(),
                                         reference.root) - group.begin();
    for (RankState& r : ranks) r.output_bytes = ranks[root].input_bytes;
    return {ranks[root].fp.tensors[0]};
  }
  // No overflow: each rank's payload is within --max_tensor_bytes and the
  // group within --max_world_size, whose product reducerd keeps below 2^62.
  TensorSpec gathered = reference.tensors[0];
  gathered.shape[0] = 0;
  size_t offset = 0;
  for (size_t i = 0; i < ranks.size(); ++i) {
    gathered.shape[0] += ranks[i].fp.tensors[0].shape[0];
    base_offset_[i] = offset;
    offset += ranks[i].input_bytes;
  }
  for (size_t i = 0; i < ranks.size(); ++i) {
    ranks[i].output_bytes = GetsResult(static_cast<int>(i)) ? offset : 0;
  }
  return {gathered};
}

void ForwardStrategy::OnAllAttached(Output& out) {
  for (int i = 0; i < group_size_; ++i) {
    std::vector<std::pair<uint64_t, Payload>> early = std::move(early_[i]);
    early_[i].clear();
    for (const auto& [offset, data] : early) Forward(i, offset, data, out);
  }
}

void ForwardStrategy::Accept(int index, const RankState& /*rank*/,
                             uint64_t offset, Payload data, bool all_attached,
                             Output& out, std::vector<StagedChunk>* /*ready*/) {
  if (!all_attached) {
    early_[index].emplace_back(offset, std::move(data));
    return;
  }
  Forward(index, offset, data, out);
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

bool ForwardStrategy::MayRead(int index, const std::vector<RankState>& ranks,
                              bool all_attached) const {
  if (!all_attached) return early_[index].empty();
  int queued = 0;
  for (const RankState& r : ranks) queued += r.pending_writes;
  return queued < window_ * group_size_;
}

void ForwardStrategy::Clear() {
  for (auto& early : early_) early.clear();
}

}  // namespace reducer
