// The robustness campaign's history and the checker that holds it to
// Reducer's contract.
//
//   std::vector<Operation> ops = ParseHistory(file_contents);   // the ranks'
//   std::vector<Violation> violations = CheckHistory(ops, faults, limits);
//
// The workers write their lines with FormatHistoryLine, the parser's
// inverse.
//
// The contract checked, operation by operation:
// - a result is the closed form, and a failed in-place call left its buffer
//   untouched (the worker's "check"; tests/campaign/op_mix.h makes a doubled
//   contribution show);
// - for each collective (job, round, step, kind), the ranks that ran it all
//   succeeded or all failed (unless the result died with its shard, see
//   Violation::lost_with_shard);
// - no operation outlived its deadline plus the client's slack;
// - a failure happened while a fault that can reach its job was active (or
//   within Limits::aftermath of its end), and its message names a cause: a
//   rank, a shard or reducerd, the epoch, or a deadline;
// - quorum steps (a quorum job's "quorum", "quorum_inplace" and "handoff"
//   operations) are held to their own contract instead of the agreement
//   above: see tests/campaign/quorum_check.h.
//
// Pure functions; thread-safe.
#ifndef REDUCER_TESTS_CAMPAIGN_HISTORY_H_
#define REDUCER_TESTS_CAMPAIGN_HISTORY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace reducer {
namespace testing {

// One line of a rank's history (see tests/campaign/campaign_worker.cc).
struct Operation {
  std::string job;
  int rank = 0;
  int gen = 0;
  int64_t round = 0;  // the epoch as the ranks agreed it (see the worker)
  // -1: connect and resync. A quorum step: the job's number for it
  // (QuorumResult::step), or kUnknownStep when it failed before learning it.
  int64_t step = -1;
  std::string kind;
  int64_t elements = 0;
  bool named = false;
  absl::Time start;
  absl::Time end;
  int timeout_ms = 0;
  std::string code;  // "OK", "ABORTED", ...
  std::string message;
  std::string check;  // "ok", "none", "bad: ..."
  // A quorum step that succeeded: the ranks its result lists, and the
  // rank's replicated state after it (see tests/campaign/quorum_worker.cc;
  // empty when the rank holds none yet).
  std::vector<int> contributors;
  std::vector<int> joined;
  std::string state;

  static constexpr int64_t kUnknownStep = -2;

  bool ok() const { return code == "OK"; }
  // One of a quorum job's operations ("quorum", "quorum_inplace", "handoff").
  bool quorum() const;
  // A collective (not a connect or a resync).
  bool collective() const { return step >= 0 || step == kUnknownStep; }
  // "j0 rank 1 step 57 allreduce_inplace [t+12.345s..t+12.400s] ABORTED: ..."
  std::string Describe(absl::Time origin) const;
};

// A fault as the driver injected it: active from `start` until `end`.
struct FaultWindow {
  std::string kind;  // "kill_rank", "link_down", ...
  std::string what;  // "j0 rank 2", "shard 1 (10.77.0.3:50051)"
  std::string job;   // the only job it can reach; empty: every job
  absl::Time start;
  absl::Time end;
  // A relay's fault: the ranks of `job` that reach the shards through it.
  std::vector<int> ranks;
};

struct Limits {
  // An operation may end this much after its timeout (the client's own
  // deadline slack, a retry, scheduling on a loaded machine).
  absl::Duration deadline_slack = absl::Seconds(10);
  // A fault's consequences may show this long after it ended (a call that
  // started during it, ranks connecting again).
  absl::Duration aftermath = absl::Seconds(15);
  // Connect's own timeout.
  absl::Duration connect_timeout = absl::Seconds(5);
};

// One breach of the contract, and where in the history it shows.
struct Violation {
  std::string what;  // a sentence, with the operations that show it
  std::string job;
  absl::Time at;     // when the operation that shows it started
  // A disagreement that the contract allows: the rank that failed did so
  // because a session ended (UNAVAILABLE, ABORTED, FAILED_PRECONDITION,
  // CANCELLED) with a shard that was SIGKILLed or restarted meanwhile
  // (its message names that shard's address). The result it had decided
  // lived only in that reducerd's memory, so asking again (a replay) could
  // not get it. Reported apart from the violations; every other
  // disagreement is one (results lost on the way are asked for again).
  // Likewise, all or nothing, for a relay (reducerd --upstream) SIGKILLed
  // meanwhile: the ranks that failed are exactly the ranks of killed
  // relays that ran the collective, each failed as a session's end; the
  // relay's ranks are lost with it, the other ranks agree among themselves.
  bool lost_with_shard = false;
};

// One line of a history file (with its newline): what the workers append.
std::string FormatHistoryLine(const Operation& op);

// Appends `op`'s line to the open file `fd` in one write, so that a line is
// whole even if the process is killed; nothing when fd < 0.
void AppendHistoryLine(int fd, const Operation& op);

// The operations of one or more history files' contents (lines that do not
// parse, such as a line cut by a SIGKILL, are skipped).
std::vector<Operation> ParseHistory(absl::string_view contents);

// Every violation, in the order of the checks above.
std::vector<Violation> CheckHistory(const std::vector<Operation>& ops,
                                      const std::vector<FaultWindow>& faults,
                                      const Limits& limits);

}  // namespace testing
}  // namespace reducer

#endif  // REDUCER_TESTS_CAMPAIGN_HISTORY_H_
