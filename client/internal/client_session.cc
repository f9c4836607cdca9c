#include "client/internal/client_session.h"

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
#include "client/internal/call_failure.h"
#include "client/retry_sequence.h"
#include "client/security/channel_security.h"
#include "client/shards/shard_targets.h"
#include "core/payload_layout.h"
#include "core/point_to_point_name.h"
#include "core/process_memory.h"
#include "core/status_macros.h"
#include "proto/reducer/v1/status_conversion.h"
#include "proto/reducer/v1/wire_conversion.h"

namespace reducer {
namespace {

// Idle result buffers a client keeps for reuse (see core/buffer_cache.h):
// enough for the gradients of a mid-sized model step after step.
constexpr size_t kIdleBufferBytes = size_t{256} << 20;

// How often a join that may be given up looks whether it was.
constexpr absl::Duration kGiveUpCheck = absl::Milliseconds(200);

// What a shard still gathering the job said of it (JoinWaiting), for
// Connect's timeout: "; ranks joined: 0,2; not joined: 1,3", or with a
// note (a relay's, which sees only its host's ranks) "; ranks joined
// there: 0; <note>". Empty when it said nothing.
std::string WhoJoined(const v1::JoinWaiting& waiting, int world_size) {
  if (waiting.joined().empty()) return "";
  const std::string joined = absl::StrJoin(waiting.joined(), ",");
  if (!waiting.note().empty()) {
    return absl::StrCat("; ranks joined there: ", joined, "; ", waiting.note());
  }
  std::vector<int> missing;
  for (int r = 0; r < world_size; ++r) {
    if (std::find(waiting.joined().begin(), waiting.joined().end(), r) ==
        waiting.joined().end()) {
      missing.push_back(r);
    }
  }
  return absl::StrCat("; ranks joined: ", joined,
                      "; not joined: ", absl::StrJoin(missing, ","));
}

std::string RandomId() {
  absl::BitGen gen;
  return absl::StrFormat("%016x%016x", absl::Uniform<uint64_t>(gen),
                         absl::Uniform<uint64_t>(gen));
}

}  // namespace

ClientSession::ClientSession(ClientOptions options, std::vector<int> ranks,
                             std::vector<std::string> targets)
    : options_(std::move(options)),
      ranks_(std::move(ranks)),
      targets_(std::move(targets)),
      session_id_(RandomId()),
      buffers_(std::make_shared<BufferCache>(kIdleBufferBytes)) {}

absl::StatusOr<std::unique_ptr<ClientSession>> ClientSession::Open(
    const ClientOptions& options, std::unique_ptr<DeviceStaging> staging) {
  return OpenHolding(options, {options.rank}, std::move(staging),
                     /*given_up=*/nullptr);
}

absl::StatusOr<std::unique_ptr<ClientSession>> ClientSession::OpenForRanks(
    const ClientOptions& options, std::vector<int> ranks,
    std::unique_ptr<DeviceStaging> staging, std::function<bool()> given_up) {
  if (ranks.empty()) {
    return absl::InvalidArgumentError(
        "a session for several ranks needs at least one rank");
  }
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i] < 0 || ranks[i] >= options.world_size ||
        (i > 0 && ranks[i] <= ranks[i - 1])) {
      return absl::InvalidArgumentError(
          absl::StrCat("a session's ranks [", absl::StrJoin(ranks, ","),
                       "] must be sorted, distinct and within a world of ",
                       options.world_size));
    }
  }
  ClientOptions first = options;
  first.rank = ranks[0];
  return OpenHolding(first, std::move(ranks), std::move(staging), given_up);
}

absl::StatusOr<std::unique_ptr<ClientSession>> ClientSession::OpenHolding(
    const ClientOptions& options, std::vector<int> ranks,
    std::unique_ptr<DeviceStaging> staging,
    const std::function<bool()>& given_up) {
  if (options.job.empty()) {
    return absl::InvalidArgumentError("ClientOptions.job must not be empty");
  }
  if (options.world_size < 1 || options.rank < 0 ||
      options.rank >= options.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("ClientOptions: rank ", options.rank,
                     " is outside a world of ", options.world_size));
  }
  if (options.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("ClientOptions.timeout must be positive");
  }
  if (options.local_world_size < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ClientOptions.local_world_size must not be negative; got ",
        options.local_world_size));
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
      new ClientSession(options, std::move(ranks), std::move(targets)));
  ClientSession* raw = session.get();
  raw->driver_ = std::make_unique<CompletionDriver>();
  std::vector<ShardEndpoint*> endpoints;
  for (const std::string& target : raw->targets_) {
    raw->links_.push_back(std::make_unique<ShardLink>(
        raw->options_, target, raw->driver_.get(), raw->buffers_));
    raw->links_.back()->SetEndObserver([raw] {
      absl::MutexLock lock(&raw->end_mu_);
      raw->end_signaled_ = true;
    });
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
    absl::Status connected = raw->links_[i]->WaitForChannel(deadline, given_up);
    if (!connected.ok()) return raw->NameShard(i, connected);
  }
  REDUCER_RETURN_IF_ERROR(raw->JoinAll(deadline, given_up));
  return session;
  // On error, ~ClientSession cancels the Join streams.
}

absl::Status ClientSession::JoinAll(absl::Time deadline,
                                    const std::function<bool()>& given_up) {
  v1::JoinRequest request;
  request.set_job(options_.job);
  request.set_rank(options_.rank);
  request.set_world_size(options_.world_size);
  request.set_session_id(session_id_);
  request.set_local_world_size(options_.local_world_size);
  // A session of one rank says so by `rank` alone.
  if (ranks_.size() > 1) {
    for (int r : ranks_) request.add_ranks(r);
  }
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
  // In slices when it may be given up, looking at given_up between them.
  const absl::Duration slice =
      given_up ? kGiveUpCheck : absl::InfiniteDuration();
  while (
      !driver_->DriveUntil(settled, std::min(deadline, absl::Now() + slice)) &&
      absl::Now() < deadline) {
    if (given_up && given_up()) {
      return absl::CancelledError(
          absl::StrCat("gave up joining job ", options_.job,
                       " before every rank had joined"));
    }
  }
  std::vector<std::string> waiting;
  std::string joined;  // what the first shard still joining said
  for (size_t i = 0; i < links_.size(); ++i) {
    if (!links_[i]->JoinSettled()) {
      if (waiting.empty()) {
        joined = WhoJoined(links_[i]->LastWaiting(), options_.world_size);
      }
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
      ")", joined,
      "; check that every rank started with the same job name, world size "
      "and reducerd address"));
}

ClientSession::~ClientSession() {
  // OnEnd's thread first (no callback runs while the session closes),
  // then every shard sees this rank depart, then the calls' parts go, then
  // the links (their transports, then their Join streams), then the driver.
  {
    absl::MutexLock lock(&end_mu_);
    end_stopping_ = true;
  }
  if (end_watcher_.joinable()) end_watcher_.join();
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
  if (left_.load(std::memory_order_acquire)) {
    absl::MutexLock lock(&failure_mu_);
    return first_failure_;
  }
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
  absl::StatusOr<std::vector<int>> checked = CallGroup(spec, call, options_);
  if (checked.ok()) {
    pending->invalid_ = BuildContribution(spec, call, options_, session_id_,
                                          *checked, pending->contribution_);
  } else {
    pending->invalid_ = checked.status();
  }
  if (!pending->invalid_.ok()) return pending;
  const std::vector<int> group = *std::move(checked);
  const bool p2p = spec.kind == CollectiveKind::kSendReceive;
  const bool match = spec.kind == CollectiveKind::kMatch;
  v1::CollectiveHeader& header = pending->contribution_.header;
  // Taking the sequence number and sending happen under one lock, so that
  // collectives started concurrently on one group reach every stream in
  // the order of their sequence numbers.
  absl::MutexLock lock(&mu_);
  NumberAttempt(*pending);
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
  pending->attempt_ = SendAttempt(*pending);
  return pending;
}

void ClientSession::NumberAttempt(PendingCollective& pending) {
  v1::CollectiveHeader& header = pending.contribution_.header;
  pending.attempt_number_ = next_attempt_++;
  pending.settled_ = false;
  header.set_attempt_id(
      absl::StrCat(session_id_, "/", pending.attempt_number_));
  header.clear_received();
  absl::MutexLock ack_lock(&ack_mu_);
  unsettled_.insert(pending.attempt_number_);
  header.set_received_below(*unsettled_.begin());
  for (uint64_t n : settled_above_) header.add_received(n);
  settled_above_.clear();
}

void ClientSession::OnEnd(std::function<void(const absl::Status&)> callback) {
  absl::MutexLock lock(&end_mu_);
  end_callbacks_.push_back(std::move(callback));
  if (!end_watcher_.joinable()) {
    // The session may have ended before anyone watched.
    end_signaled_ = true;
    end_watcher_ = std::thread([this] { WatchEnd(); });
  }
}

void ClientSession::WatchEnd() {
  for (;;) {
    std::vector<std::function<void(const absl::Status&)>> due;
    {
      absl::MutexLock lock(&end_mu_);
      end_mu_.Await(absl::Condition(
          +[](ClientSession* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->end_mu_) {
            return s->end_stopping_ ||
                   (s->end_signaled_ && !s->end_callbacks_.empty());
          },
          this));
      if (end_stopping_) return;
      end_signaled_ = false;
      due.swap(end_callbacks_);
    }
    // A link signals after its status changed, under its own lock: the
    // status read here is at least that new.
    const absl::Status status = SessionStatus();
    if (status.ok()) {
      // Not ended (the first look, or a signal of an event that ends
      // nothing): wait for the next signal.
      absl::MutexLock lock(&end_mu_);
      due.insert(due.end(), std::make_move_iterator(end_callbacks_.begin()),
                 std::make_move_iterator(end_callbacks_.end()));
      end_callbacks_ = std::move(due);
      continue;
    }
    for (auto& callback : due) callback(status);
  }
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
  call.timeout =
      std::max(pending.contribution_.deadline - kDeadlineSlack - absl::Now(),
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

}  // namespace reducer
