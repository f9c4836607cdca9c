// HeldBackForwarding: what every kind that forwards received bytes without
// reducing them shares (ForwardStrategy: AllGather, Broadcast, Gather;
// ExchangeStrategy: Scatter, AllToAll). A rank's place in the result is
// known only once every header is in, so payload that arrives before then
// is held back (and its rank stops reading) until OnAllAttached; after that
// each message goes straight to the subclass's Forward, which sends its
// bytes, shared, to the ranks that get them.
//
// Memory: a rank reserves a window of messages held back plus its share of
// the group's queued messages; ranks may read while fewer than `window`
// messages per rank are queued across the group.
#ifndef REDUCER_SERVER_ENGINE_HELD_BACK_FORWARDING_H_
#define REDUCER_SERVER_ENGINE_HELD_BACK_FORWARDING_H_

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "server/engine/kind_strategy.h"

namespace reducer {

class HeldBackForwarding : public KindStrategy {
 public:
  size_t Reservation(int index, size_t input_bytes) const override;
  void OnAllAttached(Output& out) override;
  void Accept(int index, const RankState& rank, uint64_t offset, Payload data,
              bool all_attached, Output& out,
              std::vector<StagedChunk>* ready) override;
  bool MayRead(int index, const std::vector<RankState>& ranks,
               bool all_attached) const override;
  void Clear() override;

 protected:
  HeldBackForwarding(int group_size, size_t chunk_bytes, int window);

  // Sends bytes [offset, offset + data.size()) of ranks[index]'s input to
  // the ranks that get them; called once every header is in.
  virtual void Forward(int index, uint64_t offset, const Payload& data,
                       Output& out) = 0;

  const int group_size_;

 private:
  const size_t chunk_bytes_;
  const int window_;
  // Per rank: what it sent before every header was in.
  std::vector<std::vector<std::pair<uint64_t, Payload>>> early_;
};

}  // namespace reducer

#endif  // REDUCER_SERVER_ENGINE_HELD_BACK_FORWARDING_H_
