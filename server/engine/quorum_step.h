// QuorumStep: how a quorum barrier (CollectiveKind::kQuorumBarrier) ends
// before every rank of its group attached. Its Collective reports each
// rank's arrival, withdrawal (a cancelled call detached for its retry) and
// loss (its session ended); the step asks its QuorumRule (core/quorum_rule.h)
// and answers through its Host: look again at the grace's end, fail (the
// step can no longer end), or leave out every rank that did not arrive and
// end over the others, who then get the marks of
// server/engine/quorum_barrier_strategy.h. A late call of a rank left out is
// refused with LateRefusal.
//
//   QuorumStep step(group.size(), settings);
//   step.Start(absent, joining, ranks, host);  // absent ranks left out now
//   step.Arrived(index, clock.Now(), host);    // may end the step
//
// Thread-compatible: its Collective calls it under its own lock, and the
// Host's calls run under that lock as well.
#ifndef REDUCER_SERVER_ENGINE_QUORUM_STEP_H_
#define REDUCER_SERVER_ENGINE_QUORUM_STEP_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "core/quorum_rule.h"
#include "server/engine/kind_strategy.h"

namespace reducer {

class QuorumStep {
 public:
  // What the step does to its collective (positions are in group order).
  class Host {
   public:
    // Ask Decide again at `when` (a grace ends then).
    virtual void LookAgainAt(absl::Time when) = 0;
    // The step cannot end (too few ranks left alive): the collective fails
    // with `why`.
    virtual void StepFailed(const absl::Status& why) = 0;
    // The rank at `index` takes no part: it counts as attached and
    // finished, is sent nothing, and holds no memory any more.
    virtual void LeaveOut(int index) = 0;
    // The step ended over the positions `contributors` (and the joining
    // ranks that arrived); those in `left_out` were just left out.
    virtual void StepEnded(const std::vector<int>& contributors,
                           const std::vector<int>& left_out) = 0;

   protected:
    ~Host() = default;
  };

  QuorumStep(int group_size, const QuorumSettings& settings);

  // Right after its collective is made: `joining` positions take part
  // without contributing (their RankState::joining is set), `absent`
  // positions count as dead from the start and are left out at once.
  void Start(const std::vector<int>& absent, const std::vector<int>& joining,
             std::vector<RankState>& ranks, Host& host);

  // Times are those of the engine's clock (server/engine/clock.h).
  // The rank at `index` attached at `at`, the time now; the step may end now.
  void Arrived(int index, absl::Time at, const std::vector<RankState>& ranks,
               Host& host);
  // The rank at `index`, attached, was detached again (its call cancelled
  // before it sent anything).
  void Withdrew(int index);
  // The rank at `index` is known dead at `now`: the step no longer waits
  // for it and may end now.
  void Lost(int index, absl::Time now, const std::vector<RankState>& ranks,
            Host& host);
  // Asks the rule at `now` (the timer LookAgainAt asked for): the step may
  // end or fail now. Call only while the step has not ended or failed.
  void Decide(absl::Time now, const std::vector<RankState>& ranks, Host& host);

  // What a late call of `rank`, left out of the step `description`, gets.
  static absl::Status LateRefusal(const std::string& description, int rank);

 private:
  QuorumRule rule_;
  // When the timer asked for with LookAgainAt fires next.
  absl::Time look_at_ = absl::InfiniteFuture();
};

}  // namespace reducer

#endif  // REDUCER_SERVER_ENGINE_QUORUM_STEP_H_
