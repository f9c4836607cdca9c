// ReduceStrategy: AllReduce, ReduceScatter and Reduce. Each rank's payload
// is staged in chunks of chunk_bytes; once every rank's part of chunk k is
// in, the chunk is reduced in group order (ReducePackedRange) and its result
// goes to every rank (AllReduce), or, cut at the slice boundaries, to the
// ranks whose slices it overlaps (ReduceScatter: rank i owns bytes
// [i * total / n, (i + 1) * total / n)), or to the root only (Reduce: the
// other ranks get no result). Each rank's call ends once every rank's
// payload is in (Collective::IsComplete).
//
// A rank's part of chunk k is held in the storage it arrived in, in as many
// pieces as it came in (a StagedPart), and never copied whole: the
// reduction reads it tile by tile, gathering only tiles that are not in one
// aligned piece into a cache-sized scratch (ReduceStagedParts).
//
// Ranks taking no part (Exclude: they called Done()) are left out of every
// chunk: the reduction runs over the others' parts in group order, so that
// kAvg divides by the ranks with values. Ranks covered by another's
// contribution (Cover: a relay's sum of several ranks) send no part either,
// but count among the ranks with values: kAvg divides the sum of the parts
// by the parts plus the covered ranks. A ReduceScatter contribution that
// covers ranks gets their slices with its own, one range of the reduction
// (they are consecutive): the slices of ranks first..last of its span.
//
// Back-pressure: a rank may read while it has fewer than `window` chunks
// staged and fewer than `window` messages queued for it. Reduce's non-roots
// reserve only their staged window (nothing is queued for them).
#ifndef REDUCER_SERVER_ENGINE_REDUCE_STRATEGY_H_
#define REDUCER_SERVER_ENGINE_REDUCE_STRATEGY_H_

#include <cstddef>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "core/payload_layout.h"
#include "server/engine/kind_strategy.h"

namespace reducer {

class ReduceStrategy final : public KindStrategy {
 public:
  enum class Mode { kAllReduce, kReduceScatter, kReduce };

  // `root_index`: for kReduce, the root's position in the group.
  ReduceStrategy(Mode mode, int root_index, int group_size, size_t chunk_bytes,
                 int window, ChunkPool* chunks);

  size_t Reservation(int index, size_t input_bytes) const override;
  std::vector<TensorSpec> PlanResult(const Fingerprint& reference,
                                     std::vector<RankState>& ranks) override;
  bool GetsResult(int index) const override;
  void Accept(int index, const RankState& rank, uint64_t offset, Payload data,
              bool all_attached, Output& out,
              std::vector<StagedChunk>* ready) override;
  absl::StatusOr<SharedBytes> Reduce(StagedChunk chunk) const override;
  void OnChunkReduced() override;
  void Deliver(size_t chunk_index, SharedBytes result, Output& out) override;
  bool MayRead(int index, const std::vector<RankState>& ranks,
               bool all_attached) const override;
  bool HoldsBytesOf(int index) const override;
  void Clear() override;
  // ReduceScatter: a contribution's own result specs when it covers other
  // ranks (its span's slices, concatenated).
  std::optional<std::vector<TensorSpec>> ResultOf(int index) const override;
  // AllReduce, and Reduce when it is not the root.
  bool Exclude(int index, std::vector<StagedChunk>* ready) override;
  // Every mode, but not Reduce's root.
  bool Cover(int index, std::vector<StagedChunk>* ready) override;

 private:
  // Leaves ranks[index]'s part out of every chunk (Exclude, Cover).
  void LeaveOut(int index, std::vector<StagedChunk>* ready);

  // What reducing a chunk needs; fixed by PlanResult, read without the lock.
  struct Plan {
    PayloadLayout layout;
    std::vector<TensorSpec> tensors;
    int covered = 0;  // ranks covered by another's part (Cover)
  };
  // One chunk being staged: a part per rank, filled in order.
  struct Staging {
    std::vector<StagedPart> parts;
    int complete = 0;  // ranks whose part is whole
  };

  const Mode mode_;
  const int root_index_;
  const int group_size_;
  const size_t chunk_bytes_;
  const int window_;
  ChunkPool* const chunks_;

  std::shared_ptr<const Plan> plan_;
  // Chunks staged but not yet whole, by chunk index.
  absl::flat_hash_map<size_t, Staging> staging_;
  // Per rank: its parts staged or being reduced.
  std::vector<int> staged_parts_;
  // Ranks taking no part (Exclude); a chunk is whole once every other
  // rank's part is in, and is reduced over those parts only.
  std::vector<bool> excluded_;
  int taking_part_;
  std::vector<bool> covered_;  // Cover: counted in kAvg's divisor
  // Every rank's payload size (they agree), once one rank sent bytes: the
  // last chunk's length for chunks made whole by Exclude.
  size_t plan_input_bytes_ = 0;
  // ReduceScatter, fixed by PlanResult: per rank, the bytes [first, second)
  // of the reduction it gets (empty for a covered rank), and the slice of
  // one rank; per rank, how many ranks' slices it gets.
  std::vector<std::pair<size_t, size_t>> result_range_;
  TensorSpec slice_;
  std::vector<int> slices_of_;
};

}  // namespace reducer

#endif  // REDUCER_SERVER_ENGINE_REDUCE_STRATEGY_H_
