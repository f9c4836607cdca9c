// The robustness campaign's workload: which collective a job runs at each
// step (drawn from the job's seed, so every rank draws the same one), what
// rank r contributes to it, and the exact result every rank must get,
// computed by plain arithmetic.
//
//   CampaignOp op = DrawOp(seed, step, world_size, max_elements);
//   std::vector<float> mine = SumInput(op, rank);
//   std::vector<float> want = SumExpected(op);
//
// Contributions are small integers, exact in float32 and int32 whatever
// order a reduction adds them in. Every SUM input carries a one-hot part:
// element i of rank i mod W holds 1 more, so a contribution counted twice
// (or missed) shows in the result.
//
// Pure functions; thread-safe.
#ifndef REDUCER_TESTS_CAMPAIGN_OP_MIX_H_
#define REDUCER_TESTS_CAMPAIGN_OP_MIX_H_

#include <cstdint>
#include <string>
#include <vector>

namespace reducer {
namespace testing {

enum class CampaignKind {
  kAllReduce,          // out of place, SUM
  kAllReduceMax,       // out of place, MAX
  kAllReduceInPlace,   // SUM
  kAllReduceAsync,     // SUM, AllReduceAsync then Wait
  kAllReduceMany,      // three tensors, SUM
  kAllGather,          // uneven dim 0
  kBroadcast,          // out of place, empty view on non-roots
  kBroadcastInPlace,
  kReduceScatter,      // SUM
  kBarrier,
  kMetricSync,         // two states, in place
};

// Its name in histories ("allreduce_inplace").
std::string KindName(CampaignKind kind);

struct CampaignOp {
  int64_t step = 0;
  CampaignKind kind = CampaignKind::kAllReduce;
  int64_t elements = 0;  // float32 elements (per rank, per tensor kind)
  bool named = false;    // matched by name ("c<step>") rather than order
  int world_size = 1;
  int root = 0;          // Broadcast
};

// The op of `step` for a job of `world_size` ranks: about a third tiny (0
// to 16 elements), a third up to 64 Ki, a third up to `max_elements`
// (several partitions over the shards).
CampaignOp DrawOp(uint64_t seed, int64_t step, int world_size,
                  int64_t max_elements);

// SUM: rank r's input of `n` elements for `salt`, and the sum over all
// ranks.
std::vector<float> SumInput(int64_t n, int64_t salt, int rank, int world_size);
std::vector<float> SumExpected(int64_t n, int64_t salt, int world_size);
// MAX: the same.
std::vector<float> MaxInput(int64_t n, int64_t salt, int rank);
std::vector<float> MaxExpected(int64_t n, int64_t salt, int world_size);

// AllGather: rank r's rows (of kGatherColumns), and all ranks' in order.
inline constexpr int64_t kGatherColumns = 5;
int64_t GatherRows(const CampaignOp& op, int rank);
std::vector<float> GatherInput(const CampaignOp& op, int rank);
std::vector<float> GatherExpected(const CampaignOp& op);

// Broadcast: the root's tensor.
std::vector<float> BroadcastValues(const CampaignOp& op);

// ReduceScatter: each rank's input holds world_size x slice elements;
// rank r gets elements [r x slice, (r + 1) x slice) of the sum.
int64_t ScatterSlice(const CampaignOp& op);

}  // namespace testing
}  // namespace reducer

#endif  // REDUCER_TESTS_CAMPAIGN_OP_MIX_H_
