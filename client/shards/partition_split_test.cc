#include "client/shards/partition_split.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/data_type.h"
#include "core/fingerprint.h"
#include "core/payload_layout.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/reducer/v1/wire_conversion.h"
#include "tests/matchers.h"

namespace reducer {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

// A contribution of `tensors` read from `inputs`, for a group of `group`
// ranks, sequence `sequence`.
Contribution ContributionOf(CollectiveKind kind, const std::vector<TensorSpec>& tensors,
                            std::vector<const void*> inputs, int group = 4,
                            uint64_t sequence = 7) {
  Contribution c;
  c.header.set_job("j");
  c.header.set_kind(static_cast<v1::CollectiveKind>(CollectiveKindToWire(kind)));
  for (int r = 0; r < group; ++r) c.header.add_group(r);
  c.header.set_sequence(sequence);
  c.header.set_attempt_id("s/1");
  for (const TensorSpec& t : tensors) *c.header.add_tensors() = TensorSpecToWire(t);
  c.layout = *ComputePayloadLayout(tensors);
  c.inputs = std::move(inputs);
  return c;
}

// What a shard answers one rank alone: its partition's tensors, unchanged.
std::vector<Tensor> EchoOf(const Contribution& part) {
  std::vector<Tensor> out;
  for (int i = 0; i < part.header.tensors_size(); ++i) {
    TensorSpec spec = *TensorSpecFromWire(part.header.tensors(i), true, "t", i);
    Tensor t(spec.dtype, spec.shape);
    std::memcpy(t.mutable_data(), part.inputs[i], t.num_bytes());
    out.push_back(std::move(t));
  }
  return out;
}

// What every rank of a collective cut by dim 0 (reduce-scatter, all-to-all)
// contributes: kRanks float32 tensors of [kRows, kCols], each split over 3
// shards.
constexpr int kRanks = 4;
constexpr int64_t kRows = 4 * 100000;  // dim 0: 100000 rows per rank
constexpr int64_t kCols = 3;

struct EveryRank {
  std::vector<std::vector<float>> inputs;  // inputs[q]: rank q's tensor
  std::vector<Contribution> wholes;        // reading inputs
  std::vector<SplitCollective> splits;
};

// Every rank's contribution to a collective of `kind`, element i of rank q's
// tensor holding value(q, i), and its split.
EveryRank SplitEveryRank(CollectiveKind kind,
                         const std::function<float(int, size_t)>& value) {
  const TensorSpec spec{DataType::kFloat32, {kRows, kCols}, ReduceOp::kSum};
  EveryRank all;
  all.inputs.assign(kRanks, std::vector<float>(kRows * kCols));
  for (int q = 0; q < kRanks; ++q) {
    for (size_t i = 0; i < all.inputs[q].size(); ++i) {
      all.inputs[q][i] = value(q, i);
    }
    all.wholes.push_back(ContributionOf(kind, {spec}, {all.inputs[q].data()}));
  }
  for (int q = 0; q < kRanks; ++q) {
    all.splits.push_back(SplitContribution(all.wholes[q], 3, kMiB));
  }
  return all;
}

TEST(PartitionSplitTest, SmallCollectiveGoesWholeToTheShardOfItsKey) {
  std::vector<float> x(1000, 1.0f);
  Contribution c = ContributionOf(CollectiveKind::kAllReduce,
                                  {{DataType::kFloat32, {1000}, ReduceOp::kSum}},
                                  {x.data()});
  SplitCollective split = SplitContribution(c, 3);
  ASSERT_TRUE(split.whole);
  ASSERT_EQ(split.parts.size(), 1u);
  const std::vector<int> group = {0, 1, 2, 3};
  EXPECT_EQ(split.parts[0].shard, ShardForKey(CollectiveKeyHash("", group, 7), 3));
  EXPECT_EQ(split.parts[0].contribution.header.SerializeAsString(),
            c.header.SerializeAsString());
  EXPECT_EQ(split.parts[0].contribution.inputs[0], x.data());
}

TEST(PartitionSplitTest, SmallCollectivesSpreadOverEveryShard) {
  std::vector<float> x(16, 1.0f);
  std::set<int> used;
  for (uint64_t seq = 0; seq < 64; ++seq) {
    Contribution c = ContributionOf(CollectiveKind::kAllReduce,
                                    {{DataType::kFloat32, {16}, ReduceOp::kSum}},
                                    {x.data()}, 4, seq);
    used.insert(SplitContribution(c, 4).parts[0].shard);
  }
  EXPECT_EQ(used, (std::set<int>{0, 1, 2, 3}));
}

TEST(PartitionSplitTest, AllReduceOfManyTensorsCutsAndJoinsBackByteForByte) {
  std::vector<float> a(1000 * 300);
  std::vector<int64_t> b(5);
  std::vector<double> c(600000);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i) * 0.5f;
  for (size_t i = 0; i < b.size(); ++i) b[i] = -static_cast<int64_t>(i) * 1000003;
  for (size_t i = 0; i < c.size(); ++i) c[i] = 1.0 / (i + 1);
  const std::vector<TensorSpec> specs = {
      {DataType::kFloat32, {1000, 300}, ReduceOp::kSum},
      {DataType::kInt64, {5}, ReduceOp::kMax},
      {DataType::kFloat64, {600000}, ReduceOp::kMin}};
  Contribution whole = ContributionOf(CollectiveKind::kAllReduce, specs,
                                      {a.data(), b.data(), c.data()});
  SplitCollective split = SplitContribution(whole, 3, kMiB);
  ASSERT_FALSE(split.whole);
  ASSERT_EQ(split.parts.size(), 3u);
  std::set<int> shards;
  size_t bytes = 0;
  for (const PartitionContribution& part : split.parts) {
    shards.insert(part.shard);
    const v1::CollectiveHeader& h = part.contribution.header;
    EXPECT_EQ(h.sequence(), 7u);
    EXPECT_EQ(h.attempt_id(), "s/1");
    ASSERT_EQ(h.tensors_size(), static_cast<int>(part.pieces.size()));
    for (int i = 0; i < h.tensors_size(); ++i) {
      EXPECT_EQ(h.tensors(i).shape_size(), 1);  // every piece is 1-D
      EXPECT_EQ(h.tensors(i).op(), TensorSpecToWire(specs[part.pieces[i].tensor]).op());
    }
    bytes += part.contribution.layout.total_bytes;
  }
  EXPECT_EQ(shards.size(), 3u);  // one partition per shard
  // Near-equal: no partition above 40 % of the bytes.
  for (const PartitionContribution& part : split.parts) {
    EXPECT_LT(part.contribution.layout.total_bytes, bytes * 2 / 5);
  }
  std::vector<std::vector<Tensor>> results;
  for (const PartitionContribution& part : split.parts) {
    results.push_back(EchoOf(part.contribution));
  }
  absl::StatusOr<std::vector<Tensor>> joined =
      JoinPartitionResults(whole, split, &results, nullptr);
  ASSERT_THAT(joined, IsOk());
  ASSERT_EQ(joined->size(), 3u);
  EXPECT_EQ((*joined)[0].shape(), (std::vector<int64_t>{1000, 300}));
  EXPECT_EQ(std::memcmp((*joined)[0].data(), a.data(), a.size() * 4), 0);
  EXPECT_EQ(std::memcmp((*joined)[1].data(), b.data(), b.size() * 8), 0);
  EXPECT_EQ(std::memcmp((*joined)[2].data(), c.data(), c.size() * 8), 0);
}

TEST(PartitionSplitTest, AllReduceIntoMemoryGivenCutsItIntoPiecesOfIt) {
  std::vector<float> a(1000 * 300);
  std::vector<double> c(600000);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i) * 0.5f;
  for (size_t i = 0; i < c.size(); ++i) c[i] = 1.0 / (i + 1);
  const std::vector<TensorSpec> specs = {
      {DataType::kFloat32, {1000, 300}, ReduceOp::kSum},
      {DataType::kFloat64, {600000}, ReduceOp::kMin}};
  Contribution whole =
      ContributionOf(CollectiveKind::kAllReduce, specs, {a.data(), c.data()});
  // The result's memory, laid out as the payload; `landed` counts from 0.
  auto memory = std::make_shared<std::vector<char>>(whole.layout.total_bytes);
  char* base = memory->data();
  auto into = std::make_shared<ResultInto>();
  into->specs = specs;
  into->data = {base + whole.layout.offsets[0], base + whole.layout.offsets[1]};
  into->offsets = whole.layout.offsets;
  into->owner = memory;
  whole.result_into = into;
  SplitCollective split = SplitContribution(whole, 3, kMiB);
  ASSERT_FALSE(split.whole);
  std::vector<int> writes(whole.layout.total_bytes, 0);
  std::vector<std::vector<Tensor>> results;
  for (const PartitionContribution& part : split.parts) {
    const std::shared_ptr<const ResultInto>& piece =
        part.contribution.result_into;
    ASSERT_NE(piece, nullptr);
    ASSERT_EQ(piece->specs.size(), part.pieces.size());
    for (size_t i = 0; i < part.pieces.size(); ++i) {
      const TensorSpec declared = *TensorSpecFromWire(
          part.contribution.header.tensors(i), true, "t", i);
      EXPECT_EQ(piece->specs[i].dtype, declared.dtype);
      EXPECT_EQ(piece->specs[i].shape, declared.shape);
      // Where it lands is where it lies, in the whole's numbering.
      EXPECT_EQ(piece->offsets[i], static_cast<size_t>(piece->data[i] - base));
      const size_t bytes = part.contribution.layout.sizes[i];
      for (size_t b = 0; b < bytes; ++b) ++writes[piece->offsets[i] + b];
      // As a transport writes it: the partition's echo, into the piece.
      std::memcpy(piece->data[i], part.contribution.inputs[i], bytes);
    }
    results.emplace_back();  // the tensors lent over `memory` are the result
  }
  // Every byte of both tensors is written by exactly one piece.
  for (size_t t = 0; t < specs.size(); ++t) {
    for (size_t b = 0; b < whole.layout.sizes[t]; ++b) {
      ASSERT_EQ(writes[whole.layout.offsets[t] + b], 1)
          << "tensor " << t << " byte " << b;
    }
  }
  absl::StatusOr<std::vector<Tensor>> joined =
      JoinPartitionResults(whole, split, &results, nullptr);
  ASSERT_THAT(joined, IsOk());
  ASSERT_EQ(joined->size(), 2u);
  EXPECT_EQ((*joined)[0].data(), into->data[0]);  // lent, not copied
  EXPECT_EQ((*joined)[0].shape(), (std::vector<int64_t>{1000, 300}));
  EXPECT_EQ(std::memcmp((*joined)[0].data(), a.data(), a.size() * 4), 0);
  EXPECT_EQ(std::memcmp((*joined)[1].data(), c.data(), c.size() * 8), 0);
}

// Remembers the ends awaited through it; every byte is readable.
class RecordingGate final : public InputGate {
 public:
  absl::Status Await(size_t end, absl::Time) const override {
    awaited.push_back(end);
    return absl::OkStatus();
  }
  mutable std::vector<size_t> awaited;
};

TEST(PartitionSplitTest, AGatedAllReducesPartitionsAwaitTheBytesTheyReadFrom) {
  std::vector<float> a(1000 * 300);
  std::vector<double> c(600000);
  const std::vector<TensorSpec> specs = {
      {DataType::kFloat32, {1000, 300}, ReduceOp::kSum},
      {DataType::kFloat64, {600000}, ReduceOp::kMin}};
  Contribution whole =
      ContributionOf(CollectiveKind::kAllReduce, specs, {a.data(), c.data()});
  RecordingGate gate;
  whole.inputs_gate = &gate;
  EXPECT_TRUE(PartitionsReadInPlace(whole));
  SplitCollective split = SplitContribution(whole, 3, kMiB);
  ASSERT_FALSE(split.whole);
  for (const PartitionContribution& part : split.parts) {
    const Contribution& p = part.contribution;
    ASSERT_NE(p.inputs_gate, nullptr);
    ASSERT_NE(p.inputs_gate, &gate);
    // Where each of its pieces starts in the whole payload, computed from
    // the pointers it reads.
    for (size_t i = 0; i < part.pieces.size(); ++i) {
      const char* source = static_cast<const char*>(p.inputs[i]);
      const char* tensor =
          static_cast<const char*>(whole.inputs[part.pieces[i].tensor]);
      const size_t start =
          whole.layout.offsets[part.pieces[i].tensor] + (source - tensor);
      // Its first byte, its last, and all of it: the whole's bytes up to
      // there are awaited.
      for (size_t in_piece : {size_t{1}, p.layout.sizes[i]}) {
        gate.awaited.clear();
        ASSERT_TRUE(p.AwaitPayload(p.layout.offsets[i] + in_piece).ok());
        ASSERT_EQ(gate.awaited.size(), 1u);
        EXPECT_GE(gate.awaited[0], start + in_piece);
        // No more than the furthest byte of its pieces read so far.
        size_t furthest = 0;
        for (size_t j = 0; j <= i; ++j) {
          const char* s = static_cast<const char*>(p.inputs[j]);
          const char* t =
              static_cast<const char*>(whole.inputs[part.pieces[j].tensor]);
          furthest = std::max(
              furthest, whole.layout.offsets[part.pieces[j].tensor] + (s - t) +
                            (j == i ? in_piece : p.layout.sizes[j]));
        }
        EXPECT_EQ(gate.awaited[0], furthest);
      }
    }
  }
  // A reduce-scatter's partitions gather their bytes as they are made: the
  // whole payload must be awaited first.
  Contribution scatter =
      ContributionOf(CollectiveKind::kReduceScatter, {specs[0]}, {a.data()});
  EXPECT_FALSE(PartitionsReadInPlace(scatter));
}

TEST(PartitionSplitTest, ReduceScatterPartitionsReduceToTheClosedForm) {
  const EveryRank all =
      SplitEveryRank(CollectiveKind::kReduceScatter, [](int q, size_t i) {
        return static_cast<float>((q + 1) * 1000 + i % 997);
      });
  const std::vector<std::vector<float>>& inputs = all.inputs;
  const std::vector<SplitCollective>& splits = all.splits;
  ASSERT_FALSE(splits[0].whole);
  const size_t parts = splits[0].parts.size();
  ASSERT_EQ(parts, 3u);
  const int64_t slice = kRows * kCols / kRanks;
  for (int r = 0; r < kRanks; ++r) {
    // Each shard's reduce-scatter for rank r: sum over the ranks of piece r
    // of their gathered partition input.
    std::vector<std::vector<Tensor>> results;
    for (size_t k = 0; k < parts; ++k) {
      const int64_t count = splits[0].parts[k].count;
      Tensor t(DataType::kFloat32, {count});
      float* out = static_cast<float*>(t.mutable_data());
      for (int64_t e = 0; e < count; ++e) {
        float sum = 0;
        for (int q = 0; q < kRanks; ++q) {
          ASSERT_EQ(splits[q].parts[k].count, count);
          const float* g =
              static_cast<const float*>(splits[q].parts[k].contribution.inputs[0]);
          sum += g[r * count + e];
        }
        out[e] = sum;
      }
      results.push_back({});
      results.back().push_back(std::move(t));
    }
    absl::StatusOr<std::vector<Tensor>> joined =
        JoinPartitionResults(all.wholes[r], splits[r], &results, nullptr);
    ASSERT_THAT(joined, IsOk());
    ASSERT_EQ((*joined)[0].shape(), (std::vector<int64_t>{kRows / kRanks, kCols}));
    const float* got = static_cast<const float*>((*joined)[0].data());
    for (int64_t e = 0; e < slice; ++e) {
      float want = 0;
      for (int q = 0; q < kRanks; ++q) want += inputs[q][r * slice + e];
      ASSERT_EQ(got[e], want) << "rank " << r << " element " << e;
    }
  }
}

TEST(PartitionSplitTest, ReduceScatterForSeveralRanksJoinsTheirSlices) {
  // Ranks 1-2 as one contribution (a relay's: the sum of their inputs,
  // header.ranks {1, 2}), ranks 0 and 3 alone. Each shard gives the
  // contribution its two ranks' pieces back to back; joined, they are
  // ranks 1 and 2's slices of the sum, in closed form.
  const EveryRank all =
      SplitEveryRank(CollectiveKind::kReduceScatter, [](int q, size_t i) {
        return static_cast<float>((q + 1) * 1000 + i % 997);
      });
  const std::vector<std::vector<float>>& inputs = all.inputs;
  std::vector<float> summed(inputs[1].size());
  for (size_t i = 0; i < summed.size(); ++i) {
    summed[i] = inputs[1][i] + inputs[2][i];
  }
  Contribution carrier = all.wholes[1];
  carrier.header.set_rank(1);
  carrier.header.add_ranks(1);
  carrier.header.add_ranks(2);
  carrier.inputs = {summed.data()};
  const SplitCollective split = SplitContribution(carrier, 3, kMiB);
  ASSERT_FALSE(split.whole);
  ASSERT_EQ(split.parts.size(), 3u);
  const std::vector<const SplitCollective*> senders = {&all.splits[0], &split,
                                                       &all.splits[3]};
  std::vector<std::vector<Tensor>> results;
  for (size_t k = 0; k < split.parts.size(); ++k) {
    const int64_t count = split.parts[k].count;
    Tensor t(DataType::kFloat32, {2 * count});
    float* out = static_cast<float*>(t.mutable_data());
    for (int j = 0; j < 2; ++j) {
      for (int64_t e = 0; e < count; ++e) {
        float sum = 0;
        for (const SplitCollective* s : senders) {
          ASSERT_EQ(s->parts[k].count, count);
          const float* g =
              static_cast<const float*>(s->parts[k].contribution.inputs[0]);
          sum += g[(1 + j) * count + e];
        }
        out[j * count + e] = sum;
      }
    }
    results.push_back({});
    results.back().push_back(std::move(t));
  }
  absl::StatusOr<std::vector<Tensor>> joined =
      JoinPartitionResults(carrier, split, &results, nullptr);
  ASSERT_THAT(joined, IsOk());
  ASSERT_EQ((*joined)[0].shape(),
            (std::vector<int64_t>{2 * kRows / kRanks, kCols}));
  const int64_t slice = kRows * kCols / kRanks;
  const float* got = static_cast<const float*>((*joined)[0].data());
  for (int j = 0; j < 2; ++j) {
    for (int64_t e = 0; e < slice; ++e) {
      float want = 0;
      for (int q = 0; q < kRanks; ++q) want += inputs[q][(1 + j) * slice + e];
      ASSERT_EQ(got[j * slice + e], want)
          << "rank " << 1 + j << " element " << e;
    }
  }
}

TEST(PartitionSplitTest, AllGatherBroadcastAndBarrierGoWhole) {
  std::vector<float> x(4 * kMiB / 4);
  for (CollectiveKind kind : {CollectiveKind::kAllGather, CollectiveKind::kBroadcast}) {
    Contribution c = ContributionOf(
        kind, {{DataType::kFloat32, {static_cast<int64_t>(x.size())}, ReduceOp::kSum}},
        {x.data()});
    EXPECT_TRUE(SplitContribution(c, 4, kMiB).whole);
  }
  Contribution barrier = ContributionOf(CollectiveKind::kBarrier, {}, {});
  EXPECT_TRUE(SplitContribution(barrier, 4, kMiB).whole);
}

TEST(PartitionSplitTest, ReduceScatterThatDoesNotDivideGoesWholeForItsShardToRefuse) {
  std::vector<float> x(4 * kMiB / 4 + 1);
  Contribution c = ContributionOf(
      CollectiveKind::kReduceScatter,
      {{DataType::kFloat32, {static_cast<int64_t>(x.size())}, ReduceOp::kSum}},
      {x.data()});
  EXPECT_TRUE(SplitContribution(c, 4, kMiB).whole);
}

TEST(PartitionSplitTest, ResultOfTheWrongSizeIsAnInternalError) {
  std::vector<float> x(3 * kMiB / 4);
  Contribution whole = ContributionOf(
      CollectiveKind::kAllReduce,
      {{DataType::kFloat32, {static_cast<int64_t>(x.size())}, ReduceOp::kSum}},
      {x.data()});
  SplitCollective split = SplitContribution(whole, 3, kMiB);
  ASSERT_EQ(split.parts.size(), 3u);
  std::vector<std::vector<Tensor>> results;
  for (const PartitionContribution& part : split.parts) {
    results.push_back(EchoOf(part.contribution));
  }
  results[1][0] = Tensor(DataType::kFloat32, {3});
  absl::StatusOr<std::vector<Tensor>> joined =
      JoinPartitionResults(whole, split, &results, nullptr);
  EXPECT_THAT(joined, StatusIs(absl::StatusCode::kInternal,
                               ::testing::HasSubstr("partition 1")));
}


// Reduce of 4 MiB over 4 shards: cut like an AllReduce, every partition a
// Reduce with the whole call's root; the root's results join back byte for
// byte, a non-root's (no tensor from any partition) into no tensor.
TEST(PartitionSplitTest, ReduceIsCutIntoReducesWithTheSameRoot) {
  std::vector<float> x(4 * kMiB / 4);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 1000);
  for (int rank : {2, 1}) {
    SCOPED_TRACE(rank == 2 ? "root" : "non-root");
    Contribution whole = ContributionOf(
        CollectiveKind::kReduce,
        {{DataType::kFloat32,
          {static_cast<int64_t>(x.size())},
          ReduceOp::kMax}},
        {x.data()});
    whole.header.set_root(2);
    whole.header.set_rank(rank);
    SplitCollective split = SplitContribution(whole, 4, kMiB);
    ASSERT_FALSE(split.whole);
    ASSERT_EQ(split.parts.size(), 4u);
    std::vector<std::vector<Tensor>> results;
    for (const PartitionContribution& part : split.parts) {
      const v1::CollectiveHeader& h = part.contribution.header;
      EXPECT_EQ(h.kind(), v1::COLLECTIVE_KIND_REDUCE);
      EXPECT_EQ(h.root(), 2);
      ASSERT_EQ(h.tensors_size(), 1);
      EXPECT_EQ(h.tensors(0).op(), v1::REDUCE_OP_MAX);
      results.push_back(rank == 2 ? EchoOf(part.contribution)
                                  : std::vector<Tensor>());
    }
    absl::StatusOr<std::vector<Tensor>> joined =
        JoinPartitionResults(whole, split, &results, nullptr);
    ASSERT_THAT(joined, IsOk());
    if (rank == 2) {
      ASSERT_EQ(joined->size(), 1u);
      EXPECT_EQ(std::memcmp((*joined)[0].data(), x.data(), x.size() * 4), 0);
    } else {
      EXPECT_TRUE(joined->empty());
      // A tensor for a non-root is the shard's error, named.
      results[3].push_back(Tensor(DataType::kFloat32, {1}));
      joined = JoinPartitionResults(whole, split, &results, nullptr);
      EXPECT_THAT(joined,
                  StatusIs(absl::StatusCode::kInternal,
                           ::testing::HasSubstr("partition 3 of a reduce")));
    }
  }
}

TEST(PartitionSplitTest, AllToAllPartitionsJoinToTheClosedForm) {
  const EveryRank all =
      SplitEveryRank(CollectiveKind::kAllToAll, [](int q, size_t i) {
        return static_cast<float>((q + 1) * 1000000 + i);
      });
  const std::vector<std::vector<float>>& inputs = all.inputs;
  const std::vector<SplitCollective>& splits = all.splits;
  ASSERT_FALSE(splits[0].whole);
  const size_t parts = splits[0].parts.size();
  ASSERT_EQ(parts, 3u);
  std::set<int> shards;
  for (const PartitionContribution& part : splits[0].parts) shards.insert(part.shard);
  EXPECT_EQ(shards.size(), 3u);  // one partition per shard
  const int64_t slice = kRows * kCols / kRanks;
  for (int r = 0; r < kRanks; ++r) {
    // Each shard's all-to-all for rank r: piece r of every rank's partition
    // input, in rank order.
    std::vector<std::vector<Tensor>> results;
    for (size_t k = 0; k < parts; ++k) {
      const int64_t count = splits[0].parts[k].count;
      Tensor t(DataType::kFloat32, {kRanks * count});
      float* out = static_cast<float*>(t.mutable_data());
      for (int q = 0; q < kRanks; ++q) {
        ASSERT_EQ(splits[q].parts[k].count, count);
        const float* g =
            static_cast<const float*>(splits[q].parts[k].contribution.inputs[0]);
        std::memcpy(out + q * count, g + r * count, count * sizeof(float));
      }
      results.push_back({});
      results.back().push_back(std::move(t));
    }
    absl::StatusOr<std::vector<Tensor>> joined =
        JoinPartitionResults(all.wholes[r], splits[r], &results, nullptr);
    ASSERT_THAT(joined, IsOk());
    ASSERT_EQ((*joined)[0].shape(), (std::vector<int64_t>{kRows, kCols}));
    const float* got = static_cast<const float*>((*joined)[0].data());
    for (int q = 0; q < kRanks; ++q) {
      for (int64_t e = 0; e < slice; ++e) {
        // Part r of rank q, element e: inputs[q][r * slice + e].
        ASSERT_EQ(got[q * slice + e], inputs[q][r * slice + e])
            << "rank " << r << " from rank " << q << " element " << e;
      }
    }
  }
}

TEST(PartitionSplitTest, AllToAllForSeveralRanksJoinsTheirRows) {
  // Ranks 1-2 as one contribution (a relay's, header.ranks {1, 2}): per
  // destination d, rank 1's part for d then rank 2's; ranks 0 and 3 alone.
  // Every rank cuts its parts alike, and the contribution gets back, per
  // partition, the pieces sent to rank 1 then those sent to rank 2; joined,
  // they are ranks 1 and 2's results, in closed form.
  const EveryRank all =
      SplitEveryRank(CollectiveKind::kAllToAll, [](int q, size_t i) {
        return static_cast<float>((q + 1) * 1000000 + i);
      });
  const std::vector<std::vector<float>>& inputs = all.inputs;
  const int64_t slice = kRows * kCols / kRanks;  // one part's elements
  std::vector<float> combined;
  for (int d = 0; d < kRanks; ++d) {
    for (int q : {1, 2}) {
      combined.insert(combined.end(), inputs[q].begin() + d * slice,
                      inputs[q].begin() + (d + 1) * slice);
    }
  }
  Contribution carrier = ContributionOf(
      CollectiveKind::kAllToAll,
      {TensorSpec{DataType::kFloat32, {2 * kRows, kCols}, ReduceOp::kSum}},
      {combined.data()});
  carrier.header.set_rank(1);
  carrier.header.add_ranks(1);
  carrier.header.add_ranks(2);
  const SplitCollective split = SplitContribution(carrier, 3, kMiB);
  ASSERT_FALSE(split.whole);
  ASSERT_EQ(split.parts.size(), 3u);
  std::vector<std::vector<Tensor>> results;
  for (size_t k = 0; k < split.parts.size(); ++k) {
    const int64_t count = split.parts[k].count;
    ASSERT_EQ(split.parts[k].begin, all.splits[0].parts[k].begin);
    ASSERT_EQ(count, all.splits[0].parts[k].count);
    // What the shard sends the contribution: for rank 1 then rank 2, the
    // piece every sender q's partition holds for it.
    Tensor t(DataType::kFloat32, {2 * kRanks * count});
    float* out = static_cast<float*>(t.mutable_data());
    for (int j = 0; j < 2; ++j) {
      const int to = 1 + j;
      for (int q = 0; q < kRanks; ++q) {
        const bool carried = q == 1 || q == 2;
        const float* g = static_cast<const float*>(
            (carried ? split : all.splits[q]).parts[k].contribution.inputs[0]);
        const int64_t at = carried ? (to * 2 + (q - 1)) * count : to * count;
        std::memcpy(out + (j * kRanks + q) * count, g + at,
                    count * sizeof(float));
      }
    }
    results.push_back({});
    results.back().push_back(std::move(t));
  }
  absl::StatusOr<std::vector<Tensor>> joined =
      JoinPartitionResults(carrier, split, &results, nullptr);
  ASSERT_THAT(joined, IsOk());
  ASSERT_EQ((*joined)[0].shape(), (std::vector<int64_t>{2 * kRows, kCols}));
  const float* got = static_cast<const float*>((*joined)[0].data());
  for (int j = 0; j < 2; ++j) {
    for (int q = 0; q < kRanks; ++q) {
      for (int64_t e = 0; e < slice; ++e) {
        // Rank q's part for rank 1 + j, element e.
        ASSERT_EQ(got[(j * kRanks + q) * slice + e],
                  inputs[q][(1 + j) * slice + e])
            << "rank " << 1 + j << " from rank " << q << " element " << e;
      }
    }
  }
}

TEST(PartitionSplitTest, MessagesAndMatchesToOneRankWithOneTagShareAShard) {
  // Every send to rank 1 with tag 7, whatever its source and count, and
  // every match of rank 1's receives of tag 7 go to one shard; over many
  // destinations and tags, every shard is used.
  std::vector<float> x(16, 1.0f);
  auto shard_of = [&](CollectiveKind kind, const std::string& name,
                      std::vector<int> group) {
    Contribution c = ContributionOf(kind, {{DataType::kFloat32, {16}}},
                                    {x.data()});
    c.header.clear_group();
    for (int r : group) c.header.add_group(r);
    c.header.set_name(name);
    if (kind == CollectiveKind::kMatch) {
      c.header.clear_tensors();
      c.layout = PayloadLayout();
      c.inputs.clear();
      c.send_payload = false;
    }
    SplitCollective split = SplitContribution(c, 4);
    EXPECT_TRUE(split.whole) << name;
    return split.parts[0].shard;
  };
  const int shard = shard_of(CollectiveKind::kSendReceive, "p2p 0>1 tag 7 #0", {0, 1});
  EXPECT_EQ(shard_of(CollectiveKind::kSendReceive, "p2p 0>1 tag 7 #5", {0, 1}), shard);
  EXPECT_EQ(shard_of(CollectiveKind::kSendReceive, "p2p 3>1 tag 7 #2", {1, 3}), shard);
  EXPECT_EQ(shard_of(CollectiveKind::kMatch, "p2p *>1 tag 7 #4", {1}), shard);
  std::set<int> used;
  for (int destination = 0; destination < 4; ++destination) {
    for (int tag = 0; tag < 8; ++tag) {
      used.insert(shard_of(CollectiveKind::kSendReceive,
                           absl::StrCat("p2p 9>", destination, " tag ", tag, " #0"),
                           {destination, 9}));
    }
  }
  EXPECT_EQ(used, (std::set<int>{0, 1, 2, 3}));
}

TEST(PartitionSplitTest, AllToAllVGoesWhole) {
  std::vector<float> x(3 * 100000, 1.0f);  // over the size that cuts
  Contribution c = ContributionOf(CollectiveKind::kAllToAllV,
                                  {{DataType::kFloat32, {3, 100000}}},
                                  {x.data()}, 3);
  for (int64_t rows : {1, 0, 2}) c.header.add_send_rows(rows);
  SplitCollective split = SplitContribution(c, 3);
  ASSERT_TRUE(split.whole);
  EXPECT_EQ(split.parts[0].contribution.header.SerializeAsString(),
            c.header.SerializeAsString());
}

TEST(PartitionSplitTest, GatherAndScatterGoWhole) {
  std::vector<float> x(4 * kMiB / 4);
  for (CollectiveKind kind : {CollectiveKind::kGather, CollectiveKind::kScatter}) {
    Contribution c = ContributionOf(
        kind,
        {{DataType::kFloat32,
          {static_cast<int64_t>(x.size())},
          ReduceOp::kSum}},
        {x.data()});
    EXPECT_TRUE(SplitContribution(c, 4, kMiB).whole);
  }
}

}  // namespace
}  // namespace reducer
