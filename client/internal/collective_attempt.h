// CollectiveAttempt: one attempt at running a collective, whichever way it
// travels to reducerd (its own Collective stream for large payloads, or the
// shared Collectives stream for payloads of one message). The attempt is
// sent when it is created; Wait() blocks for its outcome.
//
// Contract: caller memory behind the inputs is only read, and must stay valid
// and unchanged until Wait() returns; a byte is read only once the
// contribution's AwaitPayload covered it. Wait() is called at most once, from
// one thread.
#ifndef REDUCER_CLIENT_INTERNAL_COLLECTIVE_ATTEMPT_H_
#define REDUCER_CLIENT_INTERNAL_COLLECTIVE_ATTEMPT_H_

#include <cstddef>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/internal/input_gate.h"
#include "core/device.h"
#include "core/payload_layout.h"
#include "core/result_into.h"
#include "core/tensor.h"
#include "proto/reducer/v1/reducer.pb.h"

namespace reducer {

// This rank's contribution to one collective: what every attempt sends.
struct Contribution {
  v1::CollectiveHeader header;
  PayloadLayout layout;              // of header.tensors
  std::vector<const void*> inputs;   // inputs[i]: tensor i's bytes (caller's)
  bool send_payload = true;          // false: declare shapes, send no bytes
  absl::Time deadline;               // when the client gives up
  // Where inputs live and results go (StagingBackend moves them between a
  // GPU and the host; the transports see only the CPU), and the
  // cudaStream_t the inputs are ordered after (null: the default stream).
  Device device;
  void* cuda_stream = nullptr;
  // Null: every input byte may be read now. Else the staging that is still
  // filling `inputs` (it outlives every attempt of this contribution), and
  // a transport reads payload bytes only after AwaitPayload covered them.
  const InputGate* inputs_gate = nullptr;
  // The caller copies the result out as soon as Wait() hands it over, then
  // drops it (an in-place all-reduce): a transport may hand out a tensor
  // lent from its own memory (Tensor::Lent: the same-host path's result
  // segment, read-only) instead of a copy, saving one copy of the result.
  bool result_may_be_lent = false;
  // False: never over the same-host path, whose session carries only the
  // calls of the rank it was opened for (a relay's call forwarded for
  // another of its ranks goes over gRPC).
  bool same_host_path = true;
  // Null: the result is assembled into tensors of the call's own. Else the
  // memory it is written into as it arrives, whose tensors the result then
  // lends (a relay's forwarded all-reduce; core/result_into.h): a
  // transport checks that the result's tensors are its specs.
  std::shared_ptr<const ResultInto> result_into;

  size_t payload_bytes() const { return send_payload ? layout.total_bytes : 0; }

  // This contribution as a replay sends it: the same header marked replay
  // (reducerd answers with the result it kept for that attempt), no
  // payload.
  Contribution AsReplay() const {
    Contribution replay = *this;
    replay.header.set_replay(true);
    replay.send_payload = false;
    return replay;
  }

  // OK once payload bytes [0, end) may be read; InputGate::Await's errors
  // (the copy's own, or DEADLINE_EXCEEDED at `deadline`) otherwise.
  absl::Status AwaitPayload(size_t end) const {
    if (inputs_gate == nullptr || end == 0) return absl::OkStatus();
    return inputs_gate->Await(end, deadline);
  }
};

class CollectiveAttempt {
 public:
  virtual ~CollectiveAttempt() = default;

  // Blocks until the server answered or the attempt's deadline passed.
  // Returns the result only when every byte of it arrived; else the
  // server's status, or DATA_LOSS / INTERNAL if its answer does not add up.
  virtual absl::StatusOr<std::vector<Tensor>> Wait() = 0;

  // True once the attempt's outcome is known, so that Wait() returns
  // without waiting on reducerd. Never blocks.
  virtual bool Ready() = 0;

  // True once the attempt's outcome is known, judged from what has been
  // received so far: unlike Ready(), it neither polls nor blocks, so it may
  // be called inside ProgressEngine::DriveUntil's condition (to wait for
  // the first of several attempts).
  virtual bool Settled() = 0;

  // Gives the attempt up: Wait() then returns promptly, CANCELLED unless
  // the outcome came first, and still only once gRPC no longer reads the
  // caller's memory. May be called from any thread, before Wait().
  virtual void Cancel() = 0;

  // After Wait(): true if any answer arrived. An attempt that failed with
  // UNAVAILABLE before that may be retried with the same header.
  virtual bool received_any() const = 0;

  // True when the attempt replays and retries its own parts (a sharded
  // collective's partitions, each on its shard): its caller must neither
  // ask for its result again nor resend it.
  virtual bool retries_itself() const { return false; }
};

}  // namespace reducer

#endif  // REDUCER_CLIENT_INTERNAL_COLLECTIVE_ATTEMPT_H_
