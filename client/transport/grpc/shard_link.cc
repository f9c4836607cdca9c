#include "client/transport/grpc/shard_link.h"

#include <algorithm>
#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/security/tls_diagnosis.h"
#include "client/transport/shm/handshake.h"
#include "core/status_macros.h"
#include "proto/reducer/v1/status_conversion.h"

namespace reducer {
namespace {

// Payload bytes per message when reducerd does not say (JobReady carries
// its --chunk_bytes, which the link uses instead).
constexpr size_t kDefaultChunkBytes = 1 << 20;

// Reconnect backoff of the channels: gRPC's default starts at 1 s and grows
// to 2 min, which would fail every collective of that time fast.
constexpr int kMinReconnectBackoffMs = 100;
constexpr int kMaxReconnectBackoffMs = 1000;

// While Connect waits for the channel, a failed connection is diagnosed
// (client/security/tls_diagnosis.h) at most this often, each probe bounded by
// kProbeTimeout: a TLS mismatch fails Connect in about a second instead of
// after the whole timeout.
constexpr absl::Duration kProbeEvery = absl::Seconds(1);
constexpr absl::Duration kProbeTimeout = absl::Seconds(1);
// WaitForChannel says on stderr that it is still waiting after this long
// (or half its wait, if less).
constexpr absl::Duration kSayWaitingAfter = absl::Seconds(10);
// What to check when reducerd does not answer (the wait's line, its error).
constexpr char kCheckTarget[] = "(is it running, and is the address right?)";

constexpr char kJoinMethod[] = "/reducer.v1.Reducer/Join";

// How long closing a client waits for reducerd to note the departure.
constexpr absl::Duration kLeaveTimeout = absl::Seconds(1);

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

ShardLink::ShardLink(const ClientOptions& options, std::string target,
                     CompletionDriver* driver,
                     std::shared_ptr<BufferCache> buffers)
    : options_(options),
      target_(std::move(target)),
      driver_(driver),
      buffers_(std::move(buffers)),
      chunk_bytes_(kDefaultChunkBytes) {}

void ShardLink::Open(const ChannelSecurity& security) {
  channel_ = security.NewChannel(target_, ChannelArgs());
  stub_ = v1::Reducer::NewStub(channel_);
  session_stub_ = std::make_unique<grpc::GenericStub>(channel_);
  join_ = std::make_unique<AsyncStream>(driver_, &mu_,
                                        static_cast<AsyncStream::Observer*>(this));
  // Collectives get their own connection, so bulk transfers never queue
  // behind (or starve) the session's keepalive traffic.
  grpc::ChannelArguments data_args = ChannelArgs();
  data_args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  data_channel_ = security.NewChannel(target_, data_args);
  data_stub_ = std::make_unique<grpc::GenericStub>(data_channel_);
  small_calls_ =
      std::make_unique<CollectivesRpc>(data_stub_.get(), driver_, buffers_);
  per_call_ = std::make_unique<PerCallBackend>(data_stub_.get(), driver_,
                                               &chunk_bytes_, buffers_);
  router_ = std::make_unique<CollectiveRouter>(
      small_calls_.get(), per_call_.get(), &chunk_bytes_,
      CollectiveRouter::TransportFromEnvironment());
}

void ShardLink::SetEndObserver(std::function<void()> observer) {
  end_observer_ = std::move(observer);
}

absl::Status ShardLink::WaitForChannel(absl::Time deadline,
                                       const std::function<bool()>& given_up) {
  absl::Time next_probe = absl::InfinitePast();
  const absl::Time started = absl::Now();
  const absl::Time say_at =
      started + std::min(kSayWaitingAfter, (deadline - started) / 2);
  bool said = false;
  for (;;) {
    const grpc_connectivity_state state = channel_->GetState(true);
    if (state == GRPC_CHANNEL_READY) return absl::OkStatus();
    if (given_up && given_up()) {
      return absl::CancelledError(absl::StrCat("gave up reaching reducerd at ",
                                               target_, " before it answered"));
    }
    const absl::Time now = absl::Now();
    if (now >= deadline) break;
    if (!said && now >= say_at) {
      said = true;
      const absl::Duration second = absl::Seconds(1);
      const std::string line = absl::StrCat(
          "reducer: rank ", options_.rank, " of job ", options_.job,
          " has waited ",
          absl::FormatDuration(absl::Trunc(now - started, second)), " of ",
          absl::FormatDuration(absl::Ceil(deadline - started, second)),
          " for reducerd at ", target_, " ", kCheckTarget, "\n");
      std::fputs(line.c_str(), stderr);
    }
    if (state == GRPC_CHANNEL_TRANSIENT_FAILURE && now >= next_probe) {
      REDUCER_RETURN_IF_ERROR(DiagnoseTls(
          target_, options_.tls, std::min(kProbeTimeout, deadline - now)));
      next_probe = absl::Now() + kProbeEvery;
    }
    channel_->WaitForStateChange(
        state, absl::ToChronoTime(std::min(deadline, absl::Now() + kProbeEvery)));
  }
  return absl::UnavailableError(
      absl::StrCat("cannot reach reducerd at ", target_, " within ",
                   absl::FormatDuration(options_.timeout), " ", kCheckTarget));
}

absl::Status ShardLink::StartJoin(const v1::JoinRequest& request) {
  grpc::ByteBuffer message;
  bool own_buffer = false;
  grpc::Status serialized = grpc::SerializationTraits<v1::JoinRequest>::Serialize(
      request, &message, &own_buffer);
  if (!serialized.ok()) return FromGrpcStatus(serialized);
  absl::MutexLock lock(&mu_);
  session_id_ = request.session_id();
  // Join is server-streaming: the one request, then the half-close.
  join_->Start(session_stub_.get(), kJoinMethod);
  join_->Write(0, std::move(message), /*last=*/true);
  return absl::OkStatus();
}

absl::Status ShardLink::StartSharedMemory(absl::Time deadline) {
  const SharedMemory mode = SharedMemoryFromEnvironment(options_.shared_memory);
  if (mode == SharedMemory::kOff) return absl::OkStatus();
  v1::SharedMemoryHello hello;
  std::string socket;
  {
    absl::MutexLock lock(&mu_);
    socket = shared_memory_socket_;
    hello.set_session_id(session_id_);
  }
  hello.set_job(options_.job);
  hello.set_rank(options_.rank);
  hello.set_token(options_.token);
  absl::StatusOr<SharedMemoryChannel> channel =
      socket.empty()
          ? absl::UnavailableError(
                "it does not offer it (started with --shared_memory=false)")
          : ShakeHands(socket, std::move(hello), options_.shared_memory_bytes,
                       deadline);
  if (!channel.ok()) {
    if (mode == SharedMemory::kAuto) return absl::OkStatus();
    return absl::FailedPreconditionError(absl::StrCat(
        "ClientOptions::shared_memory is kRequired, but the same-host path to "
        "reducerd at ", target_, " cannot be used: ",
        channel.status().message()));
  }
  shared_memory_ = std::make_unique<SharedMemoryBackend>(
      *std::move(channel), target_, buffers_,
      [driver = driver_] { driver->Wake(); });
  router_->UseSharedMemory(shared_memory_.get());
  return absl::OkStatus();
}

bool ShardLink::JoinSettled() {
  absl::MutexLock lock(&mu_);
  return ready_ || ended_;
}

absl::Status ShardLink::JoinOutcome() {
  absl::MutexLock lock(&mu_);
  if (ready_) return absl::OkStatus();
  if (ended_) {
    return end_status_.ok()
               ? absl::UnavailableError(absl::StrCat(
                     "reducerd at ", target_, " closed the session"))
               : end_status_;
  }
  return absl::DeadlineExceededError(
      absl::StrCat("reducerd at ", target_, " has not answered Join"));
}

absl::Status ShardLink::SessionStatus() {
  absl::MutexLock lock(&mu_);
  if (!aborted_.ok()) return aborted_;
  if (ended_) return end_status_;
  return absl::OkStatus();
}

uint64_t ShardLink::quorum_steps_started() {
  absl::MutexLock lock(&mu_);
  return quorum_steps_started_;
}

uint64_t ShardLink::epoch() {
  absl::MutexLock lock(&mu_);
  return epoch_;
}

void ShardLink::Close() {
  bool leave;
  std::string session_id;
  {
    absl::MutexLock lock(&mu_);
    leave = ready_ && !ended_ && !closed_;
    closed_ = true;
    session_id = session_id_;
  }
  if (leave) {
    // Best effort: without it the shard treats this rank as lost.
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + kLeaveTimeout));
    v1::LeaveRequest request;
    request.set_job(options_.job);
    request.set_session_id(session_id);
    v1::LeaveResponse response;
    stub_->Leave(&context, request, &response);
  }
  absl::MutexLock lock(&mu_);
  CancelJoinLocked();
}

absl::Status ShardLink::LoseRanks(const std::vector<int>& ranks,
                                  const std::string& cause) {
  std::string session_id;
  {
    absl::MutexLock lock(&mu_);
    if (ready_ && (ended_ || !aborted_.ok())) {
      // The epoch ended there already: that shard waits for nobody.
      return absl::OkStatus();
    }
    if (!ready_ || closed_) {
      return absl::FailedPreconditionError(
          absl::StrCat("no running session with reducerd at ", target_,
                       " to report ranks lost on"));
    }
    session_id = session_id_;
  }
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + kLeaveTimeout));
  v1::LeaveRequest request;
  request.set_job(options_.job);
  request.set_session_id(session_id);
  request.set_cause(cause);
  for (int rank : ranks) request.add_ranks(rank);
  v1::LeaveResponse response;
  return FromGrpcStatus(stub_->Leave(&context, request, &response));
}

void ShardLink::Abandon(const std::string& cause) {
  {
    absl::MutexLock lock(&mu_);
    if (closed_ || join_ == nullptr || !join_->started() || join_->done()) {
      return;
    }
    closed_ = true;
    if (!ready_ || !aborted_.ok()) {
      // No running epoch here to end with the cause.
      CancelJoinLocked();
      return;
    }
    abandoning_ = true;
    abandon_ = std::make_unique<AbandonCall>(this);
    abandon_->request.set_job(options_.job);
    abandon_->request.set_session_id(session_id_);
    abandon_->request.set_cause(cause);
  }
  abandon_->context.set_deadline(
      absl::ToChronoTime(absl::Now() + kLeaveTimeout));
  abandon_->reader = stub_->AsyncLeave(&abandon_->context, abandon_->request,
                                       driver_->cq());
  abandon_->reader->Finish(&abandon_->response, &abandon_->status,
                           abandon_.get());
}

void ShardLink::AbandonCall::OnComplete(bool /*ok*/) {
  // Whether or not the shard took the Leave, the session ends here.
  absl::MutexLock lock(&link_->mu_);
  link_->CancelJoinLocked();
  link_->abandoning_ = false;
  link_->abandon_outcome_ = FromGrpcStatus(status);
}

absl::Status ShardLink::AwaitAbandon(absl::Time deadline) {
  {
    absl::MutexLock lock(&mu_);
    if (abandon_ == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat(
          "no running session with reducerd at ", target_, " to leave"));
    }
  }
  const bool done = driver_->DriveUntil(
      [this] {
        absl::MutexLock lock(&mu_);
        return !abandoning_;
      },
      deadline);
  absl::MutexLock lock(&mu_);
  if (!done) {
    return absl::DeadlineExceededError(
        absl::StrCat("reducerd at ", target_, " did not answer Leave in time"));
  }
  return abandon_outcome_;
}

void ShardLink::CancelJoinLocked() {
  if (join_ != nullptr && join_->started() && !join_->done()) join_->Cancel();
}

ShardLink::~ShardLink() {
  // Abandon's Leave first (bounded by its deadline), then the calls (they
  // drive the queue until gRPC handed them back), then the Join stream.
  driver_->DriveUntil(
      [this] {
        absl::MutexLock lock(&mu_);
        return !abandoning_;
      },
      absl::InfiniteFuture());
  abandon_.reset();
  router_.reset();
  shared_memory_.reset();
  per_call_.reset();
  small_calls_.reset();
  if (join_ == nullptr) return;
  bool joined;
  {
    absl::MutexLock lock(&mu_);
    joined = join_->started();
    CancelJoinLocked();
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
}

void ShardLink::OnRead(grpc::ByteBuffer* message) {
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
    quorum_steps_started_ = join_event_.ready().quorum_steps_started();
    const uint64_t chunk = join_event_.ready().chunk_bytes();
    chunk_bytes_.store(chunk > 0 ? chunk : kDefaultChunkBytes,
                       std::memory_order_relaxed);
    shared_memory_socket_ = join_event_.ready().shared_memory_socket();
  } else if (join_event_.has_aborted()) {
    aborted_ = absl::AbortedError(join_event_.aborted().reason());
    if (end_observer_) end_observer_();
  } else if (join_event_.has_waiting()) {
    waiting_ = join_event_.waiting();
  } else if (join_event_.has_pace() && join_event_.pace().chunk_bytes() > 0) {
    // Later payloads go in messages of the job's paced chunk size.
    chunk_bytes_.store(join_event_.pace().chunk_bytes(), std::memory_order_relaxed);
  }
}

v1::JoinWaiting ShardLink::LastWaiting() {
  absl::MutexLock lock(&mu_);
  return waiting_;
}

void ShardLink::OnFinished(const grpc::Status& status) {
  mu_.AssertHeld();
  ended_ = true;
  if (status.ok()) {
    end_status_ = absl::UnavailableError(
        absl::StrCat("reducerd at ", target_, " closed the session"));
  } else if (status.error_code() == grpc::StatusCode::UNAVAILABLE ||
             status.error_code() == grpc::StatusCode::CANCELLED) {
    end_status_ = absl::UnavailableError(absl::StrCat(
        "lost the session with reducerd at ", target_, ": ",
        status.error_message(), "; Connect again"));
  } else {
    end_status_ = FromGrpcStatus(status);
  }
  if (end_observer_) end_observer_();
}

}  // namespace reducer
