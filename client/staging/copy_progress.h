// CopyProgress: the InputGate of a copy that fills a payload front to back,
// chunk by chunk. The copier calls Advance as each chunk lands (device
// staging does so from a host function on its CUDA copy stream) or Fail
// when a copy went wrong; transports Await the bytes they are about to read.
//
//   CopyProgress progress(total_bytes);
//   contribution.inputs_gate = &progress;
//   ... copier thread: progress.Advance(end_of_chunk); ...
//   ... transport:     absl::Status ready = progress.Await(end, deadline);
//
// Thread-safe.
#ifndef REDUCER_CLIENT_STAGING_COPY_PROGRESS_H_
#define REDUCER_CLIENT_STAGING_COPY_PROGRESS_H_

#include <cstddef>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/internal/input_gate.h"

namespace reducer {

class CopyProgress final : public InputGate {
 public:
  // A copy of `total_bytes` bytes, none of them there yet.
  explicit CopyProgress(size_t total_bytes) : total_bytes_(total_bytes) {}

  // InputGate. DEADLINE_EXCEEDED names how far the copy had come; an `end`
  // past total_bytes waits for the whole copy.
  absl::Status Await(size_t end, absl::Time deadline) const override;

  // Bytes [0, ready_bytes) are there (a smaller mark than before is
  // ignored). Never blocks: safe in a CUDA host function.
  void Advance(size_t ready_bytes);

  // The copy failed with `error` (not OK): every Await that is not yet
  // covered returns it. The first failure wins. Never blocks.
  void Fail(absl::Status error);

  // How many bytes are there so far.
  size_t ready_bytes() const;

 private:
  const size_t total_bytes_;

  mutable absl::Mutex mu_;
  size_t ready_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
};

}  // namespace reducer

#endif  // REDUCER_CLIENT_STAGING_COPY_PROGRESS_H_
