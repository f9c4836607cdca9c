// JobDoor: the one way into reducerd's jobs, whatever the transport. The
// gRPC reactors (server/grpc) and the same-host path's sessions (server/shm)
// both call it to join a job, check a token, attach a call to its
// collective (with the replay fallbacks) and leave; neither knows the other.
//
// Thread-safe; every pointer given to the constructor must outlive it.
#ifndef REDUCER_SERVER_JOBS_JOB_DOOR_H_
#define REDUCER_SERVER_JOBS_JOB_DOOR_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/reducer/v1/reducer.pb.h"
#include "server/engine/collective.h"
#include "server/engine/rank_channel.h"
#include "server/jobs/job_registry.h"
#include "server/jobs/stream_shares.h"
#include "server/metrics/metrics_sink.h"
#include "server/security/job_tokens.h"

namespace reducer {

class JobDoor {
 public:
  // Finds or creates the collective for `header` and attaches `channel` to
  // it (the Collective may fail the channel right away). Returns the
  // Collective, or the error to end the call with before anything was
  // attached. Bound to the token the call's connection presented.
  using AttachFn =
      std::function<absl::StatusOr<std::shared_ptr<AttachedCollective>>(
          const v1::CollectiveHeader& header,
          std::shared_ptr<RankChannel> channel)>;

  // `metrics` counts refused requests. With `tokens` (null: no tokens
  // required) every entry must present the job's token. Every name a
  // request carries (job, session, collective, attempt) is at most
  // `max_name_bytes` long, or the request gets INVALID_ARGUMENT naming the
  // field and --max_name_bytes before anything is looked up or kept.
  JobDoor(JobRegistry* registry, MetricsSink* metrics, JobTokens* tokens,
          size_t max_name_bytes);

  bool tokens_required() const { return tokens_ != nullptr; }

  // OK when tokens are off or `token` is `job`'s; else JobTokens::Check's
  // error (counted as a refused request).
  absl::Status Authorize(absl::string_view job, const PresentedToken& token);

  // OK when tokens are off or `token` is some job's (JobTokens::CheckAnyJob;
  // a refusal is counted): what a stream that may carry several jobs'
  // calls must present before it takes a slot.
  absl::Status AuthorizeAnyJob(const PresentedToken& token);

  // What a same-host session must hold, at its handshake and all along:
  // `token` authorizes `job` (Authorize's error otherwise), and `session_id`
  // holds `rank` in the job's running epoch (FAILED_PRECONDITION otherwise:
  // it never joined, was replaced, or the epoch ended). The epoch's
  // Job::Seat::epoch_id.
  absl::StatusOr<uint64_t> CheckSeat(const std::string& job,
                                     const std::string& session_id, int rank,
                                     const PresentedToken& token);

  // The most addresses a Join's shard list may name: the client library's
  // own bound (kMaxShards in client/shards/shard_targets.h).
  static constexpr int kMaxJoinShards = 1024;
  // The most bytes of addresses a Join's shard list may hold in all:
  // kMaxJoinShards addresses of 64 bytes.
  static constexpr size_t kMaxJoinShardListBytes = 64 << 10;
  // The most ranks one Join may hold (JoinRequest.ranks: a relay's, for
  // the ranks of its host).
  static constexpr int kMaxJoinRanks = 1024;
  // The largest Join (serialized) taken: its two names at most
  // max_name_bytes each, its shard list within kMaxJoinShardListBytes (and
  // 2 bytes of framing per address), kMaxJoinRanks ranks of at most 5
  // bytes each, and kJoinFramingBytes for the rest.
  size_t max_join_request_bytes() const;

  // Checks the request (CheckJoin), authorizes, then joins `session` to the
  // request's job (JobRegistry::Join).
  absl::Status Join(const v1::JoinRequest& request, const PresentedToken& token,
                    std::shared_ptr<SessionChannel> session);

  // The session's channel `owner` ended (JobRegistry::Leave: nothing
  // happens unless `owner` is the channel the session is seated with).
  void Leave(const std::string& job, const std::string& session_id,
             const SessionChannel* owner, const std::string& why,
             EpochEndReason reason);

  // A client's Leave request: checks the names, authorizes, then departs on
  // purpose, or, with a `cause` (the job failed on another shard), ends the
  // job's epoch with the first 2 KiB of it. With `ranks` (at most
  // kMaxJoinRanks; INVALID_ARGUMENT otherwise), those ranks of the session
  // alone depart (no cause: Job::DepartRanks) or are lost, the cause
  // saying how (Job::LoseRanks).
  absl::Status Leave(const v1::LeaveRequest& request,
                     const PresentedToken& token);

  // Checks the header's names, authorizes against its job, then attaches `channel` to its
  // collective. A replayed attempt whose job was freed (and perhaps joined
  // again since) gets the freed job's kept result. Refusals other than
  // RESOURCE_EXHAUSTED (counted where the limit is known) are counted.
  absl::StatusOr<std::shared_ptr<AttachedCollective>> Attach(
      const v1::CollectiveHeader& header, const PresentedToken& token,
      std::shared_ptr<RankChannel> channel);

  // Attach bound to `token`, for a same-host session.
  AttachFn AttachWithToken(const PresentedToken& token);

  // Attach bound to `token`, for one gRPC stream: once the header's names
  // and token pass, the stream holds a share of the job's tenant
  // (TenantOf) in `stream_shares`, taking one if need be (refused with
  // StreamShares::Take's error, nothing attached), and keeps it if the call
  // attaches (HeldStreamShares::Hold and Settle). The stream gives them
  // back when it ends (HeldStreamShares::GiveBack).
  AttachFn AttachForStream(const PresentedToken& token,
                           std::shared_ptr<HeldStreamShares> stream_shares);

  // The tenant whose token `token` is (JobTokens::TenantOfToken); empty when
  // tokens are off or no line has it: a stream that names no job yet.
  std::string TenantOfToken(const PresentedToken& token);

 private:
  // A Join's bounds, before anything is looked up or kept: INVALID_ARGUMENT
  // naming the field when its names are over max_name_bytes_, its shard
  // list names more than kMaxJoinShards addresses, one of them over
  // max_name_bytes_ or more than kMaxJoinShardListBytes in all, or when the
  // whole message (fields this reducerd does not know included) is over
  // max_join_request_bytes().
  absl::Status CheckJoin(const v1::JoinRequest& request) const;
  // `invalid`, counted as a refused request.
  absl::Status Refuse(absl::Status invalid) const;
  // INVALID_ARGUMENT naming `field` when `value` is over max_name_bytes_.
  absl::Status CheckName(absl::string_view field,
                         absl::string_view value) const;
  absl::Status CheckNames(const v1::CollectiveHeader& header) const;
  // The header's names (CheckNames), then its token against its job.
  absl::Status CheckCall(const v1::CollectiveHeader& header,
                         const PresentedToken& token);
  // Attach once CheckCall has passed.
  absl::StatusOr<std::shared_ptr<AttachedCollective>> AttachChecked(
      const v1::CollectiveHeader& header, std::shared_ptr<RankChannel> channel);

  JobRegistry* const registry_;  // not owned
  MetricsSink* const metrics_;   // not owned
  JobTokens* const tokens_;      // not owned; null: no tokens required
  const size_t max_name_bytes_;
  // The room max_join_request_bytes() leaves for a Join's fields other than
  // its names and shards (rank, world size, tags and lengths).
  static constexpr size_t kJoinFramingBytes = 64;
};

}  // namespace reducer

#endif  // REDUCER_SERVER_JOBS_JOB_DOOR_H_
