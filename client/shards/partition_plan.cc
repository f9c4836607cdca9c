#include "client/shards/partition_plan.h"

#include <algorithm>

#include "core/data_type.h"
#include "core/tensor.h"

namespace reducer {
namespace {

constexpr uint64_t kFnvOffset = 14695981039346656037ull;
constexpr uint64_t kFnvPrime = 1099511628211ull;

void Mix(uint64_t* h, const void* data, size_t n) {
  const unsigned char* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) {
    *h ^= p[i];
    *h *= kFnvPrime;
  }
}

// Little-endian on every machine, so the hash does not depend on it.
void MixInt(uint64_t* h, uint64_t v) {
  unsigned char bytes[8];
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<unsigned char>(v >> (8 * i));
  Mix(h, bytes, sizeof(bytes));
}

int64_t Elements(const TensorSpec& t) {
  absl::StatusOr<int64_t> n = NumElements(t.shape);
  return n.ok() ? *n : 0;  // validated by the caller
}

// How many partitions `bytes` is cut into, at most `limit` (the shards, or
// the elements available).
int64_t PartitionCount(size_t bytes, int64_t limit, size_t min_partition_bytes) {
  const size_t by_size = bytes / std::max<size_t>(min_partition_bytes, 1);
  return std::max<int64_t>(1, std::min<int64_t>(limit, static_cast<int64_t>(by_size)));
}

}  // namespace

uint64_t CollectiveKeyHash(absl::string_view name, absl::Span<const int> group,
                           uint64_t sequence) {
  uint64_t h = kFnvOffset;
  if (!name.empty()) {
    Mix(&h, "name", 4);
    Mix(&h, name.data(), name.size());
    return h;
  }
  Mix(&h, "seq", 3);
  for (int r : group) MixInt(&h, static_cast<uint64_t>(r));
  MixInt(&h, sequence);
  return h;
}

int ShardForKey(uint64_t key_hash, int shards) {
  return shards <= 1 ? 0 : static_cast<int>(key_hash % static_cast<uint64_t>(shards));
}

std::vector<ReducePartition> PlanAllReduce(absl::Span<const TensorSpec> tensors,
                                           int shards, uint64_t key_hash,
                                           size_t min_partition_bytes) {
  size_t total = 0;
  for (const TensorSpec& t : tensors) total += Elements(t) * DataTypeSize(t.dtype);
  const int64_t parts = PartitionCount(total, shards, min_partition_bytes);
  const int first = ShardForKey(key_hash, shards);
  std::vector<ReducePartition> plan(parts);
  for (int64_t k = 0; k < parts; ++k) {
    plan[k].shard = static_cast<int>((first + k) % std::max(shards, 1));
  }
  // Walk the elements in order; partition k ends at byte (k + 1) x total /
  // parts, moved back to the start of the element holding it.
  int64_t k = 0;
  size_t tensor_start = 0;  // byte position of the current tensor
  for (int i = 0; i < static_cast<int>(tensors.size()); ++i) {
    const size_t es = DataTypeSize(tensors[i].dtype);
    const int64_t n = Elements(tensors[i]);
    if (n == 0) {
      plan[0].pieces.push_back(TensorPiece{i, 0, 0});
      continue;
    }
    int64_t begin = 0;
    while (begin < n) {
      int64_t end = n;
      if (k + 1 < parts) {
        const size_t cut = static_cast<size_t>(
            static_cast<unsigned __int128>(total) * (k + 1) / parts);
        if (cut < tensor_start + n * es) {
          end = std::max<int64_t>(begin, (cut - tensor_start) / es);
        }
      }
      if (end > begin) plan[k].pieces.push_back(TensorPiece{i, begin, end - begin});
      if (end < n) ++k;  // the cut falls inside this tensor
      begin = end;
    }
    tensor_start += n * es;
  }
  return plan;
}

std::vector<ScatterPartition> PlanReduceScatter(const TensorSpec& input,
                                                int group_size, int shards,
                                                uint64_t key_hash,
                                                size_t min_partition_bytes) {
  const int64_t slice = Elements(input) / std::max(group_size, 1);
  const size_t total = Elements(input) * DataTypeSize(input.dtype);
  const int64_t parts = PartitionCount(
      total, std::min<int64_t>(shards, std::max<int64_t>(slice, 1)),
      min_partition_bytes);
  const int first = ShardForKey(key_hash, shards);
  std::vector<ScatterPartition> plan(parts);
  for (int64_t k = 0; k < parts; ++k) {
    plan[k].shard = static_cast<int>((first + k) % std::max(shards, 1));
    plan[k].begin = slice * k / parts;
    plan[k].count = slice * (k + 1) / parts - plan[k].begin;
  }
  return plan;
}

}  // namespace reducer
