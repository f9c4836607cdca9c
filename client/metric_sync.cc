#include "client/metric_sync.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "client/internal/call_results.h"
#include "client/internal/client_impl.h"
#include "client/reducer_client.h"
#include "core/status_macros.h"

namespace reducer {

MetricSync::MetricSync(Client* client) : client_(client) {}

void MetricSync::Add(std::string name, MutableTensorView state, ReduceOp op) {
  for (Entry& e : entries_) {
    if (e.name == name) {
      e.state = state;
      e.op = op;
      return;
    }
  }
  entries_.push_back(Entry{std::move(name), state, op});
}

absl::StatusOr<absl::flat_hash_map<std::string, Tensor>> MetricSync::Reduce(
    const CallOptions& call) {
  if (entries_.empty()) {
    return absl::FailedPreconditionError(
        "MetricSync::Reduce: no state registered (call Add first)");
  }
  std::vector<TensorView> inputs;
  std::vector<ReduceOp> ops;
  for (const Entry& e : entries_) {
    inputs.push_back(e.state.view());
    ops.push_back(e.op);
  }
  REDUCER_ASSIGN_OR_RETURN(std::vector<Tensor> reduced,
                           client_->AllReduceMany(inputs, ops, call));
  absl::flat_hash_map<std::string, Tensor> out;
  for (size_t i = 0; i < entries_.size(); ++i) {
    out.emplace(entries_[i].name, std::move(reduced[i]));
  }
  return out;
}

absl::Status MetricSync::ReduceInPlace(const CallOptions& call) {
  absl::StatusOr<absl::flat_hash_map<std::string, Tensor>> reduced =
      Reduce(call);
  if (!reduced.ok()) return reduced.status();
  // Check every state first so that either all are written or none.
  for (const Entry& e : entries_) {
    REDUCER_RETURN_IF_ERROR(
        CheckFits(reduced->at(e.name), e.state,
                  absl::StrCat("MetricSync::ReduceInPlace: state \"", e.name,
                               "\" (no state was written)")));
  }
  for (const Entry& e : entries_) {
    REDUCER_RETURN_IF_ERROR(
        CopyInto(reduced->at(e.name), e.state, "MetricSync::ReduceInPlace",
                 client_->impl_->staging(), call.cuda_stream));
  }
  return absl::OkStatus();
}

}  // namespace reducer
