// MetricSync: a metric's states (counters, sums) reduced across the ranks
// of a Client's job in one round trip. Part of the public API; included by
// client/reducer_client.h.
#ifndef REDUCER_CLIENT_METRIC_SYNC_H_
#define REDUCER_CLIENT_METRIC_SYNC_H_

#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/client_options.h"
#include "core/data_type.h"
#include "core/tensor.h"

namespace reducer {

class Client;

// Ignite's sync_all_reduce / torchmetrics' sync, done in one round trip.
//
//   MetricSync sync(client.get());
//   sync.Add("correct", MutableTensorView::Of<int64_t>(absl::MakeSpan(&correct, 1)),
//            ReduceOp::kSum);
//   sync.Add("total", MutableTensorView::Of<int64_t>(absl::MakeSpan(&total, 1)),
//            ReduceOp::kSum);
//   auto reduced = sync.Reduce();   // local counters left as they are
//
// Not thread-safe. The registered views must stay valid while the MetricSync
// is used.
class MetricSync {
 public:
  explicit MetricSync(Client* client);  // not owned; must outlive this
  // Registers a state. Names must be unique; a repeated name replaces the
  // earlier registration.
  void Add(std::string name, MutableTensorView state, ReduceOp op);
  // Out-of-place: the registered states are left as they are.
  absl::StatusOr<absl::flat_hash_map<std::string, Tensor>> Reduce(
      const CallOptions& = {});
  // In-place: every registered state is overwritten with its reduced value
  // (all or none of them).
  absl::Status ReduceInPlace(const CallOptions& = {});

 private:
  struct Entry {
    std::string name;
    MutableTensorView state;
    ReduceOp op;
  };
  Client* client_;
  std::vector<Entry> entries_;
};

}  // namespace reducer

#endif  // REDUCER_CLIENT_METRIC_SYNC_H_
