// AttachedCollective: what a transport's call feeds once it is attached,
// whatever it attached to: a Collective (server/engine/collective.h), or on
// a relay (reducerd --upstream) the collective that combines its host's
// ranks and takes the result from upstream (server/relay/). The transports
// (server/grpc, server/shm) know only this; every method may be called from
// any thread, without the transport's own locks held.
#ifndef REDUCER_SERVER_ENGINE_ATTACHED_COLLECTIVE_H_
#define REDUCER_SERVER_ENGINE_ATTACHED_COLLECTIVE_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "server/engine/rank_channel.h"
#include "server/engine/shared_bytes.h"

namespace reducer {

class AttachedCollective {
 public:
  virtual ~AttachedCollective() = default;

  // `rank`'s payload bytes [offset, offset + data.size()). Returns true if
  // the channel may read its next message now, false if it must wait for
  // RankChannel::ResumeReading(). Out-of-order or excess bytes fail the
  // collective.
  virtual bool OnData(int rank, uint64_t offset, Payload data) = 0;
  // `rank`'s client closed its side: INVALID_ARGUMENT if payload is missing.
  virtual void OnInputEnd(int rank) = 0;
  // A message queued for `rank` was written.
  virtual void OnWriteDone(int rank) = 0;
  // `rank`'s call on `channel` was cancelled (its connection dropped or it
  // gave up).
  virtual void OnRankCancelled(int rank, const RankChannel* channel) = 0;
  // Fails the collective for every rank attached and every later attach
  // (a transport's own finding: a malformed message).
  virtual void Fail(const absl::Status& status) = 0;
  // Names it in messages: `allreduce "step7" in job j1`.
  virtual const std::string& description() const = 0;
};

}  // namespace reducer

#endif  // REDUCER_SERVER_ENGINE_ATTACHED_COLLECTIVE_H_
