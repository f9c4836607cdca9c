// Membership: who takes part in one job, epoch by epoch.
//
// It holds the job's seats (a seat: the ranks one session holds in the
// epoch; one rank today, several for a relay), the epoch's state, and the
// rules of who is left out: ranks that departed, ranks that called Done()
// (with how many unnamed collectives of each group they were left out of),
// and, in quorum mode, absent and rejoined ranks; and the steps that left
// ranks out (whom they left out), to refuse their late calls. What it
// keeps per call (Done's counts, remembered steps) holds its bytes in the
// memory budget, reserved by its Job before the call is let in; it keeps
// no more than kRememberedQuorumSteps steps and one open session per rank.
//
// A plain state machine: no collectives, no locks, no logging, and nothing
// sent (the SessionChannel a seat holds is only handed back). Each
// transition says what changed, and its Job acts on it (fails collectives,
// sends JoinEvents, logs). Time is passed in. Not thread-safe: its Job
// calls it under its own lock.
//
// The epoch rules.
// - An epoch is joining until every rank of the job is seated; then it
//   runs. It ends (EndEpoch) when the Job says so: a running rank lost
//   outside quorum mode, a departed rank seated again, another shard's
//   failure. The first seat after that needs StartNextEpoch.
// - A rank that departs (its client closed on purpose) stays departed for
//   the epoch: collectives that include it are refused.
// Done. A rank that calls Done() is left out of the epoch's collectives
// until every rank has; the last one lets them all go (MarkDone).
// Quorum mode. Entered with the epoch's first quorum step. Then a running
// rank that is lost, departs, or is late for a step becomes absent instead
// of ending the epoch; it is seated again at once (Seated::kRejoined), and
// the next quorum step started counts it as joining.
//
// It is its collectives' Participation: the Job hands it to a Collective,
// under the Job's lock, to ask who is left out (CalledDone, Gone).
#ifndef REDUCER_SERVER_JOBS_MEMBERSHIP_H_
#define REDUCER_SERVER_JOBS_MEMBERSHIP_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/engine/memory_budget.h"
#include "server/engine/participation.h"
#include "server/jobs/session_channel.h"

namespace reducer {

class Membership final : public Participation {
 public:
  // `job` names the job in error messages; `epoch_id` identifies epoch 1.
  Membership(std::string job, int world_size, uint64_t epoch_id);

  // What a job of `world_size` ranks holds per rank here.
  static size_t StateBytes(int world_size);

  int world_size() const { return world_size_; }
  uint64_t epoch() const { return epoch_; }
  // Unique in the process for each epoch of each job (the Job's caller
  // hands out fresh ones).
  uint64_t epoch_id() const { return epoch_id_; }
  // Every rank seated this epoch, and the epoch not ended.
  bool running() const { return running_ && !ended_; }
  bool ended() const { return ended_; }
  const std::string& end_reason() const { return end_reason_; }
  // "running", "joining" or "aborted" (the epoch ended).
  std::string state() const;

  // How many ranks are seated here for the epoch to run: world_size (the
  // default), or on a relay the ranks of the job on its host (the rest
  // are seated upstream). Kept across epochs.
  void ExpectRanksHere(int count) { expected_here_ = count; }
  int expected_here() const { return expected_here_; }

  // ---- Seats
  //
  // Who may end a session. A session is its id and the channel (stream)
  // seated with it. Only that channel, its owner, ends it (Unseat): a
  // refused Join, or any other stream naming the id, changes nothing. A
  // request carrying the id (a collective, a departure) proves only that
  // its caller is the session's client, as the wire contract has it.
  //
  // At most one open session per rank. Each open session claims the ranks
  // it was seated with until its stream ends; seating a rank takes it
  // from the session that claimed it before (one of an ended epoch, or
  // one absent or departed from the running one, which no longer holds
  // it), and a session left claiming no rank is closed here: Seat hands it
  // back for its Job to end. So a job never has more open sessions than
  // ranks, however often its ranks connect again.
  enum class Seated {
    kWaiting,    // the epoch still waits for other ranks
    kAllJoined,  // this seat completed the epoch: it runs now
    kRejoined,   // an absent rank is back in the running epoch
  };
  // True when `session_id` holds a seat, in any epoch.
  bool HasSession(const std::string& session_id) const;
  // The ranks `session_id` claims (see above); empty when it is not open.
  std::vector<int> SessionRanks(const std::string& session_id) const;
  // A rank of `ranks` that departed from the running epoch (seating it
  // again must end the epoch first), if any.
  std::optional<int> DepartedAmong(const std::vector<int>& ranks) const;
  // OK when no live session holds a rank of `ranks` in the current epoch;
  // else ALREADY_EXISTS naming the rank.
  absl::Status CheckFree(const std::vector<int>& ranks) const;
  // Seats `session` (as `session_id`) holding `ranks`, distinct ranks of
  // the job. ALREADY_EXISTS (CheckFree), nothing changed, when a live
  // session holds one of them. The caller checks HasSession first, and
  // calls StartNextEpoch when ended(). The sessions closed because they no
  // longer claim any rank are appended to `superseded` (the caller ends
  // their streams).
  absl::StatusOr<Seated> Seat(
      const std::string& session_id, const std::vector<int>& ranks,
      std::shared_ptr<SessionChannel> session,
      std::vector<std::shared_ptr<SessionChannel>>* superseded = nullptr);
  // A retried Join of open session `session_id`: `session` becomes its
  // channel (its owner) in place of the one returned, which the caller
  // ends. The seats and the epoch are as they were.
  std::shared_ptr<SessionChannel> Reseat(
      const std::string& session_id, std::shared_ptr<SessionChannel> session);
  // The quorum_steps_started its JobReady carried for `rank`, held now:
  // nonzero for a rank admitted into the running epoch (kRejoined).
  uint64_t ReadyQuorumSteps(int rank) const;
  // On a relay: what upstream said for `rank` rejoining (its JobReady's
  // quorum_steps_started there), which ReadyQuorumSteps says from now on.
  void SetReadyQuorumSteps(int rank, uint64_t steps);

  // What the loss or departure of a seat changed.
  struct Unseated {
    enum class Effect {
      kNone,       // nothing the job must act on
      kAbsent,     // quorum mode: `ranks` are absent now
      kDeparted,   // `ranks` departed from the running epoch
      kEndsEpoch,  // `ranks` held the running epoch: the job must end it
    };
    Effect effect = Effect::kNone;
    std::vector<int> ranks;
    // No session of any epoch is left: the job can be freed.
    bool last_session = false;
  };
  // The stream `owner` of `session_id` ended. Ignored (kNone) unless
  // `owner` is the session's channel now: an unknown id, one closed
  // already, or another stream naming it.
  Unseated Unseat(const std::string& session_id, const SessionChannel* owner,
                  absl::Time now);
  // The client of `session_id` reports `ranks` of it lost (a relay whose
  // rank's own session there was lost: LeaveRequest.ranks): each is lost
  // as a session of its own would be (Unseat), and the session keeps
  // holding its other ranks. Ranks it does not hold are ignored.
  Unseated LoseRanks(const std::string& session_id,
                     const std::vector<int>& ranks, absl::Time now);
  // The client of `session_id` is closing on purpose: its ranks depart
  // from the running epoch (kDeparted), or in quorum mode become absent.
  // kNone when it holds no rank of the running epoch.
  Unseated Depart(const std::string& session_id, absl::Time now);
  // Depart for `ranks` of the session alone (LeaveRequest.ranks without a
  // cause: a relay whose ranks' clients there were closed); the session
  // keeps holding the others. Ranks it does not hold are ignored.
  Unseated DepartRanks(const std::string& session_id,
                       const std::vector<int>& ranks, absl::Time now);
  // True when no session of any epoch is open.
  bool NoSessions() const { return open_sessions_.empty(); }

  // The ranks `session_id` holds in the running epoch; empty when none.
  std::vector<int> RunningRanks(const std::string& session_id) const;
  // True when `session_id` holds `rank` in the current epoch (running or
  // joining).
  bool Holds(int rank, const std::string& session_id) const;
  // The session of each seat, once each (to send them an event).
  std::vector<std::shared_ptr<SessionChannel>> Sessions() const;
  // The session holding `rank` this epoch; null when none does.
  std::shared_ptr<SessionChannel> HolderOf(int rank) const;

  // ---- Epochs
  // Ends the epoch (`reason` says why; AbortedError texts quote it).
  void EndEpoch(const std::string& reason);
  // After an ended epoch: epoch + 1 (`epoch_id` its id), nobody seated,
  // nobody departed, done or absent, quorum mode off.
  void StartNextEpoch(uint64_t epoch_id);

  // ---- Calls
  // OK when `rank` may call in `epoch` from `session_id`; else ABORTED
  // (the epoch ended), FAILED_PRECONDITION (not started, absent, not
  // seated). `description` names the collective.
  absl::Status CheckCaller(int rank, uint64_t epoch,
                           const std::string& session_id,
                           const std::string& description) const;
  // OK when a new collective of `group` may start: FAILED_PRECONDITION
  // naming a departed rank, ABORTED naming an absent one. Quorum steps go
  // on without them and are not checked.
  absl::Status CheckGroupPresent(const std::vector<int>& group,
                                 const std::string& description) const;

  // ---- Who is left out (Participation)
  bool CalledDone(int rank) const override { return done_[rank]; }
  // Departed, absent, or holding no seat.
  bool Gone(int rank) const override;

  // ---- Done
  int done_count() const { return done_count_; }
  enum class DoneMark {
    kAlready,  // it had called Done() already
    kLeftOut,  // left out of the epoch's collectives from now on
    kAllDone,  // it was the last: every rank takes part again
  };
  DoneMark MarkDone(int rank);
  // How many unnamed collectives of `group` (its ranks, "0,2,3") `rank`
  // was left out of this epoch; NoteSkipped counts one more.
  //
  // These counts are kept for the epoch, one record per group, and each
  // record holds its worst case (SkipRecordBytes: every rank of the group
  // counted) in the memory budget: the Job reserves it before a skip can
  // be noted (AddSkipRecord), and refuses the call that would need a
  // record when the budget cannot hold it. NoteSkipped on a group without
  // one makes a record that holds nothing (never done by the Job).
  uint64_t Skipped(int rank, const std::string& group) const;
  void NoteSkipped(int rank, const std::string& group);
  static size_t SkipRecordBytes(const std::string& group, size_t group_size);
  bool HasSkipRecord(const std::string& group) const {
    return skipped_.contains(group);
  }
  void AddSkipRecord(const std::string& group,
                     std::vector<MemoryReservation> held);
  // The unnamed collectives of the whole job: one more than the highest
  // sequence number created this epoch (what a DONE call answers).
  uint64_t next_whole_sequence() const { return next_whole_sequence_; }
  void NoteWholeSequence(uint64_t sequence);

  // ---- Quorum mode
  bool quorum_mode() const { return quorum_mode_; }
  void EnterQuorumMode() { quorum_mode_ = true; }
  bool IsAbsent(int rank) const { return absent_[rank]; }
  // Quorum mode: `rank` no longer holds its seat (lost, departed, or late
  // for a step) and is absent from `now` on. Also on a relay, for a rank
  // lost here whose loss the relay took upstream (Job::Leave): seating it
  // again is then a rejoin (Seated::kRejoined).
  void MarkAbsent(int rank, absl::Time now);
  // How long `rank` has been absent at `now`; zero when it is not.
  absl::Duration AbsentFor(int rank, absl::Time now) const;
  // Who joins a quorum step of `group` (number `step`) created now: the
  // ranks seated again since the last step and not Gone (the step starts
  // without those). Enters quorum mode; the joining ranks count as
  // rejoined no longer.
  std::vector<int> StartQuorumStep(const std::vector<int>& group,
                                   uint64_t step);
  // Forgets Done's counts and the remembered steps, giving their budget
  // back: the job was freed, and no call but a replay comes any more.
  void ForgetRecords();
  // One more than the highest step number started this epoch.
  uint64_t quorum_steps_started() const { return quorum_steps_started_; }
  // A finished step (matching `key`, named by `description`) that left
  // ranks out (`left_out`: each rank, and whether it was left out for
  // Done()): their late calls are refused (RememberedLeftOut). The newest
  // kRememberedQuorumSteps are kept, each holding `held`, its
  // StepBytes of the memory budget (reserved when the step was created).
  static constexpr size_t kRememberedQuorumSteps = 16;
  static size_t StepBytes(const std::string& key,
                          const std::string& description, size_t group_size);
  void RememberStep(std::string key, std::string description,
                    std::vector<std::pair<int, bool>> left_out,
                    std::vector<MemoryReservation> held = {});
  // What a remembered step keeps for `rank`'s late call, if it left the
  // rank out: the step's description, and whether it was for Done().
  struct LeftOutOfStep {
    std::string description;
    bool done = false;
  };
  std::optional<LeftOutOfStep> RememberedLeftOut(const std::string& key,
                                                 int rank) const;

  // ---- Reports
  std::vector<int> SeatedRanks() const;
  std::vector<int> AbsentRanks() const;
  std::vector<int> DoneRanks() const;

 private:
  struct Holder {
    std::string session_id;
    std::shared_ptr<SessionChannel> session;
    uint64_t ready_quorum_steps = 0;  // ReadyQuorumSteps
  };
  // An open session: the ranks it claims, and its owner.
  struct OpenSession {
    std::vector<int> ranks;
    std::shared_ptr<SessionChannel> channel;
  };
  const std::string job_;
  const int world_size_;
  int expected_here_;  // ExpectRanksHere

  uint64_t epoch_ = 1;
  uint64_t epoch_id_;
  bool running_ = false;  // every rank was seated this epoch
  bool ended_ = false;
  std::string end_reason_;
  // Per rank: the session holding it this epoch.
  std::vector<std::optional<Holder>> holders_;
  // Every open session, of any epoch, by id; no rank is claimed twice.
  absl::flat_hash_map<std::string, OpenSession> open_sessions_;
  std::vector<bool> departed_;
  // Done.
  std::vector<bool> done_;
  int done_count_ = 0;
  // Per group: each rank's count, and the budget the record holds.
  struct SkipRecord {
    absl::flat_hash_map<int, uint64_t> by_rank;
    std::vector<MemoryReservation> held;
  };
  absl::flat_hash_map<std::string, SkipRecord> skipped_;
  uint64_t next_whole_sequence_ = 0;
  // Quorum mode.
  bool quorum_mode_ = false;
  std::vector<bool> absent_;
  std::vector<absl::Time> absent_since_;
  std::vector<bool> rejoined_;  // seated again since the last step began
  uint64_t quorum_steps_started_ = 0;
  // Unseat and LoseRanks: `ranks` of `session_id` lost, into `out`.
  void LoseHeld(const std::string& session_id, const std::vector<int>& ranks,
                absl::Time now, Unseated* out);
  struct RememberedStep {
    std::string key;
    std::string description;
    std::vector<std::pair<int, bool>> left_out;  // sorted by rank
    std::vector<MemoryReservation> held;
  };
  std::vector<RememberedStep> recent_quorum_steps_;
};

}  // namespace reducer

#endif  // REDUCER_SERVER_JOBS_MEMBERSHIP_H_
