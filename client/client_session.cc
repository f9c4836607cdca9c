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
#include "client/channel_security.h"
#include "client/tls_diagnosis.h"
#include "core/process_memory.h"
#include "proto/reducer/v1/status_conversion.h"
#include "proto/reducer/v1/wire_conversion.h"

namespace reducer {
namespace {

// Payload bytes per message when reducerd does not say (JobReady carries
// its --chunk_bytes, which the session uses instead).
constexpr size_t kDefaultChunkBytes = 1 << 20;

// The server answers a stalled collective with DEADLINE_EXCEEDED naming the
// missing ranks at the collective's timeout; the client's own deadline
// comes this much later so that the server's message is the one seen.
constexpr absl::Duration kDeadlineSlack = absl::Seconds(5);

// Idle result buffers a client keeps for reuse (see core/buffer_cache.h):
// enough for the gradients of a mid-sized model step after step.
constexpr size_t kIdleBufferBytes = size_t{256} << 20;

// How long a collective keeps retrying after the transport failed before
// any answer (while the session is intact), and the pauses between tries
// (doubling up to the last). Longer than the channel's longest reconnect
// backoff, so that a dropped data connection that comes back is found again.
constexpr absl::Duration kRetryBudget = absl::Seconds(3);
constexpr absl::Duration kFirstRetryPause = absl::Milliseconds(100);
constexpr absl::Duration kLastRetryPause = absl::Milliseconds(800);
// Reconnect backoff of the channels: gRPC's default starts at 1 s and grows
// to 2 min, which would fail every collective of that time fast.
constexpr int kMinReconnectBackoffMs = 100;
constexpr int kMaxReconnectBackoffMs = 1000;

// While Connect waits for the channel, a failed connection is diagnosed
// (client/tls_diagnosis.h) at most this often, each probe bounded by
// kProbeTimeout: a TLS mismatch fails Connect in about a second instead of
// after the whole timeout.
constexpr absl::Duration kProbeEvery = absl::Seconds(1);
constexpr absl::Duration kProbeTimeout = absl::Seconds(1);

constexpr char kJoinMethod[] = "/reducer.v1.Reducer/Join";

// How long closing a client waits for reducerd to note the departure.
constexpr absl::Duration kLeaveTimeout = absl::Seconds(1);

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

grpc::ChannelArguments ChannelArgs() {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  // BDP probing cost 12 % time and 30 % CPU at 64 MiB, measured with bench/run.sh.
  args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  // Pings find a reducerd that vanished without closing the connection.
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 1000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 2000);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, kMinReconnectBackoffMs);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, kMinReconnectBackoffMs);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, kMaxReconnectBackoffMs);
  return args;
}

}  // namespace

ClientSession::ClientSession(ClientOptions options)
    : options_(std::move(options)),
      session_id_(RandomId()),
      buffers_(std::make_shared<BufferCache>(kIdleBufferBytes)),
      chunk_bytes_(kDefaultChunkBytes) {}

absl::StatusOr<std::unique_ptr<ClientSession>> ClientSession::Open(
    const ClientOptions& options) {
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
  if (options.keep_freed_memory) KeepFreedMemory();
  absl::StatusOr<ChannelSecurity> security = ChannelSecurity::Create(options);
  if (!security.ok()) return security.status();
  std::unique_ptr<ClientSession> session(new ClientSession(options));
  session->driver_ = std::make_unique<CompletionDriver>();
  session->channel_ = security->NewChannel(options.target, ChannelArgs());
  session->stub_ = v1::Reducer::NewStub(session->channel_);
  session->session_stub_ = std::make_unique<grpc::GenericStub>(session->channel_);
  session->join_ = std::make_unique<AsyncStream>(
      session->driver_.get(), &session->mu_,
      static_cast<AsyncStream::Observer*>(session.get()));
  // Collectives get their own connection, so bulk transfers never queue
  // behind (or starve) the session's keepalive traffic.
  grpc::ChannelArguments data_args = ChannelArgs();
  data_args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  session->data_channel_ = security->NewChannel(options.target, data_args);
  session->data_stub_ = std::make_unique<grpc::GenericStub>(session->data_channel_);
  session->small_calls_ = std::make_unique<SmallCallStream>(
      session->data_stub_.get(), session->driver_.get(), session->buffers_);
  session->per_call_ = std::make_unique<PerCallBackend>(
      session->data_stub_.get(), session->driver_.get(), &session->chunk_bytes_,
      session->buffers_);
  session->router_ = std::make_unique<CollectiveRouter>(
      session->small_calls_.get(), session->per_call_.get(),
      &session->chunk_bytes_, CollectiveRouter::TransportFromEnvironment());
  session->device_staging_ = NewDeviceStaging(options.cuda_staging_bytes);
  session->staging_backend_ = std::make_unique<StagingBackend>(
      session->router_.get(), session->device_staging_.get());

  // Wait for the connection within the timeout rather than failing at once
  // while reducerd is still starting.
  const absl::Time deadline = absl::Now() + options.timeout;
  absl::Status connected = session->WaitForChannel(deadline);
  if (!connected.ok()) return connected;
  if (session->channel_->GetState(false) != GRPC_CHANNEL_READY) {
    return absl::UnavailableError(absl::StrCat(
        "cannot reach reducerd at ", options.target, " within ",
        absl::FormatDuration(options.timeout),
        " (is it running, and is the address right?)"));
  }
  v1::JoinRequest request;
  request.set_job(options.job);
  request.set_rank(options.rank);
  request.set_world_size(options.world_size);
  request.set_session_id(session->session_id_);
  grpc::ByteBuffer request_message;
  bool own_buffer = false;
  grpc::Status serialized = grpc::SerializationTraits<v1::JoinRequest>::Serialize(
      request, &request_message, &own_buffer);
  if (!serialized.ok()) return FromGrpcStatus(serialized);
  ClientSession* raw = session.get();
  {
    absl::MutexLock lock(&raw->mu_);
    // Join is server-streaming: the one request, then the half-close.
    raw->join_->Start(raw->session_stub_.get(), kJoinMethod);
    raw->join_->Write(0, std::move(request_message), /*last=*/true);
  }
  raw->driver_->DriveUntil(
      [raw] {
        absl::MutexLock lock(&raw->mu_);
        return raw->ready_ || raw->ended_;
      },
      deadline);
  absl::MutexLock lock(&raw->mu_);
  if (raw->ready_) return session;
  if (raw->ended_) {
    absl::Status status = raw->end_status_;
    return status.ok() ? absl::UnavailableError("reducerd closed the session")
                       : status;
  }
  return absl::DeadlineExceededError(absl::StrCat(
      "Connect: job ", options.job, " did not gather all ",
      options.world_size, " ranks within ",
      absl::FormatDuration(options.timeout), " (this is rank ", options.rank,
      "); check that every rank started with the same job name, world size "
      "and reducerd address"));
  // ~ClientSession cancels the Join stream.
}

absl::Status ClientSession::WaitForChannel(absl::Time deadline) {
  absl::Time next_probe = absl::InfinitePast();
  for (;;) {
    const grpc_connectivity_state state = channel_->GetState(true);
    if (state == GRPC_CHANNEL_READY) return absl::OkStatus();
    const absl::Time now = absl::Now();
    if (now >= deadline) return absl::OkStatus();
    if (state == GRPC_CHANNEL_TRANSIENT_FAILURE && now >= next_probe) {
      absl::Status diagnosis =
          DiagnoseTls(options_.target, options_.tls,
                      std::min(kProbeTimeout, deadline - now));
      if (!diagnosis.ok()) return diagnosis;
      next_probe = absl::Now() + kProbeEvery;
    }
    channel_->WaitForStateChange(
        state, absl::ToChronoTime(std::min(deadline, absl::Now() + kProbeEvery)));
  }
}

ClientSession::~ClientSession() {
  bool leave;
  {
    absl::MutexLock lock(&mu_);
    closing_ = true;
    leave = ready_ && !ended_;
  }
  if (leave) {
    // Best effort: without it the server treats this rank as lost.
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + kLeaveTimeout));
    v1::LeaveRequest request;
    request.set_job(options_.job);
    request.set_session_id(session_id_);
    v1::LeaveResponse response;
    stub_->Leave(&context, request, &response);
  }
  // Calls first (they drive the queue until gRPC handed them back), then
  // the Join stream, then the driver.
  staging_backend_.reset();
  router_.reset();
  per_call_.reset();
  small_calls_.reset();
  bool joined = false;
  if (join_ != nullptr) {
    absl::MutexLock lock(&mu_);
    joined = join_->started();
    if (joined) join_->Cancel();
  }
  if (joined) {
    driver_->DriveUntil(
        [this] {
          absl::MutexLock lock(&mu_);
          return join_->done();
        },
        absl::InfiniteFuture());
  }
  join_.reset();
  driver_.reset();
}

void ClientSession::OnRead(grpc::ByteBuffer* message) {
  mu_.AssertHeld();
  if (!grpc::SerializationTraits<v1::JoinEvent>::Deserialize(message,
                                                               &join_event_)
           .ok()) {
    // A session event that does not parse ends the session.
    join_->Cancel();
    return;
  }
  if (join_event_.has_ready()) {
    ready_ = true;
    epoch_ = join_event_.ready().epoch();
    const uint64_t chunk = join_event_.ready().chunk_bytes();
    chunk_bytes_.store(chunk > 0 ? chunk : kDefaultChunkBytes,
                       std::memory_order_relaxed);
  } else if (join_event_.has_aborted()) {
    aborted_ = absl::AbortedError(join_event_.aborted().reason());
  }
}

void ClientSession::OnFinished(const grpc::Status& status) {
  mu_.AssertHeld();
  ended_ = true;
  if (status.ok()) {
    end_status_ = absl::UnavailableError(absl::StrCat(
        "reducerd at ", options_.target, " closed the session"));
  } else if (status.error_code() == grpc::StatusCode::UNAVAILABLE ||
             status.error_code() == grpc::StatusCode::CANCELLED) {
    end_status_ = absl::UnavailableError(absl::StrCat(
        "lost the session with reducerd at ", options_.target, ": ",
        status.error_message(), "; Connect again"));
  } else {
    end_status_ = FromGrpcStatus(status);
  }
}

absl::Status ClientSession::SessionStatus() {
  absl::MutexLock lock(&mu_);
  if (!aborted_.ok()) return aborted_;
  if (ended_) return end_status_;
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Tensor>> ClientSession::Run(
    const CollectiveRequestSpec& spec, const CallOptions& call) {
  return Start(spec, call)->Wait();
}

std::unique_ptr<PendingCollective> ClientSession::Start(
    const CollectiveRequestSpec& spec, const CallOptions& call) {
  std::unique_ptr<PendingCollective> pending(new PendingCollective(this));
  pending->invalid_ = SessionStatus();
  if (!pending->invalid_.ok()) return pending;
  absl::StatusOr<std::vector<int>> normalized =
      NormalizeGroup(call.group, options_.rank, options_.world_size);
  if (!normalized.ok()) {
    pending->invalid_ = normalized.status();
    return pending;
  }
  const std::vector<int> group = *std::move(normalized);
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
  header.set_attempt_id(absl::StrCat(session_id_, "/", next_attempt_.fetch_add(1)));
  // Taking the sequence number and sending happen under one lock, so that
  // collectives started concurrently on one group reach every stream in
  // the order of their sequence numbers.
  absl::MutexLock lock(&mu_);
  header.set_epoch(epoch_);
  if (call.name.empty()) {
    header.set_sequence(sequence_[absl::StrJoin(group, ",")]++);
  } else {
    header.set_name(call.name);
  }
  pending->attempt_ = SendAttempt(*pending);
  return pending;
}

std::unique_ptr<CollectiveAttempt> ClientSession::SendAttempt(
    const PendingCollective& pending) {
  return staging_backend_->Start(pending.contribution_);
}

bool PendingCollective::Ready() {
  return !invalid_.ok() || attempt_->Ready();
}

namespace {

// A failure whose message does not name the job (a transport error, such as
// gRPC's bare "Connection reset by peer", or a lost session) is prefixed
// with the collective and reducerd's address; reducerd's own messages name
// the job and the collective already and are returned as they are.
absl::Status NameWhereItFailed(const absl::Status& status,
                               const v1::CollectiveHeader& header,
                               const std::string& target) {
  const absl::string_view message = status.message();
  if (absl::StrContains(message, absl::StrCat("job ", header.job()))) {
    return status;
  }
  absl::StatusOr<CollectiveKind> kind = CollectiveKindFromWire(header.kind());
  std::string prefix = DescribeCollective(
      header, kind.ok() ? std::optional(*kind) : std::nullopt);
  if (!absl::StrContains(message, target)) {
    absl::StrAppend(&prefix, ": reducerd at ", target);
  }
  return absl::Status(status.code(), absl::StrCat(prefix, ": ", message));
}

}  // namespace

absl::StatusOr<std::vector<Tensor>> PendingCollective::Wait() {
  if (!invalid_.ok()) return invalid_;
  absl::StatusOr<std::vector<Tensor>> result;
  absl::Time give_up = absl::InfiniteFuture();  // set at the first failure
  absl::Duration pause = kFirstRetryPause;
  for (;;) {
    result = attempt_->Wait();
    if (result.ok() || result.status().code() != absl::StatusCode::kUnavailable ||
        attempt_->received_any() || !session_->SessionStatus().ok()) {
      break;
    }
    if (give_up == absl::InfiniteFuture()) {
      give_up = std::min(absl::Now() + kRetryBudget, contribution_.deadline);
    }
    if (absl::Now() + pause >= give_up) break;
    absl::SleepFor(pause);
    pause = std::min(pause * 2, kLastRetryPause);
    attempt_ = session_->SendAttempt(*this);
  }
  if (!result.ok()) {
    // Prefer the session's explanation (a lost rank) to the call's.
    absl::Status why = session_->SessionStatus();
    if (!why.ok() && result.status().code() != absl::StatusCode::kFailedPrecondition &&
        result.status().code() != absl::StatusCode::kInvalidArgument) {
      return NameWhereItFailed(why, contribution_.header,
                               session_->options().target);
    }
    return NameWhereItFailed(result.status(), contribution_.header,
                             session_->options().target);
  }
  return result;
}

}  // namespace reducer
