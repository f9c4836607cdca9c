#include "client/shards/partition_split.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/data_type.h"
#include "core/fingerprint.h"
#include "core/payload_layout.h"
#include "core/point_to_point_name.h"
#include "proto/reducer/v1/wire_conversion.h"

namespace reducer {
namespace {

// The header's tensors, or nullopt when one does not convert.
std::optional<std::vector<TensorSpec>> DeclaredTensors(
    const v1::CollectiveHeader& header) {
  std::vector<TensorSpec> specs;
  specs.reserve(header.tensors_size());
  for (int i = 0; i < header.tensors_size(); ++i) {
    absl::StatusOr<TensorSpec> spec =
        TensorSpecFromWire(header.tensors(i), /*with_op=*/true, "tensors", i);
    if (!spec.ok() || !NumBytes(spec->dtype, spec->shape).ok()) return std::nullopt;
    specs.push_back(*std::move(spec));
  }
  return specs;
}

// A copy of `whole` declaring `tensors` (read from `inputs`) instead.
Contribution PartOf(const Contribution& whole, const std::vector<TensorSpec>& tensors,
                    std::vector<const void*> inputs) {
  Contribution part;
  part.header = whole.header;
  part.header.clear_tensors();
  for (const TensorSpec& t : tensors) *part.header.add_tensors() = TensorSpecToWire(t);
  // The specs come from a layout that was valid whole, so pieces of it are.
  part.layout = *ComputePayloadLayout(tensors);
  part.inputs = std::move(inputs);
  part.send_payload = whole.send_payload;
  part.deadline = whole.deadline;
  part.device = whole.device;
  part.cuda_stream = whole.cuda_stream;
  part.same_host_path = whole.same_host_path;
  return part;
}

SplitCollective Whole(const Contribution& whole, int shard) {
  SplitCollective split;
  split.whole = true;
  split.parts.emplace_back();
  split.parts[0].shard = shard;
  split.parts[0].contribution = whole;
  return split;
}

// The same contribution to every shard (Done: each shard's part of the job
// must leave the rank out).
SplitCollective ToEveryShard(const Contribution& whole, int shards) {
  SplitCollective split;
  split.whole = false;
  for (int shard = 0; shard < shards; ++shard) {
    PartitionContribution& part = split.parts.emplace_back();
    part.shard = shard;
    part.contribution = whole;
  }
  return split;
}

// A quorum step is decided once, by the first shard; every other shard
// gets a follower note (CollectiveHeader.quorum_follower), so that its part
// of the job runs in quorum mode too.
SplitCollective SplitQuorumBarrier(const Contribution& whole, int shards) {
  SplitCollective split = ToEveryShard(whole, shards);
  for (size_t k = 1; k < split.parts.size(); ++k) {
    split.parts[k].contribution.header.set_quorum_follower(true);
  }
  return split;
}

// A partition's payload bytes, readable as the whole's gate lets the bytes
// they are read from be read (an all-reduce's pieces, read in place).
class PieceGate final : public InputGate {
 public:
  // `sources[i]`: where piece i of the partition (laid out by `layout`)
  // starts in the payload `whole` gates.
  PieceGate(const InputGate* whole, std::vector<size_t> sources,
            const PayloadLayout& layout)
      : whole_(whole),
        sources_(std::move(sources)),
        offsets_(layout.offsets),
        sizes_(layout.sizes) {}
  absl::Status Await(size_t end, absl::Time deadline) const override {
    size_t need = 0;
    for (size_t i = 0; i < offsets_.size() && offsets_[i] < end; ++i) {
      need =
          std::max(need, sources_[i] + std::min(end - offsets_[i], sizes_[i]));
    }
    return whole_->Await(need, deadline);
  }

 private:
  const InputGate* const whole_;
  const std::vector<size_t> sources_;
  const std::vector<size_t> offsets_;  // the partition's layout
  const std::vector<size_t> sizes_;
};

// `whole`'s memory for a partition's pieces (declared as `specs`; piece i
// starts skips[i] bytes into its tensor), counted by `landed` where the
// whole result counts it.
std::shared_ptr<const ResultInto> ResultIntoPieces(
    const ResultInto& whole, const std::vector<TensorSpec>& specs,
    const std::vector<TensorPiece>& pieces, const std::vector<size_t>& skips) {
  auto part = std::make_shared<ResultInto>();
  part->specs = specs;
  for (size_t i = 0; i < pieces.size(); ++i) {
    part->data.push_back(whole.data[pieces[i].tensor] + skips[i]);
    part->offsets.push_back(whole.offsets[pieces[i].tensor] + skips[i]);
  }
  part->landed = whole.landed;
  part->owner = whole.owner;
  return part;
}

SplitCollective SplitAllReduce(const Contribution& whole,
                               const std::vector<TensorSpec>& tensors,
                               int shards, uint64_t key,
                               size_t min_partition_bytes) {
  std::vector<ReducePartition> plan =
      PlanAllReduce(tensors, shards, key, min_partition_bytes);
  if (plan.size() == 1) return Whole(whole, plan[0].shard);
  SplitCollective split;
  split.whole = false;
  split.parts.resize(plan.size());
  for (size_t k = 0; k < plan.size(); ++k) {
    std::vector<TensorSpec> specs;
    std::vector<const void*> inputs;
    // Where each piece starts in its tensor, and in the whole payload.
    std::vector<size_t> skips, sources;
    for (const TensorPiece& piece : plan[k].pieces) {
      const TensorSpec& source = tensors[piece.tensor];
      skips.push_back(piece.begin * DataTypeSize(source.dtype));
      sources.push_back(whole.layout.offsets[piece.tensor] + skips.back());
      specs.push_back(TensorSpec{source.dtype, {piece.count}, source.op});
      inputs.push_back(
          static_cast<const unsigned char*>(whole.inputs[piece.tensor]) +
          skips.back());
    }
    PartitionContribution& part = split.parts[k];
    part.shard = plan[k].shard;
    part.contribution = PartOf(whole, specs, std::move(inputs));
    if (whole.inputs_gate != nullptr) {
      part.gate = std::make_unique<PieceGate>(
          whole.inputs_gate, std::move(sources), part.contribution.layout);
      part.contribution.inputs_gate = part.gate.get();
    }
    if (whole.result_into != nullptr) {
      part.contribution.result_into =
          ResultIntoPieces(*whole.result_into, specs, plan[k].pieces, skips);
    }
    part.pieces = std::move(plan[k].pieces);
  }
  return split;
}

// `ranks`: how many ranks an AllToAll contribution stands for (header.ranks,
// a relay's; 1 otherwise). Its input holds, per destination, their parts for
// it one after the other; the plan is one rank's, as every other rank makes
// it, and each partition takes the same piece of every one of their parts.
SplitCollective SplitBySlices(const Contribution& whole,
                              const TensorSpec& input, int64_t ranks,
                              int shards, uint64_t key,
                              size_t min_partition_bytes) {
  const int group = whole.header.group_size();
  TensorSpec one = input;
  one.shape[0] /= ranks;
  const int64_t elements = *NumElements(one.shape);
  std::vector<ScatterPartition> plan =
      PlanReduceScatter(one, group, shards, key, min_partition_bytes);
  if (plan.size() == 1) return Whole(whole, plan[0].shard);
  const size_t es = DataTypeSize(input.dtype);
  const int64_t slice = elements / group;
  const int64_t slices = group * ranks;
  const unsigned char* source = static_cast<const unsigned char*>(whole.inputs[0]);
  SplitCollective split;
  split.whole = false;
  split.parts.resize(plan.size());
  for (size_t k = 0; k < plan.size(); ++k) {
    PartitionContribution& part = split.parts[k];
    part.shard = plan[k].shard;
    part.begin = plan[k].begin;
    part.count = plan[k].count;
    const size_t piece_bytes = part.count * es;
    part.gathered.reset(new unsigned char[slices * piece_bytes + 1]);
    for (int64_t g = 0; g < slices; ++g) {
      std::memcpy(part.gathered.get() + g * piece_bytes,
                  source + (g * slice + part.begin) * es, piece_bytes);
    }
    const TensorSpec spec{input.dtype, {slices * part.count}, input.op};
    part.contribution = PartOf(whole, {spec}, {part.gathered.get()});
  }
  return split;
}

absl::Status WrongShape(size_t part, const Tensor& got, int64_t want) {
  return absl::InternalError(absl::StrCat(
      "partition ", part, " came back with ", got.num_elements(),
      " elements where its shard was sent ", want));
}

}  // namespace

SplitCollective SplitContribution(const Contribution& whole, int shards,
                                  size_t min_partition_bytes) {
  const v1::CollectiveHeader& header = whole.header;
  const std::vector<int> group(header.group().begin(), header.group().end());
  // Point-to-point messages and matches route by destination and tag.
  const uint64_t key = CollectiveKeyHash(PointToPointRoute(header.name()),
                                         group, header.sequence());
  const int whole_shard = ShardForKey(key, shards);
  absl::StatusOr<CollectiveKind> kind = CollectiveKindFromWire(header.kind());
  if (kind.ok() && *kind == CollectiveKind::kQuorumBarrier && shards > 1) {
    return SplitQuorumBarrier(whole, shards);
  }
  if (kind.ok() && *kind == CollectiveKind::kDone && shards > 1) {
    return ToEveryShard(whole, shards);
  }
  if (!kind.ok() || shards <= 1 || !whole.send_payload) {
    return Whole(whole, whole_shard);
  }
  std::optional<std::vector<TensorSpec>> tensors = DeclaredTensors(header);
  if (!tensors.has_value() || whole.inputs.size() != tensors->size()) {
    return Whole(whole, whole_shard);
  }
  switch (*kind) {
    case CollectiveKind::kAllReduce:
      if (tensors->empty()) break;
      return SplitAllReduce(whole, *tensors, shards, key, min_partition_bytes);
    case CollectiveKind::kReduce:
      // Cut as an AllReduce; each partition is a Reduce with the same root.
      if (tensors->size() != 1) break;
      return SplitAllReduce(whole, *tensors, shards, key, min_partition_bytes);
    case CollectiveKind::kReduceScatter:
    case CollectiveKind::kAllToAll: {
      // Both cut each rank-slice (an all-to-all's part) the same way, so a
      // partition is itself a collective of its kind over every slice's piece.
      if (tensors->size() != 1 || header.group_size() < 1) break;
      const TensorSpec& input = (*tensors)[0];
      // An all-to-all for several ranks holds each one's parts; a
      // reduce-scatter's holds their sum, one rank's size.
      const int64_t ranks = *kind == CollectiveKind::kAllToAll
                                ? std::max(1, header.ranks_size())
                                : 1;
      if (input.shape.empty() ||
          input.shape[0] % (header.group_size() * ranks) != 0) {
        break;
      }
      return SplitBySlices(whole, input, ranks, shards, key,
                           min_partition_bytes);
    }
    default:
      break;
  }
  return Whole(whole, whole_shard);
}

bool PartitionsReadInPlace(const Contribution& whole) {
  absl::StatusOr<CollectiveKind> kind =
      CollectiveKindFromWire(whole.header.kind());
  return kind.ok() && (*kind == CollectiveKind::kAllReduce ||
                       *kind == CollectiveKind::kReduce);
}

absl::StatusOr<std::vector<Tensor>> JoinPartitionResults(
    const Contribution& whole, const SplitCollective& split,
    std::vector<std::vector<Tensor>>* results,
    const std::shared_ptr<BufferCache>& buffers) {
  if (split.whole) return std::move((*results)[0]);
  // Each partition wrote its piece into the caller's memory.
  if (whole.result_into != nullptr) return LentTensors(*whole.result_into);
  std::optional<std::vector<TensorSpec>> tensors = DeclaredTensors(whole.header);
  absl::StatusOr<CollectiveKind> kind = CollectiveKindFromWire(whole.header.kind());
  if (kind.ok() && *kind == CollectiveKind::kQuorumBarrier) {
    return std::move((*results)[0]);  // the deciding shard's marks
  }
  if (kind.ok() && *kind == CollectiveKind::kDone) {
    // Each shard's next sequence number: the largest.
    std::vector<Tensor> largest;
    for (size_t k = 0; k < split.parts.size(); ++k) {
      std::vector<Tensor>& got = (*results)[k];
      if (got.size() != 1 || got[0].dtype() != DataType::kInt64 ||
          got[0].num_elements() != 1) {
        return absl::InternalError(absl::StrCat(
            "partition ", k, " of a done came back without its one int64"));
      }
      if (largest.empty() ||
          got[0].values<int64_t>()[0] > largest[0].values<int64_t>()[0]) {
        largest = std::move(got);
      }
    }
    return largest;
  }
  if (!tensors.has_value() || !kind.ok()) {
    return absl::InternalError("a split collective's header no longer converts");
  }
  if (*kind == CollectiveKind::kReduce &&
      whole.header.root() != whole.header.rank()) {
    // A Reduce's non-root gets no tensor from any partition, nor in all.
    for (size_t k = 0; k < split.parts.size(); ++k) {
      if (!(*results)[k].empty()) {
        return absl::InternalError(absl::StrCat(
            "partition ", k, " of a reduce came back with ",
            (*results)[k].size(), " tensors to non-root rank ",
            whole.header.rank(), ", which gets none"));
      }
    }
    return std::vector<Tensor>();
  }
  if (*kind == CollectiveKind::kAllToAll) {
    // Partition k's result holds, for each sender i in group order, the
    // piece [begin, begin + count) of the part i sent to this rank; for a
    // contribution for several ranks (header.ranks, a relay's), that for
    // each of them in order, as the whole result holds their rows.
    const TensorSpec& input = (*tensors)[0];
    const int group = whole.header.group_size();
    const int64_t slices = group * std::max(1, whole.header.ranks_size());
    const int64_t slice = *NumElements(input.shape) / slices;
    Tensor out = Tensor::Uninitialized(input.dtype, input.shape, buffers);
    const size_t es = DataTypeSize(input.dtype);
    for (size_t k = 0; k < split.parts.size(); ++k) {
      const PartitionContribution& part = split.parts[k];
      const std::vector<Tensor>& got = (*results)[k];
      if (got.size() != 1 || got[0].num_elements() != slices * part.count) {
        return got.empty() ? absl::InternalError(absl::StrCat(
                                 "partition ", k, " came back with no tensor"))
                           : WrongShape(k, got[0], slices * part.count);
      }
      for (int64_t i = 0; i < slices; ++i) {
        std::memcpy(static_cast<unsigned char*>(out.mutable_data()) +
                        (i * slice + part.begin) * es,
                    static_cast<const unsigned char*>(got[0].data()) +
                        i * part.count * es,
                    part.count * es);
      }
    }
    std::vector<Tensor> joined;
    joined.push_back(std::move(out));
    return joined;
  }
  if (*kind == CollectiveKind::kReduceScatter) {
    // A contribution for several ranks (header.ranks, a relay's) gets their
    // slices back to back; partition k's result holds, for each of them in
    // order, the piece [begin, begin + count) of its slice.
    const TensorSpec& input = (*tensors)[0];
    const int group = whole.header.group_size();
    const int64_t ranks = std::max(1, whole.header.ranks_size());
    const int64_t slice = *NumElements(input.shape) / group;
    std::vector<int64_t> shape = input.shape;
    shape[0] = shape[0] / group * ranks;
    Tensor out = Tensor::Uninitialized(input.dtype, shape, buffers);
    const size_t es = DataTypeSize(input.dtype);
    for (size_t k = 0; k < split.parts.size(); ++k) {
      const PartitionContribution& part = split.parts[k];
      const std::vector<Tensor>& got = (*results)[k];
      if (got.size() != 1 || got[0].num_elements() != ranks * part.count) {
        return got.empty() ? absl::InternalError(absl::StrCat(
                                 "partition ", k, " came back with no tensor"))
                           : WrongShape(k, got[0], ranks * part.count);
      }
      for (int64_t j = 0; j < ranks; ++j) {
        std::memcpy(static_cast<unsigned char*>(out.mutable_data()) +
                        (j * slice + part.begin) * es,
                    static_cast<const unsigned char*>(got[0].data()) +
                        j * part.count * es,
                    part.count * es);
      }
    }
    std::vector<Tensor> joined;
    joined.push_back(std::move(out));
    return joined;
  }
  std::vector<Tensor> joined;
  joined.reserve(tensors->size());
  for (const TensorSpec& t : *tensors) {
    joined.push_back(Tensor::Uninitialized(t.dtype, t.shape, buffers));
  }
  for (size_t k = 0; k < split.parts.size(); ++k) {
    const PartitionContribution& part = split.parts[k];
    const std::vector<Tensor>& got = (*results)[k];
    if (got.size() != part.pieces.size()) {
      return absl::InternalError(absl::StrCat(
          "partition ", k, " came back with ", got.size(), " tensors where ",
          part.pieces.size(), " were sent"));
    }
    for (size_t p = 0; p < part.pieces.size(); ++p) {
      const TensorPiece& piece = part.pieces[p];
      if (got[p].num_elements() != piece.count) return WrongShape(k, got[p], piece.count);
      const size_t es = DataTypeSize((*tensors)[piece.tensor].dtype);
      std::memcpy(static_cast<unsigned char*>(joined[piece.tensor].mutable_data()) +
                      piece.begin * es,
                  got[p].data(), piece.count * es);
    }
  }
  return joined;
}

}  // namespace reducer
