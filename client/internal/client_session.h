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
// A relay (reducerd --upstream) opens one session for all the ranks of its
// host (OpenForRanks) and forwards their calls on it (StartForwarded),
// each with the identity the caller gives; it learns of the session's end
// through OnEnd, reports a rank of its host lost with LoseRanks (the
// shards treat it as that rank's own loss), and ends the job's epoch itself
// with LeaveWithCause when it must (client_session_relay.cc).
//
// Thread-safe. Internal to the client library.
#ifndef REDUCER_CLIENT_INTERNAL_CLIENT_SESSION_H_
#define REDUCER_CLIENT_INTERNAL_CLIENT_SESSION_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
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
#include "client/internal/input_gate.h"
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
#include "core/result_into.h"
#include "core/tensor.h"
#include "proto/reducer/v1/reducer.pb.h"

namespace reducer {

class ClientSession final {
 public:
  // Opens the channels and the Join stream of every shard; returns once the
  // job is ready on all of them. Device tensors move through `staging`: the
  // client's is this build's NewDeviceStaging, a test's may stand host
  // memory in for a GPU's. INVALID_ARGUMENT for a malformed target
  // (client/shards/shard_targets.h); a shard's failure names its address.
  static absl::StatusOr<std::unique_ptr<ClientSession>> Open(
      const ClientOptions& options, std::unique_ptr<DeviceStaging> staging);
  // As Open, for a session that holds several global ranks of the job (a
  // relay's, for the ranks of its host): every shard's Join sends `ranks`
  // (JoinRequest.ranks), and the session's own rank (options().rank) is
  // ranks[0], whatever options.rank said. INVALID_ARGUMENT unless `ranks`
  // is non-empty, sorted, distinct and within the world. The job is ready
  // once every rank is held by some session.
  // `given_up`, when given, is polled while it waits for the job to be
  // ready (at least once a second): once true, it returns CANCELLED (the
  // relay that holds the ranks is stopping, or its ranks have gone).
  static absl::StatusOr<std::unique_ptr<ClientSession>> OpenForRanks(
      const ClientOptions& options, std::vector<int> ranks,
      std::unique_ptr<DeviceStaging> staging,
      std::function<bool()> given_up = nullptr);
  // Closes the session: the server sees this rank (these ranks) leave.
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

  // Starts one contribution whose identity the caller gives (a relay
  // forwarding a call of one of its ranks, or the combined call of
  // several): `header` is sent as it is (rank, ranks, group, sequence or
  // name, kind, tensors, root, timeout_ms, and the kind's own fields:
  // send_rows, match and quorum fields), the session filling in only the
  // job, its session id, the epoch, the attempt id and what it has received
  // (received_below, received); no sequence number of this session's own
  // counts is taken. `inputs`: one pointer per header tensor, to its bytes
  // (host memory; none: shapes declared, no payload sent), read only as
  // far as `gate` allows (null: all readable now), so that the caller may
  // fill them while the call is sent; the memory and the gate must outlive
  // the returned call. `deadline`: when the client gives up (usually the
  // call's timeout and kDeadlineSlack from now). Retries, replays and the
  // cut over several shards are those of Start; Wait() returns the result
  // tensors (host memory). `into` (an all-reduce's only; may be null): the
  // memory its result is written into as it arrives, its `landed` told of
  // each range (core/result_into.h), and the tensors Wait() returns lent
  // over it; its specs are the header's tensors. INVALID_ARGUMENT from
  // Wait() when header.rank or a rank of header.ranks is not held by this
  // session, or the inputs or `into` do not match the tensors. Callable
  // from many threads at once.
  std::unique_ptr<PendingCollective> StartForwarded(
      v1::CollectiveHeader header, std::vector<const void*> inputs,
      const InputGate* gate, absl::Time deadline,
      std::shared_ptr<const ResultInto> into = nullptr);

  // OK while the session is usable on every shard; else why not (as the
  // next call's failure would say).
  absl::Status status() { return SessionStatus(); }
  // Calls `callback` once, with status(), when the session ends (JobAborted
  // from a shard, a shard lost, LeaveWithCause), or soon after registration
  // when it has ended already; from a thread of the session's own, never
  // from the registering one. Not called once the session is being
  // destroyed. `callback` must not destroy the session.
  void OnEnd(std::function<void(const absl::Status&)> callback);
  // Ends the job's epoch on every shard naming `cause` (LeaveRequest.cause:
  // as when a session is lost, with the cause in the other ranks' message),
  // for a relay that lost one of its ranks; the session is over then
  // (status() is ABORTED naming `cause`). Waits for each shard's answer, a
  // second or so at most. OK when every shard took it; else the first
  // failure, naming its shard; the session's failure when it had ended
  // before.
  absl::Status LeaveWithCause(std::string cause);

  // For a relay: `ranks` of this session's were lost (their own sessions
  // with the relay ended), and every shard is told so (LeaveRequest.ranks,
  // `cause` saying how): each treats them as ranks whose own sessions were
  // lost, and the session goes on holding the others. With an empty
  // `cause` the ranks depart on purpose instead (their clients closed). Waits for each
  // shard's answer, a second or so at most. OK when every shard took it
  // or had ended its session already (the epoch ended there: it waits for
  // nobody); else the first failure, naming its shard.
  absl::Status LoseRanks(const std::vector<int>& ranks,
                         const std::string& cause);

  const ClientOptions& options() const { return options_; }
  // The global ranks this session holds, sorted: {options().rank} unless
  // opened with OpenForRanks.
  const std::vector<int>& ranks() const { return ranks_; }
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
  ClientSession(ClientOptions options, std::vector<int> ranks,
                std::vector<std::string> targets);
  // Open and OpenForRanks: `ranks` checked, options.rank its first.
  static absl::StatusOr<std::unique_ptr<ClientSession>> OpenHolding(
      const ClientOptions& options, std::vector<int> ranks,
      std::unique_ptr<DeviceStaging> staging,
      const std::function<bool()>& given_up);
  // StartForwarded's checks: INVALID_ARGUMENT naming what is wrong.
  absl::Status CheckForwarded(const v1::CollectiveHeader& header,
                              size_t inputs) const;
  static absl::Status CheckResultInto(const v1::CollectiveHeader& header,
                                      const std::vector<TensorSpec>& tensors,
                                      const ResultInto& into);
  // Numbers `pending`'s contribution as this session's next attempt (its
  // attempt id, received_below and received).
  void NumberAttempt(PendingCollective& pending)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // OnEnd's thread: calls the registered callbacks once the session ended.
  void WatchEnd();
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
  // Joins every shard; OK once all are ready; CANCELLED once `given_up`
  // (when given) is true.
  absl::Status JoinAll(absl::Time deadline,
                       const std::function<bool()>& given_up);
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
  const std::vector<int> ranks_;            // held, sorted; ranks_[0] = rank
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
  // After LeaveWithCause (also with one shard): ABORTED naming its cause.
  absl::Status first_failure_ ABSL_GUARDED_BY(failure_mu_);
  // LeaveWithCause began: first_failure_ says why the session is over.
  std::atomic<bool> left_{false};

  // OnEnd: the callbacks not yet called, and the thread that calls them.
  // Taken after a link's lock (its end observer signals here).
  absl::Mutex end_mu_;
  std::vector<std::function<void(const absl::Status&)>> end_callbacks_
      ABSL_GUARDED_BY(end_mu_);
  bool end_signaled_ ABSL_GUARDED_BY(end_mu_) = false;  // a link may have ended
  bool end_stopping_ ABSL_GUARDED_BY(end_mu_) = false;  // the session closes
  std::thread end_watcher_;  // started by the first OnEnd

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
