// ProgressEngine: what a waiting caller runs to make its transports'
// outstanding operations progress, as MPI's progress engine does. The gRPC
// transport's CompletionDriver is one (it polls the completion queue on the
// waiting thread); backends that compose others (the sharded backend) wait
// through this interface and so never see a transport's types.
//
// Implementations are thread-safe.
#ifndef REDUCER_CLIENT_INTERNAL_PROGRESS_ENGINE_H_
#define REDUCER_CLIENT_INTERNAL_PROGRESS_ENGINE_H_

#include <functional>

#include "absl/time/time.h"

namespace reducer {

class ProgressEngine {
 public:
  virtual ~ProgressEngine() = default;

  // Makes progress on the calling thread (or waits while another thread
  // does) until `done()` is true or `deadline` passes. `done` may be called
  // with the engine's lock held: it may take locks that completion handlers
  // take, and must not call into the engine. Returns done().
  virtual bool DriveUntil(const std::function<bool()>& done,
                          absl::Time deadline) = 0;

  // Makes every thread inside DriveUntil evaluate its condition again now,
  // for outcomes that arrive other than through this engine. Cheap when
  // nobody is inside DriveUntil.
  virtual void Wake() = 0;

  // Handles whatever has completed already, without waiting.
  virtual void PollReady() = 0;
};

}  // namespace reducer

#endif  // REDUCER_CLIENT_INTERNAL_PROGRESS_ENGINE_H_
