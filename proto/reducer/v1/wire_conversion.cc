#include "proto/reducer/v1/wire_conversion.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace reducer {

absl::StatusOr<Fingerprint> FingerprintFromHeader(
    const v1::CollectiveHeader& header, int world_size) {
  Fingerprint fp;
  absl::StatusOr<CollectiveKind> kind = CollectiveKindFromWire(header.kind());
  if (!kind.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("header.kind: ", kind.status().message()));
  }
  fp.kind = *kind;
  const bool with_op = fp.kind == CollectiveKind::kAllReduce ||
                       fp.kind == CollectiveKind::kReduceScatter ||
                       fp.kind == CollectiveKind::kReduce;
  fp.tensors.reserve(header.tensors_size());
  for (int i = 0; i < header.tensors_size(); ++i) {
    absl::StatusOr<TensorSpec> spec =
        TensorSpecFromWire(header.tensors(i), with_op, "header.tensors", i);
    if (!spec.ok()) return spec.status();
    fp.tensors.push_back(*std::move(spec));
  }
  if (header.group().empty()) {
    for (int r = 0; r < world_size; ++r) fp.group.push_back(r);
  } else {
    fp.group.assign(header.group().begin(), header.group().end());
  }
  fp.root = fp.kind == CollectiveKind::kBroadcast ||
                    fp.kind == CollectiveKind::kReduce ||
                    fp.kind == CollectiveKind::kGather ||
                    fp.kind == CollectiveKind::kScatter ||
                    fp.kind == CollectiveKind::kSendReceive
                ? header.root()
                : -1;
  if (fp.kind == CollectiveKind::kQuorumBarrier) {
    fp.quorum.min_ranks = header.quorum_min_ranks();
    fp.quorum.grace = absl::Milliseconds(header.quorum_grace_ms());
  }
  if (fp.kind == CollectiveKind::kAllToAllV) {
    fp.send_rows.assign(header.send_rows().begin(), header.send_rows().end());
    fp.recv_rows.assign(header.recv_rows().begin(), header.recv_rows().end());
  }
  if (fp.kind == CollectiveKind::kMatch) {
    fp.root = header.root();
    fp.tag = header.match_tag();
    if (header.match_sources().empty()) {
      for (int r = 0; r < world_size; ++r) {
        if (r != header.rank()) fp.sources.push_back(r);
      }
    } else {
      fp.sources.assign(header.match_sources().begin(),
                        header.match_sources().end());
    }
  }
  return fp;
}

namespace {

std::string FieldName(absl::string_view field, int index) {
  return index < 0 ? std::string(field) : absl::StrCat(field, "[", index, "]");
}

}  // namespace

absl::StatusOr<TensorSpec> TensorSpecFromWire(const v1::TensorSpec& wire,
                                              bool with_op,
                                              absl::string_view field,
                                              int index) {
  TensorSpec spec;
  absl::StatusOr<DataType> dtype = DataTypeFromWire(wire.dtype());
  if (!dtype.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        FieldName(field, index), ".dtype: ", dtype.status().message()));
  }
  spec.dtype = *dtype;
  spec.shape.assign(wire.shape().begin(), wire.shape().end());
  if (with_op) {
    absl::StatusOr<ReduceOp> op = ReduceOpFromWire(wire.op());
    if (!op.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          FieldName(field, index), ".op: ", op.status().message()));
    }
    spec.op = *op;
  }
  return spec;
}

v1::TensorSpec TensorSpecToWire(const TensorSpec& spec) {
  v1::TensorSpec out;
  out.set_dtype(static_cast<v1::DataType>(DataTypeToWire(spec.dtype)));
  out.set_op(static_cast<v1::ReduceOp>(ReduceOpToWire(spec.op)));
  for (int64_t d : spec.shape) out.add_shape(d);
  return out;
}

namespace {

std::string DescribeCollective(const v1::CollectiveHeader& header,
                               std::optional<CollectiveKind> kind,
                               absl::Span<const int> group_if_partial) {
  std::string out(kind.has_value() ? CollectiveKindName(*kind) : "collective");
  if (!header.name().empty()) {
    absl::StrAppend(&out, " \"", header.name(), "\"");
  } else {
    absl::StrAppend(&out, " #", header.sequence());
  }
  if (!group_if_partial.empty()) {
    absl::StrAppend(&out, " of group [", absl::StrJoin(group_if_partial, ","),
                    "]");
  }
  absl::StrAppend(&out, " in job ", header.job());
  return out;
}

}  // namespace

std::string DescribeCollective(const v1::CollectiveHeader& header,
                               const Fingerprint& fp, int world_size) {
  const bool partial = static_cast<int>(fp.group.size()) != world_size;
  return DescribeCollective(header, fp.kind,
                            partial ? absl::Span<const int>(fp.group)
                                    : absl::Span<const int>());
}

std::string DescribeCollective(const v1::CollectiveHeader& header,
                               std::optional<CollectiveKind> kind) {
  return DescribeCollective(header, kind, absl::Span<const int>());
}

}  // namespace reducer
