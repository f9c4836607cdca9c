#include "server/engine/reduce_strategy.h"

#include <algorithm>
#include <cstdint>
#include <utility>

namespace reducer {

ReduceStrategy::ReduceStrategy(Mode mode, int root_index, int group_size,
                               size_t chunk_bytes, int window,
                               ChunkPool* chunks)
    : mode_(mode),
      root_index_(root_index),
      group_size_(group_size),
      chunk_bytes_(chunk_bytes),
      window_(window),
      chunks_(chunks),
      staged_parts_(group_size, 0),
      excluded_(group_size, false),
      taking_part_(group_size),
      covered_(group_size, false) {}

bool ReduceStrategy::Cover(int index, std::vector<StagedChunk>* ready) {
  if (mode_ == Mode::kReduce && index == root_index_) return false;
  LeaveOut(index, ready);
  covered_[index] = true;
  return true;
}

bool ReduceStrategy::Exclude(int index, std::vector<StagedChunk>* ready) {
  if (mode_ == Mode::kReduceScatter ||
      (mode_ == Mode::kReduce && index == root_index_)) {
    return false;
  }
  LeaveOut(index, ready);
  return true;
}

void ReduceStrategy::LeaveOut(int index, std::vector<StagedChunk>* ready) {
  if (excluded_[index]) return;
  excluded_[index] = true;
  --taking_part_;
  for (auto it = staging_.begin(); it != staging_.end();) {
    auto current = it++;
    Staging& staging = current->second;
    if (staging.complete == taking_part_) {
      const size_t k = current->first;
      const size_t len =
          std::min(chunk_bytes_, plan_input_bytes_ - k * chunk_bytes_);
      ready->push_back(StagedChunk{k, len, std::move(staging.parts)});
      staging_.erase(current);
    }
  }
}

size_t ReduceStrategy::Reservation(int index, size_t input_bytes) const {
  // A staged part holds a chunk's bytes of received storage; a reduced chunk
  // takes a pooled buffer, which may be larger than a paced chunk.
  const size_t buffer_bytes =
      chunks_ != nullptr ? std::max(chunk_bytes_, chunks_->chunk_bytes()) : chunk_bytes_;
  const size_t window_bytes = static_cast<size_t>(window_) * buffer_bytes;
  // In: at most `window` chunks staged. Out: AllReduce and Reduce's root
  // queue no more than their input; a ReduceScatter slice may arrive in
  // pieces up to a window; Reduce's other ranks get nothing.
  const size_t staged = std::min(input_bytes, window_bytes);
  switch (mode_) {
    case Mode::kReduceScatter:
      return staged + window_bytes;
    case Mode::kReduce:
      return index == root_index_ ? 2 * staged : staged;
    case Mode::kAllReduce:
      break;
  }
  return 2 * staged;
}

bool ReduceStrategy::GetsResult(int index) const {
  return mode_ != Mode::kReduce || index == root_index_;
}

std::vector<TensorSpec> ReduceStrategy::PlanResult(
    const Fingerprint& reference, std::vector<RankState>& ranks) {
  // The reference passed ValidateContribution, so its layout exists.
  auto plan = std::make_shared<Plan>();
  plan->layout = *ComputePayloadLayout(reference.tensors);
  plan->tensors = reference.tensors;
  plan->covered =
      static_cast<int>(std::count(covered_.begin(), covered_.end(), true));
  const size_t total = plan->layout.total_bytes;
  plan_ = std::move(plan);
  const size_t n = ranks.size();
  if (mode_ != Mode::kReduceScatter) {
    for (size_t i = 0; i < n; ++i) {
      ranks[i].output_bytes =
          !ranks[i].left_out && GetsResult(static_cast<int>(i)) ? total : 0;
    }
    return reference.tensors;
  }
  // Rank i's slice is bytes [i * share, (i + 1) * share); a contribution
  // gets the slices of its span, one after the other.
  const size_t share = total / n;
  result_range_.assign(n, {0, 0});
  slices_of_.assign(n, 0);
  for (size_t i = 0; i < n; ++i) {
    if (ranks[i].left_out) {
      ranks[i].output_bytes = 0;
      continue;
    }
    const CoveredSpan span = SpanOf(ranks, static_cast<int>(i));
    result_range_[i] = {span.first * share, (span.last + 1) * share};
    slices_of_[i] = span.count();
    ranks[i].output_bytes = span.count() * share;
  }
  slice_ = reference.tensors[0];
  slice_.shape[0] /= static_cast<int64_t>(n);
  return {slice_};
}

std::optional<std::vector<TensorSpec>> ReduceStrategy::ResultOf(
    int index) const {
  if (mode_ != Mode::kReduceScatter || slices_of_[index] <= 1) {
    return std::nullopt;
  }
  TensorSpec slices = slice_;
  slices.shape[0] *= slices_of_[index];
  return std::vector<TensorSpec>{slices};
}

void ReduceStrategy::Accept(int index, const RankState& rank, uint64_t offset,
                            Payload data, bool /*all_attached*/,
                            Output& /*out*/, std::vector<StagedChunk>* ready) {
  size_t pos = offset, consumed = 0;
  while (consumed < data.size()) {
    const size_t k = pos / chunk_bytes_;
    const size_t chunk_begin = k * chunk_bytes_;
    const size_t chunk_len = std::min(chunk_bytes_, rank.input_bytes - chunk_begin);
    const size_t in_chunk = pos - chunk_begin;
    const size_t n = std::min(chunk_len - in_chunk, data.size() - consumed);
    Staging& staging = staging_[k];
    if (staging.parts.empty()) staging.parts.resize(group_size_);
    StagedPart& part = staging.parts[index];
    if (!part) ++staged_parts_[index];
    part.Append(data, consumed, n);
    plan_input_bytes_ = rank.input_bytes;
    if (part.size() == chunk_len &&
        ++staging.complete == taking_part_) {
      ready->push_back(StagedChunk{k, chunk_len, std::move(staging.parts)});
      staging_.erase(k);
    }
    pos += n;
    consumed += n;
  }
}

absl::StatusOr<SharedBytes> ReduceStrategy::Reduce(StagedChunk chunk) const {
  const Plan& plan = *plan_;
  const size_t begin = chunk.index * chunk_bytes_;
  const size_t end = std::min(begin + chunk_bytes_, plan.layout.total_bytes);
  std::vector<const StagedPart*> parts;
  parts.reserve(chunk.parts.size());
  for (const StagedPart& p : chunk.parts) {
    if (p) parts.push_back(&p);  // none from a rank taking no part
  }
  ChunkPool::Buffer out = chunks_->Get();
  // Covered ranks' values are in their carrier's part (0: the parts).
  const size_t avg_divisor =
      plan.covered > 0 ? parts.size() + static_cast<size_t>(plan.covered) : 0;
  absl::Status status = ReduceStagedParts(plan.layout, plan.tensors, parts,
                                          begin, end, out.get(), avg_divisor);
  if (!status.ok()) return status;
  return chunks_->Share(std::move(out), end - begin);
}

void ReduceStrategy::OnChunkReduced() {
  for (int& parts : staged_parts_) --parts;
}

void ReduceStrategy::Deliver(size_t chunk_index, SharedBytes result,
                             Output& out) {
  const size_t begin = chunk_index * chunk_bytes_;
  const size_t end = begin + result.size();
  if (mode_ == Mode::kReduce) {
    out.SendTo(root_index_, begin, {result});
    return;
  }
  if (mode_ == Mode::kAllReduce) {
    for (int i = 0; i < group_size_; ++i) out.SendTo(i, begin, {result});
    return;
  }
  for (int i = 0; i < group_size_; ++i) {
    const auto [first, last] = result_range_[i];
    const size_t lo = std::max(begin, first);
    const size_t hi = std::min(end, last);
    if (lo >= hi) continue;
    out.SendTo(i, lo - first, {result.Sub(lo - begin, hi - lo)});
  }
}

bool ReduceStrategy::MayRead(int index, const std::vector<RankState>& ranks,
                             bool /*all_attached*/) const {
  return staged_parts_[index] < window_ && ranks[index].pending_writes < window_;
}

bool ReduceStrategy::HoldsBytesOf(int index) const {
  return staged_parts_[index] > 0;
}

void ReduceStrategy::Clear() {
  for (const auto& [k, staging] : staging_) {
    for (int i = 0; i < group_size_; ++i) {
      if (staging.parts[i]) --staged_parts_[i];
    }
  }
  staging_.clear();
}

}  // namespace reducer
