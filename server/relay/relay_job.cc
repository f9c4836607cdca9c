#include "server/relay/relay_job.h"

#include <algorithm>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "core/payload_layout.h"
#include "core/point_to_point_name.h"
#include "proto/reducer/v1/wire_conversion.h"
#include "server/engine/kind_strategy.h"
#include "server/jobs/several_ranks.h"
#include "server/relay/forwarded_message.h"

namespace reducer {
namespace {

// The key that matches one collective across the ranks of this host: as a
// Job matches it (its name, or its group and sequence number), and for a
// call that goes upstream alone, its rank.
std::string MatchingKey(const v1::CollectiveHeader& header,
                        const Fingerprint& fp, bool alone) {
  std::string key =
      header.name().empty()
          ? absl::StrCat(absl::StrJoin(fp.group, ","), "|#", header.sequence())
          : absl::StrCat("\"", header.name());
  if (alone) absl::StrAppend(&key, "@", header.rank());
  return key;
}

}  // namespace

RelayJob::RelayJob(
    RelayJobEnv env, std::string job, int world_size,
    std::function<void(uint64_t, const std::string&)> upstream_ended,
    std::function<void(uint64_t, int, const std::string&)> rank_ended)
    : env_(std::move(env)),
      job_(std::move(job)),
      world_size_(world_size),
      upstream_ended_(std::move(upstream_ended)),
      rank_ended_(std::move(rank_ended)) {}

RelayJob::~RelayJob() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;  // joins in flight give up
  }
  threads_.JoinAll();
}

std::vector<int> RelayJob::ranks() const {
  absl::MutexLock lock(&mu_);
  return ranks_;
}

uint64_t RelayJob::bytes_saved() const {
  absl::MutexLock lock(&mu_);
  return bytes_saved_ + local_.bytes_saved();
}

uint64_t RelayJob::local_messages() const {
  absl::MutexLock lock(&mu_);
  return local_.kept();
}

bool RelayJob::KeepsHere(const v1::CollectiveHeader& header,
                         const Fingerprint& fp) {
  const std::optional<PointToPointNameParts> message =
      ParsePointToPointName(header.name());
  if (!message.has_value() || message->source < 0) return false;
  absl::StatusOr<PayloadLayout> layout = ComputePayloadLayout(fp.tensors);
  const uint64_t bytes =
      layout.ok() && header.rank() == message->source ? layout->total_bytes : 0;
  absl::MutexLock lock(&mu_);
  if (session_ == nullptr || ended_ || upstream_end_due_.has_value()) {
    return false;
  }
  // Both ranks on the host's session, taking part: a rank lost, joined
  // again alone, or whose Done() is in flight, is upstream's to judge (for
  // a message not decided yet).
  bool may_stay = true;
  for (int rank : {message->source, message->destination}) {
    if (!std::binary_search(ranks_.begin(), ranks_.end(), rank) ||
        lost_.count(rank) > 0 || alone_.count(rank) > 0 ||
        rejoining_.count(rank) > 0 || done_.count(rank) > 0) {
      may_stay = false;
    }
  }
  const uint64_t kept_before = local_.kept();
  const uint64_t saved_before = local_.bytes_saved();
  const bool here =
      local_.KeepsHere(*message, header, bytes, may_stay, absl::Now());
  // Both of its calls met here: counted once, with what it saved.
  if (local_.kept() > kept_before) {
    env_.collectives.metrics->RelayMessageKept(local_.bytes_saved() -
                                               saved_before);
  }
  return here;
}

std::vector<JobRelay::HeldMessage> RelayJob::HeldFrom(
    const std::vector<int>& ranks) {
  absl::MutexLock lock(&mu_);
  if (session_ == nullptr || ended_ || upstream_end_due_.has_value()) {
    return {};
  }
  // Their loss is reported upstream once upstream holds them (LoseRanks
  // waits for forwarding_): a send from a rank reported lost is refused.
  return ForwardLocked(local_.HeldFrom(ranks, absl::Now()));
}

std::vector<JobRelay::HeldMessage> RelayJob::BeforeMatch(
    const v1::CollectiveHeader& header, const Fingerprint& fp) {
  std::vector<std::pair<int, uint64_t>> received;
  for (const v1::ReceivedCount& count : header.match_received()) {
    received.emplace_back(count.source(), count.count());
  }
  absl::MutexLock lock(&mu_);
  if (session_ == nullptr || ended_ || upstream_end_due_.has_value()) {
    return {};
  }
  return ForwardLocked(
      local_.BeforeMatch(header.rank(), fp.tag, received, absl::Now()));
}

std::vector<JobRelay::HeldMessage> RelayJob::ForwardLocked(
    std::vector<v1::CollectiveHeader> sends) {
  // Those answered already need no waiting for.
  forwarding_.erase(std::remove_if(forwarding_.begin(), forwarding_.end(),
                                   [](const Forwarding& f) {
                                     return f.outcome->HasBeenNotified();
                                   }),
                    forwarding_.end());
  std::vector<HeldMessage> held;
  for (v1::CollectiveHeader& send : sends) {
    auto outcome = std::make_shared<absl::Notification>();
    forwarding_.push_back(
        {outcome, absl::Now() + absl::Milliseconds(send.timeout_ms())});
    absl::StatusOr<Fingerprint> sent = FingerprintFromHeader(send, world_size_);
    absl::StatusOr<PayloadLayout> layout =
        sent.ok() ? ComputePayloadLayout(sent->tensors)
                  : absl::StatusOr<PayloadLayout>(sent.status());
    const size_t bytes = layout.ok() ? layout->total_bytes : 0;
    const std::string name = send.name();
    HeldMessage message;
    message.send = send;
    message.channel = std::make_shared<ForwardedMessage>(
        *session_, std::move(send), bytes,
        [log = env_.log, job = job_, name,
         outcome = std::move(outcome)](const absl::Status& status) {
          outcome->Notify();
          if (status.ok()) return;
          log->Log({LogSeverity::kWarning, "relay_message_forwarded",
                    absl::StrCat("job ", job, ": message \"", name,
                                 "\", held on this host and sent upstream "
                                 "later, failed there: ",
                                 status.ToString()),
                    job});
        });
    held.push_back(std::move(message));
  }
  return held;
}

void RelayJob::JoinUpstream(uint64_t epoch_id, std::vector<int> ranks,
                            std::function<void(const absl::Status&)> ready) {
  absl::MutexLock lock(&mu_);
  joining_.insert(epoch_id);
  threads_.Start([this, epoch_id, ranks, ready = std::move(ready)] {
    // Why the join was given up; nullopt while it was not.
    auto why_given_up = [this, epoch_id]() -> std::optional<std::string> {
      absl::MutexLock lock(&mu_);
      if (stopping_) return "the relay let go of the job";
      if (given_up_.count(epoch_id) > 0) {
        return "the ranks of this host left before the job was ready";
      }
      return std::nullopt;
    };
    absl::StatusOr<std::unique_ptr<UpstreamSession>> session =
        env_.upstream->Open(
            job_, world_size_, ranks,
            [why_given_up] { return why_given_up().has_value(); },
            [this, epoch_id](const absl::Status& why) {
              OnUpstreamEnded(epoch_id, why);
            });
    if (std::optional<std::string> why = why_given_up();
        why.has_value() &&
        (session.ok() || absl::IsCancelled(session.status()))) {
      // Ready upstream just as it was given up: it leaves at once.
      if (session.ok()) {
        (*session)->Leave(absl::StrCat(*why, " (on ", env_.name, ")"));
      }
      session = absl::CancelledError(
          absl::StrCat("gave up joining upstream: ", *why));
    }
    if (session.ok()) {
      absl::MutexLock lock(&mu_);
      epoch_id_ = epoch_id;
      ranks_ = ranks;
      lost_.clear();
      rejoining_.clear();
      local_.Clear();
      session_ = std::shared_ptr<UpstreamSession>(*std::move(session));
      ended_ = false;
    }
    env_.log->Log(
        {session.ok() ? LogSeverity::kInfo : LogSeverity::kWarning,
         "relay_joined",
         session.ok()
             ? absl::StrCat("job ", job_, ": ranks [",
                            absl::StrJoin(ranks, ","), "] joined upstream")
             : absl::StrCat(
                   "job ", job_, ": ranks [", absl::StrJoin(ranks, ","),
                   "] could not join upstream: ", session.status().ToString()),
         job_});
    {
      absl::MutexLock lock(&mu_);
      joining_.erase(epoch_id);
      given_up_.erase(epoch_id);
    }
    ready(session.status());
  });
}

void RelayJob::OnUpstreamEnded(uint64_t epoch_id, const absl::Status& why) {
  const std::string reason(why.message());
  std::vector<std::pair<std::string, std::shared_ptr<RelayCollective>>> calls;
  {
    absl::MutexLock lock(&mu_);
    if (epoch_id != epoch_id_ || ended_) return;
    ended_ = true;  // no call attaches from now on
    calls.assign(pending_.begin(), pending_.end());
  }
  // The calls not made upstream cannot be any more; those made go on
  // upstream (replaying their results), and the epoch here waits for them.
  // A call whose last member attached meanwhile was made: it goes on.
  const absl::Status failed = UpstreamEndedError(reason);
  std::vector<std::string> failed_keys;
  for (const auto& [key, c] : calls) {
    if (c->FailUnlessStarted(failed)) failed_keys.push_back(key);
  }
  size_t made_upstream = 0;
  std::vector<int> ranks;
  {
    absl::MutexLock lock(&mu_);
    // The epoch ended here meanwhile (EndEpoch): nothing to pass on.
    if (epoch_id != epoch_id_ || session_ == nullptr) return;
    for (const std::string& key : failed_keys) pending_.erase(key);
    made_upstream = pending_.size();
    if (made_upstream > 0) upstream_end_due_ = reason;
    ranks = ranks_;
  }
  if (made_upstream == 0) {
    upstream_ended_(epoch_id, reason);
    return;
  }
  // The last of them to end passes the end on (its on_done, in Attach).
  env_.log->Log({LogSeverity::kWarning, "relay_upstream_ended",
                 absl::StrCat("job ", job_, ": the upstream session of ranks [",
                              absl::StrJoin(ranks, ","), "] ended (", reason,
                              "); the epoch here ends once its ", made_upstream,
                              " call(s) made upstream have their outcome"),
                 job_});
}

void RelayJob::OnRankSessionEnded(uint64_t epoch_id, int rank,
                                  const absl::Status& why) {
  std::shared_ptr<UpstreamSession> ended;  // let go of without the lock
  {
    absl::MutexLock lock(&mu_);
    // Once the rank was lost again (LoseRanks took its session) the end is
    // that report's.
    if (epoch_id != epoch_id_ || ended_) return;
    auto alone = alone_.find(rank);
    if (alone == alone_.end()) {
      // Ended while its join was in flight: the join gives up.
      rejoining_.erase(rank);
      return;
    }
    ended = std::move(alone->second);
    alone_.erase(alone);
  }
  env_.log->Log({LogSeverity::kWarning, "relay_rank_upstream_ended",
                 absl::StrCat("job ", job_, ": rank ", rank,
                              "'s own session upstream ended (", why.message(),
                              "); its session here ends"),
                 job_});
  rank_ended_(epoch_id, rank, std::string(why.message()));
}

absl::Status RelayJob::UpstreamEndedError(const std::string& why) const {
  return absl::AbortedError(absl::StrCat(
      "job ", job_, ": this relay's upstream session ended (", why,
      "); the epoch ends here once the calls it made upstream have their "
      "outcome; Connect again to go on"));
}

std::vector<int> RelayJob::MembersLocked(const Fingerprint& fp,
                                         int rank) const {
  if (!TraitsOf(fp.kind).takes_several_ranks) return {rank};
  std::vector<int> members;
  bool consecutive = true;
  for (size_t i = 0; i < fp.group.size(); ++i) {
    const bool here =
        std::binary_search(ranks_.begin(), ranks_.end(), fp.group[i]) &&
        done_.count(fp.group[i]) == 0 && lost_.count(fp.group[i]) == 0;
    if (here && !members.empty() && fp.group[i - 1] != members.back()) {
      consecutive = false;
    }
    if (here) members.push_back(fp.group[i]);
  }
  if (!consecutive || members.empty()) return {rank};
  return members;
}

absl::StatusOr<std::shared_ptr<AttachedCollective>> RelayJob::Attach(
    const v1::CollectiveHeader& header, const Fingerprint& fp,
    std::shared_ptr<RankChannel> channel) {
  std::shared_ptr<RelayCollective> collective;
  std::vector<std::shared_ptr<RelayCollective>> excusing;
  {
    absl::MutexLock lock(&mu_);
    if (upstream_end_due_.has_value()) {
      return UpstreamEndedError(*upstream_end_due_);
    }
    if (session_ == nullptr || ended_) {
      return absl::UnavailableError(absl::StrCat(
          "job ", job_, ": this relay holds no upstream session for it now"));
    }
    const bool done = fp.kind == CollectiveKind::kDone;
    if (done) {
      // The host's combined calls go on without it from now on, those
      // waiting for it too.
      done_.insert(header.rank());
      for (auto& [key, c] : pending_) excusing.push_back(c);
    }
    std::vector<int> members = MembersLocked(fp, header.rank());
    const std::string shared_key = MatchingKey(header, fp, /*alone=*/false);
    if (auto late = late_.find(shared_key);
        late != late_.end() && late->second.erase(header.rank()) > 0) {
      members = {header.rank()};
      if (late->second.empty()) late_.erase(late);
    }
    // A rank that joined again goes alone, through its own session.
    std::shared_ptr<UpstreamSession> via = session_;
    if (auto alone = alone_.find(header.rank()); alone != alone_.end()) {
      members = {header.rank()};
      via = alone->second;
    }
    const std::string key = MatchingKey(header, fp, members.size() == 1);
    auto it = pending_.find(key);
    if (it == pending_.end()) {
      const std::string description = absl::StrCat(
          CollectiveKindName(fp.kind), " ",
          header.name().empty() ? absl::StrCat("#", header.sequence())
                                : absl::StrCat("\"", header.name(), "\""),
          " in job ", job_);
      collective = std::make_shared<RelayCollective>(
          env_.collectives, description, members, via,
          [this, key, epoch = epoch_id_, done, rank = header.rank(),
           match = fp.kind == CollectiveKind::kMatch,
           tag = fp.tag](uint64_t saved, const std::vector<int>& absent) {
            std::optional<std::string> ending;
            {
              absl::MutexLock lock(&mu_);
              bytes_saved_ += saved;
              if (epoch != epoch_id_) return;
              // Sends to its rank with its tag may stay here again.
              if (match) local_.MatchDone(rank, tag);
              pending_.erase(key);
              if (!absent.empty())
                late_[key].insert(absent.begin(), absent.end());
              // Done() returns once every rank called it: all take part
              // again.
              if (done) done_.erase(rank);
              // The upstream session ended: the last call made upstream to
              // have its outcome ends the epoch here.
              if (upstream_end_due_.has_value() && pending_.empty()) {
                ending = std::move(upstream_end_due_);
                upstream_end_due_.reset();
              }
            }
            if (ending.has_value()) upstream_ended_(epoch, *ending);
          });
      pending_.emplace(key, collective);
    } else {
      collective = it->second;
    }
  }
  for (const auto& c : excusing) c->Excuse(header.rank());
  if (!collective->Attach(std::move(channel), header.rank(), header, fp)) {
    return absl::AbortedError("the relay refused this call; it was told why");
  }
  return collective;
}

void RelayJob::EndEpoch(uint64_t epoch_id, const absl::Status& status,
                        const std::string& reason) {
  std::vector<std::shared_ptr<RelayCollective>> failing;
  std::shared_ptr<UpstreamSession> leaving;
  {
    absl::MutexLock lock(&mu_);
    if (joining_.count(epoch_id) > 0) given_up_.insert(epoch_id);
    if (epoch_id != epoch_id_ || session_ == nullptr) return;
    // A call already made upstream ends as upstream decides (a result
    // decided there reaches every rank, as for ranks connected directly);
    // the others cannot be made any more.
    for (auto& [key, c] : pending_) {
      if (!c->started()) failing.push_back(c);
    }
    pending_.clear();
    late_.clear();
    // Ended here first: nothing of upstream's end is left to pass on.
    upstream_end_due_.reset();
    if (!ended_) leaving = session_;
    ended_ = true;
    session_ = nullptr;
    // The sessions of ranks that joined again close (each a departure
    // upstream) on a thread, as the host's session leaves.
    std::vector<std::shared_ptr<UpstreamSession>> closing;
    for (auto& [rank, alone] : alone_) closing.push_back(std::move(alone));
    alone_.clear();
    rejoining_.clear();
    if (leaving != nullptr || !closing.empty()) {
      threads_.Start(
          [leaving, closing = std::move(closing),
           cause = absl::StrCat(reason, " (on ", env_.name, ")")]() mutable {
            if (leaving != nullptr) leaving->Leave(cause);
            closing.clear();
          });
    }
  }
  // One whose last member attached meanwhile was made: it goes on.
  for (const auto& c : failing) c->FailUnlessStarted(status);
}

bool RelayJob::LoseRanks(uint64_t epoch_id, const std::vector<int>& ranks,
                         const std::string& cause) {
  absl::MutexLock lock(&mu_);
  if (epoch_id != epoch_id_ || session_ == nullptr || ended_ ||
      upstream_end_due_.has_value()) {
    return false;
  }
  // A rank that had joined again is reported on its own session, which
  // then closes.
  std::vector<std::shared_ptr<UpstreamSession>> own;
  std::vector<int> on_host_session;
  for (int rank : ranks) {
    rejoining_.erase(rank);  // a join upstream in flight gives up
    auto alone = alone_.find(rank);
    if (alone == alone_.end()) {
      // The host's session holds it unless it was lost before (and its
      // own session, if it joined again, ended since).
      if (lost_.count(rank) == 0) on_host_session.push_back(rank);
      continue;
    }
    own.push_back(std::move(alone->second));
    alone_.erase(alone);
  }
  lost_.insert(ranks.begin(), ranks.end());
  // An empty cause: they departed on purpose (their clients closed).
  env_.log->Log(
      {cause.empty() ? LogSeverity::kInfo : LogSeverity::kWarning,
       "relay_rank_lost",
       absl::StrCat("job ", job_, ": ", RanksName(ranks), " of this host ",
                    cause.empty() ? std::string("left (its client closed)")
                                  : absl::StrCat("lost (", cause, ")"),
                    "; reported upstream as such, and the host's other "
                    "ranks go on"),
       job_});
  threads_.Start([this, epoch_id, ranks, on_host_session, own = std::move(own),
                  forwarded = std::exchange(forwarding_, {}),
                  session = session_,
                  cause = cause.empty() ? std::string()
                                        : absl::StrCat(cause, ", on ",
                                                       env_.name)]() mutable {
    // What waits here for them goes on without them: collectives they had
    // not attached to, and (a second time, after the report) those whose
    // call of theirs was cut off meanwhile.
    auto excuse = [this, &ranks] {
      std::vector<std::shared_ptr<RelayCollective>> pending;
      {
        absl::MutexLock lock(&mu_);
        for (auto& [key, c] : pending_) pending.push_back(c);
      }
      for (const auto& c : pending) {
        for (int rank : ranks) c->Excuse(rank);
      }
    };
    excuse();
    // Their messages held here went upstream first (HeldFrom): upstream
    // takes them only from ranks it has not been told are lost.
    for (const Forwarding& f : forwarded) {
      f.outcome->WaitForNotificationWithDeadline(f.deadline);
    }
    absl::Status reported;
    if (!on_host_session.empty()) {
      reported = session->LoseRanks(on_host_session, cause);
    }
    for (const auto& alone : own) {
      // Its session holds it alone.
      absl::Status told = alone->LoseRanks(ranks, cause);  // others ignored
      if (reported.ok()) reported = told;
    }
    own.clear();
    excuse();
    if (reported.ok()) return;
    // Upstream would wait for them until its timeouts: the epoch ends
    // here, and the relay leaves upstream (EndEpoch).
    upstream_ended_(epoch_id, absl::StrCat("the loss of ", RanksName(ranks),
                                           " could not be reported upstream (",
                                           reported.ToString(), ")",
                                           cause.empty() ? "" : "; ", cause));
  });
  return true;
}

bool RelayJob::RejoinUpstream(
    uint64_t epoch_id, int rank,
    std::function<void(absl::StatusOr<uint64_t>)> ready) {
  absl::MutexLock lock(&mu_);
  if (epoch_id != epoch_id_ || session_ == nullptr || ended_ ||
      upstream_end_due_.has_value() || lost_.count(rank) == 0 ||
      alone_.count(rank) > 0 || rejoining_.count(rank) > 0) {
    return false;
  }
  rejoining_.insert(rank);
  threads_.Start([this, epoch_id, rank, ready = std::move(ready)] {
    auto gone = [this, epoch_id, rank]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return stopping_ || epoch_id != epoch_id_ || ended_ ||
             rejoining_.count(rank) == 0;
    };
    absl::StatusOr<std::unique_ptr<UpstreamSession>> session =
        env_.upstream->Open(
            job_, world_size_, {rank},
            [this, gone] {
              absl::MutexLock lock(&mu_);
              return gone();
            },
            [this, epoch_id, rank](const absl::Status& why) {
              OnRankSessionEnded(epoch_id, rank, why);
            });
    absl::StatusOr<uint64_t> first_step;
    std::shared_ptr<UpstreamSession> dropped;  // closed without the lock
    {
      absl::MutexLock lock(&mu_);
      if (!session.ok()) {
        first_step = session.status();
      } else if (gone()) {
        dropped = std::shared_ptr<UpstreamSession>(*std::move(session));
        first_step = absl::CancelledError(
            "the epoch ended here, or the rank left, before it was ready "
            "upstream");
      } else {
        first_step = (*session)->FirstQuorumStep();
        alone_[rank] = std::shared_ptr<UpstreamSession>(*std::move(session));
      }
      rejoining_.erase(rank);
    }
    dropped.reset();
    env_.log->Log(
        {first_step.ok() ? LogSeverity::kInfo : LogSeverity::kWarning,
         "relay_rank_rejoined",
         first_step.ok()
             ? absl::StrCat("job ", job_, ": rank ", rank,
                            " joined upstream again on a session of its own; "
                            "it takes part from quorum step ",
                            *first_step)
             : absl::StrCat("job ", job_, ": rank ", rank,
                            " could not join upstream again: ",
                            first_step.status().ToString()),
         job_});
    ready(std::move(first_step));
  });
  return true;
}

}  // namespace reducer
