// SendReceiveStrategy: a point-to-point message (CollectiveKind::kSendReceive)
// over the group {source, destination}, root = source. A buffered send: the
// source reserves its whole payload (Reservation) and its call finishes OK as
// soon as reducerd holds all of it (FinishesAlone), whether or not the
// destination has attached. Until the destination attaches the bytes are
// held here, shared with the received messages; from then on each message
// is forwarded as received, at its own offset, to the destination only,
// whose result is the source's tensor. The source gets an empty spec list
// and 0 result bytes. Bytes a client lent (a same-host shared segment) are
// copied on arrival, since the source's call ends before they are
// delivered.
//
// Memory: the source's reservation (its whole payload) stays until the
// collective is done (the destination got every byte) or failed
// (HoldsBytesOf); a message whose destination never comes is dropped, and
// its bytes released, at the collective's deadline. The destination reserves
// nothing: what is queued for it is the source's bytes.
//
// Back-pressure: none is needed, the whole payload being reserved; both
// ranks may always read.
#ifndef REDUCER_SERVER_ENGINE_SEND_RECEIVE_STRATEGY_H_
#define REDUCER_SERVER_ENGINE_SEND_RECEIVE_STRATEGY_H_

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "server/engine/kind_strategy.h"

namespace reducer {

class SendReceiveStrategy final : public KindStrategy {
 public:
  // `source_index`: the source's position in the (sorted) group of two.
  explicit SendReceiveStrategy(int source_index);

  size_t Reservation(int index, size_t input_bytes) const override;
  std::vector<TensorSpec> PlanResult(const Fingerprint& reference,
                                     std::vector<RankState>& ranks) override;
  bool GetsResult(int index) const override;
  bool FinishesAlone(int index) const override;
  void OnAllAttached(Output& out) override;
  void Accept(int index, const RankState& rank, uint64_t offset, Payload data,
              bool all_attached, Output& out,
              std::vector<StagedChunk>* ready) override;
  bool MayRead(int index, const std::vector<RankState>& ranks,
               bool all_attached) const override;
  bool HoldsBytesOf(int index) const override;
  void Clear() override;

 private:
  const int source_;
  const int destination_;
  // What the source sent before the destination attached, in order.
  std::vector<std::pair<uint64_t, Payload>> held_;
  bool cleared_ = false;
};

}  // namespace reducer

#endif  // REDUCER_SERVER_ENGINE_SEND_RECEIVE_STRATEGY_H_
