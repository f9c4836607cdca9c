#include "tests/campaign/quorum_check.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace reducer {
namespace testing {
namespace {

// Operations of one collective: every call was in flight over [lo, hi].
struct Cluster {
  absl::Time lo;
  absl::Time hi;
  std::vector<const Operation*> ops;
};

// Groups `ops` (all of one job, one kind family and one step number) into
// collectives: calls that share an instant.
std::vector<Cluster> ClusterByOverlap(std::vector<const Operation*> ops) {
  std::sort(ops.begin(), ops.end(),
            [](const Operation* a, const Operation* b) { return a->start < b->start; });
  std::vector<Cluster> clusters;
  for (const Operation* op : ops) {
    Cluster* home = nullptr;
    for (Cluster& c : clusters) {
      if (op->start <= c.hi && op->end >= c.lo) home = &c;
    }
    if (home == nullptr) {
      clusters.push_back(Cluster{op->start, op->end, {}});
      home = &clusters.back();
    }
    home->lo = std::max(home->lo, op->start);
    home->hi = std::min(home->hi, op->end);
    home->ops.push_back(op);
  }
  return clusters;
}

// A shard's fault reaches every rank; a rank's, that rank; a relay's, every
// rank it serves.
bool Reaches(const FaultWindow& f, const std::string& job, int rank) {
  if (f.job.empty()) return true;
  if (f.job != job) return false;
  return std::find(f.ranks.begin(), f.ranks.end(), rank) != f.ranks.end() ||
         absl::StartsWith(f.what, absl::StrCat(job, " rank ", rank, " "));
}

std::string Ranks(const std::vector<int>& ranks) {
  return absl::StrCat("[", absl::StrJoin(ranks, ","), "]");
}

class Checker {
 public:
  Checker(const std::vector<Operation>& ops, const std::vector<FaultWindow>& faults,
          const Limits& limits)
      : ops_(ops), faults_(faults), limits_(limits) {
    origin_ = absl::InfiniteFuture();
    for (const Operation& op : ops) origin_ = std::min(origin_, op.start);
    for (const FaultWindow& f : faults) origin_ = std::min(origin_, f.start);
    for (const Operation& op : ops) {
      int& world = world_[op.job];
      world = std::max(world, op.rank + 1);
    }
  }

  std::vector<Violation> Run() {
    std::map<std::pair<std::string, int64_t>, std::vector<const Operation*>> steps, handoffs;
    for (const Operation& op : ops_) {
      if (!op.quorum() || !op.ok() || op.step < 0) continue;
      (op.kind == "handoff" ? handoffs : steps)[{op.job, op.step}].push_back(&op);
    }
    for (const auto& [key, ops] : steps) {
      for (const Cluster& step : ClusterByOverlap(ops)) CheckStep(key.second, step);
    }
    for (const auto& [key, ops] : handoffs) {
      for (const Cluster& handoff : ClusterByOverlap(ops)) {
        CheckSameState(handoff, "the handoff after step", key.second);
      }
    }
    return std::move(violations_);
  }

 private:
  void Add(const std::string& what, const Cluster& c) {
    violations_.push_back({what, c.ops.front()->job, c.ops.front()->start});
  }

  void CheckStep(int64_t step, const Cluster& c) {
    const Operation& first = *c.ops.front();
    const std::string name = absl::StrCat("step ", step, " of ", first.job);
    for (const Operation* op : c.ops) {
      if (op->contributors != first.contributors || op->joined != first.joined) {
        Add(absl::StrCat("ranks disagree on ", name, ": ", first.Describe(origin_),
                         " lists contributors ", Ranks(first.contributors), " joined ",
                         Ranks(first.joined), " but ", op->Describe(origin_), " lists ",
                         Ranks(op->contributors), " joined ", Ranks(op->joined)),
            c);
        return;
      }
    }
    std::set<int> listed(first.contributors.begin(), first.contributors.end());
    listed.insert(first.joined.begin(), first.joined.end());
    if (first.contributors.empty() ||
        listed.size() != first.contributors.size() + first.joined.size()) {
      Add(absl::StrCat(name, " lists contributors ", Ranks(first.contributors), " and joined ",
                       Ranks(first.joined), ": ", first.Describe(origin_)),
          c);
    }
    std::set<int> answered;
    for (const Operation* op : c.ops) {
      answered.insert(op->rank);
      if (listed.count(op->rank) == 0) {
        Add(absl::StrCat(name, " answered rank ", op->rank,
                         ", which it does not list: ", op->Describe(origin_)),
            c);
      }
    }
    const int world = world_[first.job];
    for (int rank = 0; rank < world; ++rank) {
      if (listed.count(rank) == 0 && !Excused(first.job, rank, c)) {
        Add(absl::StrCat(name, " went on without rank ", rank,
                         ", alive and in time (no fault reached it since ",
                         absl::FormatDuration(limits_.aftermath),
                         " before): ", first.Describe(origin_)),
            c);
      }
      if (listed.count(rank) != 0 && answered.count(rank) == 0 && !InFlight(first.job, rank, c)) {
        Add(absl::StrCat(
                name, " lists rank ", rank,
                ", which had no call in flight at its decision: ", first.Describe(origin_)),
            c);
      }
    }
    Cluster contributors{c.lo, c.hi, {}};
    for (const Operation* op : c.ops) {
      if (!op->joined.empty() && std::count(op->joined.begin(), op->joined.end(), op->rank) != 0) {
        continue;  // a joined rank holds no state until the handoff
      }
      contributors.ops.push_back(op);
    }
    if (!contributors.ops.empty()) CheckSameState(contributors, "step", step);
  }

  // A fault reached `rank` between aftermath before the decision and it.
  bool Excused(const std::string& job, int rank, const Cluster& c) const {
    for (const FaultWindow& f : faults_) {
      if (Reaches(f, job, rank) && f.start <= c.hi && f.end + limits_.aftermath >= c.lo) {
        return true;
      }
    }
    return false;
  }

  // `rank` had a call in flight at the decision (its line may say it
  // failed afterwards), or was killed around it (its line was never
  // written).
  bool InFlight(const std::string& job, int rank, const Cluster& c) const {
    for (const Operation& op : ops_) {
      if (op.job == job && op.rank == rank && op.start <= c.hi && op.end >= c.lo) return true;
    }
    for (const FaultWindow& f : faults_) {
      if (f.kind == "kill_rank" && Reaches(f, job, rank) && f.start >= c.lo - limits_.aftermath &&
          f.start <= c.hi + limits_.aftermath) {
        return true;
      }
    }
    return false;
  }

  void CheckSameState(const Cluster& c, absl::string_view what, int64_t step) {
    const Operation& first = *c.ops.front();
    for (const Operation* op : c.ops) {
      if (op->state != first.state) {
        Add(absl::StrCat("replicated state differs after ", what, " ", step, ": ",
                         first.Describe(origin_), " holds ", first.state, " but ",
                         op->Describe(origin_), " holds ", op->state),
            c);
        return;
      }
    }
  }

  const std::vector<Operation>& ops_;
  const std::vector<FaultWindow>& faults_;
  const Limits limits_;
  absl::Time origin_;
  std::map<std::string, int> world_;  // a job's ranks, from its history
  std::vector<Violation> violations_;
};

}  // namespace

std::vector<Violation> CheckQuorumSteps(const std::vector<Operation>& ops,
                                        const std::vector<FaultWindow>& faults,
                                        const Limits& limits) {
  return Checker(ops, faults, limits).Run();
}

}  // namespace testing
}  // namespace reducer
