#include "client/internal/pending_collective.h"

#include <algorithm>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/internal/call_failure.h"
#include "client/internal/client_session.h"
#include "client/retry_sequence.h"
#include "proto/reducer/v1/wire_conversion.h"

namespace reducer {
namespace {

// The answer of a match: the message's source and count, from its one int64
// tensor [2]; INTERNAL when reducerd answered anything else.
absl::StatusOr<std::pair<int, uint64_t>> AnswerOf(
    const std::vector<Tensor>& answer, int world_size) {
  if (answer.size() == 1 && answer[0].dtype() == DataType::kInt64 &&
      answer[0].num_elements() == 2) {
    const int64_t source = answer[0].values<int64_t>()[0];
    const int64_t n = answer[0].values<int64_t>()[1];
    if (source >= 0 && source < world_size && n >= 0) {
      return std::make_pair(static_cast<int>(source), static_cast<uint64_t>(n));
    }
  }
  return absl::InternalError(
      "reducerd answered a match (ReceiveAny) without its message's source and "
      "count (one int64 tensor [2] naming a rank of the job)");
}

}  // namespace

PendingCollective::~PendingCollective() {
  attempt_.reset();  // before the contributions it may point into
  if (!settled_) session_->Settle(attempt_number_);
  if (matched_ != nullptr) {
    absl::MutexLock lock(&matched_->mu);
    if (!matched_->settled && invalid_.ok()) session_->AbandonMatch(*this);
  }
}

bool PendingCollective::Ready() {
  if (!invalid_.ok()) return true;
  if (matched_ == nullptr) return attempt_->Ready();
  // Wait() may be moving on from the match: its outcome is not known here.
  if (!matched_->mu.TryLock()) return false;
  bool ready = true;
  if (matched_->receive != nullptr) {
    ready = matched_->receive->Ready();
  } else if (!matched_->settled && !first_outcome_.has_value()) {
    ready = attempt_->Ready();
    if (ready) {
      // The answer is in: start the receive of its message now, so that
      // this says when the message itself is in.
      absl::StatusOr<std::vector<Tensor>> answer = attempt_->Wait();
      if (answer.ok()) {
        TakeAnswer(FinishOwn(std::move(answer)));
        if (matched_->receive != nullptr) ready = matched_->receive->Ready();
      } else {
        first_outcome_ = std::move(answer);  // Wait() may retry it
      }
    }
  }
  matched_->mu.Unlock();
  return ready;
}

int PendingCollective::matched_source() const {
  if (matched_ == nullptr || !matched_->any || matched_->source < 0) return -1;
  const std::vector<int>& group = matched_->group;
  if (group.empty()) return matched_->source;
  auto it = std::lower_bound(group.begin(), group.end(), matched_->source);
  return static_cast<int>(it - group.begin());
}

void PendingCollective::TakeAnswer(absl::StatusOr<std::vector<Tensor>> answer) {
  matched_->settled = true;
  absl::StatusOr<std::pair<int, uint64_t>> picked =
      answer.ok() ? AnswerOf(*answer, session_->options_.world_size)
                  : absl::StatusOr<std::pair<int, uint64_t>>(answer.status());
  if (!picked.ok()) {
    matched_->failure = picked.status();
    session_->AbandonMatch(*this);
    return;
  }
  matched_->source = picked->first;
  matched_->receive =
      session_->FollowMatch(*this, picked->first, picked->second);
}

absl::StatusOr<std::vector<Tensor>> PendingCollective::WaitMatched() {
  PendingCollective* receive = nullptr;
  {
    absl::MutexLock lock(&matched_->mu);
    if (!matched_->settled) TakeAnswer(WaitOwn());
    if (!matched_->failure.ok()) return matched_->failure;
    receive = matched_->receive.get();
  }
  return receive->Wait();
}

namespace {

// A failure whose message does not name the job (a transport error, such as
// gRPC's bare "Connection reset by peer", or a lost session) is prefixed
// with the collective and reducerd's address (unless the message names a
// shard's address already); reducerd's own messages name
// the job and the collective already and are returned as they are.
absl::Status NameWhereItFailed(const absl::Status& status,
                               const v1::CollectiveHeader& header,
                               const std::vector<std::string>& targets) {
  const absl::string_view message = status.message();
  if (absl::StrContains(message, absl::StrCat("job ", header.job()))) {
    return status;
  }
  absl::StatusOr<CollectiveKind> kind = CollectiveKindFromWire(header.kind());
  std::string prefix = DescribeCollective(
      header, kind.ok() ? std::optional(*kind) : std::nullopt);
  bool named = false;
  for (const std::string& target : targets) {
    named = named || absl::StrContains(message, target);
  }
  if (!named) {
    absl::StrAppend(&prefix, ": reducerd at ", absl::StrJoin(targets, ","));
  }
  return absl::Status(status.code(), absl::StrCat(prefix, ": ", message));
}

}  // namespace

absl::StatusOr<std::vector<Tensor>> PendingCollective::WaitRetrying() {
  absl::StatusOr<std::vector<Tensor>> result = first_outcome_.has_value()
                                                   ? *std::move(first_outcome_)
                                                   : attempt_->Wait();
  first_outcome_.reset();
  if (result.ok() || attempt_->retries_itself()) return result;
  RetrySequence retries(contribution_.deadline);
  while (!result.ok()) {
    const RetrySequence::Next next =
        retries.AfterFailure(result.status(), attempt_->received_any(),
                             session_->SessionStatus(), absl::Now());
    if (next == RetrySequence::Next::kStop) return retries.failure();
    absl::SleepFor(retries.next_at() - absl::Now());
    attempt_.reset();
    attempt_ = next == RetrySequence::Next::kReplay
                   ? session_->SendReplay(*this)
                   : session_->SendAttempt(*this);
    result = attempt_->Wait();
  }
  return result;
}

absl::StatusOr<std::vector<Tensor>> PendingCollective::Wait() {
  if (!invalid_.ok()) return invalid_;
  if (matched_ != nullptr) return WaitMatched();
  return WaitOwn();
}

absl::StatusOr<std::vector<Tensor>> PendingCollective::WaitOwn() {
  return FinishOwn(WaitRetrying());
}

absl::StatusOr<std::vector<Tensor>> PendingCollective::FinishOwn(
    absl::StatusOr<std::vector<Tensor>> result) {
  session_->Settle(attempt_number_);
  settled_ = true;
  if (!result.ok()) {
    // The session's explanation (a lost rank) first, then the call's own:
    // a call cut off by its session's end may fail in any way (with
    // several shards the others' sessions are let go, and a shard whose
    // every session left answers FAILED_PRECONDITION, "no open session").
    // A call's own invalid input stays its own.
    absl::Status why = session_->SessionStatus();
    if (!why.ok() &&
        result.status().code() != absl::StatusCode::kInvalidArgument) {
      return NameWhereItFailed(SessionFailureWithCall(why, result.status()),
                               contribution_.header, session_->targets_);
    }
    return NameWhereItFailed(result.status(), contribution_.header,
                             session_->targets_);
  }
  return result;
}

}  // namespace reducer
