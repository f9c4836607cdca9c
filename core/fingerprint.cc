#include "core/fingerprint.h"

#include <cstddef>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/enum_tables.h"
#include "core/tensor.h"

namespace reducer {
namespace {

// Names in enumerator order.
constexpr absl::string_view kCollectiveKindNames[] = {
    "allreduce", "allgather", "broadcast", "reducescatter", "barrier",
    "reduce",    "gather",    "scatter",   "alltoall",      "sendreceive",
    "quorum",    "done",      "alltoallv", "match"};
static_assert(std::size(kCollectiveKindNames) == kNumCollectiveKinds);

std::string TensorCount(size_t n) {
  return absl::StrCat(n, n == 1 ? " tensor" : " tensors");
}

// Whether ops matter for this kind of collective.
bool Reduces(CollectiveKind kind) {
  return kind == CollectiveKind::kAllReduce ||
         kind == CollectiveKind::kReduceScatter ||
         kind == CollectiveKind::kReduce;
}

// Whether a rank of this kind may contribute no tensor (and then agrees with
// any spec): Broadcast's non-roots may, Scatter's send none, and so may a
// point-to-point message's destination (Receive declares nothing).
bool MayHaveNoInput(CollectiveKind kind) {
  return kind == CollectiveKind::kBroadcast ||
         kind == CollectiveKind::kScatter ||
         kind == CollectiveKind::kSendReceive;
}

// Shapes agree; for kAllGather, kGather and kAllToAllV dimension 0 may
// differ.
bool ShapesAgree(CollectiveKind kind, const std::vector<int64_t>& a,
                 const std::vector<int64_t>& b) {
  if (kind != CollectiveKind::kAllGather && kind != CollectiveKind::kGather &&
      kind != CollectiveKind::kAllToAllV) {
    return a == b;
  }
  if (a.size() != b.size()) return false;
  for (size_t d = 1; d < a.size(); ++d) {
    if (a[d] != b[d]) return false;
  }
  return true;
}

absl::Status Mismatch(size_t num_tensors, size_t index, absl::string_view what,
                      int rank_a, absl::string_view value_a, int rank_b,
                      absl::string_view value_b) {
  std::string prefix = num_tensors > 1 ? TensorPrefix(index) : std::string();
  return absl::FailedPreconditionError(
      absl::StrCat(prefix, "mismatched ", what, ": rank ", rank_a, " sent ",
                   value_a, ", rank ", rank_b, " sent ", value_b));
}

}  // namespace

absl::string_view CollectiveKindName(CollectiveKind kind) {
  return EnumName(kind, kCollectiveKindNames, "unknown_collective");
}

absl::StatusOr<CollectiveKind> CollectiveKindFromWire(int value) {
  return EnumFromWire<CollectiveKind>(value, kNumCollectiveKinds,
                                      "collective kind");
}

int CollectiveKindToWire(CollectiveKind kind) {
  return static_cast<int>(kind) + 1;
}

std::string GroupToString(const std::vector<int>& group) {
  return absl::StrCat("[", absl::StrJoin(group, ","), "]");
}

std::string TensorPrefix(size_t index) {
  return absl::StrCat("tensor ", index, ": ");
}

absl::Status WithTensorPrefix(size_t index, const absl::Status& status) {
  return absl::Status(status.code(),
                      absl::StrCat(TensorPrefix(index), status.message()));
}

bool HasRoot(CollectiveKind kind) {
  return kind == CollectiveKind::kBroadcast ||
         kind == CollectiveKind::kReduce || kind == CollectiveKind::kGather ||
         kind == CollectiveKind::kScatter ||
         kind == CollectiveKind::kSendReceive;
}

std::string DescribeTensor(const TensorSpec& spec) {
  return absl::StrCat(ShapeToString(spec.shape), " ", DataTypeName(spec.dtype));
}

std::string DescribeTensors(const std::vector<TensorSpec>& specs) {
  if (specs.empty()) return "none";
  return absl::StrCat(specs.size(), specs.size() == 1 ? " tensor" : " tensors",
                      ", the first ", DescribeTensor(specs[0]));
}

// The checks run in the order the header lists; for the per-tensor fields
// every tensor is checked for an op difference before any for a dtype
// difference, and so on, so the most fundamental disagreement is reported.
absl::Status CheckAgreement(int rank_a, const Fingerprint& a, int rank_b,
                            const Fingerprint& b) {
  if (a.kind != b.kind) {
    return absl::FailedPreconditionError(
        absl::StrCat("mismatched collectives: rank ", rank_a, " called ",
                     CollectiveKindName(a.kind), ", rank ", rank_b, " called ",
                     CollectiveKindName(b.kind)));
  }
  const CollectiveKind kind = a.kind;
  if (a.group != b.group) {
    return Mismatch(0, 0, "groups", rank_a, GroupToString(a.group), rank_b,
                    GroupToString(b.group));
  }
  if (HasRoot(kind) && a.root != b.root) {
    return Mismatch(0, 0, "roots", rank_a, absl::StrCat(a.root), rank_b,
                    absl::StrCat(b.root));
  }
  if (kind == CollectiveKind::kQuorumBarrier &&
      (a.quorum.min_ranks != b.quorum.min_ranks ||
       a.quorum.grace != b.quorum.grace)) {
    auto settings = [](const QuorumSettings& q) {
      return absl::StrCat("min_ranks ", q.min_ranks, ", grace ",
                          absl::FormatDuration(q.grace));
    };
    return Mismatch(0, 0, "quorum settings", rank_a, settings(a.quorum), rank_b,
                    settings(b.quorum));
  }
  if (MayHaveNoInput(kind) && (a.tensors.empty() || b.tensors.empty())) {
    return absl::OkStatus();  // A rank with no input agrees with any spec.
  }
  if (a.tensors.size() != b.tensors.size()) {
    return Mismatch(0, 0, "tensor counts", rank_a,
                    TensorCount(a.tensors.size()), rank_b,
                    TensorCount(b.tensors.size()));
  }
  const size_t n = a.tensors.size();
  if (Reduces(kind)) {
    for (size_t i = 0; i < n; ++i) {
      if (a.tensors[i].op != b.tensors[i].op) {
        return Mismatch(n, i, "ops", rank_a, ReduceOpName(a.tensors[i].op),
                        rank_b, ReduceOpName(b.tensors[i].op));
      }
    }
  }
  for (size_t i = 0; i < n; ++i) {
    if (a.tensors[i].dtype != b.tensors[i].dtype) {
      return Mismatch(n, i, "dtypes", rank_a, DescribeTensor(a.tensors[i]),
                      rank_b, DescribeTensor(b.tensors[i]));
    }
  }
  for (size_t i = 0; i < n; ++i) {
    if (!ShapesAgree(kind, a.tensors[i].shape, b.tensors[i].shape)) {
      return Mismatch(n, i, "shapes", rank_a, DescribeTensor(a.tensors[i]),
                      rank_b, DescribeTensor(b.tensors[i]));
    }
  }
  return absl::OkStatus();
}

}  // namespace reducer
