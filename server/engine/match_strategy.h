// MatchStrategy: a match (CollectiveKind::kMatch), the first step of a
// receive whose message reducerd picks (Client::ReceiveAny, or a Receive
// started while an earlier match of the same tag was unanswered). Its
// group is the receiving rank alone, which sends no payload; the job picks
// the message (server/jobs/message_matcher.h) and hands it over with
// SetResultValues: {source, n}, the sender's global rank and the message's
// count. The rank then gets one int64 tensor [2] holding them, and receives
// the message itself as a plain point-to-point message.
//
// Until the job answered, the match is undecided (Decided is false): the
// end of the job's epoch fails it (a lost rank is named, as for a Receive),
// a cancelled call is detached so that its retry takes its place, and its
// deadline's error says what it waited for: "no rank sent to rank 1 with
// tag 7" (or, for a Receive from one source that waited for an earlier
// match, which one). An answer that comes while the rank's call is detached
// is sent once its retry attaches.
//
// Memory: 16 result bytes, reserved as kept results are; nothing staged.
#ifndef REDUCER_SERVER_ENGINE_MATCH_STRATEGY_H_
#define REDUCER_SERVER_ENGINE_MATCH_STRATEGY_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/fingerprint.h"
#include "server/engine/kind_strategy.h"

namespace reducer {

class MatchStrategy final : public KindStrategy {
 public:
  // `reference`: the receiving rank's fingerprint (its group, tag, source
  // and sources).
  explicit MatchStrategy(const Fingerprint& reference);

  size_t Reservation(int index, size_t input_bytes) const override;
  std::vector<TensorSpec> PlanResult(const Fingerprint& reference,
                                     std::vector<RankState>& ranks) override;
  void OnAllAttached(Output& out) override;
  void SetResultValues(const std::vector<int64_t>& values, bool all_attached,
                       Output& out) override;
  bool Decided() const override { return answered_; }
  std::string Awaited() const override;
  // Never called: a match's input is empty, so the Collective's bounds
  // check refuses any payload first.
  void Accept(int, const RankState&, uint64_t, Payload, bool, Output&,
              std::vector<StagedChunk>*) override {}
  bool MayRead(int, const std::vector<RankState>&, bool) const override {
    return true;
  }

 private:
  // Sends the answer to the one rank.
  void Answer(Output& out) const;

  const int receiver_;
  const int64_t tag_;
  const int source_;  // -1: any of its sources
  bool answered_ = false;
  int64_t values_[2] = {0, 0};  // source, n
};

}  // namespace reducer

#endif  // REDUCER_SERVER_ENGINE_MATCH_STRATEGY_H_
