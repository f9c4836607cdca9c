#include "server/shm/listener.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <system_error>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/shm/control_segment.h"
#include "core/shm/fd_passing.h"
#include "core/shm/range_allocator.h"
#include "core/shm/shared_segment.h"
#include "core/status_macros.h"
#include "proto/reducer/v1/call_status.h"
#include "proto/reducer/v1/reducer.pb.h"
#include "server/engine/clock.h"

namespace reducer {
namespace {

// A hello is a few names and a token; anything longer is not one.
constexpr size_t kMaxHelloBytes = 64 << 10;
// How often the accept thread frees the sessions that ended.
constexpr int kReapIntervalMs = 1000;
// How long a refused connection stays open for its peer to read the refusal,
// and how many are kept so at once (beyond, they are closed at once).
constexpr absl::Duration kRefusedGrace = absl::Seconds(1);
constexpr size_t kMaxRefusedKept = 256;

absl::Status Prefixed(absl::string_view what, const absl::Status& status) {
  return absl::Status(status.code(), absl::StrCat(what, status.message()));
}

}  // namespace

SharedMemoryListener::SharedMemoryListener(JobDoor* door, const Logger* log,
                                           size_t chunk_bytes,
                                           size_t max_unread_answer_bytes,
                                           int max_handshakes,
                                           PeerUids peer_uids,
                                           absl::Duration handshake_timeout)
    : door_(door),
      log_(log),
      chunk_bytes_(chunk_bytes),
      max_unread_answer_bytes_(max_unread_answer_bytes),
      max_handshakes_(max_handshakes),
      peer_uids_(std::move(peer_uids)),
      handshake_timeout_(handshake_timeout) {}

absl::StatusOr<std::unique_ptr<SharedMemoryListener>>
SharedMemoryListener::Start(JobDoor* door, const Logger* log,
                            size_t chunk_bytes, size_t max_unread_answer_bytes,
                            int max_handshakes, PeerUids peer_uids,
                            absl::Duration handshake_timeout) {
  std::unique_ptr<SharedMemoryListener> listener(new SharedMemoryListener(
      door, log, chunk_bytes, max_unread_answer_bytes, max_handshakes,
      std::move(peer_uids), handshake_timeout));
  listener->name_ = absl::StrCat("reducerd-", getpid(), "-",
                                 absl::BytesToHexString(RandomBytes(8)));
  const std::string& name = listener->name_;
  listener->listen_fd_.reset(
      socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!listener->listen_fd_.valid()) {
    return absl::UnavailableError(absl::StrCat(
        "same-host path: socket(AF_UNIX, SOCK_SEQPACKET): ", strerror(errno)));
  }
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  addr.sun_path[0] = '\0';  // abstract: no file behind it
  std::memcpy(addr.sun_path + 1, name.data(), name.size());
  const socklen_t len =
      static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  if (bind(listener->listen_fd_.get(), reinterpret_cast<sockaddr*>(&addr),
           len) != 0 ||
      listen(listener->listen_fd_.get(), SOMAXCONN) != 0) {
    return absl::UnavailableError(
        absl::StrCat("same-host path: cannot listen on abstract socket ", name,
                     ": ", strerror(errno)));
  }
  listener->stop_fd_.reset(eventfd(0, EFD_CLOEXEC));
  if (!listener->stop_fd_.valid()) {
    return absl::UnavailableError(
        absl::StrCat("same-host path: eventfd: ", strerror(errno)));
  }
  SharedMemoryListener* raw = listener.get();
  listener->accept_thread_ = std::thread([raw] { raw->AcceptLoop(); });
  log->Log({LogSeverity::kInfo, "shm_listening",
            absl::StrCat("same-host path offered on abstract socket ", name)});
  return listener;
}

SharedMemoryListener::~SharedMemoryListener() { Stop(); }

void SharedMemoryListener::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
    // Wakes handshakes waiting for their hello.
    for (Handshake& h : handshakes_) {
      if (h.fd >= 0) shutdown(h.fd, SHUT_RDWR);
    }
    refused_.clear();
  }
  if (stop_fd_.valid()) {
    const uint64_t one = 1;
    (void)!write(stop_fd_.get(), &one, sizeof(one));
  }
  if (accept_thread_.joinable()) accept_thread_.join();
  // Nodes keep their addresses when spliced: handshakes still running
  // update theirs.
  std::list<Handshake> handshakes;
  {
    absl::MutexLock lock(&mu_);
    handshakes.splice(handshakes.end(), handshakes_);
  }
  for (Handshake& h : handshakes) {
    if (h.thread.joinable()) h.thread.join();
  }
  std::vector<std::shared_ptr<SharedMemoryJob>> jobs;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [name, job] : jobs_) jobs.push_back(std::move(job));
    jobs_.clear();
    for (auto& job : superseded_) jobs.push_back(std::move(job));
    superseded_.clear();
  }
  for (auto& job : jobs) job->Stop();
  for (auto& job : jobs) job->Join();
}

void SharedMemoryListener::AcceptLoop() {
  while (true) {
    pollfd fds[2] = {{listen_fd_.get(), POLLIN, 0},
                     {stop_fd_.get(), POLLIN, 0}};
    const int n = poll(fds, 2, kReapIntervalMs);
    if (n < 0 && errno != EINTR) {
      log_->Log({LogSeverity::kError, "shm_accept_failed",
                 absl::StrCat("same-host path: poll of socket ", name_, ": ",
                              strerror(errno), "; no more sessions accepted")});
      return;
    }
    if (n > 0 && (fds[1].revents & POLLIN) != 0) return;
    int connection = -1;
    if (n > 0 && (fds[0].revents & POLLIN) != 0) {
      connection = accept4(listen_fd_.get(), nullptr, nullptr, SOCK_CLOEXEC);
      if (connection < 0 && errno != EAGAIN && errno != EINTR &&
          errno != ECONNABORTED) {
        // Out of descriptors or memory: say so, and do not spin on it.
        log_->Log({LogSeverity::kWarning, "shm_accept_failed",
                   absl::StrCat("same-host path: accept on socket ", name_,
                                ": ", strerror(errno))});
        absl::SleepFor(absl::Milliseconds(100));
      }
    }
    absl::MutexLock lock(&mu_);
    ReapLocked();
    if (connection < 0) continue;
    if (stopping_) {
      close(connection);
      return;
    }
    if (static_cast<int>(handshakes_.size()) >= max_handshakes_) {
      RefuseAtOnce(
          UniqueFd(connection),
          absl::ResourceExhaustedError(absl::StrCat(
              "reducerd is already shaking hands with ", handshakes_.size(),
              " same-host peers "
              "(--max_same_host_handshakes=",
              max_handshakes_, "); retry later")));
      continue;
    }
    handshakes_.emplace_back();
    Handshake* h = &handshakes_.back();
    h->fd = connection;
    try {
      h->thread = std::thread(
          [this, h, connection] { Shake(h, UniqueFd(connection)); });
    } catch (const std::system_error& e) {
      // Out of threads (or memory for one): that peer's error, not
      // reducerd's end.
      handshakes_.pop_back();
      RefuseAtOnce(UniqueFd(connection),
                   absl::ResourceExhaustedError(absl::StrCat(
                       "reducerd cannot start a thread for this handshake (",
                       e.what(), "); retry later")));
    }
  }
}

void SharedMemoryListener::RefuseAtOnce(UniqueFd connection,
                                        const absl::Status& why) {
  v1::SharedMemoryWelcome refusal;
  *refusal.mutable_status() = ToCallStatus(why);
  // One small message into a fresh connection's empty buffer: no wait.
  SendWithFds(connection.get(), refusal.SerializeAsString(), {})
      .IgnoreError();  // the peer may be gone; the refusal is logged
  log_->Log({LogSeverity::kWarning, "shm_session_refused",
             absl::StrCat("same-host path: refused a connection before its "
                          "handshake: ",
                          why.message())});
  if (refused_.size() < kMaxRefusedKept) {
    refused_.emplace_back(Clock::Steady().Now() + kRefusedGrace,
                          std::move(connection));
  }
}

void SharedMemoryListener::ReapLocked() {
  const absl::Time now = Clock::Steady().Now();
  while (!refused_.empty() && refused_.front().first <= now)
    refused_.pop_front();
  for (auto it = handshakes_.begin(); it != handshakes_.end();) {
    if (!it->done) {
      ++it;
      continue;
    }
    if (it->thread.joinable()) it->thread.join();
    it = handshakes_.erase(it);
  }
  for (auto it = jobs_.begin(); it != jobs_.end();) {
    if (it->second->live() > 0) {
      ++it;
      continue;
    }
    // No session, and none can come: reserving takes mu_.
    it->second->Stop();
    it->second->Join();
    it = jobs_.erase(it);
  }
  for (auto it = superseded_.begin(); it != superseded_.end();) {
    if ((*it)->live() > 0) {
      ++it;
      continue;
    }
    (*it)->Stop();
    (*it)->Join();
    it = superseded_.erase(it);
  }
}

absl::StatusOr<std::shared_ptr<SharedMemoryJob>>
SharedMemoryListener::ReserveJob(const std::string& job, uint64_t epoch_id,
                                 size_t result_bytes) {
  absl::MutexLock lock(&mu_);
  if (stopping_) return absl::UnavailableError("reducerd is shutting down");
  std::shared_ptr<SharedMemoryJob>& found = jobs_[job];
  // A segment that a peer of another epoch, or one that lost its seat, may
  // still map is never handed to a new session: it gets a fresh one.
  if (found != nullptr && (found->epoch_id() != epoch_id || found->retired())) {
    superseded_.push_back(std::move(found));
    found = nullptr;
  }
  if (found == nullptr) {
    absl::StatusOr<std::shared_ptr<SharedMemoryJob>> created =
        SharedMemoryJob::Create(job, epoch_id, result_bytes, log_);
    if (!created.ok()) {
      jobs_.erase(job);
      return Prefixed("the result segment: ", created.status());
    }
    found = *std::move(created);
  } else if (result_bytes > found->results_bytes()) {
    // The first session sized the job's result segment; a larger input
    // segment could make results that do not fit in it.
    return absl::InvalidArgumentError(absl::StrCat(
        "this session's input segment needs a result segment of ", result_bytes,
        " bytes, but job ", job, "'s is ", found->results_bytes(),
        " bytes (sized by its first same-host "
        "session): every rank of a job must use the same "
        "ClientOptions::shared_memory_bytes"));
  }
  found->Reserve();
  return found;
}

void SharedMemoryListener::Shake(Handshake* handshake, UniqueFd connection) {
  SharedMemoryPeer peer;
  PresentedToken token;
  absl::StatusOr<SharedMemorySession::Parts> parts =
      Check(connection.get(), &peer, &token);
  absl::Status outcome = parts.status();
  std::shared_ptr<SharedMemoryJob> job;
  if (parts.ok()) {
    // 64 bytes more than the input segment, for the nonce: a result as
    // large as the whole input segment still fits.
    absl::StatusOr<std::shared_ptr<SharedMemoryJob>> reserved =
        ReserveJob(peer.job, peer.epoch_id,
                   parts->input.size() + RangeAllocator::kAlignment);
    outcome = reserved.status();
    if (reserved.ok()) job = *std::move(reserved);
  }
  if (outcome.ok()) {
    v1::SharedMemoryWelcome welcome;
    *welcome.mutable_status() = ToCallStatus(absl::OkStatus());
    welcome.set_nonce(job->results_nonce());
    outcome = SendWithFds(connection.get(), welcome.SerializeAsString(),
                          {job->results_fd()});
    if (!outcome.ok()) outcome = Prefixed("sending the welcome: ", outcome);
  } else {
    v1::SharedMemoryWelcome refusal;
    *refusal.mutable_status() = ToCallStatus(outcome);
    SendWithFds(connection.get(), refusal.SerializeAsString(), {})
        .IgnoreError();  // the peer may be gone; the refusal is logged
  }
  absl::MutexLock lock(&mu_);
  handshake->fd = -1;
  if (outcome.ok() && stopping_) {
    outcome = absl::UnavailableError("reducerd is shutting down");
  }
  if (outcome.ok()) {
    parts->peer = peer;
    parts->socket = std::move(connection);
    parts->check_seat = [door = door_, peer, token]() -> absl::Status {
      REDUCER_ASSIGN_OR_RETURN(
          uint64_t epoch_id,
          door->CheckSeat(peer.job, peer.session_id, peer.rank, token));
      if (epoch_id == peer.epoch_id) return absl::OkStatus();
      return absl::FailedPreconditionError(
          absl::StrCat("job ", peer.job,
                       " began a new epoch since this session's "
                       "handshake"));
    };
    job->Add(*std::move(parts), door_->AttachWithToken(token), chunk_bytes_,
             max_unread_answer_bytes_);
  } else {
    if (job != nullptr) job->Unreserve();
    const int ranks[] = {peer.rank};
    log_->Log({LogSeverity::kWarning, "shm_refused",
               absl::StrCat("same-host session refused for job ",
                            peer.job.empty() ? "?" : peer.job, " rank ",
                            peer.rank, " (pid ", peer.pid, ", uid ", peer.uid,
                            "): ", outcome.ToString()),
               peer.job, std::nullopt, "",
               peer.rank >= 0 ? absl::Span<const int>(ranks)
                              : absl::Span<const int>()});
  }
  handshake->done = true;
  // `connection`, unless the session took it, closes after the lock.
}

absl::StatusOr<SharedMemorySession::Parts> SharedMemoryListener::Check(
    int connection, SharedMemoryPeer* peer, PresentedToken* token) {
  absl::StatusOr<PeerCredentials> who = PeerOf(connection);
  if (who.ok()) {
    peer->pid = who->pid;
    peer->uid = who->uid;
  }
  // A wall-clock deadline, as ReceiveWithFds (core/shm) takes it.
  absl::StatusOr<Received> received = ReceiveWithFds(
      connection, kMaxHelloBytes, 2, absl::Now() + handshake_timeout_);
  if (!received.ok()) {
    return Prefixed("no SharedMemoryHello: ", received.status());
  }
  // Checked once the hello is read, so that the refusal reaches the peer.
  if (!who.ok()) return Prefixed("SO_PEERCRED: ", who.status());
  const uint32_t own = geteuid();
  if (!peer_uids_.any && who->uid != own &&
      std::find(peer_uids_.uids.begin(), peer_uids_.uids.end(), who->uid) ==
          peer_uids_.uids.end()) {
    return absl::PermissionDeniedError(absl::StrCat(
        "the same-host peer runs as uid ", who->uid, ", not reducerd's (", own,
        "); start reducerd with --shared_memory_allowed_uids=", who->uid,
        " (or any) to let it share memory, or it uses gRPC"));
  }
  v1::SharedMemoryHello hello;
  if (!hello.ParseFromString(received->bytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat("the first message (", received->bytes.size(),
                     " bytes) does not parse as a SharedMemoryHello"));
  }
  peer->job = hello.job();
  peer->session_id = hello.session_id();
  peer->rank = hello.rank();
  if (received->fds.size() != 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the SharedMemoryHello carries ", received->fds.size(),
        " memfds; it needs 2 (the control segment, then the input segment)"));
  }
  absl::StatusOr<std::unique_ptr<ControlSegment>> control =
      ControlSegment::Adopt(received->fds[0].release());
  if (!control.ok()) return Prefixed("the control segment: ", control.status());
  absl::StatusOr<SharedSegment> input = SharedSegment::Adopt(
      received->fds[1].release(), SharedSegment::Access::kReadOnly);
  if (!input.ok()) return Prefixed("the input segment: ", input.status());
  if (hello.nonce().size() != ControlSegment::kNonceBytes ||
      hello.nonce() != (*control)->nonce()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the nonce in the control segment differs from the hello's nonce (",
        hello.nonce().size(), " bytes, of ", ControlSegment::kNonceBytes,
        "): the memfd sent is not the memory the client wrote"));
  }
  token->present = !hello.token().empty();
  if (token->present) token->hash = HashToken(hello.token());
  REDUCER_ASSIGN_OR_RETURN(
      peer->epoch_id,
      door_->CheckSeat(hello.job(), hello.session_id(), hello.rank(), *token));
  SharedMemorySession::Parts parts{*peer, UniqueFd(), *std::move(control),
                                   *std::move(input)};
  return parts;
}

}  // namespace reducer
