// CollectiveHandle::Impl: what a CollectiveHandle holds, a collective the
// session started (or the error that refused it before anything was sent)
// and, for an in-place call, where its result goes.
//
// Not thread-safe, as CollectiveHandle. Internal to the client library.
#ifndef REDUCER_CLIENT_INTERNAL_COLLECTIVE_HANDLE_IMPL_H_
#define REDUCER_CLIENT_INTERNAL_COLLECTIVE_HANDLE_IMPL_H_

#include <memory>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/collective_handle.h"
#include "client/internal/call_results.h"
#include "client/internal/pending_collective.h"
#include "core/tensor.h"

namespace reducer {

// Hidden, as Client::Impl: a member of CollectiveHandle, no part of the API.
class __attribute__((visibility("hidden"))) CollectiveHandle::Impl {
 public:
  // A started collective: Wait() gives `pending`'s results, or, given a
  // `target`, writes them into its buffer (all or nothing) and gives none.
  Impl(std::unique_ptr<PendingCollective> pending,
       std::optional<InPlaceTarget> target);
  // A call refused before anything was sent: Wait() returns `refused`.
  explicit Impl(absl::Status refused);
  // Waits for a collective not waited for (its inputs are in use until then).
  ~Impl();

  // As CollectiveHandle's.
  absl::StatusOr<std::vector<Tensor>> Wait();
  bool Ready();
  int source() const { return source_; }

 private:
  std::unique_ptr<PendingCollective> pending_;  // null once waited for
  std::optional<InPlaceTarget> target_;         // an in-place call's buffer
  absl::Status refused_;  // the call was refused before it started
  bool waited_ = false;
  int source_ = -1;
};

}  // namespace reducer

#endif  // REDUCER_CLIENT_INTERNAL_COLLECTIVE_HANDLE_IMPL_H_
