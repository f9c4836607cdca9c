// PendingCollective: a collective that ClientSession::Start started, until
// it is waited for: its retries (client/retry_sequence.h), and for a
// receive whose message reducerd picks, the two steps of the match and the
// receive of the message it names.
//
// Not thread-safe (one thread waits; Ready() may be called meanwhile from
// that thread). Internal to the client library.
#ifndef REDUCER_CLIENT_INTERNAL_PENDING_COLLECTIVE_H_
#define REDUCER_CLIENT_INTERNAL_PENDING_COLLECTIVE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "client/internal/collective_attempt.h"
#include "core/device.h"
#include "core/fingerprint.h"
#include "core/tensor.h"

namespace reducer {

class ClientSession;

// A collective that was started (its place in the group's call order taken,
// its first attempt sent) and not yet waited for.
//
// Contract: caller memory behind the request's inputs must stay valid and
// unchanged until Wait() returns; the session must outlive this. Wait() once,
// from one thread.
class PendingCollective {
 public:
  // Blocks for the result. When the transport failed before any answer
  // came, asks reducerd for the result again (it may have been decided and
  // lost on the way), then retries the attempt where that is safe: the
  // session is intact (the retry carries the same attempt_id, so the server
  // never counts it twice). See client/retry_sequence.h.
  absl::StatusOr<std::vector<Tensor>> Wait();
  // A call never waited for counts as settled (its result is not wanted).
  ~PendingCollective();

  // True once the current attempt's outcome is known (Wait() may still
  // retry a transport failure). Never blocks.
  bool Ready();

  // A receive whose message reducerd picked (ReceiveAny): once Wait()
  // returned the message, its source as a rank of the call's group (its
  // position in CallOptions.group, else its global rank); -1 otherwise.
  int matched_source() const;

 private:
  friend class ClientSession;
  explicit PendingCollective(ClientSession* session) : session_(session) {}

  // A receive whose message reducerd picks (a ReceiveAny, or a Receive
  // started while a match of its tag was unanswered) runs in two steps:
  // this collective is the match (CollectiveKind::kMatch), whose answer
  // names the message; then `receive`, a plain receive of that message,
  // whose result is the call's.
  struct MatchedReceive {
    uint64_t epoch = 0;
    int64_t tag = 0;
    std::vector<TensorSpec> declared;  // ReceiveInPlace's buffer, or none
    Device device;
    void* cuda_stream = nullptr;
    bool any = false;        // a ReceiveAny (else a Receive from one source)
    std::vector<int> group;  // ReceiveAny's CallOptions.group, sorted
    // Wait()'s and Ready()'s moves from the match to the receive.
    absl::Mutex mu;
    // The match's outcome was handed to the session (answered or not).
    bool settled ABSL_GUARDED_BY(mu) = false;
    absl::Status failure ABSL_GUARDED_BY(mu);  // the match's, if it failed
    int source = -1;  // global, once answered (written before `receive`)
    std::unique_ptr<PendingCollective> receive ABSL_GUARDED_BY(mu);
  };

  // Waits for this collective's own outcome: WaitRetrying, then settled and
  // its failure named.
  absl::StatusOr<std::vector<Tensor>> WaitOwn();
  // Waits for the first attempt's outcome (or takes first_outcome_), then
  // replays and retries as Wait() says.
  absl::StatusOr<std::vector<Tensor>> WaitRetrying();
  // What Wait() does with this collective's own `result`: settles it and
  // names its failure.
  absl::StatusOr<std::vector<Tensor>> FinishOwn(
      absl::StatusOr<std::vector<Tensor>> result);
  // The two steps of a receive whose message reducerd picks.
  absl::StatusOr<std::vector<Tensor>> WaitMatched();
  // Hands the match's outcome to the session: the receive of the message
  // it names starts, or the match is abandoned.
  void TakeAnswer(absl::StatusOr<std::vector<Tensor>> answer)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(matched_->mu);

  ClientSession* const session_;
  absl::Status invalid_;  // the call was refused before anything was sent
  Contribution contribution_;
  // contribution_ as a replay sends it (header.replay, no payload).
  Contribution replay_;
  uint64_t attempt_number_ = 0;  // in its attempt id
  bool settled_ = true;          // false from its first attempt to Wait()'s end
  std::unique_ptr<CollectiveAttempt> attempt_;  // the latest
  // The first attempt's outcome, when Ready() took it before Wait().
  std::optional<absl::StatusOr<std::vector<Tensor>>> first_outcome_;
  std::unique_ptr<MatchedReceive> matched_;  // null: one step
};

}  // namespace reducer

#endif  // REDUCER_CLIENT_INTERNAL_PENDING_COLLECTIVE_H_
