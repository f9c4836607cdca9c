#include "core/validate.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/data_type.h"
#include "core/enum_tables.h"
#include "core/payload_layout.h"
#include "core/quorum_rule.h"
#include "core/status_macros.h"
#include "core/tensor.h"

namespace reducer {
namespace {

// The kinds that cut or concatenate their tensor along dimension 0, so that
// it needs one; the last three of them cut it into one part per rank.
bool UsesDim0(CollectiveKind kind) {
  return kind == CollectiveKind::kAllGather ||
         kind == CollectiveKind::kReduceScatter ||
         kind == CollectiveKind::kGather || kind == CollectiveKind::kScatter ||
         kind == CollectiveKind::kAllToAll ||
         kind == CollectiveKind::kAllToAllV;
}
bool CutsDim0(CollectiveKind kind) {
  return kind == CollectiveKind::kReduceScatter ||
         kind == CollectiveKind::kScatter || kind == CollectiveKind::kAllToAll;
}

absl::Status CheckGroup(const std::vector<int>& group, int rank,
                        int world_size) {
  if (group.empty()) {
    return absl::InvalidArgumentError(
        "group is empty (an empty group means all ranks and must be expanded "
        "before validation)");
  }
  for (size_t i = 0; i < group.size(); ++i) {
    if (group[i] < 0 || group[i] >= world_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("group ", GroupToString(group), ": rank ", group[i],
                       " outside world of ", world_size));
    }
    if (i > 0 && group[i] <= group[i - 1]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "group ", GroupToString(group), " is not sorted or has duplicates"));
    }
  }
  if (!std::binary_search(group.begin(), group.end(), rank)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rank ", rank, " is not in its group ", GroupToString(group)));
  }
  return absl::OkStatus();
}

absl::Status CheckTensorCount(const Fingerprint& fp, int rank) {
  const size_t n = fp.tensors.size();
  const absl::string_view kind = CollectiveKindName(fp.kind);
  switch (fp.kind) {
    case CollectiveKind::kAllReduce:
      if (n >= 1) return absl::OkStatus();
      return absl::InvalidArgumentError(
          absl::StrCat(kind, " needs at least one tensor, got 0"));
    case CollectiveKind::kAllGather:
    case CollectiveKind::kReduceScatter:
    case CollectiveKind::kReduce:
    case CollectiveKind::kGather:
    case CollectiveKind::kAllToAll:
    case CollectiveKind::kAllToAllV:
      if (n == 1) return absl::OkStatus();
      return absl::InvalidArgumentError(
          absl::StrCat(kind, " needs exactly one tensor, got ", n));
    case CollectiveKind::kBroadcast:
      if (rank == fp.root && n != 1) {
        return absl::InvalidArgumentError(absl::StrCat(
            "broadcast root ", rank, " needs exactly one tensor, got ", n));
      }
      if (n > 1) {
        return absl::InvalidArgumentError(
            absl::StrCat("broadcast needs at most one tensor, got ", n));
      }
      return absl::OkStatus();
    case CollectiveKind::kBarrier:
    case CollectiveKind::kQuorumBarrier:
    case CollectiveKind::kDone:
    case CollectiveKind::kMatch:
      if (n == 0) return absl::OkStatus();
      return absl::InvalidArgumentError(
          absl::StrCat(kind, " takes no tensors, got ", n));
    case CollectiveKind::kSendReceive:
      // The source sends its tensor; the destination declares its buffer's
      // (ReceiveInPlace) or nothing (Receive).
      if (rank == fp.root && n != 1) {
        return absl::InvalidArgumentError(absl::StrCat(
            "sendreceive source ", rank, " needs exactly one tensor, got ", n));
      }
      if (n > 1) {
        return absl::InvalidArgumentError(absl::StrCat(
            "sendreceive destination ", rank,
            " declares at most one tensor, got ", n));
      }
      return absl::OkStatus();
    case CollectiveKind::kScatter:
      if (rank == fp.root && n != 1) {
        return absl::InvalidArgumentError(absl::StrCat(
            "scatter root ", rank, " needs exactly one tensor, got ", n));
      }
      if (rank != fp.root && n != 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "scatter rank ", rank, " is not the root (", fp.root,
            ") and sends no tensor, got ", n));
      }
      return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown collective kind ", static_cast<int>(fp.kind)));
}

// kAllToAllV's rows: `send_rows` one entry per rank of the group, none
// negative, summing to `dim0`; `recv_rows` empty or one entry per rank, none
// negative.
absl::Status CheckRows(const Fingerprint& fp, int64_t dim0) {
  const size_t group_size = fp.group.size();
  auto check = [&](const std::vector<int64_t>& rows,
                   absl::string_view field) -> absl::Status {
    if (rows.size() != group_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "alltoallv ", field, " has ", rows.size(),
          rows.size() == 1 ? " entry" : " entries", ", but the group ",
          GroupToString(fp.group), " has ", group_size, " ranks"));
    }
    for (size_t j = 0; j < rows.size(); ++j) {
      if (rows[j] < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "alltoallv ", field, "[", j, "] is ", rows[j], ", negative"));
      }
    }
    return absl::OkStatus();
  };
  REDUCER_RETURN_IF_ERROR(check(fp.send_rows, "send_rows"));
  if (!fp.recv_rows.empty()) {
    REDUCER_RETURN_IF_ERROR(check(fp.recv_rows, "recv_rows"));
  }
  int64_t sum = 0;
  for (int64_t rows : fp.send_rows) {
    // Each is at most dim0 when they sum to it: no overflow before that.
    if (rows > dim0 - sum) {
      sum = -1;
      break;
    }
    sum += rows;
  }
  if (sum != dim0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "alltoallv send_rows [", absl::StrJoin(fp.send_rows, ","),
        "] do not sum to dimension 0 of its tensor (", dim0, ")"));
  }
  return absl::OkStatus();
}

// kMatch: its group is the receiving rank alone, its tag not negative, its
// sources other ranks of the world (sorted, at least one), and its root -1
// or one of them.
absl::Status CheckMatch(const Fingerprint& fp, int rank, int world_size) {
  if (fp.group.size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "match group ", GroupToString(fp.group),
        " must be the receiving rank alone"));
  }
  if (fp.tag < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("match tag ", fp.tag, " is negative"));
  }
  if (fp.sources.empty()) {
    return absl::InvalidArgumentError(
        "match names no source rank it may receive from");
  }
  for (size_t i = 0; i < fp.sources.size(); ++i) {
    const int s = fp.sources[i];
    if (s < 0 || s >= world_size || s == rank ||
        (i > 0 && s <= fp.sources[i - 1])) {
      return absl::InvalidArgumentError(absl::StrCat(
          "match sources ", GroupToString(fp.sources),
          " must be other ranks of the world of ", world_size,
          " than the receiver ", rank, ", sorted, each once"));
    }
  }
  if (fp.root != -1 &&
      !std::binary_search(fp.sources.begin(), fp.sources.end(), fp.root)) {
    return absl::InvalidArgumentError(
        absl::StrCat("match source ", fp.root, " is not in its sources ",
                     GroupToString(fp.sources)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateContribution(const Fingerprint& fp, int rank,
                                  int world_size, size_t max_payload_bytes) {
  if (world_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("world size ", world_size, " is less than 1"));
  }
  if (rank < 0 || rank >= world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank, " outside world of ", world_size));
  }
  if (!IsEnumerator(fp.kind, kNumCollectiveKinds)) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown collective kind ", static_cast<int>(fp.kind)));
  }
  const absl::string_view kind = CollectiveKindName(fp.kind);
  REDUCER_RETURN_IF_ERROR(CheckGroup(fp.group, rank, world_size));
  if (fp.kind == CollectiveKind::kSendReceive && fp.group.size() != 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sendreceive group ", GroupToString(fp.group),
        " must be exactly its source and its destination, two distinct ranks"));
  }
  if (HasRoot(fp.kind) &&
      !std::binary_search(fp.group.begin(), fp.group.end(), fp.root)) {
    return absl::InvalidArgumentError(absl::StrCat(kind, " root ", fp.root,
                                                   " is not in group ",
                                                   GroupToString(fp.group)));
  }
  REDUCER_RETURN_IF_ERROR(CheckTensorCount(fp, rank));
  if (fp.kind == CollectiveKind::kMatch) {
    REDUCER_RETURN_IF_ERROR(CheckMatch(fp, rank, world_size));
  }
  if (fp.kind == CollectiveKind::kQuorumBarrier) {
    REDUCER_RETURN_IF_ERROR(QuorumRule::Validate(
        static_cast<int>(fp.group.size()), fp.quorum));
  }

  const bool reduces = fp.kind == CollectiveKind::kAllReduce ||
                       fp.kind == CollectiveKind::kReduceScatter ||
                       fp.kind == CollectiveKind::kReduce;
  for (size_t i = 0; i < fp.tensors.size(); ++i) {
    const TensorSpec& t = fp.tensors[i];
    if (!IsEnumerator(t.dtype, kNumDataTypes)) {
      return absl::InvalidArgumentError(absl::StrCat(
          TensorPrefix(i), "unknown dtype ", static_cast<int>(t.dtype)));
    }
    if (reduces) {
      if (absl::Status s = CheckOpSupported(t.op, t.dtype); !s.ok()) {
        return WithTensorPrefix(i, s);
      }
    }
  }
  absl::StatusOr<PayloadLayout> layout = ComputePayloadLayout(fp.tensors);
  if (!layout.ok()) return layout.status();

  if (UsesDim0(fp.kind) && !fp.tensors.empty()) {
    const TensorSpec& t = fp.tensors[0];
    if (t.shape.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(TensorPrefix(0), kind,
                       " needs at least one dimension, got shape []"));
    }
    const int64_t group_size = static_cast<int64_t>(fp.group.size());
    if (CutsDim0(fp.kind) && t.shape[0] % group_size != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(TensorPrefix(0), kind, " dimension 0 of shape ",
                       ShapeToString(t.shape),
                       " is not divisible by the group size ", group_size));
    }
    if (fp.kind == CollectiveKind::kAllToAllV) {
      REDUCER_RETURN_IF_ERROR(CheckRows(fp, t.shape[0]));
    }
  }
  if (layout->total_bytes > max_payload_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        kind, " payload of ", layout->total_bytes,
        " bytes exceeds the limit of ", max_payload_bytes, " bytes"));
  }
  return absl::OkStatus();
}

}  // namespace reducer
