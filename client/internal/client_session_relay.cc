// ClientSession's side for a relay (client_session.h: OpenForRanks' session
// of several ranks): the calls it forwards for them, and how it reports a
// rank lost or ends the epoch itself. The rest of ClientSession is in
// client_session.cc.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "client/internal/client_session.h"
#include "core/payload_layout.h"
#include "core/status_macros.h"
#include "proto/reducer/v1/wire_conversion.h"

namespace reducer {

absl::Status ClientSession::CheckForwarded(const v1::CollectiveHeader& header,
                                           size_t inputs) const {
  auto held = [this](int r) {
    return std::binary_search(ranks_.begin(), ranks_.end(), r);
  };
  if (!held(header.rank())) {
    return absl::InvalidArgumentError(
        absl::StrCat("a forwarded call of rank ", header.rank(),
                     ", which this session (ranks [",
                     absl::StrJoin(ranks_, ","), "]) does not hold"));
  }
  for (int r : header.ranks()) {
    if (!held(r)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "a forwarded call for ranks [", absl::StrJoin(header.ranks(), ","),
          "], of which this session (ranks [", absl::StrJoin(ranks_, ","),
          "]) does not hold ", r));
    }
  }
  if (inputs != 0 && inputs != static_cast<size_t>(header.tensors_size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a forwarded call of ", header.tensors_size(), " tensor(s) given ",
        inputs, " input(s); give one per tensor, or none"));
  }
  return absl::OkStatus();
}

absl::Status ClientSession::CheckResultInto(
    const v1::CollectiveHeader& header, const std::vector<TensorSpec>& tensors,
    const ResultInto& into) {
  const std::string why =
      header.kind() != v1::COLLECTIVE_KIND_ALL_REDUCE
          ? absl::StrCat(
                "only an all-reduce's result goes to memory given, "
                "and this is ",
                v1::CollectiveKind_Name(header.kind()))
          : WhyNotFor(into, tensors);
  if (why.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "a forwarded call of ", DescribeTensors(tensors),
      " was given memory for its result that does not fit: ", why));
}

std::unique_ptr<PendingCollective> ClientSession::StartForwarded(
    v1::CollectiveHeader header, std::vector<const void*> inputs,
    const InputGate* gate, absl::Time deadline,
    std::shared_ptr<const ResultInto> into) {
  std::unique_ptr<PendingCollective> pending(new PendingCollective(this));
  Contribution& contribution = pending->contribution_;
  // What Wait() names in a failure, also for a refused call.
  header.set_job(options_.job);
  header.set_session_id(session_id_);
  header.clear_replay();
  contribution.header = std::move(header);
  pending->invalid_ = SessionStatus();
  if (!pending->invalid_.ok()) return pending;
  pending->invalid_ = CheckForwarded(contribution.header, inputs.size());
  if (!pending->invalid_.ok()) return pending;
  std::vector<TensorSpec> tensors;
  tensors.reserve(contribution.header.tensors_size());
  for (int i = 0; i < contribution.header.tensors_size(); ++i) {
    absl::StatusOr<TensorSpec> spec = TensorSpecFromWire(
        contribution.header.tensors(i), /*with_op=*/false, "tensors", i);
    if (!spec.ok()) {
      pending->invalid_ = spec.status();
      return pending;
    }
    tensors.push_back(*std::move(spec));
  }
  absl::StatusOr<PayloadLayout> layout = ComputePayloadLayout(tensors);
  if (!layout.ok()) {
    pending->invalid_ = layout.status();
    return pending;
  }
  if (into != nullptr) {
    pending->invalid_ = CheckResultInto(contribution.header, tensors, *into);
    if (!pending->invalid_.ok()) return pending;
  }
  contribution.layout = *std::move(layout);
  contribution.result_into = std::move(into);
  contribution.send_payload = !inputs.empty();
  contribution.inputs = std::move(inputs);
  contribution.inputs_gate = gate;
  contribution.deadline = deadline;
  contribution.device = Device::Cpu();
  // The same-host path was opened for the session's own rank alone.
  contribution.same_host_path = contribution.header.rank() == options_.rank;
  {
    absl::MutexLock lock(&mu_);
    NumberAttempt(*pending);
  }
  // With several shards, each partition carries its own shard's epoch.
  contribution.header.set_epoch(links_[0]->epoch());
  // Sent without mu_ held: the caller orders its own calls, and a gated
  // input may keep this thread until its bytes are in.
  pending->attempt_ = SendAttempt(*pending);
  return pending;
}

absl::Status ClientSession::LeaveWithCause(std::string cause) {
  REDUCER_RETURN_IF_ERROR(SessionStatus());
  {
    absl::MutexLock lock(&failure_mu_);
    if (!first_failure_.ok()) return first_failure_;
    first_failure_ = absl::AbortedError(absl::StrCat(
        "job ", options_.job, ": the session of ranks [",
        absl::StrJoin(ranks_, ","), "] left, ending the epoch: ", cause));
  }
  left_.store(true, std::memory_order_release);
  for (const std::unique_ptr<ShardLink>& link : links_) link->Abandon(cause);
  // Each Leave has a deadline of its own (a second); this bounds the wait
  // should one never complete.
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  absl::Status outcome;
  for (size_t i = 0; i < links_.size(); ++i) {
    absl::Status left = links_[i]->AwaitAbandon(deadline);
    if (!left.ok() && outcome.ok()) outcome = NameShard(i, left);
  }
  return outcome;
}

absl::Status ClientSession::LoseRanks(const std::vector<int>& ranks,
                                      const std::string& cause) {
  // Not SessionStatus(): a shard whose session ended (another shard ended
  // the epoch on the report, and passed it on) has nothing to be told.
  absl::Status outcome;
  for (size_t i = 0; i < links_.size(); ++i) {
    absl::Status told = links_[i]->LoseRanks(ranks, cause);
    if (!told.ok() && outcome.ok()) outcome = NameShard(i, told);
  }
  return outcome;
}

}  // namespace reducer
