// Client::Impl: what a Client holds, its session and the counts of its
// quorum steps and Done calls, and how each of its calls starts: a
// checked request (client/internal/collective_request.h) sent by the
// session, or refused before anything is sent, behind a CollectiveHandle.
//
// Thread-safe. Internal to the client library.
#ifndef REDUCER_CLIENT_INTERNAL_CLIENT_IMPL_H_
#define REDUCER_CLIENT_INTERNAL_CLIENT_IMPL_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "client/collective_handle.h"
#include "client/internal/call_results.h"
#include "client/internal/client_session.h"
#include "client/internal/collective_request.h"
#include "client/reducer_client.h"
#include "client/staging/device_staging.h"
#include "core/tensor.h"

namespace reducer {

// Hidden: the shared library exports the public classes' members, and this
// class is a member of Client but no part of the API.
class __attribute__((visibility("hidden"))) Client::Impl {
 public:
  explicit Impl(std::unique_ptr<ClientSession> session);

  ClientSession& session() const { return *session_; }
  // Moves tensors between GPUs and the host; lives as long as the Client.
  DeviceStaging* staging() const { return session_->staging(); }
  int rank() const { return session_->options().rank; }
  int world_size() const { return session_->options().world_size; }

  // Starts the collective `spec` describes, or makes a handle whose Wait()
  // returns `spec`'s error.
  std::unique_ptr<CollectiveHandle> Start(
      absl::StatusOr<CollectiveRequestSpec> spec, const CallOptions& call);
  // A collective of one input (OneInputSpec; `what` names the input in
  // errors), started, or run to its one result tensor.
  std::unique_ptr<CollectiveHandle> StartOneInput(CollectiveKind kind,
                                                  const TensorView& input,
                                                  ReduceOp op,
                                                  absl::string_view what,
                                                  const CallOptions& call);
  absl::StatusOr<Tensor> RunOneInput(CollectiveKind kind,
                                     const TensorView& input, ReduceOp op,
                                     absl::string_view what,
                                     const CallOptions& call);
  // The in-place calls, blocking (their handle waited for at once) or not:
  // the handle's Wait() writes the result into the buffer (all or nothing)
  // and gives no tensor. `what` names the call in errors ("ReduceInPlace",
  // "ReduceInPlaceAsync"); a string literal.
  std::unique_ptr<CollectiveHandle> StartAllReduceInPlace(
      const MutableTensorView& inout, ReduceOp op, const CallOptions& call,
      absl::string_view what);
  std::unique_ptr<CollectiveHandle> StartBroadcastInPlace(
      const MutableTensorView& inout, int root, const CallOptions& call,
      absl::string_view what);
  std::unique_ptr<CollectiveHandle> StartReduceInPlace(
      const MutableTensorView& inout, ReduceOp op, int root,
      const CallOptions& call, absl::string_view what);
  std::unique_ptr<CollectiveHandle> StartReceiveInPlace(
      const MutableTensorView& out, int source, int tag,
      const CallOptions& call, absl::string_view what);
  // Runs the collective `spec` describes to its end: its results, or
  // `spec`'s error (nothing sent) or the collective's.
  absl::StatusOr<std::vector<Tensor>> Run(
      absl::StatusOr<CollectiveRequestSpec> spec, const CallOptions& call);

  // The number of this rank's next quorum step.
  uint64_t NextQuorumStep();
  // The name of this rank's next unnamed Done call.
  std::string NextDoneName();

 private:
  // As Start; Wait() writes the result into `buffer` (named `what`).
  std::unique_ptr<CollectiveHandle> StartInPlace(
      absl::StatusOr<CollectiveRequestSpec> spec, const CallOptions& call,
      const MutableTensorView& buffer, absl::string_view what,
      bool gets_result = true);

  const std::unique_ptr<ClientSession> session_;

  absl::Mutex mu_;
  std::optional<uint64_t> next_quorum_step_ ABSL_GUARDED_BY(mu_);
  uint64_t done_calls_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace reducer

#endif  // REDUCER_CLIENT_INTERNAL_CLIENT_IMPL_H_
