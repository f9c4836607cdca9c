// RelayCollective's answer to a group whose every rank is a member
// (relay_collective.h, "Answered here"): the combined payload is the
// result, sent as it is combined, and nothing goes upstream. The rest of
// RelayCollective is in relay_collective.cc.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/relay/relay_collective.h"

namespace reducer {

bool RelayCollective::AnswersHereLocked() const {
  const Fingerprint& ref = members_[0].fp;
  if (members_.size() < 2 || ref.group.size() != members_.size()) {
    return false;
  }
  switch (ref.kind) {
    case CollectiveKind::kAllReduce:
    case CollectiveKind::kReduce:
    case CollectiveKind::kReduceScatter:
    case CollectiveKind::kAllGather:
    case CollectiveKind::kGather:
    case CollectiveKind::kBroadcast:
    case CollectiveKind::kScatter:
    case CollectiveKind::kAllToAll:
    case CollectiveKind::kBarrier:
      return true;
    default:  // decided upstream: quorum steps, Done, the rest per rank
      return false;
  }
}

void RelayCollective::AnswerHereLocked() {
  const Fingerprint& ref = members_[0].fp;
  // The result as upstream would answer the members' one call: the
  // reduction's tensors, the concatenation's (or the parts') one tensor of
  // every member's rows, the root's tensors, or none (a barrier). Its
  // bytes are the combined payload's, packed alike.
  UpstreamResult result;
  switch (combine_) {
    case Combine::kReduce:
      result.specs = ref.tensors;
      for (size_t offset : plan_->layout.offsets) {
        result.data.push_back(input_->data() + offset);
      }
      break;
    case Combine::kConcat:
    case Combine::kParts: {
      TensorSpec spec = ref.tensors[0];
      spec.shape[0] = 0;
      for (const Member& m : members_) {
        spec.shape[0] += m.fp.tensors[0].shape[0];
      }
      result.specs = {spec};
      result.data = {input_->data()};
      break;
    }
    case Combine::kRoot:
      for (const Member& m : members_) {
        if (m.rank == ref.root) result.specs = m.fp.tensors;
      }
      result.data = {input_->data()};
      break;
    default:
      break;
  }
  result.owner = input_;
  DeliverResultLocked(result);
}

bool RelayCollective::ReadyToSendLocked(const Member& m) const {
  const ResultMessage& next = m.to_send.back();
  if (m.to_send.size() == 1) return input_->ready() == input_->size();
  size_t end = m.answer_base + next.offset;
  for (const SharedBytes& piece : next.data) end += piece.size();
  return end <= input_->ready();
}

void RelayCollective::OnHereDeadline() {
  {
    absl::MutexLock lock(&mu_);
    deadline_.reset();
    if (failed_) return;
    // Those whose payload is missing; when none, those that have not
    // taken all of their result.
    std::vector<std::string> slow;
    for (const Member& m : members_) {
      if (m.received < m.input_bytes) {
        slow.push_back(absl::StrCat("rank ", m.rank, " sent ", m.received,
                                    " of ", m.input_bytes, " bytes"));
      }
    }
    const bool payload_missing = !slow.empty();
    for (const Member& m : members_) {
      if (!payload_missing && !m.finished) {
        slow.push_back(
            absl::StrCat("rank ", m.rank, " has not taken all of its result"));
      }
    }
    if (slow.empty()) return;
    FailLocked(absl::DeadlineExceededError(absl::StrCat(
        description_, " timed out after ", absl::FormatDuration(timeout_),
        ": every rank arrived but ", absl::StrJoin(slow, "; "))));
  }
  MaybeDone();
}

}  // namespace reducer
