#include "server/engine/collective.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/payload_layout.h"
#include "server/engine/chunk_pacing.h"
#include "server/log.h"

namespace reducer {
namespace {

size_t TotalBytes(const std::vector<TensorSpec>& tensors) {
  absl::StatusOr<PayloadLayout> layout = ComputePayloadLayout(tensors);
  return layout.ok() ? layout->total_bytes : 0;  // validated by the caller
}

}  // namespace

Collective::Collective(CollectiveEnv env, CollectiveLabel label,
                       std::string description, std::vector<int> group,
                       absl::Duration timeout)
    : env_(env),
      label_(std::move(label)),
      description_(std::move(description)),
      group_(std::move(group)),
      timeout_(timeout),
      created_(absl::Now()),
      ranks_(group_.size()),
      chunk_bytes_(env.options->chunk_bytes) {}

Collective::~Collective() {
  absl::MutexLock lock(&mu_);
  for (size_t i = 0; i < ranks_.size(); ++i) ReleaseMemory(i);
  StopKeeping();
  for (TimerQueue::Id id : timer_ids_) env_.timers->Cancel(id);
}

size_t Collective::StateBytes(size_t group_size) {
  return sizeof(Collective) + group_size * (sizeof(RankState) + sizeof(int));
}

void Collective::HoldState(std::vector<MemoryReservation> state) {
  absl::MutexLock lock(&mu_);
  state_ = std::move(state);
}

void Collective::StartTimers() {
  std::weak_ptr<Collective> weak = weak_from_this();
  absl::MutexLock lock(&mu_);
  timer_ids_.push_back(env_.timers->Schedule(created_ + timeout_ / 2, [weak] {
    if (auto self = weak.lock()) self->OnStallTimer();
  }));
  timer_ids_.push_back(env_.timers->Schedule(created_ + timeout_, [weak] {
    if (auto self = weak.lock()) self->OnDeadline();
  }));
}

int Collective::IndexOf(int rank) const {
  auto it = std::lower_bound(group_.begin(), group_.end(), rank);
  return (it != group_.end() && *it == rank) ? static_cast<int>(it - group_.begin())
                                             : -1;
}

bool Collective::all_attached() const {
  absl::MutexLock lock(&mu_);
  return attached_ == static_cast<int>(group_.size());
}

bool Collective::done() const {
  absl::MutexLock lock(&mu_);
  return done_;
}

bool Collective::Attach(std::shared_ptr<RankChannel> channel, int rank,
                        Fingerprint fp, const std::string& attempt_id) {
  absl::MutexLock lock(&mu_);
  const int index = IndexOf(rank);
  if (index < 0) {
    // Only named collectives meet across groups: the groups disagree.
    // A collective failed before any rank attached has no reference rank.
    const std::string first =
        reference_rank_ >= 0 ? absl::StrCat("rank ", reference_rank_, " sent")
                             : std::string("the collective's group is");
    const absl::Status status = absl::FailedPreconditionError(absl::StrCat(
        description_, ": mismatched groups: ", first, " [",
        absl::StrJoin(group_, ","), "], rank ", rank, " sent [",
        absl::StrJoin(fp.group, ","), "]"));
    channel->Fail(status);
    FailLocked(status, {reference_rank_, rank});
    return false;
  }
  RankState& m = ranks_[index];
  if (m.left_out) {
    channel->Fail(LeftOutError(rank));
    return false;
  }
  if (m.attached) {
    if (!attempt_id.empty() && attempt_id == m.attempt_id && !done_ &&
        m.received == 0 && !m.header_sent) {
      // A retry of a contribution whose first call moved no data: the new
      // call takes its place and nothing is counted twice.
      m.channel->Fail(absl::AbortedError(
          absl::StrCat(description_, ": rank ", rank,
                       "'s contribution was replaced by its retry")));
      m.channel = std::move(channel);
      return true;
    }
    if (!attempt_id.empty() && attempt_id == m.attempt_id) {
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
  m.attached = true;
  m.channel = std::move(channel);
  m.attempt_id = attempt_id;
  ++attached_;
  if (done_) {
    m.channel->Fail(failure_);
    return false;
  }
  if (!Agree(rank, fp)) return false;
  // Broadcast's and Scatter's non-roots send no payload, nor does a
  // point-to-point message's destination (its tensor, if any, is the spec
  // its buffer expects).
  const bool sends_data = (fp.kind != CollectiveKind::kBroadcast &&
                           fp.kind != CollectiveKind::kScatter &&
                           fp.kind != CollectiveKind::kSendReceive) ||
                          rank == fp.root;
  m.input_bytes = sends_data ? TotalBytes(fp.tensors) : 0;
  m.fp = std::move(fp);

  // Reserve the worst case this rank can make the server hold before
  // accepting any of its payload.
  const size_t reserve = strategy_->Reservation(index, m.input_bytes);
  if (!env_.memory->TryReserve(reserve)) {
    FailLocked(absl::ResourceExhaustedError(absl::StrCat(
        description_, ": the server's memory budget of ",
        env_.memory->limit(), " bytes (--memory_budget_bytes) is exhausted: ",
        env_.memory->used(), " bytes in use, rank ", rank, " needs ", reserve,
        " more; retry later or raise the limit")), {rank});
    env_.metrics->RequestRefused(absl::StatusCode::kResourceExhausted,
                                 RefusedLimit::kMemoryBudgetBytes);
    return false;
  }
  if (env_.job_memory != nullptr && !env_.job_memory->TryReserve(reserve)) {
    env_.memory->Release(reserve);
    FailLocked(absl::ResourceExhaustedError(absl::StrCat(
        description_, ": job ", label_.job, "'s share of the memory budget, ",
        env_.job_memory->limit(), " bytes (--max_job_memory_fraction=",
        env_.options->max_job_memory_fraction,
        " of --memory_budget_bytes), is exhausted: ",
        env_.job_memory->used(), " bytes in use by the job, rank ", rank,
        " needs ", reserve, " more; other jobs keep the rest")), {rank});
    env_.metrics->RequestRefused(absl::StatusCode::kResourceExhausted,
                                 RefusedLimit::kMaxJobMemoryFraction);
    return false;
  }
  m.reserved = reserve;
  m.finishes_alone = strategy_->FinishesAlone(index);
  if (quorum_.has_value()) {
    quorum_->Arrived(index, absl::Now());
    DecideQuorumLocked();
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
    m.keeping = env_.kept != nullptr && !m.attempt_id.empty() &&
                env_.kept->Reserve(0);
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
    strategy_ = MakeKindStrategy(fp, static_cast<int>(group_.size()),
                                 IndexOf(fp.root), chunk_bytes_,
                                 env_.options->window, env_.chunks);
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

void Collective::OnAllAttached() {
  all_headers_ = true;
  result_specs_ = std::make_shared<const std::vector<TensorSpec>>(
      strategy_->PlanResult(reference_, ranks_));
  no_result_specs_ = std::make_shared<const std::vector<TensorSpec>>();
  for (size_t i = 0; i < ranks_.size(); ++i) {
    std::optional<std::vector<TensorSpec>> own = strategy_->ResultOf(i);
    ranks_[i].own_result_specs =
        own.has_value()
            ? std::make_shared<const std::vector<TensorSpec>>(*std::move(own))
            : nullptr;
  }
  StartKeeping();
  for (size_t i = 0; i < ranks_.size(); ++i) {
    // A rank that finishes alone may have had its header already.
    if (ranks_[i].output_bytes == 0 && !ranks_[i].header_sent) {
      SendTo(i, 0, {});
      MaybeFinish(i);
    }
  }
  strategy_->OnAllAttached(*this);
  ResumeReaders();
}

bool Collective::OnData(int rank, uint64_t offset, Payload data) {
  std::vector<StagedChunk> ready;
  std::shared_ptr<KindStrategy> strategy;
  bool may_read;
  {
    absl::MutexLock lock(&mu_);
    const int index = IndexOf(rank);
    RankState& m = ranks_[index];
    if (done_) return false;
    if (offset != m.received) {
      FailLocked(absl::InvalidArgumentError(absl::StrCat(
          description_, ": rank ", rank, " sent payload bytes at offset ",
          offset, ", expected offset ", m.received,
          " (chunks must come in order)")));
      return false;
    }
    if (data.size() > m.input_bytes - m.received) {
      FailLocked(absl::InvalidArgumentError(absl::StrCat(
          description_, ": rank ", rank, " sent ", m.received + data.size(),
          " payload bytes or more, but its tensors (",
          m.fp.tensors.empty() ? std::string("none")
                               : DescribeTensor(m.fp.tensors[0]),
          m.fp.tensors.size() > 1 ? ", ..." : "", ") hold ", m.input_bytes,
          m.input_bytes == 0
              ? absl::StrCat(" (a non-root rank sends no ",
                             CollectiveKindName(m.fp.kind), " payload)")
              : std::string())));
      return false;
    }
    if (data.size() > 0) {
      const absl::Time now = absl::Now();
      if (m.received == 0) {
        m.first_data_at = now;
        m.first_data_bytes = data.size();
      }
      m.last_data_at = now;
      m.received += data.size();
      strategy_->Accept(index, m, offset, std::move(data), all_headers_, *this,
                        &ready);
    }
    MaybeFinish(index);
    may_read = MayRead(index);
    if (!may_read) m.read_paused = true;
    strategy = strategy_;
  }
  for (StagedChunk& chunk : ready) {
    ScheduleReduction(strategy, std::move(chunk));
  }
  return may_read;
}

void Collective::ScheduleReduction(std::shared_ptr<KindStrategy> strategy,
                                   StagedChunk chunk) {
  if (chunk.bytes < env_.options->offload_bytes) {
    ReduceChunk(*strategy, std::move(chunk));
    return;
  }
  auto shared_chunk = std::make_shared<StagedChunk>(std::move(chunk));
  env_.reduction_pool->Schedule(
      [self = shared_from_this(), strategy, shared_chunk] {
        self->ReduceChunk(*strategy, std::move(*shared_chunk));
      });
}

void Collective::ReduceChunk(const KindStrategy& strategy, StagedChunk chunk) {
  const size_t index = chunk.index;
  absl::StatusOr<SharedBytes> result = strategy.Reduce(std::move(chunk));

  absl::MutexLock lock(&mu_);
  strategy_->OnChunkReduced();
  for (size_t i = 0; i < ranks_.size(); ++i) ReleaseIfDone(i);
  if (done_) return;
  if (!result.ok()) {
    FailLocked(absl::Status(result.status().code(),
                            absl::StrCat(description_, ": ",
                                         result.status().message())));
    return;
  }
  strategy_->Deliver(index, *std::move(result), *this);
  ResumeReaders();
}

void Collective::SendTo(int index, uint64_t offset,
                        std::vector<SharedBytes> data) {
  RankState& m = ranks_[index];
  if (m.left_out) return;  // a quorum step ended without it
  if (m.cut_off && !m.keeping) return;  // nobody to send it to
  ResultMessage message;
  message.offset = offset;
  if (!m.header_sent) {
    message.result_specs = !strategy_->GetsResult(index) ? no_result_specs_
                           : m.own_result_specs != nullptr ? m.own_result_specs
                                                           : result_specs_;
  }
  m.header_sent = true;
  for (const SharedBytes& s : data) m.sent += s.size();
  message.data = std::move(data);
  if (m.keeping) {
    // Shares the bytes, unless a client lent them.
    ResultMessage kept;
    kept.offset = message.offset;
    kept.result_specs = message.result_specs;
    for (const SharedBytes& piece : message.data) {
      kept.data.push_back(Keepable(piece));
    }
    m.kept.push_back(std::move(kept));
  }
  const bool last = IsComplete(m);
  if (m.cut_off) {
    // Kept for a replay of the call that was cut off.
    if (last) MarkFinished(index);
    return;
  }
  // The last write completes with the call (no OnWriteDone), so it is not
  // counted as pending.
  if (!last) ++m.pending_writes;
  m.channel->Send(std::move(message), last);
  if (last) MarkFinished(index);
}

bool Collective::IsComplete(const RankState& m) const {
  // A rank is done once it has its whole result and has sent its whole
  // payload (a ReduceScatter rank may get its slice before it sent all);
  // one that finishes alone (a buffered send) needs no other rank's header.
  return !m.finished && (all_headers_ || m.finishes_alone) && m.header_sent &&
         m.sent == m.output_bytes && m.received == m.input_bytes;
}

void Collective::MarkFinished(int index) {
  RankState& m = ranks_[index];
  if (m.keeping) {
    env_.kept->Keep(m.attempt_id, group_[index], m.fp.tensors,
                    std::move(m.kept), m.output_bytes);
    m.keeping = false;
    m.kept.clear();
  }
  m.finished = true;
  ReleaseIfDone(index);
  if (++finished_ == static_cast<int>(ranks_.size())) {
    done_ = true;
    // Every rank has its whole result: nothing is held for any of them (a
    // buffered send's bytes were held until now, see FinishesAlone).
    for (size_t i = 0; i < ranks_.size(); ++i) ReleaseMemory(i);
    ReportEnd(absl::StatusCode::kOk);
    for (TimerQueue::Id id : timer_ids_) env_.timers->Cancel(id);
    timer_ids_.clear();
  }
}

void Collective::StartKeeping() {
  if (env_.kept == nullptr) return;
  for (RankState& m : ranks_) {
    if (m.finished) continue;  // finished alone, before every rank attached
    m.keeping = !m.attempt_id.empty() && env_.kept->Reserve(m.output_bytes);
  }
}

void Collective::StopKeeping() {
  for (RankState& m : ranks_) {
    if (!m.keeping) continue;
    env_.kept->Unreserve(m.output_bytes);
    m.keeping = false;
    m.kept.clear();
  }
}

void Collective::ReleaseIfDone(int index) {
  const RankState& m = ranks_[index];
  if (m.finished && m.reserved > 0 && !strategy_->HoldsBytesOf(index)) {
    ReleaseMemory(index);
  }
}

bool Collective::MayRead(int index) const {
  if (done_ || strategy_ == nullptr) return false;
  return strategy_->MayRead(index, ranks_, all_headers_);
}

void Collective::ResumeReaders() {
  for (size_t i = 0; i < ranks_.size(); ++i) {
    RankState& m = ranks_[i];
    if (m.read_paused && MayRead(i)) {
      m.read_paused = false;
      m.channel->ResumeReading();
    }
  }
}

void Collective::MaybeFinish(int index) {
  RankState& m = ranks_[index];
  if (!IsComplete(m)) return;
  m.channel->FinishWhenSent();
  MarkFinished(index);
}

void Collective::ReleaseMemory(int index) {
  RankState& m = ranks_[index];
  env_.memory->Release(m.reserved);
  if (env_.job_memory != nullptr) env_.job_memory->Release(m.reserved);
  m.reserved = 0;
}

void Collective::OnWriteDone(int rank) {
  absl::MutexLock lock(&mu_);
  RankState& m = ranks_[IndexOf(rank)];
  // A call a replay replaced may still report its last writes.
  if (m.pending_writes > 0) --m.pending_writes;
  ResumeReaders();
}

void Collective::OnInputEnd(int rank) {
  absl::MutexLock lock(&mu_);
  const RankState& m = ranks_[IndexOf(rank)];
  if (done_ || m.received == m.input_bytes) return;
  FailLocked(absl::InvalidArgumentError(absl::StrCat(
      description_, ": rank ", rank, " closed its stream after ", m.received,
      " of ", m.input_bytes, " payload bytes")));
}

absl::Status Collective::Resume(int rank, const std::string& attempt_id,
                                const std::vector<TensorSpec>& declared,
                                std::shared_ptr<RankChannel> channel) {
  absl::MutexLock lock(&mu_);
  const int index = IndexOf(rank);
  const std::string what = absl::StrCat(description_, ": rank ", rank,
                                        "'s attempt ", attempt_id);
  if (index < 0 || done_ || !ranks_[index].attached ||
      ranks_[index].attempt_id != attempt_id || !ranks_[index].keeping ||
      ranks_[index].finished) {
    return absl::NotFoundError(
        absl::StrCat(what, " has no result being kept to resume"));
  }
  RankState& m = ranks_[index];
  if (declared != m.fp.tensors) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " is replayed declaring other tensors than it did (",
        DescribeTensors(declared), "; it declared ", DescribeTensors(m.fp.tensors),
        ")"));
  }
  if (!m.cut_off) {
    // Its client gave that call up (its connection broke) before reducerd
    // saw it end: the replay takes its place.
    m.channel->Fail(absl::AbortedError(
        absl::StrCat(what, "'s call was replaced by its replay")));
  }
  m.cut_off = false;
  m.channel = std::move(channel);
  m.pending_writes = 0;
  // Not the last message: a whole result was handed to KeptResults.
  for (const ResultMessage& sent : m.kept) {
    ++m.pending_writes;
    m.channel->Send(sent, /*last=*/false);
  }
  const int ranks[] = {rank};
  env_.log->Log({LogSeverity::kInfo, "result_resumed",
                 absl::StrCat(what, " asked again for its result: ",
                              m.kept.size(), " messages sent again, the rest "
                              "follows as it is made"),
                 label_.job, label_.epoch, label_.name, ranks});
  return absl::OkStatus();
}

bool Collective::HasFinished(int rank) const {
  absl::MutexLock lock(&mu_);
  const int index = IndexOf(rank);
  return index >= 0 && ranks_[index].finished;
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
    if (quorum_.has_value()) quorum_->Withdrew(IndexOf(rank));
    return;
  }
  const std::string why = absl::StrCat(
      description_, ": rank ", rank,
      "'s call was cancelled (it timed out, gave up, or lost its connection)");
  if (AllInputInLocked()) {
    if (m.finished) return;  // all of its result was queued already
    const int ranks[] = {rank};
    env_.log->Log({LogSeverity::kWarning, "rank_cut_off",
                   absl::StrCat(why, " after every input was in; the other "
                                     "ranks get their result",
                                m.keeping ? ", and its own is kept for a replay"
                                          : ""),
                   label_.job, label_.epoch, label_.name, ranks});
    m.cut_off = true;
    m.pending_writes = 0;
    // Without keeping, it counts as finished now; else once its whole
    // result is collected (SendTo).
    if (!m.keeping) MarkFinished(IndexOf(rank));
    return;
  }
  FailLocked(absl::AbortedError(why), {rank});
}

void Collective::Fail(const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  FailLocked(status);
}

void Collective::FailUnlessDecided(const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  if (AllInputInLocked()) return;
  FailLocked(status);
}

bool Collective::AllInputInLocked() const {
  if (!all_headers_ || !strategy_->Decided()) return false;
  for (const RankState& m : ranks_) {
    if (m.received != m.input_bytes) return false;
  }
  return true;
}

void Collective::ReportEnd(absl::StatusCode outcome) {
  uint64_t bytes_in = 0, bytes_out = 0;
  for (const RankState& m : ranks_) {
    bytes_in += m.received;
    bytes_out += m.sent;
  }
  env_.metrics->CollectiveEnded(label_.kind, outcome, absl::Now() - created_,
                                bytes_in, bytes_out);
}

void Collective::FailLocked(const absl::Status& status,
                            std::vector<int> ranks) {
  if (done_) return;
  done_ = true;
  failure_ = status;
  ReportEnd(status.code());
  const std::string message = status.ToString();
  env_.log->Log({LogSeverity::kWarning, "collective_failed", message,
                 label_.job, label_.epoch, label_.name,
                 ranks.empty() ? absl::Span<const int>(group_)
                               : absl::Span<const int>(ranks)});
  // Memory first: by the time any rank learns of the failure, every
  // reservation is back in the budget.
  for (size_t i = 0; i < ranks_.size(); ++i) ReleaseMemory(i);
  StopKeeping();
  for (RankState& m : ranks_) {
    if (m.attached && !m.finished && !m.cut_off) m.channel->Fail(status);
  }
  if (strategy_ != nullptr) strategy_->Clear();
  for (TimerQueue::Id id : timer_ids_) env_.timers->Cancel(id);
  timer_ids_.clear();
}

std::vector<int> Collective::AbsentRanks() const {
  std::vector<int> absent;
  for (size_t i = 0; i < ranks_.size(); ++i) {
    if (!ranks_[i].attached) absent.push_back(group_[i]);
  }
  return absent;
}

std::optional<CollectiveSnapshot> Collective::Snapshot() const {
  absl::MutexLock lock(&mu_);
  if (done_) return std::nullopt;
  CollectiveSnapshot s;
  s.name = label_.name;
  s.kind = label_.kind;
  s.group = group_;
  s.missing_ranks = AbsentRanks();
  s.age = absl::Now() - created_;
  s.stalled = stalled_;
  return s;
}

std::string Collective::MissingRanks() const {
  std::vector<int> absent, present;
  for (size_t i = 0; i < ranks_.size(); ++i) {
    (ranks_[i].attached ? present : absent).push_back(group_[i]);
  }
  if (!absent.empty()) {
    return absl::StrCat(absent.size() == 1 ? "rank " : "ranks ",
                        absl::StrJoin(absent, ","), " never arrived (",
                        present.empty() ? std::string("no rank")
                                        : absl::StrCat("ranks ",
                                                       absl::StrJoin(present, ",")),
                        " waited)");
  }
  std::vector<std::string> slow;
  for (size_t i = 0; i < ranks_.size(); ++i) {
    const RankState& m = ranks_[i];
    if (m.received < m.input_bytes) {
      slow.push_back(absl::StrCat("rank ", group_[i], " sent ", m.received,
                                  " of ", m.input_bytes, " bytes"));
    } else if (!m.finished) {
      slow.push_back(absl::StrCat("rank ", group_[i], " has received ",
                                  m.sent, " of ", m.output_bytes,
                                  " result bytes"));
    }
  }
  return absl::StrCat("every rank arrived but payload is missing: ",
                      absl::StrJoin(slow, "; "));
}

std::string Collective::AwaitedLocked() const {
  if (!all_headers_ || strategy_ == nullptr || strategy_->Decided()) {
    return std::string();
  }
  return strategy_->Awaited();
}

void Collective::OnStallTimer() {
  absl::MutexLock lock(&mu_);
  if (done_) return;
  stalled_ = true;
  if (label_.kind.has_value()) env_.metrics->CollectiveStalled(*label_.kind);
  const std::string awaited = AwaitedLocked();
  const std::string message = absl::StrCat(
      description_, " stalled for ", absl::FormatDuration(absl::Now() - created_),
      ": ", awaited.empty() ? MissingRanks() : awaited,
      "; it fails at the timeout of ", absl::FormatDuration(timeout_));
  const std::vector<int> absent = AbsentRanks();
  env_.log->Log({LogSeverity::kWarning, "collective_stalled", message,
                 label_.job, label_.epoch, label_.name, absent});
}

void Collective::OnDeadline() {
  absl::MutexLock lock(&mu_);
  if (done_) return;
  const std::string awaited = AwaitedLocked();
  if (!awaited.empty()) {
    FailLocked(absl::DeadlineExceededError(
        absl::StrCat(description_, ": ", awaited, " within ",
                     absl::FormatDuration(timeout_))));
    return;
  }
  FailLocked(absl::DeadlineExceededError(
                 absl::StrCat(description_, " timed out after ",
                              absl::FormatDuration(timeout_), ": ",
                              MissingRanks())),
             AbsentRanks());
}

void Collective::StartQuorum(const QuorumSettings& settings,
                             const std::vector<int>& absent,
                             const std::vector<int>& joining) {
  absl::MutexLock lock(&mu_);
  quorum_.emplace(static_cast<int>(group_.size()), settings);
  for (int rank : joining) {
    const int index = IndexOf(rank);
    if (index < 0) continue;
    ranks_[index].joining = true;
    quorum_->Joining(index);
  }
  // Absent from the start: left out already, and not named again in the
  // log (the job named them when they were lost).
  for (int rank : absent) {
    const int index = IndexOf(rank);
    if (index < 0) continue;
    quorum_->Died(index);
    if (!ranks_[index].left_out) MarkLeftOutLocked(index);
  }
}

void Collective::OnRankLost(int rank) {
  absl::MutexLock lock(&mu_);
  const int index = IndexOf(rank);
  if (!quorum_.has_value() || done_ || index < 0 || all_headers_) return;
  quorum_->Died(index);
  DecideQuorumLocked();
}

bool Collective::LeftOut(int rank) const {
  absl::MutexLock lock(&mu_);
  const int index = IndexOf(rank);
  return index >= 0 && ranks_[index].left_out;
}

void Collective::SetChunkBytes(size_t chunk_bytes) {
  absl::MutexLock lock(&mu_);
  chunk_bytes_ = chunk_bytes;
}

std::optional<double> Collective::InputPace() const {
  absl::MutexLock lock(&mu_);
  if (!AllInputInLocked()) return std::nullopt;
  std::optional<double> slowest;
  for (const RankState& m : ranks_) {
    // The first message's own transfer time is not seen: its bytes are
    // left out.
    const absl::Duration took = m.last_data_at - m.first_data_at;
    if (m.received < kMinPacedInputBytes || took <= absl::ZeroDuration()) continue;
    const double pace =
        static_cast<double>(m.received - m.first_data_bytes) / absl::ToDoubleSeconds(took);
    if (!slowest.has_value() || pace < *slowest) slowest = pace;
  }
  return slowest;
}

std::map<int, absl::Status> Collective::LeftOutRefusals() const {
  absl::MutexLock lock(&mu_);
  std::map<int, absl::Status> refusals;
  for (size_t i = 0; i < ranks_.size(); ++i) {
    if (ranks_[i].left_out) refusals[group_[i]] = LeftOutError(group_[i]);
  }
  return refusals;
}

bool Collective::SetResultValues(std::vector<int64_t> values) {
  absl::MutexLock lock(&mu_);
  if (done_) return false;
  result_values_ = std::move(values);
  if (strategy_ != nullptr) {
    strategy_->SetResultValues(result_values_, all_headers_, *this);
  }
  return true;
}

bool Collective::HasAttached(int rank) const {
  absl::MutexLock lock(&mu_);
  const int index = IndexOf(rank);
  return index >= 0 && ranks_[index].attached;
}

bool Collective::LeftAnyOut() const {
  absl::MutexLock lock(&mu_);
  return std::any_of(ranks_.begin(), ranks_.end(),
                     [](const RankState& m) { return m.left_out; });
}

void Collective::DecideQuorumLocked() {
  if (done_ || all_headers_) return;
  QuorumDecision decision = quorum_->Decide(absl::Now());
  switch (decision.state) {
    case QuorumDecision::State::kWaiting:
      if (decision.wake_at != absl::InfiniteFuture() &&
          decision.wake_at != quorum_wake_at_) {
        quorum_wake_at_ = decision.wake_at;
        std::weak_ptr<Collective> weak = weak_from_this();
        timer_ids_.push_back(env_.timers->Schedule(decision.wake_at, [weak] {
          if (auto self = weak.lock()) self->OnQuorumTimer();
        }));
      }
      return;
    case QuorumDecision::State::kImpossible:
      FailLocked(absl::FailedPreconditionError(
          absl::StrCat(description_, ": ", decision.why.message())));
      return;
    case QuorumDecision::State::kDecided:
      break;
  }
  std::vector<bool> takes_part(ranks_.size(), false);
  for (int i : decision.contributors) takes_part[i] = true;
  for (int i : decision.joined) takes_part[i] = true;
  std::vector<int> left_out;
  for (size_t i = 0; i < ranks_.size(); ++i) {
    if (takes_part[i] || ranks_[i].left_out) continue;
    // A rank lost after it attached has no call left to answer.
    ReleaseMemory(i);
    MarkLeftOutLocked(i);
    left_out.push_back(group_[i]);
  }
  if (!left_out.empty()) {
    env_.metrics->QuorumRanksLeftOut(static_cast<int>(left_out.size()));
    std::vector<int> contributors;
    for (int i : decision.contributors) contributors.push_back(group_[i]);
    env_.log->Log({LogSeverity::kWarning, "quorum_left_out",
                   absl::StrCat(description_, " ended over ranks [",
                                absl::StrJoin(contributors, ","),
                                "] without ranks [", absl::StrJoin(left_out, ","),
                                "]"),
                   label_.job, label_.epoch, label_.name, left_out});
  }
  OnAllAttached();
}

void Collective::OnQuorumTimer() {
  absl::MutexLock lock(&mu_);
  if (quorum_.has_value()) DecideQuorumLocked();
}

void Collective::ExcludeDone(int rank) {
  std::vector<StagedChunk> ready;
  std::shared_ptr<KindStrategy> strategy;
  {
    absl::MutexLock lock(&mu_);
    const int index = IndexOf(rank);
    if (done_ || index < 0 || ranks_[index].attached) return;
    ranks_[index].done = true;
    if (!LeaveOutLocked(index, &ready)) return;
    if (attached_ == static_cast<int>(group_.size()) && strategy_ != nullptr) {
      OnAllAttached();
    }
    strategy = strategy_;
  }
  for (StagedChunk& chunk : ready) ScheduleReduction(strategy, std::move(chunk));
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
      label_.kind.has_value() ? CollectiveKindName(*label_.kind)
                              : "collective",
      " cannot go on without its part (done ranks are left out of "
      "all-reduce, all-gather, barrier, and of broadcast, reduce and gather "
      "to another root)"));
}

absl::Status Collective::LeftOutError(int rank) const {
  const RankState& m = ranks_[IndexOf(rank)];
  if (m.done) {
    return absl::FailedPreconditionError(absl::StrCat(
        description_, ": rank ", rank,
        " called Done(); it takes part in no collective of the job until "
        "every rank has called Done()"));
  }
  return absl::FailedPreconditionError(absl::StrCat(
      description_, " finished without rank ", rank,
      ": it arrived after the step ended over the ranks in time; Connect "
      "again to rejoin at the next step"));
}

}  // namespace reducer
