#include "server/engine/held_back_forwarding.h"

#include <algorithm>

namespace reducer {

HeldBackForwarding::HeldBackForwarding(int group_size, size_t chunk_bytes,
                                       int window)
    : group_size_(group_size),
      chunk_bytes_(chunk_bytes),
      window_(window),
      early_(group_size) {}

size_t HeldBackForwarding::Reservation(int /*index*/,
                                       size_t input_bytes) const {
  // In: a window of messages held back before every header is in. Out: the
  // rank's share of the group's queued messages (all of which may be queued
  // for one rank, a Gather's root: at most `window` per rank of the group).
  const size_t window_bytes = static_cast<size_t>(window_) * chunk_bytes_;
  return std::min(input_bytes, window_bytes) + window_bytes;
}

void HeldBackForwarding::OnAllAttached(Output& out) {
  for (int i = 0; i < group_size_; ++i) {
    std::vector<std::pair<uint64_t, Payload>> early = std::move(early_[i]);
    early_[i].clear();
    for (const auto& [offset, data] : early) Forward(i, offset, data, out);
  }
}

void HeldBackForwarding::Accept(int index, const RankState& /*rank*/,
                                uint64_t offset, Payload data,
                                bool all_attached, Output& out,
                                std::vector<StagedChunk>* /*ready*/) {
  if (!all_attached) {
    early_[index].emplace_back(offset, std::move(data));
    return;
  }
  Forward(index, offset, data, out);
}

bool HeldBackForwarding::MayRead(int index, const std::vector<RankState>& ranks,
                                 bool all_attached) const {
  if (!all_attached) return early_[index].empty();
  int queued = 0;
  for (const RankState& r : ranks) queued += r.pending_writes;
  return queued < window_ * group_size_;
}

void HeldBackForwarding::Clear() {
  for (auto& early : early_) early.clear();
}

}  // namespace reducer
