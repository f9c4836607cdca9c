// InputGate: says when a contribution's payload bytes may be read. Device
// staging copies a GPU tensor to host memory in chunks while the transport
// already sends what has arrived; every transport that reads input bytes
// first awaits them through Contribution::AwaitPayload (the gate, when the
// contribution has one), so a byte is never read before its copy is done.
//
//   absl::Status ready = contribution.AwaitPayload(end);  // bytes [0, end)
//   if (!ready.ok()) ... fail the attempt with it, sending nothing more ...
//
// Implementations are thread-safe: Await is called from any thread, also
// from the completion thread between two messages of one call.
#ifndef REDUCER_CLIENT_INTERNAL_INPUT_GATE_H_
#define REDUCER_CLIENT_INTERNAL_INPUT_GATE_H_

#include <cstddef>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace reducer {

class InputGate {
 public:
  virtual ~InputGate() = default;

  // Blocks until bytes [0, end) of the packed payload (offsets of the
  // contribution's PayloadLayout) may be read through its inputs. OK then;
  // the copy's error (INTERNAL naming the CUDA call) when filling them
  // failed; DEADLINE_EXCEEDED when `deadline` passed first. Bytes only ever
  // become readable in order, so an OK for `end` holds for every smaller end.
  virtual absl::Status Await(size_t end, absl::Time deadline) const = 0;
};

}  // namespace reducer

#endif  // REDUCER_CLIENT_INTERNAL_INPUT_GATE_H_
