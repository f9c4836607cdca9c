#include "server/relay/relay_collective.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"
#include "server/engine/kind_strategy.h"
#include "server/relay/result_messages.h"

namespace reducer {
namespace {

size_t TotalBytes(const std::vector<TensorSpec>& tensors) {
  absl::StatusOr<PayloadLayout> layout = ComputePayloadLayout(tensors);
  return layout.ok() ? layout->total_bytes : 0;  // validated by the job
}

}  // namespace

v1::CollectiveHeader RelayCollective::ForwardedHeader(
    const v1::CollectiveHeader& header) {
  v1::CollectiveHeader forwarded = header;
  forwarded.clear_session_id();
  forwarded.clear_epoch();
  forwarded.clear_attempt_id();
  forwarded.clear_received_below();
  forwarded.clear_received();
  forwarded.clear_ranks();
  return forwarded;
}

RelayCollective::RelayCollective(
    RelayEnv env, std::string description, std::vector<int> members,
    std::shared_ptr<UpstreamSession> session,
    std::function<void(uint64_t, const std::vector<int>&)> on_done)
    : env_(env),
      description_(std::move(description)),
      session_(std::move(session)),
      on_done_(std::move(on_done)) {
  for (int rank : members) {
    Member m;
    m.rank = rank;
    members_.push_back(std::move(m));
  }
}

RelayCollective::~RelayCollective() {
  absl::MutexLock lock(&mu_);
  if (deadline_.has_value()) env_.timers->Cancel(*deadline_);
  const absl::Status gone =
      absl::AbortedError(description_ + ": the relay let it go");
  if (input_ != nullptr) input_->Abandon(gone);
  for (Member& m : members_) {
    if (m.own_input != nullptr) m.own_input->Abandon(gone);
  }
}

int RelayCollective::IndexOf(int rank) const {
  for (size_t i = 0; i < members_.size(); ++i) {
    if (members_[i].rank == rank) return static_cast<int>(i);
  }
  return -1;
}

bool RelayCollective::started() const {
  absl::MutexLock lock(&mu_);
  return started_ || split_;  // answered here: started_
}

bool RelayCollective::done() const {
  absl::MutexLock lock(&mu_);
  for (const Member& m : members_) {
    if (!m.finished && (m.attached || !split_)) return false;
  }
  return true;
}

bool RelayCollective::Attach(std::shared_ptr<RankChannel> channel, int rank,
                             const v1::CollectiveHeader& header,
                             Fingerprint fp) {
  std::vector<std::function<void()>> starts;
  {
    absl::MutexLock lock(&mu_);
    const int m = IndexOf(rank);
    if (m < 0 || members_[m].attached) {
      channel->Fail(absl::FailedPreconditionError(absl::StrCat(
          description_, ": rank ", rank,
          m < 0 ? " is not served by this relay for it"
                : " contributed twice; a name must not be reused while a "
                  "collective of that name is in flight")));
      return false;
    }
    if (failed_) {
      channel->Fail(failure_);
      return false;
    }
    // A member that disagrees with the others here splits it: upstream
    // names the mismatch to every rank of the job.
    bool disagrees = false;
    if (attached_ > 0 && !split_) {
      const Member& first =
          *std::find_if(members_.begin(), members_.end(),
                        [](const Member& x) { return x.attached; });
      disagrees = !CheckAgreement(first.rank, first.fp, rank, fp).ok();
    } else if (attached_ == 0 && header.timeout_ms() > 0) {
      // Upstream times the collective out from its first rank's arrival:
      // the members here go without the missing ones well before then,
      // so that upstream names only those.
      first_attached_ = env_.timers->clock().Now();
      timeout_ = absl::Milliseconds(header.timeout_ms());
      std::weak_ptr<RelayCollective> weak = weak_from_this();
      deadline_ = env_.timers->Schedule(first_attached_ + timeout_ / 2, [weak] {
        if (auto self = weak.lock()) self->OnStragglerDeadline();
      });
    }
    Member& member = members_[m];
    member.channel = std::move(channel);
    member.header = header;
    const bool sends = !TraitsOf(fp.kind).only_root_sends || rank == fp.root;
    member.input_bytes = sends ? TotalBytes(fp.tensors) : 0;
    member.fp = std::move(fp);
    member.attached = true;
    ++attached_;
    if (split_) {
      if (std::function<void()> start = StartAloneLocked(m)) {
        starts.push_back(std::move(start));
      }
    } else if (disagrees) {
      starts = SplitLocked();
    } else if (attached_ == static_cast<int>(members_.size())) {
      if (std::function<void()> start = StartLocked()) {
        starts.push_back(std::move(start));
      }
    }
  }
  for (const std::function<void()>& start : starts) start();
  MaybeDone();  // answered here, it may be over already (a barrier)
  return true;
}

void RelayCollective::Excuse(int rank) {
  std::function<void()> start;
  {
    absl::MutexLock lock(&mu_);
    const int m = IndexOf(rank);
    if (m < 0 || members_[m].attached || started_ || failed_ ||
        members_.size() == 1) {
      return;
    }
    members_.erase(members_.begin() + m);
    if (!split_ && attached_ == static_cast<int>(members_.size())) {
      start = StartLocked();
    }
  }
  if (start) start();
  MaybeDone();
}

v1::CollectiveHeader RelayCollective::UpstreamHeaderLocked() const {
  const Fingerprint& ref = members_[0].fp;
  int carrier = 0;
  for (size_t i = 0; i < members_.size(); ++i) {
    if (members_[i].rank == ref.root) carrier = static_cast<int>(i);
  }
  v1::CollectiveHeader header = ForwardedHeader(members_[carrier].header);
  if (combine_ == Combine::kAlone) return header;
  for (const Member& m : members_) header.add_ranks(m.rank);
  if (combine_ == Combine::kConcat || combine_ == Combine::kParts) {
    int64_t rows = 0;
    for (const Member& m : members_) rows += m.fp.tensors[0].shape[0];
    header.mutable_tensors(0)->set_shape(0, rows);
  }
  return header;
}

std::function<void()> RelayCollective::StartLocked() {
  if (deadline_.has_value()) {
    env_.timers->Cancel(*deadline_);
    deadline_.reset();
  }
  const Fingerprint& ref = members_[0].fp;
  here_ = AnswersHereLocked();
  size_t bytes = 0;
  base_.assign(members_.size(), 0);
  if (members_.size() == 1) {
    combine_ = Combine::kAlone;
    bytes = members_[0].input_bytes;
  } else {
    switch (ref.kind) {
      case CollectiveKind::kAllReduce:
      case CollectiveKind::kReduce:
      case CollectiveKind::kReduceScatter: {
        combine_ = Combine::kReduce;
        auto plan = std::make_shared<ReducePlan>();
        plan->tensors = ref.tensors;
        for (TensorSpec& t : plan->tensors) {
          // Answered here, AVG divides by the members: the whole group.
          if (t.op == ReduceOp::kAvg && !here_) t.op = ReduceOp::kSum;
        }
        plan->layout = *ComputePayloadLayout(plan->tensors);
        bytes = plan->layout.total_bytes;
        plan_ = std::move(plan);
        reduced_.assign((bytes + env_.chunk_bytes - 1) / env_.chunk_bytes,
                        false);
        break;
      }
      case CollectiveKind::kAllGather:
      case CollectiveKind::kGather:
        combine_ = Combine::kConcat;
        for (size_t i = 0; i < members_.size(); ++i) {
          base_[i] = bytes;
          bytes += members_[i].input_bytes;
        }
        break;
      case CollectiveKind::kAllToAll:
        // Equal parts: the members agree (else it split), so each sends
        // input_bytes / group bytes to each rank of the group.
        combine_ = Combine::kParts;
        part_bytes_ = members_[0].input_bytes / ref.group.size();
        for (const Member& m : members_) bytes += m.input_bytes;
        break;
      case CollectiveKind::kBroadcast:
      case CollectiveKind::kScatter:
        combine_ = Combine::kRoot;
        for (const Member& m : members_) bytes += m.input_bytes;
        break;
      default:
        combine_ = Combine::kNone;
        break;
    }
  }
  reserved_ = MemoryReservation::Try(env_.memory, bytes);
  if (!reserved_->ok()) {
    FailLocked(absl::ResourceExhaustedError(absl::StrCat(
        description_, ": the relay's memory budget of ", env_.memory->limit(),
        " bytes cannot hold its ", bytes, " bytes for upstream (",
        env_.memory->used(), " in use); retry later or raise the limit")));
    return nullptr;
  }
  input_ = std::make_shared<UpstreamInput>(bytes, env_.buffers);
  started_ = true;
  const v1::CollectiveHeader header = UpstreamHeaderLocked();
  for (size_t i = 0; i < members_.size(); ++i) {
    std::vector<std::pair<uint64_t, Payload>> held =
        std::move(members_[i].held);
    for (auto& [offset, data] : held) {
      absl::Status placed = PlaceLocked(static_cast<int>(i), offset, data);
      if (!placed.ok()) {
        FailLocked(placed);
        return nullptr;
      }
    }
  }
  AdvanceReadyLocked();
  if (here_) {
    if (timeout_ > absl::ZeroDuration()) {
      std::weak_ptr<RelayCollective> weak = weak_from_this();
      deadline_ = env_.timers->Schedule(first_attached_ + timeout_, [weak] {
        if (auto self = weak.lock()) self->OnHereDeadline();
      });
    }
    AnswerHereLocked();
    return nullptr;
  }
  std::shared_ptr<UpstreamInput> input = input_;
  std::shared_ptr<const ResultInto> into = StreamResultLocked();
  std::weak_ptr<RelayCollective> weak = weak_from_this();
  std::shared_ptr<UpstreamSession> session = session_;
  return [session, header, input, into, weak] {
    session->Start(header, input, into,
                   [weak](absl::StatusOr<UpstreamResult> result) {
                     if (auto self = weak.lock()) {
                       self->OnUpstreamDone(std::move(result));
                     }
                   });
  };
}

bool RelayCollective::OnData(int rank, uint64_t offset, Payload data) {
  std::vector<ChunkToReduce> offload;
  std::shared_ptr<const ReducePlan> plan;
  std::shared_ptr<UpstreamInput> input;
  {
    absl::MutexLock lock(&mu_);
    OnDataLocked(rank, offset, std::move(data), &offload);
    if (!offload.empty()) {
      plan = plan_;
      input = input_;
    }
  }
  for (ChunkToReduce& chunk : offload) {
    auto shared = std::make_shared<ChunkToReduce>(std::move(chunk));
    env_.reduction_pool->Schedule(
        [self = shared_from_this(), plan, input, shared] {
          self->ReduceOffloaded(*plan, *input, std::move(*shared));
        });
  }
  MaybeDone();  // it failed, or was answered here
  return true;
}

void RelayCollective::ReduceOffloaded(const ReducePlan& plan,
                                      UpstreamInput& input,
                                      ChunkToReduce chunk) {
  const absl::Status reduced =
      ReduceChunk(plan, chunk.parts, chunk.begin, chunk.end, input.data());
  {
    absl::MutexLock lock(&mu_);
    if (failed_ || input_.get() != &input) return;
    if (!reduced.ok()) {
      FailLocked(absl::Status(
          reduced.code(), absl::StrCat(description_, ": ", reduced.message())));
    } else {
      reduced_[chunk.index] = true;
      AdvanceReadyLocked();
      if (here_) SendReadyLocked();
    }
  }
  MaybeDone();
}

void RelayCollective::OnDataLocked(int rank, uint64_t offset, Payload data,
                                   std::vector<ChunkToReduce>* offload) {
  const int m = IndexOf(rank);
  if (m < 0 || failed_) return;
  Member& member = members_[m];
  if (offset != member.received + [&] {
        size_t held = 0;
        for (const auto& h : member.held) held += h.second.size();
        return held;
      }()) {
    FailLocked(absl::InvalidArgumentError(
        absl::StrCat(description_, ": rank ", rank, " sent bytes at offset ",
                     offset, " out of order")));
    return;
  }
  if (!started_ && !split_) {
    member.held.emplace_back(offset, std::move(data));
    return;
  }
  absl::Status placed = PlaceLocked(m, offset, data, offload);
  if (!placed.ok()) {
    FailLocked(placed);
    return;
  }
  if (split_) {
    member.own_input->MarkReady(member.received);
  } else {
    AdvanceReadyLocked();
    if (here_) SendReadyLocked();
  }
}

void RelayCollective::OnInputEnd(int rank) {
  {
    absl::MutexLock lock(&mu_);
    const int m = IndexOf(rank);
    if (m < 0 || failed_) return;
    size_t held = 0;
    for (const auto& h : members_[m].held) held += h.second.size();
    const size_t got = members_[m].received + held;
    if (got < members_[m].input_bytes) {
      FailLocked(absl::InvalidArgumentError(absl::StrCat(
          description_, ": rank ", rank, " ended its call after ", got,
          " of its ", members_[m].input_bytes, " payload bytes")));
    }
  }
  MaybeDone();
}

void RelayCollective::OnUpstreamDone(absl::StatusOr<UpstreamResult> result) {
  {
    absl::MutexLock lock(&mu_);
    if (failed_) return;
    reserved_.reset();  // the upstream call read all of it
    if (!result.ok()) {
      FailLocked(result.status());
    } else if (landing_ != nullptr) {
      if (EndStreamedLocked()) SendReadyLocked();
    } else {
      DeliverResultLocked(*result);
    }
  }
  MaybeDone();
}

void RelayCollective::DeliverResultLocked(const UpstreamResult& result) {
  const Fingerprint& ref = members_[0].fp;
  const bool combined = combine_ != Combine::kAlone;
  // Only the root gets the result (Reduce, Gather), or each member its
  // own part of it (ReduceScatter's slices, Scatter's parts, AllToAll's
  // rows sent to it), else every member the whole.
  const bool rooted = combined && (ref.kind == CollectiveKind::kReduce ||
                                   ref.kind == CollectiveKind::kGather);
  const bool own_parts =
      combined && (ref.kind == CollectiveKind::kReduceScatter ||
                   ref.kind == CollectiveKind::kScatter ||
                   ref.kind == CollectiveKind::kAllToAll);
  size_t result_bytes = 0;
  for (const TensorSpec& spec : result.specs) {
    result_bytes += TotalBytes({spec});
  }
  std::vector<std::vector<ResultMessage>> answers;
  if (own_parts) {
    const int parts = static_cast<int>(members_.size());
    for (int i = 0; i < parts; ++i) {
      members_[i].answer_base = i * result_bytes / parts;
      absl::StatusOr<std::vector<ResultMessage>> part =
          PartMessagesOf(result, i, parts, env_.chunk_bytes);
      if (!part.ok()) {
        FailLocked(absl::Status(
            part.status().code(),
            absl::StrCat(description_, ": ", part.status().message())));
        return;
      }
      answers.push_back(*std::move(part));
    }
  } else {
    // Built once, shared by every member that gets the result.
    const std::vector<ResultMessage> full =
        ResultMessagesOf(&result, env_.chunk_bytes);
    for (const Member& m : members_) {
      const bool gets = !rooted || m.rank == ref.root;
      answers.push_back(gets ? full : ResultMessagesOf(nullptr, 0));
    }
  }
  for (size_t i = 0; i < members_.size(); ++i) {
    DeliverLocked(static_cast<int>(i), std::move(answers[i]));
  }
  // What one call per member would have sent and received, less what was:
  // the members' inputs for one payload (none answered here), and where
  // each member gets the whole result, all but one copy of it (a part of
  // its own, or the root's alone, is received as it would be; answered
  // here, that one too).
  size_t sent_in = 0;
  for (const Member& m : members_) sent_in += m.input_bytes;
  const size_t sent_up = here_ ? 0 : input_->size();
  const size_t copies = rooted || own_parts ? 1 : members_.size();
  const size_t received_up = here_ ? 0 : 1;
  saved_ = (sent_in - sent_up) + (copies - received_up) * result_bytes;
}

void RelayCollective::DeliverLocked(int m,
                                    std::vector<ResultMessage> messages) {
  Member& member = members_[m];
  if (member.finished) return;
  // Sent from the back.
  std::reverse(messages.begin(), messages.end());
  member.to_send = std::move(messages);
  SendSomeLocked(m);
}

void RelayCollective::SendSomeLocked(int m) {
  Member& member = members_[m];
  while (!member.finished && !member.to_send.empty() &&
         member.unwritten < env_.window) {
    const size_t next = NextToSendLocked(member);
    if (next == member.to_send.size()) return;
    ResultMessage message = std::move(member.to_send[next]);
    member.to_send.erase(member.to_send.begin() + next);
    const bool last = member.to_send.empty();
    if (last) member.finished = true;
    ++member.unwritten;
    member.channel->Send(std::move(message), last);
  }
}

void RelayCollective::SendReadyLocked() {
  for (size_t i = 0; i < members_.size(); ++i) {
    SendSomeLocked(static_cast<int>(i));
  }
}

void RelayCollective::OnWriteDone(int rank) {
  {
    absl::MutexLock lock(&mu_);
    const int m = IndexOf(rank);
    if (m < 0) return;
    if (members_[m].unwritten > 0) --members_[m].unwritten;
    SendSomeLocked(m);
  }
  MaybeDone();
}

void RelayCollective::OnRankCancelled(int rank, const RankChannel* channel) {
  {
    absl::MutexLock lock(&mu_);
    const int m = IndexOf(rank);
    if (m < 0 || members_[m].channel.get() != channel || members_[m].finished) {
      return;
    }
    if (!started_ && !failed_) {
      // Nothing of it was used: its retry may attach again.
      Member fresh;
      fresh.rank = rank;
      members_[m] = std::move(fresh);
      --attached_;
      return;
    }
    if (!failed_ && (input_ != nullptr || split_) &&
        members_[m].received < members_[m].input_bytes) {
      // Its part will never be whole: the collective fails everywhere.
      FailLocked(absl::AbortedError(absl::StrCat(
          description_, ": rank ", rank,
          "'s call was cancelled (it timed out, gave up, or lost its "
          "connection) before the relay had its payload")));
    } else {
      members_[m].finished = true;  // it gets nothing more
    }
  }
  MaybeDone();
}

void RelayCollective::Fail(const absl::Status& status) {
  {
    absl::MutexLock lock(&mu_);
    FailLocked(status);
  }
  MaybeDone();
}

bool RelayCollective::FailUnlessStarted(const absl::Status& status) {
  {
    absl::MutexLock lock(&mu_);
    if (started_ || split_) return false;
    FailLocked(status);
  }
  MaybeDone();
  return true;
}

void RelayCollective::FailLocked(const absl::Status& status) {
  if (failed_) return;
  failed_ = true;
  failure_ = status;
  if (deadline_.has_value()) {
    env_.timers->Cancel(*deadline_);
    deadline_.reset();
  }
  if (input_ != nullptr) input_->Abandon(status);
  staging_.clear();
  reserved_.reset();
  for (Member& m : members_) {
    if (m.attached && !m.finished) m.channel->Fail(status);
    m.finished = true;
    m.to_send.clear();
    if (m.own_input != nullptr) m.own_input->Abandon(status);
    m.own_reserved.reset();
  }
}

void RelayCollective::MaybeDone() {
  uint64_t saved = 0;
  std::vector<int> absent;
  {
    absl::MutexLock lock(&mu_);
    if (done_reported_) return;
    for (const Member& m : members_) {
      if (!m.finished && (m.attached || !split_)) return;
    }
    done_reported_ = true;
    saved = saved_;
    for (const Member& m : members_) {
      if (!m.attached) absent.push_back(m.rank);
    }
    if (here_) {
      env_.metrics->RelayCallAnsweredHere(saved);
    } else if (started_ || split_) {
      env_.metrics->RelayCallEnded(static_cast<int>(members_.size()), saved);
    }
  }
  if (on_done_) on_done_(saved, absent);
}

}  // namespace reducer
