// SharedMemoryListener: where reducerd offers the same-host shared-memory
// path (docs/same_host.md, "Discovery and handshake"): an abstract AF_UNIX
// SOCK_SEQPACKET socket named `reducerd-<pid>-<16 hex digits>`, whose
// name() JobReady carries.
//
//   absl::StatusOr<std::unique_ptr<SharedMemoryListener>> listener =
//       SharedMemoryListener::Start(&door, &log, chunk_bytes, ...);
//   registry.SetSharedMemorySocket((*listener)->name());
//   ...
//   (*listener)->Stop();   // ends every session and joins every thread
//
// One thread accepts; each connection gets a short-lived thread for its
// handshake, bounded by `handshake_timeout`, so a silent peer never holds up
// the others. The handshake reads one SharedMemoryHello with two memfds
// (the control segment, mapped read-write; the input segment, read-only)
// and refuses, with SharedMemoryWelcome.status saying why, unless: both
// segments adopt (sealed memfds of the right layout); the nonce in the
// control segment equals the hello's (FAILED_PRECONDITION); the token is
// the job's when reducerd requires tokens (JobDoor::Authorize's
// UNAUTHENTICATED or PERMISSION_DENIED); the session id holds the rank in
// the job's running epoch (FAILED_PRECONDITION); for the job's first
// session here, its result segment of the input segment's size and 64
// bytes more fits (SharedSegment::Create's RESOURCE_EXHAUSTED), and for a
// later one, that its input segment is no larger than the first's
// (INVALID_ARGUMENT). Accepted,
// it answers OK with the job's result segment (its memfd, and the nonce in
// its first 64 bytes) and hands the session to the job's SharedMemoryJob,
// whose one thread serves every session of the job (of one epoch of it:
// a session of a later epoch, or one after a session lost its seat, gets a
// new SharedMemoryJob and result segment). A job is forgotten
// (its thread joined, its result segment closed) once it has no session
// left. Every refusal and every session's start and end is logged with the
// job, rank, and the peer's pid and uid (SO_PEERCRED).
//
// Thread-safe. `door` and `log` outlive the listener.
#ifndef REDUCER_SERVER_SHM_LISTENER_H_
#define REDUCER_SERVER_SHM_LISTENER_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <list>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/shm/unique_fd.h"
#include "server/jobs/job_door.h"
#include "server/log.h"
#include "server/security/job_tokens.h"
#include "server/shm/job.h"
#include "server/shm/session.h"

namespace reducer {

// Which local users may use the same-host path (--shared_memory_allowed_uids).
struct PeerUids {
  bool any = false;            // every uid
  std::vector<uint32_t> uids;  // besides reducerd's own
};

class SharedMemoryListener {
 public:
  static constexpr absl::Duration kDefaultHandshakeTimeout = absl::Seconds(3);

  // Binds the socket and starts accepting. UNAVAILABLE (with the errno
  // text) when the socket cannot be made or bound. At most
  // Each session takes `chunk_bytes` and `max_unread_answer_bytes` as
  // SharedMemorySession::Create does.
  // `max_handshakes` handshakes (each a thread) run at once; a connection
  // beyond them, or one whose thread cannot be started, is refused at once
  // with RESOURCE_EXHAUSTED.
  // A peer whose uid (SO_PEERCRED) is neither reducerd's own nor in
  // `peer_uids` is refused with PERMISSION_DENIED, unless `peer_uids.any`.
  static absl::StatusOr<std::unique_ptr<SharedMemoryListener>> Start(
      JobDoor* door, const Logger* log, size_t chunk_bytes,
      size_t max_unread_answer_bytes, int max_handshakes, PeerUids peer_uids,
      absl::Duration handshake_timeout = kDefaultHandshakeTimeout);

  ~SharedMemoryListener();  // Stop()
  SharedMemoryListener(const SharedMemoryListener&) = delete;
  SharedMemoryListener& operator=(const SharedMemoryListener&) = delete;

  // The abstract socket's name, without the leading NUL.
  const std::string& name() const { return name_; }

  // Stops accepting, ends every handshake and session (their calls not yet
  // answered count as cancelled) and joins every thread. Idempotent.
  void Stop();

  SharedMemoryListener(JobDoor* door, const Logger* log, size_t chunk_bytes,
                       size_t max_unread_answer_bytes, int max_handshakes,
                       PeerUids peer_uids,
                       absl::Duration handshake_timeout);  // Start()

 private:
  struct Handshake {
    std::thread thread;
    int fd = -1;  // the connection while the handshake owns it, else -1
    bool done = false;
  };

  void AcceptLoop();
  // Runs one connection's handshake; starts its session when accepted.
  void Shake(Handshake* handshake, UniqueFd connection);
  // The session to start for the hello received on `connection`, or why
  // not; fills in `peer` and `token` as far as the hello got.
  absl::StatusOr<SharedMemorySession::Parts> Check(int connection,
                                                   SharedMemoryPeer* peer,
                                                   PresentedToken* token);
  // The job named `job`, reserved for one more session of epoch
  // `epoch_id` (created, with a result segment of `result_bytes`, if it has
  // none here for that epoch, or only a retired one); or why not.
  absl::StatusOr<std::shared_ptr<SharedMemoryJob>> ReserveJob(
      const std::string& job, uint64_t epoch_id, size_t result_bytes)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Sends `connection` a refusal with `why`, without a handshake thread
  // (the peer may have sent nothing yet), and keeps the connection for
  // kRefusedGrace before closing it: closing a socket whose hello is
  // unread would reset the peer's end before it read the refusal.
  void RefuseAtOnce(UniqueFd connection, const absl::Status& why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Joins finished handshakes, and forgets jobs with no session left.
  void ReapLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Constant after Start.
  JobDoor* const door_;
  const Logger* const log_;
  const size_t chunk_bytes_;
  const size_t max_unread_answer_bytes_;
  const int max_handshakes_;
  const PeerUids peer_uids_;
  const absl::Duration handshake_timeout_;
  std::string name_;
  UniqueFd listen_fd_;
  UniqueFd stop_fd_;  // an eventfd, written by Stop()
  std::thread accept_thread_;

  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::list<Handshake> handshakes_ ABSL_GUARDED_BY(mu_);
  // Refused connections and when to close them (at most kMaxRefusedKept).
  std::deque<std::pair<absl::Time, UniqueFd>> refused_ ABSL_GUARDED_BY(mu_);
  // The job each name's new sessions join: of the job's running epoch,
  // and not retired.
  std::map<std::string, std::shared_ptr<SharedMemoryJob>> jobs_
      ABSL_GUARDED_BY(mu_);
  // Jobs of an earlier epoch, or retired, whose sessions have not all
  // ended yet; no new session joins them.
  std::vector<std::shared_ptr<SharedMemoryJob>> superseded_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace reducer

#endif  // REDUCER_SERVER_SHM_LISTENER_H_
