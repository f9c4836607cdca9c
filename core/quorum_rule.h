// QuorumRule: when a quorum step (an all-reduce that may finish without a
// dead or late rank) may end, and over which ranks.
//
//   QuorumRule rule(/*group_size=*/4, QuorumSettings{/*min_ranks=*/3,
//                                                   absl::Seconds(2)});
//   rule.Arrived(0, t0); rule.Arrived(1, t0 + ms); rule.Arrived(2, t0 + 2 *
//   ms); rule.Decide(t0 + 3 * ms);        // kWaiting, wake_at t0 + 2 s
//   rule.Decide(t0 + absl::Seconds(2));  // kDecided over {0, 1, 2}
//
// The rule: a step ends as soon as every rank of the group not known dead
// has arrived, or once `grace` has passed since the first arrival, in both
// cases over the ranks that arrived (and are not dead), and only when at
// least `min_ranks` did (0: the whole group). Past the grace with too few,
// it ends at the arrival that makes enough. When the ranks not dead can no
// longer make `min_ranks`, it cannot end (kImpossible, naming the dead).
// The contributors are positions in the group, ascending, whatever the
// order of arrival, so that a reduction over them in that order gives the
// same bits on every rank.
//
// A joining position (a rank that connected again since the previous step)
// takes part without contributing: the step waits for it as for any rank
// not dead, but its arrival neither starts the grace nor counts toward
// `min_ranks` (0 then means every rank not joining), and the decision
// lists it in `joined` once it arrived. One that has not arrived when the
// step ends is left out.
//
// Time is passed in, never read: the caller's clock and timers drive it.
// Not thread-safe; the caller's lock guards it.
#ifndef REDUCER_CORE_QUORUM_RULE_H_
#define REDUCER_CORE_QUORUM_RULE_H_

#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace reducer {

struct QuorumSettings {
  int min_ranks = 0;  // at least this many must contribute; 0: all
  absl::Duration grace = absl::Seconds(2);  // past the first arrival
};

struct QuorumDecision {
  enum class State { kWaiting, kDecided, kImpossible };
  State state = State::kWaiting;
  // kWaiting: when the decision may change without another arrival or
  // death (the grace's end); InfiniteFuture when only one of those can.
  absl::Time wake_at = absl::InfiniteFuture();
  // kDecided: the positions in the group that contribute, ascending, and
  // the joining positions that arrived, ascending.
  std::vector<int> contributors;
  std::vector<int> joined;
  // kImpossible: FAILED_PRECONDITION naming min_ranks and the dead ranks.
  absl::Status why;
};

class QuorumRule {
 public:
  // INVALID_ARGUMENT naming the value unless 0 <= min_ranks <= group_size
  // and grace is finite and not negative (group_size >= 1).
  static absl::Status Validate(int group_size, const QuorumSettings& settings);

  // `settings` must pass Validate.
  QuorumRule(int group_size, QuorumSettings settings);

  // Position `index` arrived (its whole input is in) at `at`. Arriving
  // twice, or after dying, changes nothing.
  void Arrived(int index, absl::Time at);

  // Position `index` is known dead: it will not contribute, and an arrival
  // it made no longer counts (its input may be cut short). The grace still
  // runs from the first arrival, whoever made it.
  void Died(int index);

  // Position `index` withdrew its arrival (its call was cancelled before
  // the step ended; it may arrive again). The grace still runs.
  void Withdrew(int index);

  // Position `index` is joining (see above). Call before it arrives.
  void Joining(int index);

  QuorumDecision Decide(absl::Time now) const;

 private:
  const int group_size_;
  const int min_ranks_;
  const absl::Duration grace_;
  std::vector<bool> arrived_;
  std::vector<bool> dead_;
  std::vector<bool> joining_;
  std::optional<absl::Time> first_arrival_;
};

}  // namespace reducer

#endif  // REDUCER_CORE_QUORUM_RULE_H_
