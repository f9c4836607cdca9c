// Collective, the rendezvous: each rank's attach (checked against the
// group and the reference fingerprint, its kind's strategy picked by the
// first), the memory its kind reserves for it before any of its payload is
// accepted, a retry or a cancelled call before the result is decided, and
// ranks that take no part: those the job's Participation says called
// Done() or are gone (OnMembershipChanged), and those a quorum step ends
// without (this file is the step's Host, server/engine/quorum_step.h).
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/payload_layout.h"
#include "server/engine/collective.h"
#include "server/log.h"

namespace reducer {
namespace {

size_t TotalBytes(const std::vector<TensorSpec>& tensors) {
  absl::StatusOr<PayloadLayout> layout = ComputePayloadLayout(tensors);
  return layout.ok() ? layout->total_bytes : 0;  // validated by the caller
}

}  // namespace

bool Collective::Attach(std::shared_ptr<RankChannel> channel, int rank,
                        Fingerprint fp, const std::string& attempt_id,
                        const std::vector<int>& covered) {
  std::vector<StagedChunk> ready;
  std::shared_ptr<KindStrategy> strategy;
  bool attached = false;
  {
    absl::MutexLock lock(&mu_);
    const int index = IndexOf(rank);
    if (index < 0) {
      RefuseForeignRankLocked(*channel, rank, fp);
      return false;
    }
    RankState& m = ranks_[index];
    if (m.left_out) {
      channel->Fail(LeftOutError(rank));
      return false;
    }
    if (m.attached) {
      return AttachAgainLocked(index, std::move(channel), attempt_id);
    }
    m.attached = true;
    m.channel = std::move(channel);
    m.attempt_id = attempt_id;
    ++attached_;
    if (done_) {
      m.channel->Fail(failure_);
      return false;
    }
    // A contribution for several ranks agrees as one of them would alone.
    if (!Agree(rank,
               OneRanksFingerprint(fp, static_cast<int>(covered.size()) + 1))) {
      return false;
    }
    // Where only the root sends (Broadcast, Scatter, a point-to-point
    // message), another rank's tensors are the spec it expects, not payload.
    const bool sends_data =
        !TraitsOf(fp.kind).only_root_sends || rank == fp.root;
    m.input_bytes = sends_data ? TotalBytes(fp.tensors) : 0;
    m.fp = std::move(fp);
    if (!CoverLocked(index, covered, &ready)) return false;
    if (!ReserveLocked(index)) return false;
    m.finishes_alone = strategy_->FinishesAlone(index);
    attached = ArrivedLocked(index);
    strategy = strategy_;
  }
  for (StagedChunk& chunk : ready) {
    ScheduleReduction(strategy, std::move(chunk));
  }
  return attached;
}

bool Collective::CoverLocked(int index, const std::vector<int>& covered,
                             std::vector<StagedChunk>* ready) {
  const int rank = group_[index];
  for (int other : covered) {
    const int at = IndexOf(other);
    RankState& c = ranks_[at];
    if (c.covered_by == index) continue;  // a retry covers them again
    if (c.attached) {
      FailLocked(absl::FailedPreconditionError(absl::StrCat(
                     description_, ": rank ", other,
                     " contributed on its own and within the contribution "
                     "rank ",
                     rank, " sent for ranks [", rank, ",",
                     absl::StrJoin(covered, ","), "]")),
                 {rank, other});
      return false;
    }
    if (!strategy_->Cover(at, ready)) {
      FailLocked(absl::InvalidArgumentError(absl::StrCat(
          description_, ": a ", CollectiveKindName(reference_.kind),
          " takes one rank's contribution per call; rank ", rank,
          " sent one for ranks [", rank, ",", absl::StrJoin(covered, ","),
          "]")));
      return false;
    }
    c.covered_by = index;
    MarkLeftOutLocked(at);
  }
  return true;
}

void Collective::RefuseForeignRankLocked(RankChannel& channel, int rank,
                                         const Fingerprint& fp) {
  // Only named collectives meet across groups: the groups disagree.
  // A collective failed before any rank attached has no reference rank.
  const std::string first =
      reference_rank_ >= 0 ? absl::StrCat("rank ", reference_rank_, " sent")
                           : std::string("the collective's group is");
  const absl::Status status = absl::FailedPreconditionError(
      absl::StrCat(description_, ": mismatched groups: ", first, " [",
                   absl::StrJoin(group_, ","), "], rank ", rank, " sent [",
                   absl::StrJoin(fp.group, ","), "]"));
  channel.Fail(status);
  FailLocked(status, {reference_rank_, rank});
}

bool Collective::AttachAgainLocked(int index,
                                   std::shared_ptr<RankChannel> channel,
                                   const std::string& attempt_id) {
  RankState& m = ranks_[index];
  const int rank = group_[index];
  const bool retry = !attempt_id.empty() && attempt_id == m.attempt_id;
  if (retry && !done_ && m.received == 0 && !m.header_sent) {
    // A retry of a contribution whose first call moved no data: the new
    // call takes its place and nothing is counted twice.
    m.channel->Fail(absl::AbortedError(
        absl::StrCat(description_, ": rank ", rank,
                     "'s contribution was replaced by its retry")));
    m.channel = std::move(channel);
    return true;
  }
  if (retry && !done_ && m.keeping && !m.finished &&
      m.received == m.input_bytes) {
    // A retry of a contribution whose whole input is in (its first call
    // was cut off, or its client gave it up, while the result was being
    // made): like a replay (Resume), it takes the first call's place and
    // gets the result, and the payload it sends again is passed over, so
    // that its rank ends as the others do.
    TakeOverLocked(
        index, std::move(channel),
        absl::StrCat(description_, ": rank ", rank, "'s attempt ", attempt_id),
        "retry");
    m.resent_to_skip = m.input_bytes;
    return true;
  }
  if (retry) {
    channel->Fail(absl::AbortedError(absl::StrCat(
        description_, ": rank ", rank,
        " retried after its first attempt had already moved data; the "
        "collective cannot be resumed, so it is not counted twice")));
    return false;
  }
  channel->Fail(absl::FailedPreconditionError(absl::StrCat(
      description_, ": rank ", rank,
      " contributed twice; a name must not be reused while a collective "
      "of that name is in flight")));
  return false;
}

bool Collective::ReserveLocked(int index) {
  RankState& m = ranks_[index];
  const int rank = group_[index];
  const EngineOptions& options = *env_.options;
  const size_t reserve = strategy_->Reservation(index, m.input_bytes);
  if (!env_.memory->TryReserve(reserve)) {
    FailLocked(
        absl::ResourceExhaustedError(absl::StrCat(
            description_, ": the server's memory budget of ",
            env_.memory->limit(), " bytes (", options.memory_budget_setting,
            ") is exhausted: ", env_.memory->used(), " bytes in use, rank ",
            rank, " needs ", reserve, " more; retry later or raise the limit")),
        {rank});
    env_.metrics->RequestRefused(absl::StatusCode::kResourceExhausted,
                                 RefusedLimit::kMemoryBudgetBytes);
    return false;
  }
  if (env_.job_memory != nullptr && !env_.job_memory->TryReserve(reserve)) {
    env_.memory->Release(reserve);
    FailLocked(absl::ResourceExhaustedError(absl::StrCat(
                   description_, ": job ", label_.job,
                   "'s share of the memory budget, ", env_.job_memory->limit(),
                   " bytes (", options.job_memory_fraction_setting, "=",
                   options.max_job_memory_fraction, " of ",
                   options.memory_budget_setting,
                   "), is exhausted: ", env_.job_memory->used(),
                   " bytes in use by the job, rank ", rank, " needs ", reserve,
                   " more; other jobs keep the rest")),
               {rank});
    env_.metrics->RequestRefused(absl::StatusCode::kResourceExhausted,
                                 RefusedLimit::kMaxJobMemoryFraction);
    return false;
  }
  if (env_.tenant_memory != nullptr &&
      !env_.tenant_memory->TryReserve(reserve)) {
    env_.memory->Release(reserve);
    if (env_.job_memory != nullptr) env_.job_memory->Release(reserve);
    FailLocked(
        absl::ResourceExhaustedError(absl::StrCat(
            description_, ": tenant ", env_.tenant,
            "'s share of the memory budget, ", env_.tenant_memory->limit(),
            " bytes (", options.tenant_memory_fraction_setting, "=",
            options.max_tenant_memory_fraction, " of ",
            options.memory_budget_setting,
            "), is exhausted: ", env_.tenant_memory->used(),
            " bytes in use by the tenant's jobs, rank ", rank, " needs ",
            reserve, " more; other tenants keep the rest")),
        {rank});
    env_.metrics->RequestRefused(absl::StatusCode::kResourceExhausted,
                                 RefusedLimit::kMaxTenantMemoryFraction);
    return false;
  }
  m.reserved = reserve;
  if (reserve > 0) {
    m.held = std::make_shared<RankReservation>(env_.memory, env_.job_memory,
                                               env_.tenant_memory, reserve);
  }
  return true;
}

bool Collective::ArrivedLocked(int index) {
  RankState& m = ranks_[index];
  if (quorum_ != nullptr) {
    if (QuorumOpenLocked()) quorum_->Arrived(index, Now(), ranks_, *this);
    // The step may have failed, or ended without it.
    return !done_ || m.finished;
  }
  if (attached_ == static_cast<int>(group_.size())) {
    OnAllAttached();
  } else if (m.finishes_alone) {
    // Its (empty) result header now; it finishes once its payload is in.
    if (no_result_specs_ == nullptr) {
      no_result_specs_ = std::make_shared<const std::vector<TensorSpec>>();
    }
    // Its empty result is kept, as every rank's is once all attached, so
    // that a replay after a lost answer gets it.
    m.keeping =
        env_.kept != nullptr && !m.attempt_id.empty() && env_.kept->Reserve(0);
    SendTo(index, 0, {});
  }
  return true;
}

bool Collective::Agree(int rank, const Fingerprint& fp) {
  if (!has_reference_ || attached_ == 1) {
    reference_ = fp;
    reference_rank_ = rank;
    has_reference_ = true;
    // No other rank is attached, so nothing is staged yet.
    strategy_ =
        MakeKindStrategy(fp, static_cast<int>(group_.size()), IndexOf(fp.root),
                         chunk_bytes_, env_.options->window, env_.chunks);
    // Not every rank is attached yet: nothing is sent.
    if (!result_values_.empty()) {
      strategy_->SetResultValues(result_values_, /*all_attached=*/false, *this);
    }
    // Ranks left out before the kind's strategy existed (nothing is
    // staged yet, so no chunk becomes whole).
    std::vector<StagedChunk> none;
    for (size_t i = 0; i < ranks_.size(); ++i) {
      if (ranks_[i].done && !strategy_->Exclude(static_cast<int>(i), &none)) {
        FailLocked(CannotGoOnWithout(static_cast<int>(i)));
        return false;
      }
    }
    return true;
  }
  absl::Status agree = CheckAgreement(reference_rank_, reference_, rank, fp);
  if (!agree.ok()) {
    FailLocked(absl::FailedPreconditionError(
                   absl::StrCat(description_, ": ", agree.message())),
               {reference_rank_, rank});
    return false;
  }
  int other = -1;
  agree = strategy_->CheckAttached(IndexOf(rank), fp, ranks_, group_, &other);
  if (!agree.ok()) {
    FailLocked(absl::Status(agree.code(),
                            absl::StrCat(description_, ": ", agree.message())),
               {other >= 0 ? group_[other] : reference_rank_, rank});
    return false;
  }
  if (reference_.tensors.empty() && !fp.tensors.empty()) {
    reference_ = fp;  // Broadcast: the first rank that names a tensor
    reference_rank_ = rank;
  }
  return true;
}

void Collective::OnRankCancelled(int rank, const RankChannel* channel) {
  absl::MutexLock lock(&mu_);
  if (done_) return;
  RankState& m = ranks_[IndexOf(rank)];
  if (m.channel.get() != channel) return;  // a retry already replaced it
  // A rank that finished alone (a buffered send) is not used any more.
  if (m.finished) return;
  // Before every rank arrived, or while the job has yet to decide the
  // result (a match), a rank that sent nothing is detached.
  const bool undecided =
      !all_headers_ || (strategy_ != nullptr && !strategy_->Decided());
  if (undecided && m.received == 0) {
    // Nothing of this rank's was used yet: forget the contribution (and the
    // room for keeping the empty result of one that finishes alone).
    ReleaseMemory(IndexOf(rank));
    if (m.keeping) env_.kept->Unreserve(m.output_bytes);
    const bool joining = m.joining;
    m = RankState();
    m.joining = joining;
    --attached_;
    all_headers_ = false;  // its retry makes them whole again
    if (quorum_ != nullptr) quorum_->Withdrew(IndexOf(rank));
    return;
  }
  const std::string why = absl::StrCat(
      description_, ": rank ", rank,
      "'s call was cancelled (it timed out, gave up, or lost its connection)");
  if (AllInputInLocked()) {
    if (m.finished) return;  // all of its result was queued already
    const int ranks[] = {rank};
    env_.log->Log(
        {LogSeverity::kWarning, "rank_cut_off",
         absl::StrCat(why,
                      " after every input was in; the other "
                      "ranks get their result",
                      m.keeping ? ", and its own is kept for a replay" : ""),
         label_.job, label_.epoch, label_.name, ranks, env_.tenant});
    m.cut_off = true;
    m.pending_writes = 0;
    // Without keeping, it counts as finished now; else once its whole
    // result is collected (SendTo).
    if (!m.keeping) MarkFinished(IndexOf(rank));
    return;
  }
  FailLocked(absl::AbortedError(why), {rank});
}

std::vector<int> Collective::OnMembershipChanged(const Participation& who) {
  std::vector<int> found_done;
  std::vector<StagedChunk> ready;
  std::shared_ptr<KindStrategy> strategy;
  {
    absl::MutexLock lock(&mu_);
    if (done_) return found_done;
    // Ranks that called Done() first, one by one: each may complete the
    // attaches, or fail the collective (the others are still counted).
    for (int index = 0; !IsDone() && index < static_cast<int>(group_.size());
         ++index) {
      if (ranks_[index].attached || !who.CalledDone(group_[index])) continue;
      found_done.push_back(group_[index]);
      if (done_) continue;
      ranks_[index].done = true;
      if (!LeaveOutLocked(index, &ready)) continue;
      if (attached_ == static_cast<int>(group_.size()) &&
          strategy_ != nullptr) {
        OnAllAttached();
      }
    }
    // Then a quorum step's deaths, arrived ranks too (a rank lost after it
    // attached has no call left to answer); the step may end now.
    // Ranks the step left out at its start are dead to it already.
    for (int index = 0; index < static_cast<int>(group_.size()); ++index) {
      if (!QuorumOpenLocked()) break;
      const RankState& m = ranks_[index];
      if (m.left_out && !m.done) continue;
      if (who.Gone(group_[index])) quorum_->Lost(index, Now(), ranks_, *this);
    }
    strategy = strategy_;
  }
  for (StagedChunk& chunk : ready)
    ScheduleReduction(strategy, std::move(chunk));
  return found_done;
}

bool Collective::LeaveOutLocked(int index, std::vector<StagedChunk>* ready) {
  if (strategy_ != nullptr && !strategy_->Exclude(index, ready)) {
    FailLocked(CannotGoOnWithout(index));
    return false;
  }
  MarkLeftOutLocked(index);
  return true;
}

void Collective::MarkLeftOutLocked(int index) {
  RankState& m = ranks_[index];
  if (!m.attached) ++attached_;
  m.attached = true;
  m.left_out = true;
  m.finished = true;
  ++finished_;
}

absl::Status Collective::CannotGoOnWithout(int index) const {
  return absl::FailedPreconditionError(absl::StrCat(
      description_, ": rank ", group_[index], " called Done(), and a ",
      label_.kind.has_value() ? CollectiveKindName(*label_.kind) : "collective",
      " cannot go on without its part (done ranks are left out of "
      "all-reduce, all-gather, barrier, and of broadcast, reduce and gather "
      "to another root)"));
}

absl::Status Collective::LeftOutError(int rank) const {
  const RankState& m = ranks_[IndexOf(rank)];
  if (m.covered_by >= 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(description_, ": rank ", rank,
                     "'s part came already in rank ", group_[m.covered_by],
                     "'s contribution (a relay's for several ranks); it cannot "
                     "contribute on its own as well"));
  }
  return LeftOutRefusal(description_, rank, m.done);
}

absl::Status Collective::LeftOutRefusal(const std::string& description,
                                        int rank, bool done) {
  if (done) {
    return absl::FailedPreconditionError(absl::StrCat(
        description, ": rank ", rank,
        " called Done(); it takes part in no collective of the job until "
        "every rank has called Done()"));
  }
  return QuorumStep::LateRefusal(description, rank);
}

void Collective::StartQuorum(const QuorumSettings& settings,
                             const std::vector<int>& joining,
                             const Participation& who) {
  absl::MutexLock lock(&mu_);
  std::vector<int> gone;
  for (int index = 0; index < static_cast<int>(group_.size()); ++index) {
    if (who.Gone(group_[index])) gone.push_back(index);
  }
  quorum_ =
      std::make_unique<QuorumStep>(static_cast<int>(group_.size()), settings);
  quorum_->Start(gone, IndicesOf(joining), ranks_, *this);
}

void Collective::OnQuorumTimer() {
  absl::MutexLock lock(&mu_);
  if (QuorumOpenLocked()) quorum_->Decide(Now(), ranks_, *this);
}

bool Collective::QuorumOpenLocked() const {
  return quorum_ != nullptr && !done_ && !all_headers_;
}

void Collective::LookAgainAt(absl::Time when) {
  std::weak_ptr<Collective> weak = weak_from_this();
  timer_ids_.push_back(env_.timers->Schedule(when, [weak] {
    if (auto self = weak.lock()) self->OnQuorumTimer();
  }));
}

void Collective::StepFailed(const absl::Status& why) {
  FailLocked(absl::FailedPreconditionError(
      absl::StrCat(description_, ": ", why.message())));
}

void Collective::LeaveOut(int index) {
  ReleaseMemory(index);
  MarkLeftOutLocked(index);
}

void Collective::StepEnded(const std::vector<int>& contributors,
                           const std::vector<int>& left_out) {
  if (!left_out.empty()) {
    env_.metrics->QuorumRanksLeftOut(static_cast<int>(left_out.size()));
    const std::vector<int> left_out_ranks = RanksAt(left_out);
    env_.log->Log({LogSeverity::kWarning, "quorum_left_out",
                   absl::StrCat(description_, " ended over ranks [",
                                absl::StrJoin(RanksAt(contributors), ","),
                                "] without ranks [",
                                absl::StrJoin(left_out_ranks, ","), "]"),
                   label_.job, label_.epoch, label_.name, left_out_ranks,
                   env_.tenant});
  }
  OnAllAttached();
}

}  // namespace reducer
