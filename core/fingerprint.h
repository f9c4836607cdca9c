// Fingerprint: what one rank's contribution to a collective claims (kind, op,
// dtype, shape, root, group), and the comparison that tells a user exactly
// how two ranks disagree.
//
//   Fingerprint a{CollectiveKind::kAllReduce, {{DataType::kFloat32, {4, 3}}}};
//   Fingerprint b{CollectiveKind::kAllReduce, {{DataType::kFloat32, {4, 4}}}};
//   absl::Status s = CheckAgreement(0, a, 2, b);
//   // FAILED_PRECONDITION:
//   // "mismatched shapes: rank 0 sent [4,3] float32, rank 2 sent [4,4] float32"
//
// Pure values and functions; thread-safe.
#ifndef REDUCER_CORE_FINGERPRINT_H_
#define REDUCER_CORE_FINGERPRINT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/data_type.h"
#include "core/quorum_rule.h"

namespace reducer {

// Numeric values are the wire values of reducer.v1.CollectiveKind minus one.
enum class CollectiveKind {
  kAllReduce,      // also AllReduceMany and MetricSync: one or more tensors
  kAllGather,
  kBroadcast,
  kReduceScatter,
  kBarrier,
  kReduce,         // the root gets the reduction; the others send only
  kGather,         // the root gets the concatenation along dim 0
  kScatter,        // the root's input, cut along dim 0, one part per rank
  kAllToAll,       // part j of rank i goes to rank j
  kSendReceive,    // point to point: group {source, destination}, root = source
  kQuorumBarrier,  // a quorum step's decision: which ranks contribute
  kDone,           // a rank is out of data (Client::Done)
  kAllToAllV,      // send_rows[j] rows of rank i go to rank j
  kMatch,          // which message a receive gets (Client::ReceiveAny)
};
inline constexpr int kNumCollectiveKinds = 14;

// "allreduce", "allgather", "broadcast", "reducescatter", "barrier",
// "reduce", "gather", "scatter", "alltoall", "sendreceive", "quorum", "done",
// "alltoallv", "match".
absl::string_view CollectiveKindName(CollectiveKind kind);
absl::StatusOr<CollectiveKind> CollectiveKindFromWire(int value);
int CollectiveKindToWire(CollectiveKind kind);

// One tensor of a contribution. `op` matters for kAllReduce, kReduceScatter
// and kReduce only.
struct TensorSpec {
  DataType dtype = DataType::kFloat32;
  std::vector<int64_t> shape;
  ReduceOp op = ReduceOp::kSum;

  bool operator==(const TensorSpec& o) const {
    return dtype == o.dtype && shape == o.shape && op == o.op;
  }
};

// "[4,3] float32".
std::string DescribeTensor(const TensorSpec& spec);
// "none", or "2 tensors, the first [4,3] float32" ("1 tensor, ...").
std::string DescribeTensors(const std::vector<TensorSpec>& specs);

// "[0,1,3]": a group of ranks as messages name it.
std::string GroupToString(const std::vector<int>& group);

// "tensor 3: ", the start of a message about one tensor of a contribution.
std::string TensorPrefix(size_t index);
// `status` with TensorPrefix(index) before its message.
absl::Status WithTensorPrefix(size_t index, const absl::Status& status);

// Whether contributions of `kind` name a root (Fingerprint::root), a rank of
// their group that every rank must agree on: kBroadcast, kReduce, kGather,
// kScatter and kSendReceive.
bool HasRoot(CollectiveKind kind);

struct Fingerprint {
  CollectiveKind kind = CollectiveKind::kAllReduce;
  // kAllReduce: one or more; kAllGather, kReduceScatter: exactly one;
  // kBroadcast: one on the root, zero or one elsewhere ("no input");
  // kBarrier, kMatch: none; kReduce, kGather, kAllToAll, kAllToAllV:
  // exactly one; kScatter: one on the root (dim 0 divisible by the group
  // size), none elsewhere; kSendReceive: one on the source (the root), zero
  // or one on the destination (the spec its buffer expects).
  std::vector<TensorSpec> tensors;
  // kBroadcast, kReduce, kGather, kScatter: a global rank in `group`;
  // kSendReceive: the source, one of the two ranks of `group`; kMatch: the
  // source it takes a message from, one of `sources`, or -1 for any.
  int root = -1;
  std::vector<int> group;  // sorted global ranks taking part
  // kQuorumBarrier only: when its step may end (no tensors).
  QuorumSettings quorum;
  // kAllToAllV only: the rows (dim 0) this rank sends to each rank of
  // `group`, in group order, summing to its tensor's dim 0; and the rows it
  // expects from each, or empty when it does not say.
  std::vector<int64_t> send_rows;
  std::vector<int64_t> recv_rows;
  // kMatch only (its group is the receiving rank alone): the tag of the
  // message it matches, and the global ranks it may take one from (sorted,
  // without the receiver).
  int64_t tag = 0;
  std::vector<int> sources;
};

// Compares rank_b's fingerprint with rank_a's. OK when they agree; otherwise
// FAILED_PRECONDITION whose message names the first difference found, in this
// order, with both ranks' values:
//   "mismatched collectives: rank 0 called allreduce, rank 1 called broadcast"
//   "mismatched groups: rank 0 sent [0,1], rank 1 sent [0,1,2]"
//   "mismatched roots: rank 0 sent 0, rank 1 sent 2"
//   "mismatched quorum settings: rank 0 sent min_ranks 3, grace 2s, ..."
//   "mismatched tensor counts: rank 0 sent 3 tensors, rank 1 sent 2 tensors"
//   "mismatched ops: rank 0 sent sum, rank 1 sent max"
//   "mismatched dtypes: rank 0 sent [4] float32, rank 1 sent [4] float64"
//   "mismatched shapes: rank 0 sent [4,3] float32, rank 2 sent [4,4] float32"
// For several tensors the message starts with "tensor 3: ". Roots are
// compared for kBroadcast, kReduce, kGather, kScatter and kSendReceive; ops for kAllReduce,
// kReduceScatter and kReduce. For kAllGather, kGather and kAllToAllV
// dimension 0 may differ; the rest of the shape and the dtype must agree
// (kAllToAll: the whole shape). For kBroadcast, kScatter and kSendReceive a
// rank with no input agrees with any spec. kAllToAllV's rows are checked
// pair by pair by its strategy (server/engine/exchange_strategy.h).
absl::Status CheckAgreement(int rank_a, const Fingerprint& a, int rank_b,
                            const Fingerprint& b);

}  // namespace reducer

#endif  // REDUCER_CORE_FINGERPRINT_H_
