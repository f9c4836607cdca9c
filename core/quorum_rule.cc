#include "core/quorum_rule.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace reducer {

absl::Status QuorumRule::Validate(int group_size,
                                  const QuorumSettings& settings) {
  if (settings.min_ranks < 0 || settings.min_ranks > group_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "quorum min_ranks is ", settings.min_ranks,
        "; it must be between 0 (every rank) and the group's size, ",
        group_size));
  }
  if (settings.grace < absl::ZeroDuration() ||
      settings.grace == absl::InfiniteDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("quorum grace is ", absl::FormatDuration(settings.grace),
                     "; it must be finite and not negative"));
  }
  return absl::OkStatus();
}

QuorumRule::QuorumRule(int group_size, QuorumSettings settings)
    : group_size_(group_size),
      min_ranks_(settings.min_ranks),
      grace_(settings.grace),
      arrived_(group_size, false),
      dead_(group_size, false),
      joining_(group_size, false) {}

void QuorumRule::Arrived(int index, absl::Time at) {
  if (dead_[index] || arrived_[index]) return;
  arrived_[index] = true;
  if (!joining_[index] && !first_arrival_.has_value()) first_arrival_ = at;
}

void QuorumRule::Died(int index) {
  dead_[index] = true;
  arrived_[index] = false;
}

void QuorumRule::Withdrew(int index) { arrived_[index] = false; }

void QuorumRule::Joining(int index) { joining_[index] = true; }

QuorumDecision QuorumRule::Decide(absl::Time now) const {
  QuorumDecision decision;
  std::vector<int> arrived;  // contributing positions that arrived
  std::vector<int> joined;   // joining positions that arrived
  std::vector<int> dead;
  int joining = 0;           // joining positions not dead
  for (int i = 0; i < group_size_; ++i) {
    if (arrived_[i]) (joining_[i] ? joined : arrived).push_back(i);
    if (dead_[i]) dead.push_back(i);
    if (joining_[i] && !dead_[i]) ++joining;
  }
  const int alive = group_size_ - static_cast<int>(dead.size());
  const int needed = min_ranks_ == 0 ? group_size_ - joining : min_ranks_;
  if (alive - joining < needed) {
    decision.state = QuorumDecision::State::kImpossible;
    decision.why = absl::FailedPreconditionError(absl::StrCat(
        "the step needs ", needed, " contributing ranks, but positions [",
        absl::StrJoin(dead, ", "), "] of the group are dead",
        joining > 0 ? absl::StrCat(" and ", joining, " are joining") : "",
        ", so at most ", alive - joining, " can contribute"));
    return decision;
  }
  const int count = static_cast<int>(arrived.size());
  const bool everyone_alive_arrived =
      count + static_cast<int>(joined.size()) == alive;
  const bool grace_over =
      first_arrival_.has_value() && now >= *first_arrival_ + grace_;
  if (count >= needed && count > 0 && (everyone_alive_arrived || grace_over)) {
    decision.state = QuorumDecision::State::kDecided;
    decision.contributors = std::move(arrived);
    decision.joined = std::move(joined);
    return decision;
  }
  if (first_arrival_.has_value() && !grace_over) {
    decision.wake_at = *first_arrival_ + grace_;
  }
  return decision;
}

}  // namespace reducer
