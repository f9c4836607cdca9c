// RelayJob: a job as a relay (reducerd --upstream) serves it, the JobRelay
// of its Job (server/jobs/job_relay.h). Per epoch it holds one upstream
// session for the ranks of its host, opened once they are all seated, and
// takes each of their calls upstream through a RelayCollective
// (relay_collective.h): one per collective for the ranks combined
// (several ranks of a kind that takes them, consecutive in its group), or
// one per call (every other kind, and ranks not consecutive in the group),
// found by the same matching key as a Job's: the name, or the group and
// sequence number. A point-to-point message between two ranks of this
// host never goes upstream: its Job matches it, as a reducerd would
// (KeepsHere), and LocalMessages (local_messages.h) says which messages
// those are, and which held ones go upstream before a match (BeforeMatch).
//
// A rank of this host lost (its session here ended) is that rank's loss
// upstream, as if it were connected there directly (LoseRanks): the relay
// reports it on its upstream session (LeaveRequest.ranks), which goes on
// holding the host's other ranks; the rank is absent in its Job here, and left
// out of the host's later combined calls; collectives waiting here for it go
// upstream without it. Upstream then decides: in quorum mode the job goes on
// without the rank (its quorum steps stop waiting for it, and the survivors'
// data all-reduce names a group without it); otherwise the epoch ends there
// naming the rank, which ends it here. A rank whose client closes on purpose is
// reported the same way, as departed (no cause). A loss before the job is
// joined upstream, or one that cannot be reported, ends the epoch here and the
// relay leaves upstream naming it. A lost rank that joins again while the epoch
// runs joins upstream on a session of its own (RejoinUpstream), admitted there
// at once in quorum mode, and its calls go upstream alone through it from then
// on; lost again, it is reported on that session, whose end then ends nothing
// here. That session ending on its own (upstream lost the rank: its keepalive,
// its connection) is the rank's loss alone: its session here ends, and it may
// join again; the host's session and its other ranks go on. The epoch
// ending upstream ends it here. An epoch that ends here while its join
// upstream still waits (for other hosts' ranks) gives that join up,
// and so does the relay letting go of the job: neither waits out the join's
// timeout.
//
// When the upstream session ends on its own (its epoch aborted upstream, a
// shard lost or cut off: a keepalive watchdog, a link down), the calls not
// yet made upstream fail at once (ABORTED, naming why) and so does every
// later call, but the epoch here ends only once each call already made
// upstream has its outcome: those calls replay their results from the
// shards as a directly connected client's do (client/retry_sequence.h),
// and their ranks must still be there to get them. Ending the epoch here
// ends the ranks' same-host sessions, which would cut those calls off, and
// a relay keeps no results to send again; so a result decided upstream
// reaches every rank of this host, as it reaches every rank connected
// directly. The calls made upstream end by their deadlines at the latest.
//
// Thread-safe.
#ifndef REDUCER_SERVER_RELAY_RELAY_JOB_H_
#define REDUCER_SERVER_RELAY_RELAY_JOB_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "server/jobs/job_relay.h"
#include "server/log.h"
#include "server/relay/joinable_threads.h"
#include "server/relay/local_messages.h"
#include "server/relay/relay_collective.h"
#include "server/relay/upstream.h"

namespace reducer {

// What a relay's jobs share; every pointer outlives them.
struct RelayJobEnv {
  Upstream* upstream;
  RelayEnv collectives;
  const Logger* log;
  // How this relay names itself in what it tells upstream ("relay
  // host-7").
  std::string name;
};

class RelayJob final : public JobRelay {
 public:
  // `upstream_ended` and `rank_ended`: see JobRelayFactory.
  RelayJob(RelayJobEnv env, std::string job, int world_size,
           std::function<void(uint64_t, const std::string&)> upstream_ended,
           std::function<void(uint64_t, int, const std::string&)> rank_ended);
  ~RelayJob() override;

  void JoinUpstream(uint64_t epoch_id, std::vector<int> ranks,
                    std::function<void(const absl::Status&)> ready) override;
  absl::StatusOr<std::shared_ptr<AttachedCollective>> Attach(
      const v1::CollectiveHeader& header, const Fingerprint& fp,
      std::shared_ptr<RankChannel> channel) override;
  void EndEpoch(uint64_t epoch_id, const absl::Status& status,
                const std::string& reason) override;
  bool LoseRanks(uint64_t epoch_id, const std::vector<int>& ranks,
                 const std::string& cause) override;
  bool RejoinUpstream(
      uint64_t epoch_id, int rank,
      std::function<void(absl::StatusOr<uint64_t>)> ready) override;

  // For status reports: the ranks of this host joined upstream (empty
  // while none), and the bytes its combined calls did not send upstream
  // (what one call per rank would have sent, less what was sent).
  std::vector<int> ranks() const;
  uint64_t bytes_saved() const override;

  bool KeepsHere(const v1::CollectiveHeader& header,
                 const Fingerprint& fp) override;
  std::vector<HeldMessage> BeforeMatch(const v1::CollectiveHeader& header,
                                       const Fingerprint& fp) override;
  std::vector<HeldMessage> HeldFrom(const std::vector<int>& ranks) override;
  // For status reports: the messages between ranks of this host that met
  // here.
  uint64_t local_messages() const;

 private:
  // The ranks of `fp`'s group that are this host's and not done, when
  // they may be combined (TakesSeveralRanks, consecutive in the group);
  // else `rank`.
  std::vector<int> MembersLocked(const Fingerprint& fp, int rank) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Starts each of `sends` (held messages' source headers) upstream on
  // session_, as a ForwardedMessage the Job hands its bytes to, and adds
  // each one's outcome (notified once upstream answered it) and the
  // deadline to wait for it by to forwarding_.
  struct Forwarding {
    std::shared_ptr<absl::Notification> outcome;
    absl::Time deadline;
  };
  std::vector<HeldMessage> ForwardLocked(
      std::vector<v1::CollectiveHeader> sends)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Upstream's `ended` callback for the session of `epoch_id`: fails the
  // calls not made upstream, and ends the epoch here (upstream_ended_)
  // once the calls made upstream have their outcomes.
  void OnUpstreamEnded(uint64_t epoch_id, const absl::Status& why);
  // Upstream's `ended` callback for `rank`'s own session (RejoinUpstream):
  // unless the rank was lost again meanwhile, lets go of that session and
  // ends the rank's session here (rank_ended_): its loss alone.
  void OnRankSessionEnded(uint64_t epoch_id, int rank, const absl::Status& why);
  // The error of a call refused, or failed before it was made upstream,
  // because the upstream session ended (`why`).
  absl::Status UpstreamEndedError(const std::string& why) const;

  const RelayJobEnv env_;
  const std::string job_;
  const int world_size_;
  const std::function<void(uint64_t, const std::string&)> upstream_ended_;
  const std::function<void(uint64_t, int, const std::string&)> rank_ended_;

  mutable absl::Mutex mu_;
  uint64_t epoch_id_ ABSL_GUARDED_BY(mu_) = 0;  // of session_
  std::vector<int> ranks_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<UpstreamSession> session_ ABSL_GUARDED_BY(mu_);
  bool ended_ ABSL_GUARDED_BY(mu_) = false;  // the epoch of session_
  // The upstream session of epoch_id_ ended on its own, and the epoch here
  // is to end (upstream_ended_) once pending_ is empty: why it ended.
  // nullopt otherwise (not ended, passed on, or the epoch ended here first).
  std::optional<std::string> upstream_end_due_ ABSL_GUARDED_BY(mu_);
  // By the matching key of a collective that is over, its members that
  // never attached: each goes upstream alone when it comes, as the others
  // did (a combined call would wait half its timeout here for ranks that
  // are done with it).
  absl::flat_hash_map<std::string, std::set<int>> late_ ABSL_GUARDED_BY(mu_);
  // Collectives in flight by matching key.
  absl::flat_hash_map<std::string, std::shared_ptr<RelayCollective>> pending_
      ABSL_GUARDED_BY(mu_);
  uint64_t bytes_saved_ ABSL_GUARDED_BY(mu_) = 0;
  // Point to point between ranks of this host, in the epoch of session_.
  LocalMessages local_ ABSL_GUARDED_BY(mu_);
  // Held messages gone upstream (before a match, or a rank's loss) whose
  // outcome may not have come: the next LoseRanks reports the loss once
  // each has it, so that upstream holds a lost rank's sends before its
  // loss (it refuses a send from a rank it was told left).
  std::vector<Forwarding> forwarding_ ABSL_GUARDED_BY(mu_);
  // Ranks of this host lost in the epoch of session_ (LoseRanks): left out
  // of its combined calls from then on.
  std::set<int> lost_ ABSL_GUARDED_BY(mu_);
  // Lost ranks that joined again (RejoinUpstream), each on an upstream
  // session of its own through which its calls go alone; and those whose
  // join upstream is in flight.
  absl::flat_hash_map<int, std::shared_ptr<UpstreamSession>> alone_
      ABSL_GUARDED_BY(mu_);
  std::set<int> rejoining_ ABSL_GUARDED_BY(mu_);
  // Ranks of this host whose Done() is in flight upstream: left out of
  // the combined calls until it returns (every rank has called it).
  std::set<int> done_ ABSL_GUARDED_BY(mu_);
  // Joins, leaves and reports of lost ranks run here, so that no caller
  // waits on upstream; those that returned are joined as new ones start.
  JoinableThreads threads_;
  // Epochs whose join upstream is in flight, and those of them given up:
  // their epoch ended here first (its ranks have gone). stopping_: the
  // relay lets go of the job; every join in flight gives up.
  std::set<uint64_t> joining_ ABSL_GUARDED_BY(mu_);
  std::set<uint64_t> given_up_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace reducer

#endif  // REDUCER_SERVER_RELAY_RELAY_JOB_H_
