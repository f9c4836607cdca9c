#include "tests/campaign/op_mix.h"

#include <algorithm>
#include <random>

namespace reducer {
namespace testing {
namespace {

// A generator for `step` of `seed`: the same on every rank and machine.
std::mt19937_64 StepGenerator(uint64_t seed, int64_t step) {
  std::seed_seq seq{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32),
                    static_cast<uint32_t>(step), static_cast<uint32_t>(step >> 32)};
  return std::mt19937_64(seq);
}

// Uniform in [lo, hi], from the generator's raw output (std's
// distributions differ between library versions).
int64_t Between(std::mt19937_64& gen, int64_t lo, int64_t hi) {
  return lo + static_cast<int64_t>(gen() % static_cast<uint64_t>(hi - lo + 1));
}

}  // namespace

std::string KindName(CampaignKind kind) {
  switch (kind) {
    case CampaignKind::kAllReduce: return "allreduce";
    case CampaignKind::kAllReduceMax: return "allreduce_max";
    case CampaignKind::kAllReduceInPlace: return "allreduce_inplace";
    case CampaignKind::kAllReduceAsync: return "allreduce_async";
    case CampaignKind::kAllReduceMany: return "allreduce_many";
    case CampaignKind::kAllGather: return "allgather";
    case CampaignKind::kBroadcast: return "broadcast";
    case CampaignKind::kBroadcastInPlace: return "broadcast_inplace";
    case CampaignKind::kReduceScatter: return "reduce_scatter";
    case CampaignKind::kBarrier: return "barrier";
    case CampaignKind::kMetricSync: return "metric_sync";
  }
  return "unknown";
}

CampaignOp DrawOp(uint64_t seed, int64_t step, int world_size,
                  int64_t max_elements) {
  std::mt19937_64 gen = StepGenerator(seed, step);
  CampaignOp op;
  op.step = step;
  op.world_size = world_size;
  op.kind = static_cast<CampaignKind>(Between(gen, 0, 10));
  switch (Between(gen, 0, 2)) {
    case 0: op.elements = Between(gen, 0, 16); break;
    case 1: op.elements = Between(gen, 17, 64 << 10); break;
    default: op.elements = Between(gen, 64 << 10, std::max<int64_t>(max_elements, 64 << 10));
  }
  op.named = Between(gen, 0, 3) == 0;
  op.root = static_cast<int>(Between(gen, 0, world_size - 1));
  return op;
}

std::vector<float> SumInput(int64_t n, int64_t salt, int rank, int world_size) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) {
    v[i] = static_cast<float>(2 * ((i + salt + rank) % 7) +
                              (i % world_size == rank ? 1 : 0));
  }
  return v;
}

std::vector<float> SumExpected(int64_t n, int64_t salt, int world_size) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) {
    int64_t sum = 1;  // the one-hot part, from rank i mod W
    for (int r = 0; r < world_size; ++r) sum += 2 * ((i + salt + r) % 7);
    v[i] = static_cast<float>(sum);
  }
  return v;
}

std::vector<float> MaxInput(int64_t n, int64_t salt, int rank) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) {
    v[i] = static_cast<float>((i * 31 + salt + rank * 17) % 1000);
  }
  return v;
}

std::vector<float> MaxExpected(int64_t n, int64_t salt, int world_size) {
  std::vector<float> v(n, 0.0f);
  for (int r = 0; r < world_size; ++r) {
    std::vector<float> in = MaxInput(n, salt, r);
    for (int64_t i = 0; i < n; ++i) v[i] = std::max(v[i], in[i]);
  }
  return v;
}

int64_t GatherRows(const CampaignOp& op, int rank) {
  // Uneven, some ranks with none: 0, 1 or 2 units of rows.
  return ((rank + op.step) % 3) * (op.elements / (3 * kGatherColumns) + 1);
}

std::vector<float> GatherInput(const CampaignOp& op, int rank) {
  const int64_t n = GatherRows(op, rank) * kGatherColumns;
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) {
    v[i] = static_cast<float>(rank * 100000 + (i + op.step) % 99991);
  }
  return v;
}

std::vector<float> GatherExpected(const CampaignOp& op) {
  std::vector<float> all;
  for (int r = 0; r < op.world_size; ++r) {
    std::vector<float> in = GatherInput(op, r);
    all.insert(all.end(), in.begin(), in.end());
  }
  return all;
}

std::vector<float> BroadcastValues(const CampaignOp& op) {
  std::vector<float> v(op.elements);
  for (int64_t i = 0; i < op.elements; ++i) {
    v[i] = static_cast<float>((i * 3 + op.step) % 10007);
  }
  return v;
}

int64_t ScatterSlice(const CampaignOp& op) {
  return op.elements / op.world_size;
}

}  // namespace testing
}  // namespace reducer
