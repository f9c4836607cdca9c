#include "client/client_session.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "absl/random/random.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "client/call_failure.h"
#include "client/retry_sequence.h"
#include "client/security/channel_security.h"
#include "client/shards/shard_targets.h"
#include "core/point_to_point_name.h"
#include "core/process_memory.h"
#include "core/status_macros.h"
#include "proto/reducer/v1/status_conversion.h"
#include "proto/reducer/v1/wire_conversion.h"

namespace reducer {
namespace {

// The server answers a stalled collective with DEADLINE_EXCEEDED naming the
// missing ranks at the collective's timeout; the client's own deadline
// comes this much later so that the server's message is the one seen.
constexpr absl::Duration kDeadlineSlack = absl::Seconds(5);

// Idle result buffers a client keeps for reuse (see core/buffer_cache.h):
// enough for the gradients of a mid-sized model step after step.
constexpr size_t kIdleBufferBytes = size_t{256} << 20;

std::string RandomId() {
  absl::BitGen gen;
  return absl::StrFormat("%016x%016x", absl::Uniform<uint64_t>(gen),
                         absl::Uniform<uint64_t>(gen));
}

// `requested` sorted, with "empty" spelled out as every rank (so that both
// spellings share one sequence of collectives). INVALID_ARGUMENT for a
// repeated rank, a rank outside the world, or a group without `rank`.
absl::StatusOr<std::vector<int>> NormalizeGroup(const std::vector<int>& requested,
                                                int rank, int world_size) {
  std::vector<int> group = requested;
  if (group.empty()) {
    for (int r = 0; r < world_size; ++r) group.push_back(r);
    return group;
  }
  std::sort(group.begin(), group.end());
  if (std::adjacent_find(group.begin(), group.end()) != group.end()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "CallOptions.group [", absl::StrJoin(requested, ","),
        "] names a rank twice"));
  }
  for (int r : group) {
    if (r < 0 || r >= world_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "CallOptions.group names rank ", r, ", outside the world of ",
          world_size, " (group [", absl::StrJoin(requested, ","), "])"));
    }
  }
  if (!std::binary_search(group.begin(), group.end(), rank)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "CallOptions.group [", absl::StrJoin(group, ","),
        "] does not contain this rank (", rank, ")"));
  }
  return group;
}

// A point-to-point call's own checks, before anything is sent: the other
// rank (`spec.peer`; the destination when spec.send_payload, else the
// source) is another rank of the world, the tag is not negative,
// and the call options leave matching and the group to the message.
// INVALID_ARGUMENT naming the value; `Send` or `Receive` by who calls.
absl::Status CheckPointToPointCall(const CollectiveRequestSpec& spec,
                                   const CallOptions& call,
                                   const ClientOptions& options) {
  const bool sends = spec.send_payload;
  const absl::string_view what = sends ? "Send" : "Receive";
  const absl::string_view peer = sends ? "destination" : "source";
  if (spec.peer == options.rank) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": ", peer, " ", spec.peer, " is this rank itself"));
  }
  if (spec.peer < 0 || spec.peer >= options.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", peer, " ", spec.peer,
                     " is outside the world of ", options.world_size));
  }
  if (spec.tag < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": tag ", spec.tag, " is negative"));
  }
  if (!call.name.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": CallOptions.name \"", call.name,
        "\" must be empty; point-to-point messages are matched by (source, "
        "destination, tag) in call order"));
  }
  if (!call.group.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": CallOptions.group [", absl::StrJoin(call.group, ","),
        "] must be empty; a point-to-point message's group is its source and "
        "destination"));
  }
  return absl::OkStatus();
}

// The group of a point-to-point message between `rank` and `peer` (checked
// distinct): both, sorted.
absl::StatusOr<std::vector<int>> PointToPointGroup(int rank, int peer) {
  return std::vector<int>{std::min(rank, peer), std::max(rank, peer)};
}

// A ReceiveAny's own checks, before anything is sent: a tag that is not
// negative, no CallOptions.name, and another rank to receive from in
// `group` (the call's, normalized). INVALID_ARGUMENT naming the value.
absl::Status CheckReceiveAnyCall(const CollectiveRequestSpec& spec,
                                 const CallOptions& call,
                                 const std::vector<int>& group) {
  if (spec.tag < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("ReceiveAny: tag ", spec.tag, " is negative"));
  }
  if (!call.name.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ReceiveAny: CallOptions.name \"", call.name,
        "\" must be empty; a message is matched by its destination and tag"));
  }
  if (group.size() < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ReceiveAny: the group [", absl::StrJoin(group, ","),
        "] has no other rank to receive from"));
  }
  return absl::OkStatus();
}

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

ClientSession::ClientSession(ClientOptions options,
                             std::vector<std::string> targets)
    : options_(std::move(options)),
      targets_(std::move(targets)),
      session_id_(RandomId()),
      buffers_(std::make_shared<BufferCache>(kIdleBufferBytes)) {}

absl::StatusOr<std::unique_ptr<ClientSession>> ClientSession::Open(
    const ClientOptions& options) {
  return Open(options, NewDeviceStaging(options.cuda_staging_bytes));
}

absl::StatusOr<std::unique_ptr<ClientSession>> ClientSession::Open(
    const ClientOptions& options, std::unique_ptr<DeviceStaging> staging) {
  if (options.job.empty()) {
    return absl::InvalidArgumentError("ClientOptions.job must not be empty");
  }
  if (options.world_size < 1 || options.rank < 0 ||
      options.rank >= options.world_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ClientOptions: rank ", options.rank, " is outside a world of ",
        options.world_size));
  }
  if (options.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("ClientOptions.timeout must be positive");
  }
  REDUCER_ASSIGN_OR_RETURN(std::vector<std::string> targets,
                           ExpandTargets(options.target));
  if (options.keep_freed_memory) KeepFreedMemory();
  if (!options.keep_lock_order_checks) {
    absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  }
  REDUCER_ASSIGN_OR_RETURN(ChannelSecurity security,
                           ChannelSecurity::Create(options));
  std::unique_ptr<ClientSession> session(
      new ClientSession(options, std::move(targets)));
  ClientSession* raw = session.get();
  raw->driver_ = std::make_unique<CompletionDriver>();
  std::vector<ShardEndpoint*> endpoints;
  for (const std::string& target : raw->targets_) {
    raw->links_.push_back(std::make_unique<ShardLink>(
        raw->options_, target, raw->driver_.get(), raw->buffers_));
    raw->links_.back()->Open(security);
    endpoints.push_back(raw->links_.back().get());
  }
  if (raw->links_.size() == 1) {
    raw->transport_ = raw->links_[0]->backend();
  } else {
    raw->sharded_ = std::make_unique<ShardedBackend>(
        std::move(endpoints), raw->driver_.get(),
        [raw] { return raw->SessionStatus(); }, raw->buffers_);
    raw->transport_ = raw->sharded_.get();
  }
  raw->device_staging_ = std::move(staging);
  raw->staging_backend_ = std::make_unique<StagingBackend>(
      raw->transport_, raw->device_staging_.get());

  // Wait for the connections within the timeout rather than failing at once
  // while reducerd is still starting.
  const absl::Time deadline = absl::Now() + options.timeout;
  for (size_t i = 0; i < raw->links_.size(); ++i) {
    absl::Status connected = raw->links_[i]->WaitForChannel(deadline);
    if (!connected.ok()) return raw->NameShard(i, connected);
  }
  REDUCER_RETURN_IF_ERROR(raw->JoinAll(deadline));
  return session;
  // On error, ~ClientSession cancels the Join streams.
}

absl::Status ClientSession::JoinAll(absl::Time deadline) {
  v1::JoinRequest request;
  request.set_job(options_.job);
  request.set_rank(options_.rank);
  request.set_world_size(options_.world_size);
  request.set_session_id(session_id_);
  // Every rank states the shards, so that each shard can check that all
  // ranks name the same ones in the same order.
  for (const std::string& target : targets_) request.add_shards(target);
  for (const std::unique_ptr<ShardLink>& link : links_) {
    REDUCER_RETURN_IF_ERROR(link->StartJoin(request));
  }
  // Until every shard is ready, or one refused.
  auto settled = [this] {
    bool all = true;
    for (const std::unique_ptr<ShardLink>& link : links_) {
      if (!link->JoinSettled()) {
        all = false;
      } else if (!link->JoinOutcome().ok()) {
        return true;
      }
    }
    return all;
  };
  driver_->DriveUntil(settled, deadline);
  std::vector<std::string> waiting;
  for (size_t i = 0; i < links_.size(); ++i) {
    if (!links_[i]->JoinSettled()) {
      waiting.push_back(targets_[i]);
      continue;
    }
    absl::Status outcome = links_[i]->JoinOutcome();
    if (!outcome.ok()) return NameShard(i, outcome);
  }
  if (waiting.empty()) {
    for (size_t i = 0; i < links_.size(); ++i) {
      absl::Status shared = links_[i]->StartSharedMemory(deadline);
      if (!shared.ok()) return NameShard(i, shared);
    }
    return absl::OkStatus();
  }
  std::string where;
  if (links_.size() > 1) {
    where = absl::StrCat(" on reducerd shard(s) ", absl::StrJoin(waiting, ","));
  }
  return absl::DeadlineExceededError(absl::StrCat(
      "Connect: job ", options_.job, " did not gather all ",
      options_.world_size, " ranks", where, " within ",
      absl::FormatDuration(options_.timeout), " (this is rank ", options_.rank,
      "); check that every rank started with the same job name, world size "
      "and reducerd address"));
}

ClientSession::~ClientSession() {
  // Every shard sees this rank depart, then the calls' parts go, then the
  // links (their transports, then their Join streams), then the driver.
  for (const std::unique_ptr<ShardLink>& link : links_) link->Close();
  staging_backend_.reset();
  sharded_.reset();
  links_.clear();
  driver_.reset();
}

absl::Status ClientSession::NameShard(size_t index,
                                      const absl::Status& status) const {
  if (links_.size() <= 1 || status.ok()) return status;
  return reducer::NameShard(status, index, links_.size(), targets_[index]);
}

absl::Status ClientSession::SessionStatus() {
  // One shard: its status as it is (the path every call takes, kept free
  // of locks and allocations beyond the link's own).
  if (links_.size() == 1) return links_[0]->SessionStatus();
  {
    absl::MutexLock lock(&failure_mu_);
    if (!first_failure_.ok()) return first_failure_;
  }
  // A shard whose session was lost (UNAVAILABLE) before one that ended the
  // job's epoch (ABORTED): a shard's loss makes the ranks that see it
  // abandon the other shards, whose epochs then end naming those ranks.
  size_t failed = links_.size();
  absl::Status failure;
  for (size_t i = 0; i < links_.size(); ++i) {
    absl::Status status = links_[i]->SessionStatus();
    if (status.ok()) continue;
    if (failed == links_.size() ||
        (absl::IsUnavailable(status) && !absl::IsUnavailable(failure))) {
      failed = i;
      failure = std::move(status);
    }
  }
  if (failed == links_.size()) return absl::OkStatus();
  absl::Status named = NameShard(failed, failure);
  {
    absl::MutexLock lock(&failure_mu_);
    if (!first_failure_.ok()) return first_failure_;
    first_failure_ = named;
  }
  for (size_t j = 0; j < links_.size(); ++j) {
    if (j != failed) links_[j]->Abandon(std::string(named.message()));
  }
  return named;
}

absl::StatusOr<std::vector<Tensor>> ClientSession::Run(
    const CollectiveRequestSpec& spec, const CallOptions& call) {
  return Start(spec, call)->Wait();
}

std::unique_ptr<PendingCollective> ClientSession::Start(
    const CollectiveRequestSpec& spec, const CallOptions& call) {
  return StartCounted(spec, call, std::nullopt);
}

std::unique_ptr<PendingCollective> ClientSession::StartCounted(
    const CollectiveRequestSpec& spec, const CallOptions& call,
    std::optional<uint64_t> message) {
  std::unique_ptr<PendingCollective> pending(new PendingCollective(this));
  pending->invalid_ = SessionStatus();
  if (!pending->invalid_.ok()) return pending;
  const bool p2p = spec.kind == CollectiveKind::kSendReceive;
  const bool match = spec.kind == CollectiveKind::kMatch;
  if (p2p) {
    pending->invalid_ = CheckPointToPointCall(spec, call, options_);
    if (!pending->invalid_.ok()) return pending;
  }
  absl::StatusOr<std::vector<int>> normalized =
      p2p ? PointToPointGroup(options_.rank, spec.peer)
          : NormalizeGroup(call.group, options_.rank, options_.world_size);
  if (!normalized.ok()) {
    pending->invalid_ = normalized.status();
    return pending;
  }
  const std::vector<int> group = *std::move(normalized);
  if (match) {
    pending->invalid_ = CheckReceiveAnyCall(spec, call, group);
    if (!pending->invalid_.ok()) return pending;
  }
  if (call.timeout < absl::ZeroDuration()) {
    pending->invalid_ =
        absl::InvalidArgumentError("CallOptions.timeout must not be negative");
    return pending;
  }
  const absl::Duration timeout =
      call.timeout == absl::ZeroDuration() ? options_.timeout : call.timeout;

  absl::StatusOr<PayloadLayout> layout = ComputePayloadLayout(spec.tensors);
  if (!layout.ok()) {
    pending->invalid_ = layout.status();
    return pending;
  }
  Contribution& contribution = pending->contribution_;
  contribution.layout = *std::move(layout);
  contribution.inputs = spec.inputs;
  contribution.send_payload = spec.send_payload;
  contribution.result_may_be_lent = spec.result_may_be_lent;
  contribution.device = spec.device;
  contribution.cuda_stream = call.cuda_stream;
  contribution.deadline = absl::Now() + timeout + kDeadlineSlack;
  v1::CollectiveHeader& header = contribution.header;
  header.set_job(options_.job);
  header.set_session_id(session_id_);
  header.set_rank(options_.rank);
  for (int r : group) header.add_group(r);
  header.set_kind(static_cast<v1::CollectiveKind>(CollectiveKindToWire(spec.kind)));
  header.mutable_tensors()->Reserve(static_cast<int>(spec.tensors.size()));
  for (const TensorSpec& t : spec.tensors) {
    *header.add_tensors() = TensorSpecToWire(t);
  }
  header.set_root(spec.root);
  header.set_timeout_ms(absl::ToInt64Milliseconds(timeout));
  // Taking the sequence number and sending happen under one lock, so that
  // collectives started concurrently on one group reach every stream in
  // the order of their sequence numbers.
  absl::MutexLock lock(&mu_);
  pending->attempt_number_ = next_attempt_++;
  pending->settled_ = false;
  header.set_attempt_id(absl::StrCat(session_id_, "/", pending->attempt_number_));
  {
    absl::MutexLock ack_lock(&ack_mu_);
    unsettled_.insert(pending->attempt_number_);
    header.set_received_below(*unsettled_.begin());
    for (uint64_t n : settled_above_) header.add_received(n);
    settled_above_.clear();
  }
  // With several shards, each partition carries its own shard's epoch.
  header.set_epoch(links_[0]->epoch());
  const bool receives = p2p && !spec.send_payload;
  if (match || (receives && !message.has_value() &&
                p2p_.MustMatch(header.epoch(), options_.rank, spec.tag))) {
    StartMatchLocked(*pending, spec, call, group);
  } else if (p2p) {
    const int destination = spec.send_payload ? spec.peer : options_.rank;
    header.set_name(
        message.has_value()
            ? PointToPointName(spec.root, destination, spec.tag, *message)
            : p2p_.NextMessage(header.epoch(), spec.root, destination,
                               spec.tag));
  } else if (call.name.empty()) {
    header.set_sequence(sequence_[absl::StrJoin(group, ",")]++);
  } else {
    header.set_name(call.name);
  }
  if (spec.kind == CollectiveKind::kQuorumBarrier) {
    header.set_sequence(spec.quorum_step);
    header.set_quorum_min_ranks(spec.quorum_min_ranks);
    header.set_quorum_grace_ms(absl::ToInt64Milliseconds(spec.quorum_grace));
  }
  for (int64_t rows : spec.send_rows) header.add_send_rows(rows);
  for (int64_t rows : spec.recv_rows) header.add_recv_rows(rows);
  pending->attempt_ = SendAttempt(*pending);
  return pending;
}

void ClientSession::StartMatchLocked(PendingCollective& pending,
                                     const CollectiveRequestSpec& spec,
                                     const CallOptions& call,
                                     const std::vector<int>& group) {
  const bool match = spec.kind == CollectiveKind::kMatch;
  Contribution& contribution = pending.contribution_;
  v1::CollectiveHeader& header = contribution.header;
  // reducerd picks the message: this call is a match from any rank of
  // its group (ReceiveAny; the whole job's when CallOptions.group is
  // empty, which the wire says with no sources), or from the receive's
  // source.
  std::vector<int> sources;
  if (match) {
    for (int r : group) {
      if (r != options_.rank) sources.push_back(r);
    }
  } else {
    sources.push_back(spec.root);
  }
  const PointToPointCounts::NewMatch m =
      p2p_.StartMatch(header.epoch(), options_.rank, spec.tag, sources);
  auto& matched = pending.matched_;
  matched = std::make_unique<PendingCollective::MatchedReceive>();
  matched->epoch = header.epoch();
  matched->tag = spec.tag;
  matched->declared = spec.tensors;
  matched->device = spec.device;
  matched->cuda_stream = call.cuda_stream;
  matched->any = match;
  if (match && !call.group.empty()) matched->group = group;
  header.set_kind(static_cast<v1::CollectiveKind>(
      CollectiveKindToWire(CollectiveKind::kMatch)));
  header.clear_group();
  header.add_group(options_.rank);
  header.clear_tensors();
  header.set_root(match ? -1 : spec.root);
  header.set_name(m.name);
  header.set_match_tag(spec.tag);
  if (match && !call.group.empty()) {
    for (int r : sources) header.add_match_sources(r);
  }
  for (const auto& [source, count] : m.received) {
    v1::ReceivedCount* c = header.add_match_received();
    c->set_source(source);
    c->set_count(count);
  }
  // The answer is a host tensor, whatever the message's device.
  contribution.layout = PayloadLayout();
  contribution.inputs.clear();
  contribution.send_payload = false;
  contribution.device = Device::Cpu();
  contribution.cuda_stream = nullptr;
}

std::unique_ptr<PendingCollective> ClientSession::FollowMatch(
    const PendingCollective& pending, int source, uint64_t n) {
  const PendingCollective::MatchedReceive& matched = *pending.matched_;
  {
    absl::MutexLock lock(&mu_);
    p2p_.Answered(matched.epoch, options_.rank, matched.tag, source, n);
  }
  CollectiveRequestSpec spec;
  spec.kind = CollectiveKind::kSendReceive;
  spec.root = source;
  spec.peer = source;
  spec.tag = matched.tag;
  spec.send_payload = false;
  spec.tensors = matched.declared;
  spec.device = matched.device;
  CallOptions call;
  call.cuda_stream = matched.cuda_stream;
  // What is left of the call's time, and at least a second for the
  // message's bytes (the answer may have come at the end of it).
  call.timeout = std::max(
      pending.contribution_.deadline - kDeadlineSlack - absl::Now(),
      absl::Seconds(1));
  return StartCounted(spec, call, n);
}

void ClientSession::AbandonMatch(const PendingCollective& pending) {
  absl::MutexLock lock(&mu_);
  p2p_.Abandoned(pending.matched_->epoch, options_.rank, pending.matched_->tag);
}

void ClientSession::CatchUpWholeSequence(uint64_t next) {
  std::vector<int> everyone(options_.world_size);
  for (int r = 0; r < options_.world_size; ++r) everyone[r] = r;
  absl::MutexLock lock(&mu_);
  uint64_t& count = sequence_[absl::StrJoin(everyone, ",")];
  count = std::max(count, next);
}

uint64_t ClientSession::FirstQuorumStep() const {
  return links_[0]->quorum_steps_started();
}

std::unique_ptr<CollectiveAttempt> ClientSession::SendAttempt(
    const PendingCollective& pending) {
  return staging_backend_->Start(pending.contribution_);
}

std::unique_ptr<CollectiveAttempt> ClientSession::SendReplay(
    PendingCollective& pending) {
  pending.replay_ = pending.contribution_.AsReplay();
  return staging_backend_->Start(pending.replay_);
}

void ClientSession::Settle(uint64_t attempt_number) {
  absl::MutexLock lock(&ack_mu_);
  unsettled_.erase(attempt_number);
  // Below the smallest unsettled number, received_below says it.
  if (!unsettled_.empty() && attempt_number > *unsettled_.begin()) {
    settled_above_.push_back(attempt_number);
  }
}

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
  matched_->receive = session_->FollowMatch(*this, picked->first, picked->second);
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
  absl::StatusOr<std::vector<Tensor>> result =
      first_outcome_.has_value() ? *std::move(first_outcome_) : attempt_->Wait();
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
    attempt_ = next == RetrySequence::Next::kReplay ? session_->SendReplay(*this)
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
    // The session's explanation (a lost rank) first, then the call's own.
    absl::Status why = session_->SessionStatus();
    if (!why.ok() && result.status().code() != absl::StatusCode::kFailedPrecondition &&
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
