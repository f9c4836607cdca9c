// The robustness campaign's contract for quorum steps
// (Client::AllReduceQuorum), checked over the history of a quorum job
// (tests/campaign/quorum_worker.cc):
//
//   std::vector<Violation> v = CheckQuorumSteps(ops, faults, limits);
//
// One step is the successful "quorum"/"quorum_inplace" operations of a job
// that carry the same step number and whose calls were all in flight at
// one instant, the decision (a job started again after a lost shard counts
// its steps from 0 again, later in time). For each step:
// - every rank that got it saw the same contributors and the same joined
//   ranks, and is one of them;
// - the contributors are exactly the ranks alive and in time: a rank of the
//   job missing from both lists was reached by a fault (its own, or a
//   shard's) between Limits::aftermath before the decision and the
//   decision; a listed rank had a call in flight at the decision, or was
//   SIGKILLed around it;
// - the contributors hold the same replicated state after it.
// The "handoff" Broadcasts that give the state to joined ranks: every rank
// that completed one holds the same state after it.
// (A result is checked against the contributors by the worker itself:
// Operation::check.)
//
// Pure; thread-safe.
#ifndef REDUCER_TESTS_CAMPAIGN_QUORUM_CHECK_H_
#define REDUCER_TESTS_CAMPAIGN_QUORUM_CHECK_H_

#include <vector>

#include "tests/campaign/history.h"

namespace reducer {
namespace testing {

std::vector<Violation> CheckQuorumSteps(const std::vector<Operation>& ops,
                                        const std::vector<FaultWindow>& faults,
                                        const Limits& limits);

}  // namespace testing
}  // namespace reducer

#endif  // REDUCER_TESTS_CAMPAIGN_QUORUM_CHECK_H_
