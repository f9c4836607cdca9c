// ExchangeStrategy: Scatter, AllToAll and AllToAllV. Nothing is reduced:
// each sender's input is cut along dim 0 into one part per rank of the
// group, and the bytes of part j go to rank j only, shared, not copied, as
// they are received. Scatter's only sender is the root, whose input is cut
// into equal parts, and part j lands at offset 0 of rank j's result; in
// AllToAll every rank sends, cut into equal parts, and part j of rank i
// lands at offset i * part_bytes of rank j's result (shapes agree exactly
// across ranks, so every rank's result has the shape of its input). In
// AllToAllV rank i's part j is the send_rows[j] rows that follow its parts
// for ranks 0..j-1, and lands in rank j's result after the rows ranks
// 0..i-1 send it: rank j's result has as many rows as all ranks send it
// (its own result specs, ResultOf), the trailing dimensions and dtype
// agreed by all. A part of no rows sends nothing. A received message that
// spans parts is split at their boundaries. Holding back early payload,
// memory and back-pressure: HeldBackForwarding.
//
// A Scatter contribution that covers ranks (Cover: a relay's for several
// ranks, the root's when the root is among them) gets their parts with its
// own, one range of the root's input (they are consecutive): the parts of
// ranks first..last of its span, in group order. An AllToAll contribution
// that covers ranks (Cover: a relay's) sends, per destination in group
// order, the parts its ranks send it, in group order (one range of the
// destination's result), and gets its ranks' results one after the other,
// in group order (own result specs, ResultOf).
//
// AllToAllV checks rows pair by pair as ranks attach (CheckAttached): where
// a rank said what it expects from another (recv_rows), or from itself,
// that must be what the other (or it) sends it, else FAILED_PRECONDITION
// naming both ranks and both numbers: "mismatched rows: rank 0 sends 3 rows
// to rank 2, but rank 2 expects 4 from rank 0".
#ifndef REDUCER_SERVER_ENGINE_EXCHANGE_STRATEGY_H_
#define REDUCER_SERVER_ENGINE_EXCHANGE_STRATEGY_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "server/engine/held_back_forwarding.h"

namespace reducer {

class ExchangeStrategy final : public HeldBackForwarding {
 public:
  enum class Mode { kScatter, kAllToAll, kAllToAllV };

  // `root_index`: for kScatter, the root's position in the group.
  ExchangeStrategy(Mode mode, int root_index, int group_size,
                   size_t chunk_bytes, int window);

  absl::Status CheckAttached(int index, const Fingerprint& fp,
                             const std::vector<RankState>& ranks,
                             const std::vector<int>& group,
                             int* other) const override;
  std::vector<TensorSpec> PlanResult(const Fingerprint& reference,
                                     std::vector<RankState>& ranks) override;
  // AllToAllV: every rank's own; Scatter and AllToAll: a contribution's
  // that covers other ranks (its ranks' results, concatenated).
  std::optional<std::vector<TensorSpec>> ResultOf(int index) const override;
  // Scatter, but not its root (whose input is every rank's parts), and
  // AllToAll.
  bool Cover(int index, std::vector<StagedChunk>* ready) override;

 private:
  // Bytes [begin, end) of a sender's input, which land at `place` of rank
  // `to`'s result.
  struct Part {
    uint64_t begin = 0;
    uint64_t end = 0;
    int to = 0;
    uint64_t place = 0;
  };

  // Sends bytes [offset, offset + data.size()) of ranks[index]'s input,
  // part by part, to the ranks the parts belong to.
  void Forward(int index, uint64_t offset, const Payload& data,
               Output& out) override;

  const Mode mode_;
  const int root_index_;
  // Per sender, its parts in input order, parts of no bytes left out (known
  // once all attached).
  std::vector<std::vector<Part>> parts_;
  // Per rank, its result's one tensor when it is its own (kAllToAllV: every
  // rank's; kScatter, kAllToAll: a contribution's that covers other ranks).
  std::vector<std::optional<TensorSpec>> own_results_;
};

}  // namespace reducer

#endif  // REDUCER_SERVER_ENGINE_EXCHANGE_STRATEGY_H_
