#include "server/jobs/job.h"

#include <algorithm>
#include <atomic>
#include <utility>

#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "core/point_to_point_name.h"
#include "core/validate.h"
#include "proto/reducer/v1/wire_conversion.h"
#include "server/log.h"

namespace reducer {
namespace {

// The key that matches the same collective across ranks: its name, which
// is unique in the job (so ranks that name different groups meet and are
// told), or else its sequence number on its group.
std::string MatchingKey(const v1::CollectiveHeader& header,
                        const Fingerprint& fp) {
  if (!header.name().empty()) return absl::StrCat("\"", header.name());
  return absl::StrCat(absl::StrJoin(fp.group, ","), "|#", header.sequence());
}

// How long a result is kept for a replay at most: a client asks again only
// within its call's replay window (client/retry_sequence.h), which is shorter.
// A fresh Job::Seat::epoch_id.
uint64_t NextEpochId() {
  static std::atomic<uint64_t> last{0};
  return last.fetch_add(1, std::memory_order_relaxed) + 1;
}

constexpr absl::Duration kKeepResultsFor = absl::Seconds(30);

// `env` with a KeptResults of the job's own, when the server keeps results.
// `env` with the job's own kept results and its share of the memory
// budget (--max_job_memory_fraction), unless the caller gave its own.
CollectiveEnv ForJob(CollectiveEnv env) {
  if (env.kept == nullptr && env.kept_memory != nullptr) {
    env.kept = std::make_shared<KeptResults>(env.kept_memory, kKeepResultsFor);
  }
  if (env.job_memory == nullptr && env.options->max_job_memory_fraction < 1) {
    env.job_memory = std::make_shared<MemoryBudget>(static_cast<size_t>(
        static_cast<double>(env.memory->limit()) *
        env.options->max_job_memory_fraction));
  }
  return env;
}

}  // namespace

Job::Job(std::string name, int world_size, CollectiveEnv env,
         std::string shared_memory_socket, MemoryReservation rank_state)
    : name_(std::move(name)),
      world_size_(world_size),
      env_(ForJob(std::move(env))),
      shared_memory_socket_(std::move(shared_memory_socket)),
      rank_state_(std::move(rank_state)),
      epoch_id_(NextEpochId()),
      members_(world_size),
      departed_(world_size, false),
      done_(world_size, false),
      skipped_(world_size),
      absent_(world_size, false),
      rejoined_(world_size, false),
      chunk_bytes_(InitialChunkBytes(env_.options->chunk_time, env_.options->chunk_bytes)) {}

void Job::ReleaseRankState() {
  absl::MutexLock lock(&mu_);
  rank_state_ = MemoryReservation();
}

size_t Job::RankStateBytes(int world_size) {
  // members_, skipped_ (its empty maps), and departed_, done_, absent_ and
  // rejoined_ (a bit each, counted as a byte).
  return static_cast<size_t>(world_size) *
         (sizeof(std::optional<Member>) +
          sizeof(absl::flat_hash_map<std::string, uint64_t>) + 4);
}

absl::Status Job::Join(int rank, int world_size, const std::string& session_id,
                       std::shared_ptr<SessionChannel> session,
                       std::vector<std::string> shards) {
  absl::MutexLock lock(&mu_);
  if (world_size != world_size_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", name_, " has world size ", world_size_,
        " (set by the ranks already joined), but rank ", rank, " asked for ",
        world_size));
  }
  if (!shards_.has_value()) {
    shards_ = std::move(shards);
  } else if (const bool several = shards.size() > 1;
             several != (shards_->size() > 1) || (several && shards != *shards_)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", name_, ": rank ", rank, " names the shards [",
        absl::StrJoin(shards, ","), "], but the ranks already joined named [",
        absl::StrJoin(*shards_, ","),
        "]; every rank must give the same shards in the same order"));
  }
  if (open_sessions_.contains(session_id)) {
    return absl::AlreadyExistsError(absl::StrCat(
        "session ", session_id, " already joined job ", name_));
  }
  if (running_ && departed_[rank]) {
    // A rank that closed its client and connects again starts its call
    // order from the beginning, which the other ranks' sessions cannot
    // match: like a lost rank, it restarts the job in a new epoch.
    EndEpoch(absl::StrCat("rank ", rank,
                          " connected again after closing its client"),
             rank, EpochEndReason::kRankRejoined);
  }
  if (ended_) {
    // The first Join after a loss starts the next epoch.
    ++epoch_;
    epoch_id_ = NextEpochId();
    ended_ = false;
    running_ = false;
    end_reason_.clear();
    members_.assign(world_size_, std::nullopt);
    departed_.assign(world_size_, false);
    matching_.clear();
    attempts_.Clear();
    active_.clear();
    done_.assign(world_size_, false);
    done_count_ = 0;
    skipped_.assign(world_size_, {});
    next_whole_sequence_ = 0;
    quorum_mode_ = false;
    absent_.assign(world_size_, false);
    rejoined_.assign(world_size_, false);
    quorum_steps_started_ = 0;
    recent_quorum_steps_.clear();
    matcher_.Clear();
    match_waiters_.clear();
  }
  if (members_[rank].has_value()) {
    return absl::AlreadyExistsError(absl::StrCat(
        "rank ", rank, " of job ", name_,
        " is already held by a live session (another process uses this "
        "rank, or the previous holder has not exited yet)"));
  }
  members_[rank] = Member{session_id, std::move(session)};
  open_sessions_[session_id] = rank;
  if (running_ && absent_[rank]) {
    // Back into the running epoch of a job in quorum mode: the others go
    // on, and the next quorum barrier counts this rank as joining.
    absent_[rank] = false;
    rejoined_[rank] = true;
    v1::JoinEvent event;
    event.mutable_ready()->set_epoch(epoch_);
    event.mutable_ready()->set_chunk_bytes(chunk_bytes_);
    event.mutable_ready()->set_shared_memory_socket(shared_memory_socket_);
    event.mutable_ready()->set_quorum_steps_started(quorum_steps_started_);
    members_[rank]->session->SendEvent(event);
    const int ranks[] = {rank};
    env_.log->Log({LogSeverity::kInfo, "rank_rejoined",
                   absl::StrCat("job ", name_, " epoch ", epoch_, ": rank ",
                                rank, " joined again; it takes part from quorum "
                                "step ", quorum_steps_started_),
                   name_, epoch_, "", ranks});
    return absl::OkStatus();
  }
  if (std::all_of(members_.begin(), members_.end(),
                  [](const auto& m) { return m.has_value(); })) {
    running_ = true;
    v1::JoinEvent event;
    event.mutable_ready()->set_epoch(epoch_);
    event.mutable_ready()->set_chunk_bytes(chunk_bytes_);
    event.mutable_ready()->set_shared_memory_socket(shared_memory_socket_);
    for (auto& m : members_) m->session->SendEvent(event);
    const std::string message = absl::StrCat(
        "job ", name_, " epoch ", epoch_, ": all ", world_size_, " ranks joined");
    env_.log->Log({LogSeverity::kInfo, "job_ready", message, name_, epoch_});
  }
  return absl::OkStatus();
}

bool Job::Leave(const std::string& session_id, const std::string& why,
                EpochEndReason reason) {
  absl::MutexLock lock(&mu_);
  auto it = open_sessions_.find(session_id);
  if (it == open_sessions_.end()) return open_sessions_.empty();
  const int rank = it->second;
  open_sessions_.erase(it);
  if (members_[rank].has_value() && members_[rank]->session_id == session_id) {
    if (running_ && !ended_ && !departed_[rank] && quorum_mode_) {
      MarkAbsentLocked(rank, absl::StrCat("its session was lost (", why, ")"));
      return open_sessions_.empty();
    }
    members_[rank].reset();
    if (running_ && !ended_ && !departed_[rank]) {
      EndEpoch(absl::StrCat("rank ", rank, "'s session was lost (", why, ")"),
               rank, reason);
    }
  }
  return open_sessions_.empty();
}

void Job::EndForOtherShard(const std::string& session_id,
                           const std::string& cause) {
  absl::MutexLock lock(&mu_);
  const std::optional<int> running = RunningRankLocked(session_id);
  if (!running.has_value() || departed_[*running]) return;
  const int rank = *running;
  EndEpoch(absl::StrCat("rank ", rank,
                        "'s job failed on another of its shards (", cause, ")"),
           rank, EpochEndReason::kOtherShardFailed);
}

std::optional<int> Job::RunningRank(const std::string& session_id) {
  absl::MutexLock lock(&mu_);
  return RunningRankLocked(session_id);
}

std::optional<Job::Seat> Job::RunningSeat(const std::string& session_id) {
  absl::MutexLock lock(&mu_);
  const std::optional<int> rank = RunningRankLocked(session_id);
  if (!rank.has_value()) return std::nullopt;
  return Seat{*rank, epoch_id_};
}

std::optional<int> Job::RunningRankLocked(const std::string& session_id) const {
  auto it = open_sessions_.find(session_id);
  if (it == open_sessions_.end()) return std::nullopt;
  const int rank = it->second;
  if (!members_[rank].has_value() || members_[rank]->session_id != session_id ||
      !running_ || ended_) {
    return std::nullopt;
  }
  return rank;
}

void Job::Depart(const std::string& session_id) {
  absl::MutexLock lock(&mu_);
  const std::optional<int> running = RunningRankLocked(session_id);
  if (!running.has_value()) return;
  const int rank = *running;
  if (quorum_mode_) {
    // As a lost rank: the others go on, and it may connect again.
    MarkAbsentLocked(rank, "its client was closed", LogSeverity::kInfo);
    return;
  }
  departed_[rank] = true;
  const std::string message =
      absl::StrCat("job ", name_, " epoch ", epoch_, ": rank ", rank, " left");
  const int ranks[] = {rank};
  env_.log->Log(
      {LogSeverity::kInfo, "rank_left", message, name_, epoch_, "", ranks});
  auto fail_if_waiting = [&](const std::shared_ptr<Collective>& c) {
    if (c->IsQuorumBarrier()) {
      c->OnRankLost(rank);
    } else if (c->Includes(rank) && !c->HasFinished(rank)) {
      c->FailUnlessDecided(absl::FailedPreconditionError(absl::StrCat(
          c->description(), ": rank ", rank,
          " left the job (its client was closed) before taking part")));
    }
  };
  for (auto& [key, collective] : matching_) fail_if_waiting(collective);
  for (auto& weak : active_) {
    if (auto collective = weak.lock()) fail_if_waiting(collective);
  }
}

std::string Job::ShortName(const std::string& description) const {
  return std::string(
      absl::StripSuffix(description, absl::StrCat(" in job ", name_)));
}

void Job::EndEpoch(const std::string& reason, int lost_rank,
                   EpochEndReason kind) {
  ended_ = true;
  running_ = false;
  end_reason_ = reason;
  const absl::Status status = absl::AbortedError(
      absl::StrCat("job ", name_, " epoch ", epoch_, " aborted: ", reason,
                   "; Connect again to go on"));
  const int ranks[] = {lost_rank};
  env_.log->Log({LogSeverity::kWarning, "epoch_aborted", status.message(),
                 name_, epoch_, "", ranks});
  env_.metrics->EpochAborted(kind);
  // A collective whose every input is in still delivers its result: the
  // ranks that are receiving it must not fail where others succeeded.
  for (auto& [key, collective] : matching_) collective->FailUnlessDecided(status);
  matching_.clear();
  for (auto& weak : active_) {
    if (auto collective = weak.lock()) collective->FailUnlessDecided(status);
  }
  active_.clear();
  v1::JoinEvent event;
  event.mutable_aborted()->set_epoch(epoch_);
  event.mutable_aborted()->set_reason(std::string(status.message()));
  for (auto& m : members_) {
    if (m.has_value()) m->session->SendEvent(event);
  }
}

absl::StatusOr<std::shared_ptr<Collective>> Job::Attach(
    const v1::CollectiveHeader& header, std::shared_ptr<RankChannel> stream) {
  if (env_.kept != nullptr &&
      (header.received_below() > 0 || header.received_size() > 0)) {
    env_.kept->Acknowledge(header.session_id(), header.received_below(),
                           header.received());
  }
  if (header.replay()) return Replay(header, std::move(stream));
  absl::StatusOr<Fingerprint> fp = CheckedFingerprint(header);
  if (!fp.ok()) return fp.status();
  const std::string description = DescribeCollective(header, *fp, world_size_);

  absl::MutexLock lock(&mu_);
  absl::Status holds = CheckSessionLocked(header, description);
  if (!holds.ok()) return holds;
  if (fp->kind == CollectiveKind::kQuorumBarrier && header.quorum_follower()) {
    // Another shard decides the step; this one only learns that the job
    // runs quorum steps.
    quorum_mode_ = true;
    ResultMessage none;
    none.result_specs = std::make_shared<const std::vector<TensorSpec>>();
    stream->Send(std::move(none), /*last=*/true);
    return std::shared_ptr<Collective>();
  }
  if (done_[header.rank()] && fp->kind != CollectiveKind::kDone) {
    return absl::FailedPreconditionError(absl::StrCat(
        description, ": rank ", header.rank(),
        " called Done(); it takes part in no collective of the job until "
        "every rank has called Done()"));
  }
  absl::StatusOr<std::shared_ptr<Collective>> collective =
      CollectiveForLocked(header, *fp, description);
  if (!collective.ok()) return collective.status();
  const CollectiveKind kind = fp->kind;
  if (kind == CollectiveKind::kDone) {
    (*collective)->SetResultValues({static_cast<int64_t>(next_whole_sequence_)});
  }
  const int root = fp->root;
  std::vector<int> sources;
  if (kind == CollectiveKind::kMatch) sources = fp->sources;
  if (!(*collective)->Attach(std::move(stream), header.rank(), *std::move(fp),
                             header.attempt_id())) {
    if ((*collective)->LeftOut(header.rank())) {
      MarkAbsentLocked(header.rank(),
                       absl::StrCat("it was late for ", ShortName(description)));
    }
    return RefusedByCollectiveError();
  }
  if (kind == CollectiveKind::kDone) MarkDoneLocked(header.rank());
  if (kind == CollectiveKind::kSendReceive) {
    NoteMessageLocked(header, root, **collective);
  }
  if (kind == CollectiveKind::kMatch) {
    AddMatchLocked(header, root, std::move(sources), *collective);
  }
  return collective;
}

void Job::NoteMessageLocked(const v1::CollectiveHeader& header, int source,
                            const Collective& message) {
  // The name was checked against the header (CheckPointToPointName).
  const std::optional<PointToPointNameParts> name =
      ParsePointToPointName(header.name());
  if (!name.has_value()) return;
  if (header.rank() != source) {
    matcher_.Received(name->source, name->destination, name->tag, name->n);
    return;
  }
  // A message its receive attached to first is taken already.
  if (message.HasAttached(name->destination)) return;
  matcher_.Sent(name->source, name->destination, name->tag, name->n,
                [this](uint64_t token, int from, uint64_t n)
                    ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
                      return AnswerMatchLocked(token, from, n);
                    });
}

void Job::AddMatchLocked(const v1::CollectiveHeader& header, int source,
                         std::vector<int> sources,
                         const std::shared_ptr<Collective>& match) {
  const std::optional<PointToPointNameParts> name =
      ParsePointToPointName(header.name());
  if (!name.has_value()) return;
  MessageMatcher::Match m;
  m.destination = header.rank();
  m.tag = header.match_tag();
  m.number = name->n;
  m.source = source;
  m.sources = std::move(sources);
  for (const v1::ReceivedCount& count : header.match_received()) {
    m.received.emplace_back(count.source(), count.count());
  }
  m.token = ++last_match_token_;
  match_waiters_[m.token] = match;
  const uint64_t token = m.token;
  if (!matcher_.Add(std::move(m), [this](uint64_t token, int from, uint64_t n)
                                      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
                                        return AnswerMatchLocked(token, from, n);
                                      })) {
    match_waiters_.erase(token);  // a retry: its first attach is the match
  }
}

bool Job::AnswerMatchLocked(uint64_t token, int source, uint64_t n) {
  auto it = match_waiters_.find(token);
  if (it == match_waiters_.end()) return false;
  std::shared_ptr<Collective> match = it->second.lock();
  match_waiters_.erase(it);
  return match != nullptr &&
         match->SetResultValues(
             {static_cast<int64_t>(source), static_cast<int64_t>(n)});
}

std::shared_ptr<KeptResults> Job::kept_results() const { return env_.kept; }

bool Job::EndedByALoss() {
  absl::MutexLock lock(&mu_);
  return ended_;
}

absl::StatusOr<std::shared_ptr<Collective>> Job::Replay(
    const v1::CollectiveHeader& header, std::shared_ptr<RankChannel> stream) {
  const int rank = header.rank();
  const std::string& attempt = header.attempt_id();
  absl::Status valid = CheckReplay(header);
  if (valid.ok() && (rank < 0 || rank >= world_size_)) {
    valid = absl::InvalidArgumentError(absl::StrCat(
        "job ", name_, ": a replay names rank ", rank, ", not a rank of the "
        "job's ", world_size_));
  }
  if (!valid.ok()) return valid;
  // A call cut off while its result is still being made takes it up again;
  // one whose result was made whole finds it kept. In that order: a result
  // handed over while this looks is kept by the time Resume says so.
  std::shared_ptr<Collective> first;
  {
    absl::MutexLock lock(&mu_);
    if (std::optional<std::weak_ptr<Collective>> seen = attempts_.Find(attempt)) {
      first = seen->lock();
    }
  }
  if (first != nullptr) {
    absl::StatusOr<Fingerprint> fp = FingerprintFromHeader(header, world_size_);
    if (!fp.ok()) return fp.status();
    absl::Status resumed = first->Resume(rank, attempt, fp->tensors, stream);
    if (resumed.ok()) return first;
    if (resumed.code() != absl::StatusCode::kNotFound) return resumed;
  }
  return ReplayKept(env_.kept.get(), header, *stream, *env_.log);
}

absl::Status RefusedByCollectiveError() {
  absl::Status refused = absl::AbortedError(
      "the collective refused this call; the call was told why");
  refused.SetPayload(kRefusedByCollectiveMark, absl::Cord());
  return refused;
}

bool IsRefusedByCollective(const absl::Status& status) {
  return status.GetPayload(kRefusedByCollectiveMark).has_value();
}

absl::Status CheckReplay(const v1::CollectiveHeader& header) {
  const std::string& attempt = header.attempt_id();
  if (!attempt.empty() &&
      absl::StartsWith(attempt, absl::StrCat(header.session_id(), "/"))) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "job ", header.job(), ": rank ", header.rank(), "'s attempt ", attempt,
      " cannot be replayed: a replay names an attempt of its own session "
      "(attempt id <session id>/<n>; this session is ", header.session_id(),
      ")"));
}

absl::StatusOr<std::shared_ptr<Collective>> ReplayKept(
    KeptResults* kept, const v1::CollectiveHeader& header, RankChannel& stream,
    const Logger& log) {
  if (absl::Status valid = CheckReplay(header); !valid.ok()) return valid;
  const int rank = header.rank();
  const std::string what = absl::StrCat("job ", header.job(), ": rank ", rank,
                                        "'s attempt ", header.attempt_id());
  std::optional<KeptResults::Kept> found =
      kept != nullptr ? kept->Find(header.attempt_id(), rank) : std::nullopt;
  if (!found.has_value() || found->messages.empty()) {
    return absl::NotFoundError(absl::StrCat(
        what, " has no result kept to send again: its contribution is in no "
        "collective whose result was decided, or the result was too large to "
        "keep (--kept_results_bytes) or is gone"));
  }
  // Only the tensors matter here (the group is not compared).
  absl::StatusOr<Fingerprint> fp = FingerprintFromHeader(header, rank + 1);
  if (!fp.ok()) return fp.status();
  if (fp->tensors != found->declared) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " is replayed declaring other tensors than it did (",
        DescribeTensors(fp->tensors), "; it declared ",
        DescribeTensors(found->declared), ")"));
  }
  std::vector<ResultMessage>* messages = &found->messages;
  const int ranks[] = {rank};
  log.Log({LogSeverity::kInfo, "result_replayed",
           absl::StrCat(what, " asked again for its result; sent again from "
                              "what was kept"),
           header.job(), header.epoch(), "", ranks});
  for (size_t i = 0; i < messages->size(); ++i) {
    stream.Send(std::move((*messages)[i]), i + 1 == messages->size());
  }
  return std::shared_ptr<Collective>();
}

absl::StatusOr<Fingerprint> Job::CheckedFingerprint(
    const v1::CollectiveHeader& header) {
  const int rank = header.rank();
  absl::StatusOr<Fingerprint> fp = FingerprintFromHeader(header, world_size_);
  absl::Status valid = fp.ok() ? ValidateContribution(*fp, rank, world_size_,
                                                      env_.options->max_tensor_bytes)
                               : fp.status();
  // Point-to-point messages are matched by their reserved names alone, and
  // no other collective may take one (core/point_to_point_name.h). A name
  // refused here fails only this call: it may name another pair's message.
  bool bad_name = false;
  if (valid.ok()) {
    valid = CheckPointToPointName(header.name(), *fp);
    bad_name = !valid.ok();
  }
  if (valid.ok()) return fp;
  const bool over_limit = valid.code() == absl::StatusCode::kResourceExhausted;
  const absl::Status status(
      valid.code(),
      absl::StrCat("job ", name_, ": rank ", rank,
                   over_limit ? " is over a limit: " : " sent a bad request: ",
                   valid.message(),
                   over_limit ? absl::StrCat(" (--max_tensor_bytes=",
                                             env_.options->max_tensor_bytes, ")")
                              : ""));
  if (over_limit) {
    env_.metrics->RequestRefused(status.code(), RefusedLimit::kMaxTensorBytes);
  }
  if (!bad_name) FailNamedCollective(header, status);
  return status;
}

absl::Status Job::CheckSessionLocked(const v1::CollectiveHeader& header,
                                     const std::string& description) {
  const int rank = header.rank();
  if (header.epoch() != epoch_ || ended_) {
    if (header.epoch() < epoch_ || ended_) {
      return absl::AbortedError(absl::StrCat(
          description, ": epoch ", header.epoch(), " of job ", name_,
          " has ended",
          end_reason_.empty() ? "" : absl::StrCat(" (", end_reason_, ")"),
          "; Connect again to go on"));
    }
    return absl::FailedPreconditionError(absl::StrCat(
        description, ": epoch ", header.epoch(), " of job ", name_,
        " has not started (current epoch ", epoch_, ")"));
  }
  if (running_ && absent_[rank]) {
    return absl::FailedPreconditionError(absl::StrCat(
        description, ": rank ", rank, " of job ", name_,
        " is absent from epoch ", epoch_,
        " (lost, or late for a quorum step); Connect again to rejoin at the "
        "next quorum step"));
  }
  if (!running_ || !members_[rank].has_value() ||
      members_[rank]->session_id != header.session_id()) {
    return absl::FailedPreconditionError(absl::StrCat(
        description, ": session ", header.session_id(),
        " does not hold rank ", rank, " of job ", name_, " in epoch ", epoch_,
        "; Connect first"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<Collective>> Job::CollectiveForLocked(
    const v1::CollectiveHeader& header, const Fingerprint& fp,
    const std::string& description) {
  const int rank = header.rank();
  // A retry (same attempt id) goes to the collective its first attempt
  // joined, if that one can still take it; a contribution already used is
  // never counted again.
  const std::string& attempt = header.attempt_id();
  if (!attempt.empty()) {
    if (std::optional<std::weak_ptr<Collective>> seen = attempts_.Find(attempt)) {
      std::shared_ptr<Collective> first = seen->lock();
      if (first == nullptr || first->done() || first->HasFinished(rank)) {
        return absl::AbortedError(absl::StrCat(
            description, ": rank ", rank, " retried a contribution (attempt ",
            attempt, ") that was already used; its result cannot be sent "
            "again, and counting it twice would be wrong"));
      }
      return first;
    }
  }
  const std::string key = MatchingKeyLocked(header, fp);
  if (std::shared_ptr<Collective> step = LeftOutStepLocked(key, rank)) {
    return step;  // its Attach refuses the late call
  }
  if (std::optional<absl::Status> refused = RememberedRefusalLocked(key, rank)) {
    return *refused;
  }
  std::shared_ptr<Collective> collective;
  auto it = matching_.find(key);
  // A rank that already has its result from a collective of this name is
  // starting the next one (names may be reused, as in Horovod).
  if (it != matching_.end() && !it->second->HasFinished(rank)) {
    collective = it->second;
  } else {
    absl::StatusOr<std::shared_ptr<Collective>> created =
        NewCollectiveLocked(header, fp, description);
    if (!created.ok()) return created.status();
    collective = *std::move(created);
    matching_[key] = collective;
    LeaveOutDoneLocked(collective, key, fp, rank);
    if (header.name().empty() &&
        static_cast<int>(fp.group.size()) == world_size_) {
      next_whole_sequence_ =
          std::max<uint64_t>(next_whole_sequence_, header.sequence() + 1);
    }
  }
  if (!attempt.empty()) attempts_.Remember(attempt, collective);
  return collective;
}

absl::StatusOr<std::shared_ptr<Collective>> Job::NewCollectiveLocked(
    const v1::CollectiveHeader& header, const Fingerprint& fp,
    const std::string& description) {
  const bool quorum = fp.kind == CollectiveKind::kQuorumBarrier;
  for (int r : fp.group) {
    if (quorum) break;  // a quorum step goes on without them
    if (departed_[r]) {
      return absl::FailedPreconditionError(absl::StrCat(
          description, ": rank ", r,
          " has left the job (its client was closed)"));
    }
    if (absent_[r]) {
      // ABORTED, as for a rank lost while the collective waited: a quorum
      // step whose contributor was lost between its two phases runs again.
      return absl::AbortedError(absl::StrCat(
          description, ": rank ", r,
          " was lost (or was late for a quorum step) and is absent; it takes "
          "part again from the quorum step after it connects again"));
    }
  }
  PruneFinished();
  const int limit = env_.options->max_pending_collectives_per_job;
  if (static_cast<int>(matching_.size()) >= limit) {
    env_.metrics->RequestRefused(absl::StatusCode::kResourceExhausted,
                                 RefusedLimit::kMaxPendingCollectivesPerJob);
    return absl::ResourceExhaustedError(absl::StrCat(
        description, ": job ", name_, " already has ", matching_.size(),
        " collectives waiting for ranks (--max_pending_collectives_per_job=",
        limit, ")"));
  }
  // Its per-rank bookkeeping counts in the budget and the job's share, as
  // its payload will.
  const size_t state_bytes = Collective::StateBytes(fp.group.size());
  std::vector<MemoryReservation> state;
  state.push_back(MemoryReservation::Try(env_.memory, state_bytes));
  if (!state.back().ok()) {
    env_.metrics->RequestRefused(absl::StatusCode::kResourceExhausted,
                                 RefusedLimit::kMemoryBudgetBytes);
    return absl::ResourceExhaustedError(absl::StrCat(
        description, ": the server's memory budget of ", env_.memory->limit(),
        " bytes (--memory_budget_bytes) cannot hold the bookkeeping of a "
        "collective of ", fp.group.size(), " ranks (", state_bytes,
        " bytes) now; retry later or raise the limit"));
  }
  if (env_.job_memory != nullptr) {
    state.push_back(MemoryReservation::Try(env_.job_memory.get(), state_bytes));
    if (!state.back().ok()) {
      env_.metrics->RequestRefused(absl::StatusCode::kResourceExhausted,
                                   RefusedLimit::kMaxJobMemoryFraction);
      return absl::ResourceExhaustedError(absl::StrCat(
          description, ": job ", name_, "'s share of the memory budget, ",
          env_.job_memory->limit(), " bytes (--max_job_memory_fraction=",
          env_.options->max_job_memory_fraction,
          " of --memory_budget_bytes), cannot hold the bookkeeping of a "
          "collective of ", fp.group.size(), " ranks (", state_bytes,
          " bytes) now; other jobs keep the rest"));
    }
  }
  absl::Duration timeout = absl::Milliseconds(header.timeout_ms());
  if (timeout <= absl::ZeroDuration() ||
      timeout > env_.options->max_collective_timeout) {
    timeout = env_.options->max_collective_timeout;
  }
  auto collective = std::make_shared<Collective>(
      env_, CollectiveLabel{name_, epoch_, ShortName(description), fp.kind},
      description, fp.group, timeout);
  collective->HoldState(std::move(state));
  if (TraitsOf(fp.kind).paced_chunks) collective->SetChunkBytes(chunk_bytes_);
  collective->StartTimers();
  if (quorum) {
    std::vector<int> absent, joining;
    for (int r : fp.group) {
      if (absent_[r] || departed_[r] || !members_[r].has_value()) {
        absent.push_back(r);
      } else if (rejoined_[r]) {
        joining.push_back(r);
        rejoined_[r] = false;
      }
    }
    collective->StartQuorum(fp.quorum, absent, joining);
    quorum_mode_ = true;
    quorum_steps_started_ =
        std::max<uint64_t>(quorum_steps_started_, header.sequence() + 1);
  }
  active_.push_back(collective);
  return collective;
}

void Job::FailNamedCollective(const v1::CollectiveHeader& header,
                              const absl::Status& status) {
  // The key as the well-formed ranks compute it: their group is "all" when
  // this header says so, else the ranks it lists, if they make sense.
  Fingerprint key_fp;
  if (header.group().empty()) {
    for (int r = 0; r < world_size_; ++r) key_fp.group.push_back(r);
  } else {
    key_fp.group.assign(header.group().begin(), header.group().end());
    std::sort(key_fp.group.begin(), key_fp.group.end());
    key_fp.group.erase(std::unique(key_fp.group.begin(), key_fp.group.end()),
                       key_fp.group.end());
    for (int r : key_fp.group) {
      if (r < 0 || r >= world_size_) return;  // no well-formed peer matches
    }
  }
  absl::MutexLock lock(&mu_);
  if (!running_ || ended_ || header.epoch() != epoch_) return;
  // Only a session that holds the rank it claims speaks for a collective:
  // otherwise which collective it meant is unknown, and a stray client
  // must not fail other ranks' work.
  const int rank = header.rank();
  if (rank < 0 || rank >= world_size_ || !members_[rank].has_value() ||
      members_[rank]->session_id != header.session_id()) {
    return;
  }
  const std::string key = MatchingKey(header, key_fp);
  std::shared_ptr<Collective>& collective = matching_[key];
  if (collective == nullptr) {
    const std::string description = DescribeCollective(header, std::nullopt);
    collective = std::make_shared<Collective>(
        env_, CollectiveLabel{name_, epoch_, ShortName(description), std::nullopt},
        description, key_fp.group, env_.options->max_collective_timeout);
    active_.push_back(collective);
  }
  // Peers waiting now get the error, and so do peers arriving later.
  collective->Fail(status);
}

void Job::PruneFinished() {
  active_.erase(std::remove_if(active_.begin(), active_.end(),
                               [](const auto& w) { return w.expired(); }),
                active_.end());
  for (auto it = matching_.begin(); it != matching_.end();) {
    auto current = it++;
    if (current->second->all_attached() && current->second->done()) {
      if (std::optional<double> pace = current->second->InputPace()) {
        NotePaceLocked(*pace);
      }
      if (current->second->LeftAnyOut()) {
        recent_quorum_steps_.push_back(
            {current->first, current->second->LeftOutRefusals()});
        if (recent_quorum_steps_.size() > kRememberedQuorumSteps) {
          recent_quorum_steps_.erase(recent_quorum_steps_.begin());
        }
      }
      matching_.erase(current);
    }
  }
}

void Job::NotePaceLocked(double bytes_per_second) {
  pace_.Note(bytes_per_second);
  const size_t chunk = PacedChunkBytes(pace_.bytes_per_second(), env_.options->chunk_time,
                                       env_.options->chunk_bytes, chunk_bytes_);
  if (chunk == chunk_bytes_) return;
  chunk_bytes_ = chunk;
  v1::JoinEvent event;
  event.mutable_pace()->set_chunk_bytes(chunk);
  for (auto& m : members_) {
    if (m.has_value()) m->session->SendEvent(event);
  }
  env_.log->Log({LogSeverity::kInfo, "chunk_paced",
                 absl::StrCat("job ", name_, " epoch ", epoch_, ": inputs arrive at ",
                              absl::StrFormat("%.1f", pace_.bytes_per_second() / 1e6),
                              " MB/s; its reductions now use chunks of ", chunk / 1024,
                              " KiB (--chunk_time=",
                              absl::FormatDuration(env_.options->chunk_time), ")"),
                 name_, epoch_});
}

void Job::MarkAbsentLocked(int rank, const std::string& why,
                           LogSeverity severity) {
  members_[rank].reset();
  absent_[rank] = true;
  rejoined_[rank] = false;
  const std::string message = absl::StrCat(
      "job ", name_, " epoch ", epoch_, ": rank ", rank, " is absent: ", why,
      "; the others go on, and it rejoins at a quorum step once it connects "
      "again");
  const int ranks[] = {rank};
  env_.log->Log({severity, "rank_absent", message, name_, epoch_, "", ranks});
  auto lose = [&](const std::shared_ptr<Collective>& c) {
    if (c->IsQuorumBarrier()) {
      c->OnRankLost(rank);
    } else if (c->Includes(rank) && !c->HasFinished(rank)) {
      c->FailUnlessDecided(absl::AbortedError(absl::StrCat(
          c->description(), ": rank ", rank, " was lost (", why,
          "); a quorum step run again goes on without it")));
    }
  };
  for (auto& [key, collective] : matching_) lose(collective);
  for (auto& weak : active_) {
    if (auto collective = weak.lock()) lose(collective);
  }
}

std::shared_ptr<Collective> Job::LeftOutStepLocked(const std::string& key,
                                                   int rank) {
  if (auto it = matching_.find(key);
      it != matching_.end() && it->second->LeftOut(rank)) {
    return it->second;
  }
  return nullptr;
}

std::optional<absl::Status> Job::RememberedRefusalLocked(const std::string& key,
                                                         int rank) {
  for (const RememberedStep& step : recent_quorum_steps_) {
    if (step.key != key) continue;
    if (auto it = step.refusals.find(rank); it != step.refusals.end()) {
      return it->second;
    }
  }
  return std::nullopt;
}

std::string Job::MatchingKeyLocked(const v1::CollectiveHeader& header,
                                   const Fingerprint& fp) {
  const bool several_shards = shards_.has_value() && shards_->size() > 1;
  if (!header.name().empty() || several_shards) return MatchingKey(header, fp);
  const std::string group = absl::StrJoin(fp.group, ",");
  auto it = skipped_[header.rank()].find(group);
  const uint64_t skipped = it == skipped_[header.rank()].end() ? 0 : it->second;
  return absl::StrCat(group, "|#", header.sequence() + skipped);
}

void Job::MarkDoneLocked(int rank) {
  if (done_[rank]) return;
  if (++done_count_ == world_size_) {
    // Every rank is done: the DONE collective ends for all, and they take
    // part again from their next call.
    done_.assign(world_size_, false);
    done_count_ = 0;
    return;
  }
  done_[rank] = true;
  const int ranks[] = {rank};
  env_.log->Log({LogSeverity::kInfo, "rank_done",
                 absl::StrCat("job ", name_, " epoch ", epoch_, ": rank ", rank,
                              " called Done(); the job's collectives go on "
                              "without it until every rank has"),
                 name_, epoch_, "", ranks});
  for (auto& [key, collective] : matching_) {
    if (!collective->Includes(rank) || collective->done() ||
        collective->IsDone()) {
      continue;
    }
    if (collective->all_attached()) continue;
    if (collective->HasAttached(rank)) continue;
    collective->ExcludeDone(rank);
    if (const size_t bar = key.find("|#"); bar != std::string::npos) {
      ++skipped_[rank][key.substr(0, bar)];
    }
  }
}

void Job::LeaveOutDoneLocked(const std::shared_ptr<Collective>& collective,
                             const std::string& key, const Fingerprint& fp,
                             int attaching) {
  if (done_count_ == 0 || fp.kind == CollectiveKind::kDone) return;
  const size_t bar = key.find("|#");
  for (int r : fp.group) {
    if (r == attaching || !done_[r]) continue;
    collective->ExcludeDone(r);
    if (bar != std::string::npos) ++skipped_[r][key.substr(0, bar)];
  }
}

bool Job::InQuorumMode() {
  absl::MutexLock lock(&mu_);
  return quorum_mode_ && running_ && !ended_;
}

void Job::Shutdown(const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  for (auto& [key, collective] : matching_) collective->Fail(status);
  matching_.clear();
  for (auto& weak : active_) {
    if (auto collective = weak.lock()) collective->Fail(status);
  }
  active_.clear();
  for (auto& m : members_) {
    if (m.has_value()) m->session->Fail(status);
  }
}

JobSnapshot Job::Snapshot() {
  absl::MutexLock lock(&mu_);
  JobSnapshot s;
  s.name = name_;
  s.world_size = world_size_;
  s.epoch = epoch_;
  s.state = ended_ ? "aborted" : running_ ? "running" : "joining";
  s.end_reason = end_reason_;
  s.quorum_mode = quorum_mode_;
  s.chunk_bytes = chunk_bytes_;
  s.input_bytes_per_s = pace_.bytes_per_second();
  for (int r = 0; r < world_size_; ++r) {
    if (members_[r].has_value()) s.joined_ranks.push_back(r);
    if (absent_[r]) s.absent_ranks.push_back(r);
    if (done_[r]) s.done_ranks.push_back(r);
  }
  for (auto& weak : active_) {
    std::shared_ptr<Collective> collective = weak.lock();
    if (collective == nullptr) continue;
    std::optional<CollectiveSnapshot> c = collective->Snapshot();
    if (c.has_value()) s.pending.push_back(*std::move(c));
  }
  return s;
}

bool Job::HasActiveCollectives() {
  absl::MutexLock lock(&mu_);
  for (auto& weak : active_) {
    auto collective = weak.lock();
    if (collective != nullptr && !collective->done()) return true;
  }
  return false;
}

}  // namespace reducer
