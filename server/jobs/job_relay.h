// JobRelay: what a Job on a relay (reducerd --upstream) hands upstream. A
// relay serves the ranks of one host: they join it and call it as they
// would a reducerd, and it holds one upstream session for all of them per
// epoch, through which their collectives go (combined where the kind
// allows: server/relay/). The Job keeps who takes part here (its
// Membership, expecting the host's ranks only) and asks its JobRelay for
// the rest. Implemented by server/relay/relay_job.h; made per job by a
// JobRelayFactory the JobRegistry holds.
//
// Calls come from the Job; none of them calls back into it synchronously
// (the Job may hold its lock). Implementations are thread-safe.
#ifndef REDUCER_SERVER_JOBS_JOB_RELAY_H_
#define REDUCER_SERVER_JOBS_JOB_RELAY_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/fingerprint.h"
#include "proto/reducer/v1/reducer.pb.h"
#include "server/engine/attached_collective.h"
#include "server/engine/rank_channel.h"

namespace reducer {

class JobRelay {
 public:
  virtual ~JobRelay() = default;

  // Every rank expected here is seated for the epoch `epoch_id` (`ranks`,
  // sorted): joins the job upstream for them, in the background. `ready`
  // is called once, from another thread: OK once the job is ready
  // upstream, else why it could not join.
  virtual void JoinUpstream(uint64_t epoch_id, std::vector<int> ranks,
                            std::function<void(const absl::Status&)> ready) = 0;

  // A call of a rank seated here in the running epoch (the Job checked its
  // session and epoch; `fp` is valid): attaches it to the collective that
  // takes it upstream.
  virtual absl::StatusOr<std::shared_ptr<AttachedCollective>> Attach(
      const v1::CollectiveHeader& header, const Fingerprint& fp,
      std::shared_ptr<RankChannel> channel) = 0;

  // The epoch `epoch_id` ended here (`reason` says why: a rank of this
  // host lost that LoseRanks could not take, or the job's end upstream):
  // fails the calls still going on with `status`, and leaves the job
  // upstream naming `reason` (unless it ended upstream first).
  virtual void EndEpoch(uint64_t epoch_id, const absl::Status& status,
                        const std::string& reason) = 0;

  // Ranks of this host seated in the running epoch `epoch_id` were lost
  // (their sessions here ended; `cause` says how), or departed on purpose
  // (their clients were closed; `cause` empty). True when the relay
  // takes it upstream as those ranks' loss (its upstream session of that
  // epoch holds them): it reports them lost there (LeaveRequest.ranks), in
  // the background, leaves them out of its later combined calls and ends
  // what waits here for them; the epoch goes on here, and upstream decides
  // whether it goes on there (quorum mode) or ends (naming the rank), which
  // then ends it here. False when it cannot (no upstream session yet, or it
  // ended): the Job ends the epoch (EndEpoch). If the report fails, the
  // epoch ends through `upstream_ended` (see JobRelayFactory).
  virtual bool LoseRanks(uint64_t epoch_id, const std::vector<int>& ranks,
                         const std::string& cause) = 0;

  // A rank of this host that was lost (LoseRanks took it) joins again in
  // the running epoch `epoch_id`: the relay joins it upstream on a session
  // of its own, in the background, through which its calls go from then
  // on, alone (the host's session no longer holds it there). `ready` is
  // called once, from another thread: with the first quorum step the rank
  // takes part in (upstream's JobReady.quorum_steps_started), or why it
  // could not join. False, and `ready` never called, when the relay cannot
  // (no upstream session of that epoch, or the rank was not lost here, or
  // is joining already): the Job refuses the Join.
  virtual bool RejoinUpstream(
      uint64_t epoch_id, int rank,
      std::function<void(absl::StatusOr<uint64_t>)> ready) = 0;

  // The bytes its combined calls did not move over the host's link (what
  // one call per rank would have sent and received, less what was).
  virtual uint64_t bytes_saved() const = 0;

  // Point to point between two ranks of this host (a kSendReceive call of
  // a rank seated here in the running epoch, `fp` valid): true when the
  // Job matches it itself, as a reducerd would, instead of Attach taking
  // it upstream. Both calls of a message go the same way
  // (server/relay/local_messages.h).
  virtual bool KeepsHere(const v1::CollectiveHeader& header,
                         const Fingerprint& fp) {
    (void)header, (void)fp;
    return false;
  }

  // A message held by the Job (its send matched here, its receive not
  // come) that goes upstream: `send` is its source's header; the Job hands
  // its bytes to `channel` as to its destination's call.
  struct HeldMessage {
    v1::CollectiveHeader send;
    std::shared_ptr<RankChannel> channel;
  };
  // A match (kMatch) of a rank of this host is about to be attached
  // (Attach): the held messages that are to go upstream before it, in the
  // order to hand them over.
  virtual std::vector<HeldMessage> BeforeMatch(
      const v1::CollectiveHeader& header, const Fingerprint& fp) {
    (void)header, (void)fp;
    return {};
  }
  // Ranks of this host are about to be lost (LoseRanks): the held
  // messages they sent that are to go upstream before their loss is
  // reported there, in the order to hand them over.
  virtual std::vector<HeldMessage> HeldFrom(const std::vector<int>& ranks) {
    (void)ranks;
    return {};
  }
};

// Makes the JobRelay of job `job` of `world_size` ranks (its tenant
// `tenant`). `upstream_ended(epoch_id, reason)` is to be called once per
// epoch whose upstream session ended on its own (the job's epoch aborted
// upstream, a shard lost): the Job then ends that epoch here.
// `rank_ended(epoch_id, rank, reason)`, when the upstream session of a
// rank that joined again alone (RejoinUpstream) ended on its own: the Job
// ends that rank's session here (Job::EndRankFromUpstream), and the epoch
// goes on.
using JobRelayFactory = std::function<std::shared_ptr<JobRelay>(
    const std::string& job, int world_size, const std::string& tenant,
    std::function<void(uint64_t epoch_id, const std::string& reason)>
        upstream_ended,
    std::function<void(uint64_t epoch_id, int rank, const std::string& reason)>
        rank_ended)>;

}  // namespace reducer

#endif  // REDUCER_SERVER_JOBS_JOB_RELAY_H_
