#include "server/engine/quorum_step.h"

#include "absl/strings/str_cat.h"

namespace reducer {

QuorumStep::QuorumStep(int group_size, const QuorumSettings& settings)
    : rule_(group_size, settings) {}

void QuorumStep::Start(const std::vector<int>& absent,
                       const std::vector<int>& joining,
                       std::vector<RankState>& ranks, Host& host) {
  for (int index : joining) {
    ranks[index].joining = true;
    rule_.Joining(index);
  }
  // Absent from the start: left out already, and not named again in the
  // log (the job named them when they were lost).
  for (int index : absent) {
    rule_.Died(index);
    if (!ranks[index].left_out) host.LeaveOut(index);
  }
}

void QuorumStep::Arrived(int index, absl::Time at,
                         const std::vector<RankState>& ranks, Host& host) {
  rule_.Arrived(index, at);
  Decide(at, ranks, host);
}

void QuorumStep::Withdrew(int index) { rule_.Withdrew(index); }

void QuorumStep::Lost(int index, absl::Time now,
                      const std::vector<RankState>& ranks, Host& host) {
  rule_.Died(index);
  Decide(now, ranks, host);
}

void QuorumStep::Decide(absl::Time now, const std::vector<RankState>& ranks,
                        Host& host) {
  const QuorumDecision decision = rule_.Decide(now);
  switch (decision.state) {
    case QuorumDecision::State::kWaiting:
      if (decision.wake_at != absl::InfiniteFuture() &&
          decision.wake_at != look_at_) {
        look_at_ = decision.wake_at;
        host.LookAgainAt(decision.wake_at);
      }
      return;
    case QuorumDecision::State::kImpossible:
      host.StepFailed(decision.why);
      return;
    case QuorumDecision::State::kDecided:
      break;
  }
  std::vector<bool> takes_part(ranks.size(), false);
  for (int i : decision.contributors) takes_part[i] = true;
  for (int i : decision.joined) takes_part[i] = true;
  std::vector<int> left_out;
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (takes_part[i] || ranks[i].left_out) continue;
    // A rank lost after it attached has no call left to answer.
    host.LeaveOut(static_cast<int>(i));
    left_out.push_back(static_cast<int>(i));
  }
  host.StepEnded(decision.contributors, left_out);
}

absl::Status QuorumStep::LateRefusal(const std::string& description, int rank) {
  return absl::FailedPreconditionError(absl::StrCat(
      description, " finished without rank ", rank,
      ": it arrived after the step ended over the ranks in time; Connect "
      "again to rejoin at the next step"));
}

}  // namespace reducer
