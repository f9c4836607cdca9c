#include "server/engine/exchange_strategy.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/data_type.h"

namespace reducer {
namespace {

// The bytes of one row (dim 0) of `spec`: its other dimensions' elements.
uint64_t RowBytes(const TensorSpec& spec) {
  uint64_t bytes = DataTypeSize(spec.dtype);
  for (size_t d = 1; d < spec.shape.size(); ++d) {
    bytes *= static_cast<uint64_t>(spec.shape[d]);
  }
  return bytes;
}

absl::Status RowsMismatch(int sender, int64_t sends, int receiver,
                          int64_t expects) {
  return absl::FailedPreconditionError(absl::StrCat(
      "mismatched rows: rank ", sender, " sends ", sends,
      sends == 1 ? " row" : " rows", " to rank ", receiver, ", but rank ",
      receiver, " expects ", expects, " from rank ", sender));
}

}  // namespace

ExchangeStrategy::ExchangeStrategy(Mode mode, int root_index, int group_size,
                                   size_t chunk_bytes, int window)
    : HeldBackForwarding(group_size, chunk_bytes, window),
      mode_(mode),
      root_index_(root_index),
      parts_(group_size) {}

absl::Status ExchangeStrategy::CheckAttached(
    int index, const Fingerprint& fp, const std::vector<RankState>& ranks,
    const std::vector<int>& group, int* other) const {
  if (mode_ != Mode::kAllToAllV) return absl::OkStatus();
  // What it expects from itself, against what it sends itself.
  if (!fp.recv_rows.empty() && fp.recv_rows[index] != fp.send_rows[index]) {
    *other = index;
    return RowsMismatch(group[index], fp.send_rows[index], group[index],
                        fp.recv_rows[index]);
  }
  for (size_t j = 0; j < ranks.size(); ++j) {
    const RankState& peer = ranks[j];
    if (static_cast<int>(j) == index || !peer.attached || peer.left_out) {
      continue;
    }
    *other = static_cast<int>(j);
    // What this rank expects from j, against what j sends it.
    if (!fp.recv_rows.empty() &&
        fp.recv_rows[j] != peer.fp.send_rows[index]) {
      return RowsMismatch(group[j], peer.fp.send_rows[index], group[index],
                          fp.recv_rows[j]);
    }
    // What j expects from this rank, against what this rank sends it.
    if (!peer.fp.recv_rows.empty() &&
        peer.fp.recv_rows[index] != fp.send_rows[j]) {
      return RowsMismatch(group[index], fp.send_rows[j], group[j],
                          peer.fp.recv_rows[index]);
    }
  }
  return absl::OkStatus();
}

std::vector<TensorSpec> ExchangeStrategy::PlanResult(
    const Fingerprint& reference, std::vector<RankState>& ranks) {
  const size_t n = ranks.size();
  for (auto& parts : parts_) parts.clear();
  auto add = [this](size_t from, uint64_t begin, uint64_t bytes, size_t to,
                    uint64_t place) {
    if (bytes == 0) return;
    parts_[from].push_back(
        Part{begin, begin + bytes, static_cast<int>(to), place});
  };
  switch (mode_) {
    case Mode::kScatter: {
      // The reference is the root's (the first fingerprint naming a tensor).
      // Rank j's part is bytes [j * part, (j + 1) * part); a contribution
      // gets the parts of its span, one after the other.
      const uint64_t part = ranks[root_index_].input_bytes / n;
      TensorSpec spec = reference.tensors[0];
      spec.shape[0] /= static_cast<int64_t>(n);
      own_results_.assign(n, std::nullopt);
      for (size_t j = 0; j < n; ++j) {
        if (ranks[j].left_out) {
          ranks[j].output_bytes = 0;
          continue;
        }
        const CoveredSpan span = SpanOf(ranks, static_cast<int>(j));
        const uint64_t bytes = static_cast<uint64_t>(span.count()) * part;
        add(root_index_, span.first * part, bytes, j, 0);
        ranks[j].output_bytes = bytes;
        if (span.count() > 1) {
          own_results_[j] = spec;
          own_results_[j]->shape[0] *= span.count();
        }
      }
      return {spec};
    }
    case Mode::kAllToAll: {
      // Every rank sends as many bytes as it gets, one part (`part` bytes)
      // to each. A contribution for ranks s..t (its span) holds, per
      // destination d in group order, the parts of s..t for d: bytes
      // [d * c * part, (d + 1) * c * part), c = t - s + 1. They land
      // together in d's result, after the parts of ranks 0..s-1; d's result
      // is at (d - e) * n * part of the result of the contribution that
      // stands for d, whose span begins at e.
      own_results_.assign(n, std::nullopt);
      for (size_t i = 0; i < n; ++i) {
        ranks[i].output_bytes = ranks[i].input_bytes;
        if (ranks[i].left_out) continue;
        const CoveredSpan from = SpanOf(ranks, static_cast<int>(i));
        const uint64_t c = static_cast<uint64_t>(from.count());
        const uint64_t part = ranks[i].input_bytes / (n * c);
        for (size_t d = 0; d < n; ++d) {
          const int covered_by = ranks[d].covered_by;
          const size_t to = covered_by >= 0 ? covered_by : d;
          const uint64_t place = (d - to) * n * part + from.first * part;
          add(i, d * c * part, c * part, to, place);
        }
        if (c > 1) {
          own_results_[i] = reference.tensors[0];
          own_results_[i]->shape[0] *= from.count();
        }
      }
      return {reference.tensors[0]};
    }
    case Mode::kAllToAllV:
      break;
  }
  // AllToAllV: rank j gets, in rank order, the rows every rank sends it.
  const uint64_t row = RowBytes(reference.tensors[0]);
  std::vector<int64_t> rows_to(n, 0);  // rows placed in each result so far
  for (size_t i = 0; i < n; ++i) {
    const std::vector<int64_t>& send = ranks[i].fp.send_rows;
    uint64_t begin = 0;
    for (size_t j = 0; j < n; ++j) {
      const uint64_t bytes = static_cast<uint64_t>(send[j]) * row;
      add(i, begin, bytes, j, static_cast<uint64_t>(rows_to[j]) * row);
      begin += bytes;
      rows_to[j] += send[j];
    }
  }
  own_results_.assign(n, reference.tensors[0]);
  for (size_t j = 0; j < n; ++j) {
    own_results_[j]->shape[0] = rows_to[j];
    ranks[j].output_bytes = static_cast<uint64_t>(rows_to[j]) * row;
  }
  return {reference.tensors[0]};
}

std::optional<std::vector<TensorSpec>> ExchangeStrategy::ResultOf(
    int index) const {
  if (static_cast<size_t>(index) >= own_results_.size() ||
      !own_results_[index].has_value()) {
    return std::nullopt;
  }
  return std::vector<TensorSpec>{*own_results_[index]};
}

bool ExchangeStrategy::Cover(int index, std::vector<StagedChunk>* /*ready*/) {
  return (mode_ == Mode::kScatter && index != root_index_) ||
         mode_ == Mode::kAllToAll;
}

void ExchangeStrategy::Forward(int index, uint64_t offset, const Payload& data,
                               Output& out) {
  const std::vector<Part>& parts = parts_[index];
  // The first part that ends after `offset`.
  auto it = std::upper_bound(
      parts.begin(), parts.end(), offset,
      [](uint64_t pos, const Part& part) { return pos < part.end; });
  size_t consumed = 0;
  for (; it != parts.end() && consumed < data.size(); ++it) {
    const uint64_t pos = offset + consumed;
    const uint64_t in_part = pos - it->begin;
    const size_t n = std::min<uint64_t>(it->end - pos, data.size() - consumed);
    std::vector<SharedBytes> pieces;
    data.AppendPiecesWithin(consumed, n, &pieces);
    out.SendTo(it->to, it->place + in_part, std::move(pieces));
    consumed += n;
  }
}

}  // namespace reducer
