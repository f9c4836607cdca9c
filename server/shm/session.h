// SharedMemorySession: reducerd's side of one client's same-host session
// (docs/same_host.md, "Calls" and "Waiting"), after SharedMemoryListener's
// handshake accepted it. It has no thread of its own: its job's thread
// (SharedMemoryJob) serves it, with the job's other sessions, in both
// directions, calling Step() each time its request ring's bell rings (or
// kSocketCheck passes) and End() once Step() says the session is over.
//
// Requests: each record of the control segment's request ring is one
// serialized CollectiveRequest:
//   - a call: nonzero `call_id` (not in flight), `header` of the session's
//     own job, session and rank, offset 0, and the whole payload inline in
//     `data` or as `data_range` inside the input segment. It attaches with a
//     RingAttempt (its RankChannel) through the AttachFn, as a call of a
//     Collectives stream does, and its payload goes to Collective::OnData in
//     pieces of at most chunk_bytes, as SharedBytes pointing straight into
//     the read-only input mapping; when OnData says wait, the rest is fed
//     once the Collective calls ResumeReading. Then OnInputEnd.
//   - `released` ranges: result ranges the client is done with (any record
//     may carry them; one carrying only these has no call).
//   - a cancel: only a `call_id`; the call counts as cancelled
//     (Collective::OnRankCancelled) and is answered CANCELLED unless its
//     outcome came first. An id not in flight is ignored (its answer and
//     the cancel crossed).
// A header naming another job, session or rank fails only that call
// (PERMISSION_DENIED); a record that does not parse, lacks a header or
// call id, reuses an id in flight, carries a nonzero offset, both `data`
// and `data_range`, a range outside its segment, or releases a range that
// was not handed out ends the session.
//
// Responses: what the Collective sends is copied by the job's thread into
// the call's result: inline when the whole result is at most
// kInlineResultBytes, else into a range of the job's result segment
// (SharedMemoryResults::Open on the first message: a range another rank's call
// of the same result still writes, which is then written once for both,
// or a new one; no room: the call ends RESOURCE_EXHAUSTED and its
// Collective hears OnRankCancelled). Each message copied counts as written
// (Collective::OnWriteDone). A call's one response record (call_id, status,
// and when OK the result specs and `data` or `data_range`) is pushed once
// its end is known and reducerd holds no reference into its input range any
// more (an AllGather or Broadcast forwards input bytes to other ranks'
// channels, which may still be writing them): from then on the range is the
// client's again. The one exception, the small-call fast path: a call whose
// payload came inline and whose whole result arrives in one message of at
// most kInlineResultBytes is answered by its channel right there
// (AnswerAtOnce, on the thread that completed the collective), sparing the
// hand-off to the job's thread and its wakeup.
//
// A range handed out holds one reference to it (SharedMemoryResults) until the
// client releases it or the session ends.
//
// Answers its client has not taken: a call whose response is due but finds
// the response ring full waits, keeping its rank's reservation in the
// memory budget (ResultMessage::hold) until its response is in the ring.
// While what waits so (each call's inline result and its bookkeeping,
// kWaitingCallBytes) exceeds `max_unread_answer_bytes`, Step() takes no
// request record: the client's request ring fills and its pushes wait, as
// gRPC's flow control stops a client that stops reading. So a client that
// never pops its response ring makes reducerd hold at most that bound plus
// the calls of one request ring's worth of records (a pass takes no more,
// and the pass that went over took them) and the calls it had in flight,
// all in the budget; the first time, a warning names the session and the
// bound. A client that pops, however late, is served on: its requests wait
// in its ring, and its own calls' deadlines end what waits too long.
//
// The session ends when the client closes its socket (seen within
// kSocketCheck: Step() looks at the socket once that has passed since it
// last did, and the job's thread wakes by then), when its peer lost its
// seat (Parts::check_seat, asked every kSeatCheck), on a corrupt ring
// (MessageRing's DATA_LOSS) or a bad record, or on Stop(). Then every call
// not answered counts as cancelled (OnRankCancelled), its references to
// result ranges are dropped, the end is logged naming the rank and the
// reason, and the socket closes (End()). The input mapping lasts as long as
// any SharedBytes of it.
//
// Lock order: a Collective's lock before the session's own (RingAttempt's
// methods take it, with the Collective's lock held, and only queue and
// ring). The job's thread never holds the session's lock while calling a
// Collective. Stop() and the channels are thread-safe; Step() and End()
// are for the job's thread alone.
#ifndef REDUCER_SERVER_SHM_SESSION_H_
#define REDUCER_SERVER_SHM_SESSION_H_

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/shm/control_segment.h"
#include "core/shm/doorbell.h"
#include "core/shm/shared_segment.h"
#include "core/shm/unique_fd.h"
#include "proto/reducer/v1/reducer.pb.h"
#include "server/engine/collective.h"
#include "server/engine/rank_channel.h"
#include "server/jobs/job_door.h"
#include "server/log.h"
#include "server/shm/results.h"

namespace reducer {

// Who a session serves, as the handshake established it.
struct SharedMemoryPeer {
  std::string job;
  std::string session_id;
  int rank = -1;
  pid_t pid = 0;  // SO_PEERCRED, for logs
  uid_t uid = 0;
  uint64_t epoch_id = 0;  // the job's epoch it holds its rank in (Job::Seat)
};

class SharedMemorySession
    : public std::enable_shared_from_this<SharedMemorySession> {
 public:
  // Results up to this size travel inline in the response record.
  static constexpr size_t kInlineResultBytes = 64 << 10;
  // How often the socket is looked at when no record arrives.
  static constexpr absl::Duration kSocketCheck = absl::Milliseconds(50);
  // How often the session asks whether its peer still holds its seat.
  static constexpr absl::Duration kSeatCheck = absl::Milliseconds(250);
  // What a call waiting for room in the response ring is counted as,
  // besides its inline result: its bookkeeping and its response record's
  // fields, rounded up.
  static constexpr size_t kWaitingCallBytes = 1024;

  // What the session is given (the result segment is its job's).
  struct Parts {
    SharedMemoryPeer peer;
    UniqueFd socket;
    std::unique_ptr<ControlSegment> control;
    SharedSegment input;  // read-only
    // OK while the peer may go on: its token still authorizes the job and
    // it still holds its rank in the epoch it shook hands in. Asked every
    // kSeatCheck; an error ends the session (lost_seat()).
    std::function<absl::Status()> check_seat;
  };

  // `results` is the job's result segment, which the client maps (it
  // outlives the session); `attach` attaches each call (as
  // JobDoor::AttachWithToken gives it); `chunk_bytes` bounds each
  // OnData piece; while the answers its client has not taken exceed
  // `max_unread_answer_bytes`, no request is taken; `log` outlives the
  // session.
  static std::shared_ptr<SharedMemorySession> Create(
      Parts parts, SharedMemoryResults* results, JobDoor::AttachFn attach,
      size_t chunk_bytes, size_t max_unread_answer_bytes, const Logger* log);

  SharedMemorySession(const SharedMemorySession&) = delete;
  SharedMemorySession& operator=(const SharedMemorySession&) = delete;

  // Asks the job's thread to end the session (calls not answered are
  // cancelled) once it has pushed the answers already known. Returns at
  // once.
  void Stop();

  // The bell the job's thread watches: the request ring's data bell, which
  // the client, the calls' channels and the input's owners ring.
  const Doorbell& bell() { return control_->requests().data_bell(); }
  // One pass (the job's thread): takes every record the request ring holds
  // (none while the answers its client has not taken are over the bound),
  // feeds the calls that may go on, copies what the Collectives sent,
  // pushes the responses that are due, and looks at the socket once
  // kSocketCheck has passed since it last did. OK while the session goes
  // on, else why it must end. `*look_again_soon`: the response ring was
  // full (it frees up without this bell ringing), or requests were left in
  // their ring that may be taken now.
  absl::Status Step(absl::Time now, bool* look_again_soon);
  // When Step() next looks at the socket.
  absl::Time next_socket_check() const { return next_socket_check_; }
  // Ends the session for `why` (the job's thread, once): cancels the calls
  // not answered, drops its references to result ranges (unless its client
  // is still connected: it may yet copy a result whose response is in its
  // ring, so those ranges stay taken while the segment lives), logs,
  // closes the socket.
  void End(const absl::Status& why);

  const SharedMemoryPeer& peer() const { return peer_; }
  // True once Step() ended the session because check_seat failed: its token
  // was revoked, its rank replaced or its epoch ended.
  bool lost_seat() const { return lost_seat_; }

  SharedMemorySession(Parts parts, SharedMemoryResults* results,
                      JobDoor::AttachFn attach, size_t chunk_bytes,
                      size_t max_unread_answer_bytes,
                      const Logger* log);  // Create()

 private:
  class RingAttempt;
  class InputOwner;
  struct Call;

  // What a RingAttempt queued for the job's thread.
  struct Item {
    // kAnswered: the call's response went from its channel already.
    enum class Kind { kMessage, kFinish, kFail, kAnswered };
    uint64_t serial = 0;
    Kind kind = Kind::kMessage;
    ResultMessage message;
    bool last = false;
    absl::Status status;
  };

  // One request record; an error ends the session.
  absl::Status HandleRecord(const std::string& record);
  absl::Status Release(const v1::CollectiveRequest& request);
  absl::Status StartCall(v1::CollectiveRequest& request);
  void CancelCall(uint64_t call_id);
  // Feeds `call`'s payload from where it stopped until OnData says wait.
  void Feed(Call& call);
  void FeedResumed();
  void ProcessItems();
  void ProcessMessage(Call& call, Item& item);
  // Sets the call's end (if not set yet); drops what it holds of its input.
  void EndCall(Call& call, const absl::Status& status);
  // Pushes the response of every call that can be answered; DATA_LOSS when
  // the response ring is corrupt, RESOURCE_EXHAUSTED when it is full (the
  // rest go next time, and count in unread_answer_bytes_).
  absl::Status PushResponses();
  // Takes the request ring's records, at most one ring's worth
  // (MessageRing::kDefaultCapacity bytes), if the answers not taken are
  // within the bound; an error ends the session. `*held_back`: records may
  // be left in the ring.
  absl::Status TakeRequests(bool* held_back);
  // The response record of `call` (its end is set).
  std::string ResponseRecord(Call& call);
  // Why the socket says the session is over, or OK while it is open.
  absl::Status CheckSocket();
  // True when the client closed its end of the socket (or died), so that
  // it reads nothing more of the segments.
  bool PeerClosed();
  // Every call not answered counts as cancelled.
  void CancelLiveCalls();

  // Called by RingAttempt and InputOwner (any thread).
  void Enqueue(Item item);
  // Pushes call `call_id`'s response with `message`, its whole result, if
  // that fits inline and the ring has room now; false (nothing done)
  // otherwise. Called with the Collective's lock held: only locks mu_ and
  // push_mu_.
  bool AnswerAtOnce(uint64_t serial, uint64_t call_id,
                    const ResultMessage& message);
  void Resume(uint64_t serial);
  void Ring();

  // Constant after construction.
  const SharedMemoryPeer peer_;
  UniqueFd socket_;  // closed by the thread as it ends
  SharedMemoryResults* const results_;
  const std::shared_ptr<ControlSegment> control_;
  const std::shared_ptr<const SharedSegment> input_;
  const JobDoor::AttachFn attach_;
  const std::function<absl::Status()> check_seat_;
  const size_t chunk_bytes_;
  const size_t max_unread_answer_bytes_;
  const Logger* const log_;

  // A result range handed out: its size, and how many times this session
  // holds it (each a reference).
  struct HandedOut {
    uint64_t size = 0;
    int count = 0;
  };

  // Only the job's thread touches these.
  absl::flat_hash_map<uint64_t, std::unique_ptr<Call>> calls_;  // by serial
  absl::flat_hash_map<uint64_t, uint64_t> in_flight_;    // call id -> serial
  absl::flat_hash_map<uint64_t, HandedOut> handed_out_;  // by result offset
  uint64_t last_serial_ = 0;
  uint64_t calls_served_ = 0;
  // What waits for room in the response ring (PushResponses' last pass):
  // each call due and not pushed, as kWaitingCallBytes plus its inline
  // result.
  size_t unread_answer_bytes_ = 0;
  bool warned_unread_ = false;  // the warning is logged once per session
  absl::Time next_socket_check_;
  absl::Time next_seat_check_;
  bool lost_seat_ = false;

  std::atomic<bool> stop_{false};

  // One producer of the response ring at a time (the job's thread, or a
  // channel answering at once); taken after mu_ when both are.
  absl::Mutex push_mu_;
  absl::Mutex mu_;
  std::deque<Item> items_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<uint64_t> resumed_ ABSL_GUARDED_BY(mu_);  // serials
  bool ended_ ABSL_GUARDED_BY(mu_) = false;  // no more items taken
};

}  // namespace reducer

#endif  // REDUCER_SERVER_SHM_SESSION_H_
