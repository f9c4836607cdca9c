// RankChannel: how the collective engine talks back to one rank's call,
// whatever carries it. The engine hands over result bytes as SharedBytes and
// result specs as core TensorSpecs; encoding them for the wire is the
// channel's job (over gRPC: CollectiveReactor for a call on its own stream,
// CollectivesReactor's StreamAttempt for a call on the shared Collectives
// stream, both encoding with server/grpc/wire_bytes.h; on the same-host
// path, SharedMemorySession's RingAttempt).
#ifndef REDUCER_SERVER_ENGINE_RANK_CHANNEL_H_
#define REDUCER_SERVER_ENGINE_RANK_CHANNEL_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "core/fingerprint.h"
#include "server/engine/shared_bytes.h"

namespace reducer {

// One message of a rank's result.
struct ResultMessage {
  // Where `data` goes in the rank's result bytes.
  uint64_t offset = 0;
  // The result's tensors; set on the rank's first message only.
  std::shared_ptr<const std::vector<TensorSpec>> result_specs;
  std::vector<SharedBytes> data;
  // What stays counted in the memory budget while the message waits to be
  // written (its rank's reservation, server/engine/rank_reservation.h);
  // null: nothing. A channel keeps it until the message is written to its
  // client (gRPC: the write completed; same-host: the response is in the
  // ring) or dropped, never longer than it keeps the message.
  std::shared_ptr<const void> hold;
};

// Calls may come from any thread, with the Collective's lock held;
// implementations must not call back into the Collective from inside them.
class RankChannel {
 public:
  virtual ~RankChannel() = default;
  // Queues one message. With `last`, the call then ends with OK (in the same
  // write, saving the client a wakeup); nothing may follow. The message's
  // `hold` goes with it until it is written.
  virtual void Send(ResultMessage message, bool last) = 0;
  // Ends the call with OK once every queued message is written.
  virtual void FinishWhenSent() = 0;
  // Ends the call with `status` now; queued messages are dropped.
  virtual void Fail(const absl::Status& status) = 0;
  // Reading was paused (OnData returned false); read the next message.
  virtual void ResumeReading() = 0;
};

}  // namespace reducer

#endif  // REDUCER_SERVER_ENGINE_RANK_CHANNEL_H_
