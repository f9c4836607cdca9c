#include "server/engine/send_receive_strategy.h"

namespace reducer {

SendReceiveStrategy::SendReceiveStrategy(int source_index)
    : source_(source_index), destination_(1 - source_index) {}

size_t SendReceiveStrategy::Reservation(int index, size_t input_bytes) const {
  // The source's whole payload may be held at once; the destination sends
  // nothing and what is queued for it is the source's bytes.
  return index == source_ ? input_bytes : 0;
}

std::vector<TensorSpec> SendReceiveStrategy::PlanResult(
    const Fingerprint& /*reference*/, std::vector<RankState>& ranks) {
  ranks[source_].output_bytes = 0;
  ranks[destination_].output_bytes = ranks[source_].input_bytes;
  return {ranks[source_].fp.tensors[0]};
}

bool SendReceiveStrategy::GetsResult(int index) const {
  return index == destination_;
}

bool SendReceiveStrategy::FinishesAlone(int index) const {
  return index == source_;
}

void SendReceiveStrategy::OnAllAttached(Output& out) {
  std::vector<std::pair<uint64_t, Payload>> held = std::move(held_);
  held_.clear();
  for (const auto& [offset, data] : held) {
    out.SendTo(destination_, offset, data.pieces());
  }
}

void SendReceiveStrategy::Accept(int index, const RankState& /*rank*/,
                                 uint64_t offset, Payload data,
                                 bool all_attached, Output& out,
                                 std::vector<StagedChunk>* /*ready*/) {
  // Only the source has payload (the Collective bounds the destination's
  // input to 0 bytes).
  if (index != source_) return;
  // The source's call ends before its bytes are delivered: storage a client
  // lent (its shared segment) is copied, since it must be let go at once.
  Payload owned;
  for (const SharedBytes& piece : data.pieces()) owned.Append(Keepable(piece));
  if (!all_attached) {
    held_.emplace_back(offset, std::move(owned));
    return;
  }
  out.SendTo(destination_, offset, owned.pieces());
}

bool SendReceiveStrategy::MayRead(int /*index*/,
                                  const std::vector<RankState>& /*ranks*/,
                                  bool /*all_attached*/) const {
  return true;
}

bool SendReceiveStrategy::HoldsBytesOf(int index) const {
  return index == source_ && !cleared_;
}

void SendReceiveStrategy::Clear() {
  held_.clear();
  cleared_ = true;
}

}  // namespace reducer
