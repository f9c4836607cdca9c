#include "core/fingerprint.h"

#include <cstddef>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/tensor.h"

namespace reducer {
namespace {

std::string GroupToString(const std::vector<int>& group) {
  return absl::StrCat("[", absl::StrJoin(group, ","), "]");
}

std::string TensorCount(size_t n) {
  return absl::StrCat(n, n == 1 ? " tensor" : " tensors");
}

// Whether ops matter for this kind of collective.
bool Reduces(CollectiveKind kind) {
  return kind == CollectiveKind::kAllReduce ||
         kind == CollectiveKind::kReduceScatter ||
         kind == CollectiveKind::kReduce;
}

// Whether this kind of collective names a root that every rank must agree on.
bool HasRoot(CollectiveKind kind) {
  return kind == CollectiveKind::kBroadcast ||
         kind == CollectiveKind::kReduce ||
         kind == CollectiveKind::kGather || kind == CollectiveKind::kScatter ||
         kind == CollectiveKind::kSendReceive;
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
  std::string prefix =
      num_tensors > 1 ? absl::StrCat("tensor ", index, ": ") : std::string();
  return absl::FailedPreconditionError(
      absl::StrCat(prefix, "mismatched ", what, ": rank ", rank_a, " sent ",
                   value_a, ", rank ", rank_b, " sent ", value_b));
}

}  // namespace

absl::string_view CollectiveKindName(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kAllReduce:
      return "allreduce";
    case CollectiveKind::kAllGather:
      return "allgather";
    case CollectiveKind::kBroadcast:
      return "broadcast";
    case CollectiveKind::kReduceScatter:
      return "reducescatter";
    case CollectiveKind::kBarrier:
      return "barrier";
    case CollectiveKind::kReduce:
      return "reduce";
    case CollectiveKind::kGather:
      return "gather";
    case CollectiveKind::kScatter:
      return "scatter";
    case CollectiveKind::kAllToAll:
      return "alltoall";
    case CollectiveKind::kSendReceive:
      return "sendreceive";
    case CollectiveKind::kQuorumBarrier:
      return "quorum";
    case CollectiveKind::kDone:
      return "done";
    case CollectiveKind::kAllToAllV:
      return "alltoallv";
    case CollectiveKind::kMatch:
      return "match";
  }
  return "unknown_collective";
}

absl::StatusOr<CollectiveKind> CollectiveKindFromWire(int value) {
  if (value == 0) {
    return absl::InvalidArgumentError(
        "collective kind is unspecified (wire value 0)");
  }
  if (value < 1 || value > kNumCollectiveKinds) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown collective kind wire value ", value));
  }
  return static_cast<CollectiveKind>(value - 1);
}

int CollectiveKindToWire(CollectiveKind kind) {
  return static_cast<int>(kind) + 1;
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
