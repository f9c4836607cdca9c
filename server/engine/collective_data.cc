// Collective, the data flow: each rank's payload taken in order and handed
// to its kind's strategy, ready chunks reduced (inline when small, else on
// the reduction pool), results queued to each rank's channel, reading
// paused and resumed by the window (back-pressure), a rank finished once
// its payload is in and its result written, its reservation released once
// nothing of it is held, and its result collected for KeptResults where
// there is room (Resume sends it again to a replay).
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/engine/chunk_pacing.h"
#include "server/engine/collective.h"
#include "server/log.h"

namespace reducer {

bool Collective::OnData(int rank, uint64_t offset, Payload data) {
  std::vector<StagedChunk> ready;
  std::shared_ptr<KindStrategy> strategy;
  bool may_read;
  {
    absl::MutexLock lock(&mu_);
    const int index = IndexOf(rank);
    RankState& m = ranks_[index];
    if (done_) return false;
    if (m.resent_to_skip > 0) {
      // A retry's payload, whose bytes its first attempt gave already.
      m.resent_to_skip -= std::min<uint64_t>(m.resent_to_skip, data.size());
      return true;
    }
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
      const absl::Time now = Now();
      if (m.received == 0) {
        m.first_data_at = now;
        m.first_data_bytes = data.size();
      }
      m.last_data_at = now;
      m.received += data.size();
      strategy_->Accept(index, m, offset, std::move(data), all_headers_, *this,
                        &ready);
    }
    if (m.received == m.input_bytes && AllInputInLocked()) {
      // The last payload is in: ranks that had their whole result end.
      for (size_t i = 0; i < ranks_.size(); ++i) MaybeFinish(i);
    } else {
      MaybeFinish(index);
    }
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
    FailLocked(absl::Status(
        result.status().code(),
        absl::StrCat(description_, ": ", result.status().message())));
    return;
  }
  strategy_->Deliver(index, *std::move(result), *this);
  ResumeReaders();
}

void Collective::SendTo(int index, uint64_t offset,
                        std::vector<SharedBytes> data) {
  RankState& m = ranks_[index];
  if (m.left_out) return;               // a quorum step ended without it
  if (m.cut_off && !m.keeping) return;  // nobody to send it to
  ResultMessage message;
  message.offset = offset;
  if (!m.header_sent) {
    message.result_specs = !strategy_->GetsResult(index)   ? no_result_specs_
                           : m.own_result_specs != nullptr ? m.own_result_specs
                                                           : result_specs_;
  }
  m.header_sent = true;
  for (const SharedBytes& s : data) m.sent += s.size();
  message.data = std::move(data);
  // Counted in the budget until the channel wrote it, whatever the
  // Collective releases meanwhile.
  message.hold = m.held;
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
  // A rank is done once it has its whole result, has sent its whole
  // payload, and every other rank's payload is in: then the collective is
  // decided, and no rank's failure can fail it (FailUnlessDecided). A rank
  // may have its whole result sooner (a ReduceScatter slice, a Reduce's
  // non-root) while another's payload is still coming; its call ends OK
  // only once that is in, so that a rank lost before then fails every
  // rank's call, not only those still waiting (all or nothing). One that
  // finishes alone (a buffered send) needs no other rank.
  if (m.finished || !m.header_sent || m.sent != m.output_bytes ||
      m.received != m.input_bytes) {
    return false;
  }
  return m.finishes_alone || AllInputInLocked();
}

void Collective::MaybeFinish(int index) {
  RankState& m = ranks_[index];
  if (!IsComplete(m)) return;
  m.channel->FinishWhenSent();
  MarkFinished(index);
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
  FailLocked(absl::InvalidArgumentError(
      absl::StrCat(description_, ": rank ", rank, " closed its stream after ",
                   m.received, " of ", m.input_bytes, " payload bytes")));
}

void Collective::ReleaseIfDone(int index) {
  const RankState& m = ranks_[index];
  if (m.finished && m.reserved > 0 && !strategy_->HoldsBytesOf(index)) {
    ReleaseMemory(index);
  }
}

void Collective::ReleaseMemory(int index) {
  RankState& m = ranks_[index];
  // The bytes go back once the messages of its answer not yet written let
  // go of them too (ResultMessage::hold).
  m.held.reset();
  m.reserved = 0;
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

absl::Status Collective::Resume(int rank, const std::string& attempt_id,
                                const std::vector<TensorSpec>& declared,
                                std::shared_ptr<RankChannel> channel) {
  absl::MutexLock lock(&mu_);
  const int index = IndexOf(rank);
  const std::string what =
      absl::StrCat(description_, ": rank ", rank, "'s attempt ", attempt_id);
  if (index < 0 || done_ || !ranks_[index].attached ||
      ranks_[index].attempt_id != attempt_id || !ranks_[index].keeping ||
      ranks_[index].finished) {
    return absl::NotFoundError(
        absl::StrCat(what, " has no result being kept to resume"));
  }
  RankState& m = ranks_[index];
  if (declared != m.fp.tensors) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " is replayed declaring other tensors than it did (",
                     DescribeTensors(declared), "; it declared ",
                     DescribeTensors(m.fp.tensors), ")"));
  }
  TakeOverLocked(index, std::move(channel), what, "replay");
  return absl::OkStatus();
}

void Collective::TakeOverLocked(int index, std::shared_ptr<RankChannel> channel,
                                const std::string& what, const char* by) {
  RankState& m = ranks_[index];
  if (!m.cut_off) {
    // Its client gave that call up (its connection broke) before reducerd
    // saw it end: the new call takes its place.
    m.channel->Fail(absl::AbortedError(
        absl::StrCat(what, "'s call was replaced by its ", by)));
  }
  m.cut_off = false;
  m.channel = std::move(channel);
  m.pending_writes = 0;
  // Not the last message: a whole result was handed to KeptResults.
  for (const ResultMessage& sent : m.kept) {
    ++m.pending_writes;
    m.channel->Send(sent, /*last=*/false);
  }
  const int ranks[] = {group_[index]};
  env_.log->Log({LogSeverity::kInfo, "result_resumed",
                 absl::StrCat(what, " asked again for its result (", by,
                              "): ", m.kept.size(),
                              " messages sent again, the rest "
                              "follows as it is made"),
                 label_.job, label_.epoch, label_.name, ranks});
}

std::optional<double> Collective::InputPace() const {
  absl::MutexLock lock(&mu_);
  if (!AllInputInLocked()) return std::nullopt;
  std::optional<double> slowest;
  for (const RankState& m : ranks_) {
    // The first message's own transfer time is not seen: its bytes are
    // left out.
    const absl::Duration took = m.last_data_at - m.first_data_at;
    if (m.received < kMinPacedInputBytes || took <= absl::ZeroDuration())
      continue;
    const double pace = static_cast<double>(m.received - m.first_data_bytes) /
                        absl::ToDoubleSeconds(took);
    if (!slowest.has_value() || pace < *slowest) slowest = pace;
  }
  return slowest;
}

}  // namespace reducer
