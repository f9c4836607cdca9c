// ClientSession: what a Client holds: one ShardLink per reducerd shard
// named by ClientOptions::target (channels, the session there, its epoch),
// the one completion queue every call of this client completes on (and who
// polls it, see CompletionDriver), the transport every collective starts
// on (one shard's router, or the ShardedBackend over several), and the
// per-group sequence numbers that match collectives across ranks by call
// order, shared by all shards.
//
// With several shards the session is one: a failure of any shard's session
// (JobAborted, the shard lost) fails every later call, naming the shard, and
// is passed on to the other shards by abandoning their sessions, so that
// each of them ends the job's epoch too.
//
// Thread-safe. Internal to the client library.
#ifndef REDUCER_CLIENT_INTERNAL_CLIENT_SESSION_H_
#define REDUCER_CLIENT_INTERNAL_CLIENT_SESSION_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "client/client_options.h"
#include "client/internal/collective_attempt.h"
#include "client/internal/collective_backend.h"
#include "client/internal/collective_request.h"
#include "client/internal/pending_collective.h"
#include "client/internal/point_to_point_counts.h"
#include "client/shards/sharded_backend.h"
#include "client/staging/device_staging.h"
#include "client/staging/staging_backend.h"
#include "client/transport/grpc/completion_driver.h"
#include "client/transport/grpc/shard_link.h"
#include "core/buffer_cache.h"
#include "core/device.h"
#include "core/fingerprint.h"
#include "core/tensor.h"
#include "proto/reducer/v1/reducer.pb.h"

namespace reducer {

class ClientSession final {
 public:
  // Opens the channels and the Join stream of every shard; returns once the
  // job is ready on all of them. INVALID_ARGUMENT for a malformed target
  // (client/shards/shard_targets.h); a shard's failure names its address.
  static absl::StatusOr<std::unique_ptr<ClientSession>> Open(
      const ClientOptions& options);
  // As Open, moving device tensors through `staging` instead of this
  // build's (NewDeviceStaging): for tests, a staging of host memory that
  // stands in for a GPU's.
  static absl::StatusOr<std::unique_ptr<ClientSession>> Open(
      const ClientOptions& options, std::unique_ptr<DeviceStaging> staging);
  // Closes the session: the server sees this rank leave.
  ~ClientSession();

  // Starts one collective: checks the call options (group, timeout; an
  // error is INVALID_ARGUMENT naming what is wrong, returned by Wait()),
  // takes the next sequence number of its group, and sends it. A
  // SendReceive refuses CallOptions.name and CallOptions.group (its group is
  // {source, destination}) and takes instead the next count of its
  // (source, destination, tag) in this epoch, for its reserved name. A
  // Match (ReceiveAny) refuses CallOptions.name; it is sent as a match, and
  // so is a receive while a match of its tag is unanswered
  // (client/point_to_point_counts.h): Wait() then receives the message the
  // answer names.
  std::unique_ptr<PendingCollective> Start(const CollectiveRequestSpec& spec,
                                           const CallOptions& call);

  // Start(spec, call)->Wait().
  absl::StatusOr<std::vector<Tensor>> Run(const CollectiveRequestSpec& spec,
                                          const CallOptions& call);

  const ClientOptions& options() const { return options_; }
  // The number of this session's first quorum step: what reducerd's
  // JobReady said for a rank admitted into a running epoch, else 0.
  uint64_t FirstQuorumStep() const;
  // Moves this rank's count of unnamed collectives of the whole job to at
  // least `next` (after Done over several shards).
  void CatchUpWholeSequence(uint64_t next);
  // How many reducerd shards serve the job.
  int shard_count() const { return static_cast<int>(targets_.size()); }
  // Moves tensors between GPUs and the host; lives as long as the session.
  DeviceStaging* staging() const { return device_staging_.get(); }

 private:
  friend class PendingCollective;
  ClientSession(ClientOptions options, std::vector<std::string> targets);
  // Start, a receive's message count given (`message`: the match's answer)
  // instead of taken.
  std::unique_ptr<PendingCollective> StartCounted(
      const CollectiveRequestSpec& spec, const CallOptions& call,
      std::optional<uint64_t> message);
  // Makes `pending` (its contribution filled for `spec`, a ReceiveAny or a
  // receive, over `group`, the call's normalized) a match: the header of
  // kind Match, its name and counts (PointToPointCounts), no payload, and
  // what its second step needs.
  void StartMatchLocked(PendingCollective& pending,
                        const CollectiveRequestSpec& spec,
                        const CallOptions& call, const std::vector<int>& group)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `pending`, a match, was answered with message n of `source`: counts it
  // and starts the receive of that message.
  std::unique_ptr<PendingCollective> FollowMatch(
      const PendingCollective& pending, int source, uint64_t n);
  // `pending`, a match, ended without an answer.
  void AbandonMatch(const PendingCollective& pending);
  // Joins every shard; OK once all are ready.
  absl::Status JoinAll(absl::Time deadline);
  // Sends one attempt of `pending`'s collective.
  std::unique_ptr<CollectiveAttempt> SendAttempt(
      const PendingCollective& pending);
  // Asks for the result of `pending`'s attempt again (pending.replay_).
  std::unique_ptr<CollectiveAttempt> SendReplay(PendingCollective& pending);
  // `attempt_number` has its outcome (CollectiveHeader.received_below).
  void Settle(uint64_t attempt_number);
  // OK while the session is usable on every shard; else why not, naming
  // the shard when there are several (and then abandoning the others'
  // sessions, once). With several shards the first failure seen is the
  // answer from then on: the abandoned shards' sessions end too, and must
  // not hide the shard that failed.
  absl::Status SessionStatus();
  // `status` of shard `index`, its address named when there are several
  // shards and the message does not name it yet.
  absl::Status NameShard(size_t index, const absl::Status& status) const;

  // Constant after construction.
  const ClientOptions options_;
  const std::vector<std::string> targets_;  // the shards, in order
  const std::string session_id_;
  const std::shared_ptr<BufferCache> buffers_;  // shared with result tensors
  // Destroyed in reverse: the calls first, the driver last.
  std::unique_ptr<CompletionDriver> driver_;
  std::vector<std::unique_ptr<ShardLink>> links_;  // links_[i]: targets_[i]
  // With several shards: the backend that cuts collectives over them.
  std::unique_ptr<ShardedBackend> sharded_;
  // Where collectives go: links_[0]'s router, or sharded_.
  CollectiveBackend* transport_ = nullptr;
  // Device contributions staged around the transport (every attempt is
  // started here); destroyed before it, and device_staging_ last of the
  // calls' parts.
  std::unique_ptr<DeviceStaging> device_staging_;
  std::unique_ptr<StagingBackend> staging_backend_;
  absl::Mutex failure_mu_;
  // With several shards: the first shard failure seen (named), once it was
  // passed on to the other shards; OK before.
  absl::Status first_failure_ ABSL_GUARDED_BY(failure_mu_);

  absl::Mutex mu_;
  // Next sequence number per group (key: the group's ranks).
  absl::flat_hash_map<std::string, uint64_t> sequence_ ABSL_GUARDED_BY(mu_);
  // The counts behind point-to-point names: messages per (source,
  // destination, tag), matches per tag, per epoch.
  PointToPointCounts p2p_ ABSL_GUARDED_BY(mu_);
  // Numbers the collectives this session starts (their attempt ids).
  uint64_t next_attempt_ ABSL_GUARDED_BY(mu_) = 0;

  // Apart from mu_, which Start holds while it sends: a call that ends
  // (Settle) does not wait for another one being sent. Taken after mu_.
  absl::Mutex ack_mu_;
  // The attempt numbers started and not yet settled: the smallest is what
  // each header's received_below says.
  std::set<uint64_t> unsettled_ ABSL_GUARDED_BY(ack_mu_);
  // Numbers settled above the smallest unsettled one, not yet told
  // (the next header's `received`).
  std::vector<uint64_t> settled_above_ ABSL_GUARDED_BY(ack_mu_);
};

}  // namespace reducer

#endif  // REDUCER_CLIENT_INTERNAL_CLIENT_SESSION_H_
