#include "server/engine/forward_strategy.h"

#include <algorithm>
#include <cstdint>
#include <limits>

#include "absl/strings/str_cat.h"
#include "core/fingerprint.h"

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

absl::Status ForwardStrategy::CheckAttached(int index, const Fingerprint& fp,
                                            const std::vector<RankState>& ranks,
                                            const std::vector<int>& group,
                                            int* other) const {
  if (mode_ == Mode::kBroadcast || fp.tensors.empty() ||
      fp.tensors[0].shape.empty()) {
    return absl::OkStatus();
  }
  constexpr int64_t kMost = std::numeric_limits<int64_t>::max();
  // Payload bytes are bounded, but not dimension 0 of a tensor of no bytes.
  int64_t before = 0;  // the dimension 0 of the ranks attached before it
  int largest = -1;
  for (size_t j = 0; j < ranks.size(); ++j) {
    const RankState& peer = ranks[j];
    if (static_cast<int>(j) == index || !peer.attached || peer.left_out ||
        peer.fp.tensors.empty() || peer.fp.tensors[0].shape.empty()) {
      continue;
    }
    const int64_t rows = peer.fp.tensors[0].shape[0];
    before += rows;  // no overflow: checked as each rank attached
    if (largest < 0 || rows > ranks[largest].fp.tensors[0].shape[0]) {
      largest = static_cast<int>(j);
    }
  }
  const int64_t rows = fp.tensors[0].shape[0];
  if (largest < 0 || rows <= kMost - before) return absl::OkStatus();
  *other = largest;
  return absl::InvalidArgumentError(absl::StrCat(
      "the ", mode_ == Mode::kGather ? "gathered" : "all-gathered",
      " result's dimension 0 would pass ", kMost, ": rank ", group[index],
      " sent ", DescribeTensor(fp.tensors[0]), " after ", before,
      " rows from the ranks attached before it (the most from rank ",
      group[largest], ", which sent ",
      DescribeTensor(ranks[largest].fp.tensors[0]), ")"));
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
  // group within --max_world_size, whose product reducerd keeps below 2^62,
  // and CheckAttached kept the sum of dimension 0 within INT64_MAX.
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
