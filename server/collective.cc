#include "server/collective.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/packed_reduce.h"
#include "core/reduce.h"
#include "server/log.h"
#include "proto/reducer/v1/wire_conversion.h"

namespace reducer {
namespace {

bool IsReduction(CollectiveKind kind) {
  return kind == CollectiveKind::kAllReduce ||
         kind == CollectiveKind::kReduceScatter;
}

bool IsForward(CollectiveKind kind) {
  return kind == CollectiveKind::kAllGather ||
         kind == CollectiveKind::kBroadcast;
}

size_t TotalBytes(const std::vector<TensorSpec>& tensors) {
  absl::StatusOr<PayloadLayout> layout = ComputePayloadLayout(tensors);
  return layout.ok() ? layout->total_bytes : 0;  // validated by the caller
}

}  // namespace

struct Collective::Member {
  std::shared_ptr<RankChannel> channel;
  bool attached = false;
  Fingerprint fp;
  std::string attempt_id;
  size_t input_bytes = 0;   // payload this rank sends
  size_t received = 0;
  size_t output_bytes = 0;  // result bytes it gets; known once all attached
  size_t base_offset = 0;   // forward kinds: where its input lands
  size_t sent = 0;
  int staged_blocks = 0;
  int pending_writes = 0;
  bool read_paused = false;
  bool header_sent = false;
  bool finished = false;
  size_t reserved = 0;  // bytes held in the memory budget
  // Forward kinds: payload that arrived before every header was in.
  std::vector<std::pair<uint64_t, SliceRange>> early;
};

struct Collective::Block {
  BlockParts parts;  // one per member, in group order
  std::vector<size_t> filled;
  int complete = 0;
};

Collective::Collective(CollectiveEnv env, CollectiveLabel label,
                       std::string description, std::vector<int> group,
                       absl::Duration timeout)
    : env_(env),
      label_(std::move(label)),
      description_(std::move(description)),
      group_(std::move(group)),
      timeout_(timeout),
      block_bytes_(env.options->chunk_bytes),
      created_(absl::Now()),
      members_(group_.size()) {}

Collective::~Collective() {
  absl::MutexLock lock(&mu_);
  for (size_t i = 0; i < members_.size(); ++i) ReleaseMemory(i);
  for (TimerQueue::Id id : timer_ids_) env_.timers->Cancel(id);
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

void Collective::Attach(std::shared_ptr<RankChannel> channel, int rank,
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
    return;
  }
  Member& m = members_[index];
  if (m.attached) {
    if (!attempt_id.empty() && attempt_id == m.attempt_id && !done_ &&
        m.received == 0 && !m.header_sent) {
      // A retry of a contribution whose first stream moved no data: the new
      // stream takes its place and nothing is counted twice.
      m.channel->Fail(absl::AbortedError(
          absl::StrCat(description_, ": rank ", rank,
                       "'s contribution was replaced by its retry")));
      m.channel = std::move(channel);
      return;
    }
    if (!attempt_id.empty() && attempt_id == m.attempt_id) {
      channel->Fail(absl::AbortedError(absl::StrCat(
          description_, ": rank ", rank,
          " retried after its first attempt had already moved data; the "
          "collective cannot be resumed, so it is not counted twice")));
      return;
    }
    channel->Fail(absl::FailedPreconditionError(absl::StrCat(
        description_, ": rank ", rank,
        " contributed twice; a name must not be reused while a collective "
        "of that name is in flight")));
    return;
  }
  m.attached = true;
  m.channel = std::move(channel);
  m.attempt_id = attempt_id;
  ++attached_;
  if (done_) {
    m.channel->Fail(failure_);
    return;
  }
  if (!has_reference_ || attached_ == 1) {
    reference_ = fp;
    reference_rank_ = rank;
    has_reference_ = true;
  } else {
    absl::Status agree = CheckAgreement(reference_rank_, reference_, rank, fp);
    if (!agree.ok()) {
      FailLocked(absl::FailedPreconditionError(
                     absl::StrCat(description_, ": ", agree.message())),
                 {reference_rank_, rank});
      return;
    }
    if (reference_.tensors.empty() && !fp.tensors.empty()) {
      reference_ = fp;  // Broadcast: the first rank that names a tensor
      reference_rank_ = rank;
    }
  }
  const CollectiveKind kind = fp.kind;
  const bool sends_data =
      kind != CollectiveKind::kBroadcast || rank == fp.root;
  m.input_bytes = sends_data ? TotalBytes(fp.tensors) : 0;
  m.fp = std::move(fp);

  // Reserve the worst case this rank can make the server hold before
  // accepting any of its payload: `window` blocks in and `window` out.
  const size_t window_bytes =
      static_cast<size_t>(env_.options->window) * block_bytes_;
  size_t reserve = std::min(m.input_bytes, window_bytes);
  if (kind == CollectiveKind::kAllReduce) {
    reserve += std::min(m.input_bytes, window_bytes);
  } else if (kind != CollectiveKind::kBarrier) {
    reserve += window_bytes;
  }
  if (!env_.memory->TryReserve(reserve)) {
    FailLocked(absl::ResourceExhaustedError(absl::StrCat(
        description_, ": the server's memory budget of ",
        env_.memory->limit(), " bytes (--memory_budget_bytes) is exhausted: ",
        env_.memory->used(), " bytes in use, rank ", rank, " needs ", reserve,
        " more; retry later or raise the limit")), {rank});
    env_.metrics->RequestRefused(absl::StatusCode::kResourceExhausted,
                                 RefusedLimit::kMemoryBudgetBytes);
    return;
  }
  m.reserved = reserve;
  if (attached_ == static_cast<int>(group_.size())) OnAllAttached();
}

void Collective::OnAllAttached() {
  all_headers_ = true;
  ComputeResult();
  const CollectiveKind kind = reference_.kind;
  for (size_t i = 0; i < members_.size(); ++i) {
    if (members_[i].output_bytes == 0) {
      SendTo(i, 0, {});
      MaybeFinish(i);
    }
  }
  if (IsForward(kind)) {
    for (size_t i = 0; i < members_.size(); ++i) {
      std::vector<std::pair<uint64_t, SliceRange>> early =
          std::move(members_[i].early);
      members_[i].early.clear();
      for (auto& [offset, data] : early) Forward(i, offset, data);
    }
  }
  ResumeReaders();
}

void Collective::ComputeResult() {
  const CollectiveKind kind = reference_.kind;
  const size_t n = members_.size();
  v1::CollectiveResponse result_specs;  // only `result` set
  switch (kind) {
    case CollectiveKind::kAllReduce: {
      plan_ = std::make_shared<const ReductionPlan>(ReductionPlan{
          *ComputePayloadLayout(reference_.tensors), reference_.tensors});
      for (const TensorSpec& t : reference_.tensors) {
        *result_specs.add_result() = TensorSpecToWire(t);
      }
      for (Member& m : members_) m.output_bytes = plan_->layout.total_bytes;
      break;
    }
    case CollectiveKind::kReduceScatter: {
      plan_ = std::make_shared<const ReductionPlan>(ReductionPlan{
          *ComputePayloadLayout(reference_.tensors), reference_.tensors});
      TensorSpec slice = reference_.tensors[0];
      slice.shape[0] /= static_cast<int64_t>(n);
      *result_specs.add_result() = TensorSpecToWire(slice);
      for (Member& m : members_) m.output_bytes = plan_->layout.total_bytes / n;
      break;
    }
    case CollectiveKind::kAllGather: {
      TensorSpec gathered = reference_.tensors[0];
      gathered.shape[0] = 0;
      size_t offset = 0;
      for (Member& m : members_) {
        gathered.shape[0] += m.fp.tensors[0].shape[0];
        m.base_offset = offset;
        offset += m.input_bytes;
      }
      *result_specs.add_result() = TensorSpecToWire(gathered);
      for (Member& m : members_) m.output_bytes = offset;
      break;
    }
    case CollectiveKind::kBroadcast: {
      const Member& root = members_[IndexOf(reference_.root)];
      *result_specs.add_result() = TensorSpecToWire(root.fp.tensors[0]);
      for (Member& m : members_) m.output_bytes = root.input_bytes;
      break;
    }
    case CollectiveKind::kBarrier:
      break;
  }
  encoded_result_specs_ = grpc::Slice(result_specs.SerializeAsString());
}

bool Collective::OnData(int rank, uint64_t offset, SliceRange data) {
  std::vector<std::pair<size_t, BlockParts>> ready;
  std::shared_ptr<const ReductionPlan> plan;
  bool may_read;
  {
    absl::MutexLock lock(&mu_);
    const int index = IndexOf(rank);
    Member& m = members_[index];
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
          m.input_bytes == 0 ? " (a non-root rank sends no broadcast payload)"
                             : "")));
      return false;
    }
    if (data.size() > 0) {
      const CollectiveKind kind = m.fp.kind;
      if (IsReduction(kind)) {
        size_t pos = offset, consumed = 0;
        while (consumed < data.size()) {
          const size_t b = pos / block_bytes_;
          const size_t block_begin = b * block_bytes_;
          const size_t block_len =
              std::min(block_bytes_, m.input_bytes - block_begin);
          const size_t in_block = pos - block_begin;
          const size_t n = std::min(block_len - in_block, data.size() - consumed);
          Block& block = blocks_[b];
          if (block.parts.empty()) {
            block.parts.resize(members_.size());
            block.filled.resize(members_.size());
          }
          if (!block.parts[index]) {
            block.parts[index] = env_.blocks->Get();
            ++m.staged_blocks;
          }
          data.CopyTo(consumed, n, block.parts[index].get() + in_block);
          block.filled[index] += n;
          if (block.filled[index] == block_len &&
              ++block.complete == static_cast<int>(members_.size())) {
            ready.emplace_back(b, std::move(block.parts));
            blocks_.erase(b);
          }
          pos += n;
          consumed += n;
        }
        m.received += data.size();
      } else if (IsForward(kind) && !all_headers_) {
        m.received += data.size();
        m.early.emplace_back(offset, std::move(data));
      } else {
        m.received += data.size();
        Forward(index, offset, data);
      }
    }
    MaybeFinish(index);
    may_read = MayRead(index);
    if (!may_read) m.read_paused = true;
    plan = plan_;
  }
  for (auto& [b, parts] : ready) ScheduleReduction(plan, b, std::move(parts));
  return may_read;
}

void Collective::ScheduleReduction(std::shared_ptr<const ReductionPlan> plan,
                                   size_t block_index, BlockParts parts) {
  const size_t begin = block_index * block_bytes_;
  const size_t end = std::min(begin + block_bytes_, plan->layout.total_bytes);
  if (end - begin < env_.options->offload_bytes) {
    ReduceBlock(*plan, block_index, std::move(parts));
    return;
  }
  auto shared_parts = std::make_shared<BlockParts>(std::move(parts));
  env_.reduction_pool->Schedule(
      [self = shared_from_this(), plan, block_index, shared_parts] {
        self->ReduceBlock(*plan, block_index, std::move(*shared_parts));
      });
}

void Collective::ReduceBlock(const ReductionPlan& plan, size_t block_index,
                             BlockParts parts) {
  const size_t begin = block_index * block_bytes_;
  const size_t end = std::min(begin + block_bytes_, plan.layout.total_bytes);
  const size_t len = end - begin;
  std::vector<const void*> inputs;
  inputs.reserve(parts.size());
  for (const auto& p : parts) inputs.push_back(p.get());
  BlockPool::Block out = env_.blocks->Get();
  absl::Status status = ReducePackedRange(plan.layout, plan.tensors, inputs,
                                          begin, end, out.get());
  parts.clear();  // the staged copies go back to the pool
  grpc::Slice result;
  if (status.ok()) result = env_.blocks->ToSlice(std::move(out), len);

  absl::MutexLock lock(&mu_);
  for (Member& m : members_) --m.staged_blocks;
  if (done_) return;
  if (!status.ok()) {
    FailLocked(absl::Status(status.code(),
                            absl::StrCat(description_, ": ", status.message())));
    return;
  }
  DeliverReduced(block_index, std::move(result));
  ResumeReaders();
}

void Collective::DeliverReduced(size_t block_index, grpc::Slice result) {
  const size_t begin = block_index * block_bytes_;
  const size_t end = begin + result.size();
  if (reference_.kind == CollectiveKind::kAllReduce) {
    for (size_t i = 0; i < members_.size(); ++i) {
      SendTo(i, begin, {result});
      MaybeFinish(i);
    }
    return;
  }
  // ReduceScatter: member i owns bytes [i * share, (i + 1) * share).
  const size_t share = plan_->layout.total_bytes / members_.size();
  for (size_t i = 0; i < members_.size(); ++i) {
    const size_t lo = std::max(begin, i * share);
    const size_t hi = std::min(end, (i + 1) * share);
    if (lo >= hi) continue;
    SendTo(i, lo - i * share, {result.sub(lo - begin, hi - begin)});
    MaybeFinish(i);
  }
}

void Collective::Forward(int index, uint64_t offset, const SliceRange& data) {
  const uint64_t out_offset = members_[index].base_offset + offset;
  for (size_t j = 0; j < members_.size(); ++j) {
    SendTo(j, out_offset, data.slices());
    MaybeFinish(j);
  }
}

void Collective::SendTo(int index, uint64_t offset,
                        absl::Span<const grpc::Slice> data) {
  Member& m = members_[index];
  v1::CollectiveResponse fields;
  fields.set_offset(offset);
  const bool with_specs = !m.header_sent;
  m.header_sent = true;
  for (const grpc::Slice& s : data) m.sent += s.size();
  const bool last = IsComplete(m);
  // The last write completes with the stream (no OnWriteDone), so it is
  // not counted as pending.
  if (!last) ++m.pending_writes;
  m.channel->Send(EncodeMessage(fields,
                                with_specs ? encoded_result_specs_ : grpc::Slice(),
                                data),
                  last);
  if (last) MarkFinished(index);
}

bool Collective::IsComplete(const Member& m) const {
  // A rank is done once it has its whole result and has sent its whole
  // payload (a ReduceScatter rank may get its slice before it sent all).
  return !m.finished && all_headers_ && m.header_sent &&
         m.sent == m.output_bytes && m.received == m.input_bytes;
}

void Collective::MarkFinished(int index) {
  members_[index].finished = true;
  ReleaseMemory(index);
  if (++finished_ == static_cast<int>(members_.size())) {
    done_ = true;
    ReportEnd(absl::StatusCode::kOk);
    for (TimerQueue::Id id : timer_ids_) env_.timers->Cancel(id);
    timer_ids_.clear();
  }
}

bool Collective::MayRead(int index) const {
  if (done_) return false;
  const Member& m = members_[index];
  const int window = env_.options->window;
  switch (m.fp.kind) {
    case CollectiveKind::kAllReduce:
    case CollectiveKind::kReduceScatter:
      return m.staged_blocks < window && m.pending_writes < window;
    case CollectiveKind::kAllGather:
    case CollectiveKind::kBroadcast: {
      if (!all_headers_) return m.early.empty();
      int queued = 0;
      for (const Member& other : members_) queued += other.pending_writes;
      return queued < window * static_cast<int>(members_.size());
    }
    case CollectiveKind::kBarrier:
      return true;
  }
  return true;
}

void Collective::ResumeReaders() {
  for (size_t i = 0; i < members_.size(); ++i) {
    Member& m = members_[i];
    if (m.read_paused && MayRead(i)) {
      m.read_paused = false;
      m.channel->ResumeReading();
    }
  }
}

void Collective::MaybeFinish(int index) {
  Member& m = members_[index];
  if (!IsComplete(m)) return;
  m.channel->FinishWhenSent();
  MarkFinished(index);
}

void Collective::ReleaseMemory(int index) {
  Member& m = members_[index];
  env_.memory->Release(m.reserved);
  m.reserved = 0;
}

void Collective::OnWriteDone(int rank) {
  absl::MutexLock lock(&mu_);
  Member& m = members_[IndexOf(rank)];
  --m.pending_writes;
  ResumeReaders();
}

void Collective::OnInputEnd(int rank) {
  absl::MutexLock lock(&mu_);
  const Member& m = members_[IndexOf(rank)];
  if (done_ || m.received == m.input_bytes) return;
  FailLocked(absl::InvalidArgumentError(absl::StrCat(
      description_, ": rank ", rank, " closed its stream after ", m.received,
      " of ", m.input_bytes, " payload bytes")));
}

bool Collective::HasFinished(int rank) const {
  absl::MutexLock lock(&mu_);
  const int index = IndexOf(rank);
  return index >= 0 && members_[index].finished;
}

void Collective::OnRankCancelled(int rank, const RankChannel* channel) {
  absl::MutexLock lock(&mu_);
  if (done_) return;
  Member& m = members_[IndexOf(rank)];
  if (m.channel.get() != channel) return;  // a retry already replaced it
  if (!all_headers_ && m.received == 0) {
    // Nothing of this rank's was used yet: forget the contribution.
    ReleaseMemory(IndexOf(rank));
    m = Member();
    --attached_;
    return;
  }
  FailLocked(absl::AbortedError(absl::StrCat(
      description_, ": rank ", rank,
      "'s call was cancelled (it timed out, gave up, or lost its "
      "connection)")), {rank});
}

void Collective::Fail(const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  FailLocked(status);
}

void Collective::ReportEnd(absl::StatusCode outcome) {
  uint64_t bytes_in = 0, bytes_out = 0;
  for (const Member& m : members_) {
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
  for (size_t i = 0; i < members_.size(); ++i) {
    Member& m = members_[i];
    if (m.attached && !m.finished) m.channel->Fail(status);
    m.early.clear();
    ReleaseMemory(i);
  }
  blocks_.clear();
  for (TimerQueue::Id id : timer_ids_) env_.timers->Cancel(id);
  timer_ids_.clear();
}

std::vector<int> Collective::AbsentRanks() const {
  std::vector<int> absent;
  for (size_t i = 0; i < members_.size(); ++i) {
    if (!members_[i].attached) absent.push_back(group_[i]);
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
  for (size_t i = 0; i < members_.size(); ++i) {
    (members_[i].attached ? present : absent).push_back(group_[i]);
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
  for (size_t i = 0; i < members_.size(); ++i) {
    const Member& m = members_[i];
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

void Collective::OnStallTimer() {
  absl::MutexLock lock(&mu_);
  if (done_) return;
  stalled_ = true;
  if (label_.kind.has_value()) env_.metrics->CollectiveStalled(*label_.kind);
  const std::string message = absl::StrCat(
      description_, " stalled for ", absl::FormatDuration(absl::Now() - created_),
      ": ", MissingRanks(), "; it fails at the timeout of ",
      absl::FormatDuration(timeout_));
  const std::vector<int> absent = AbsentRanks();
  env_.log->Log({LogSeverity::kWarning, "collective_stalled", message,
                 label_.job, label_.epoch, label_.name, absent});
}

void Collective::OnDeadline() {
  absl::MutexLock lock(&mu_);
  if (done_) return;
  FailLocked(absl::DeadlineExceededError(
                 absl::StrCat(description_, " timed out after ",
                              absl::FormatDuration(timeout_), ": ",
                              MissingRanks())),
             AbsentRanks());
}

}  // namespace reducer
