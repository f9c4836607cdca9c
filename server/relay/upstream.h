// What a relay (reducerd --upstream) needs from the reducerd shards
// upstream: a session that holds the ranks of its host for one epoch of a
// job, and calls through it. Transport-free: the relay's core
// (relay_job.h, relay_collective.h) sees only these interfaces; the one
// implementation over the client library is server/relay/client/.
//
//   std::shared_ptr<UpstreamInput> input = std::make_shared<UpstreamInput>(n);
//   session->Start(header, input, /*into=*/nullptr,
//                  [](absl::StatusOr<UpstreamResult> r) {...});
//   std::memcpy(input->data(), bytes, k);
//   input->MarkReady(k);  // the call may send bytes [0, k) now
#ifndef REDUCER_SERVER_RELAY_UPSTREAM_H_
#define REDUCER_SERVER_RELAY_UPSTREAM_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/buffer.h"
#include "core/fingerprint.h"
#include "core/result_into.h"
#include "proto/reducer/v1/reducer.pb.h"

namespace reducer {

// The payload a relay sends upstream for one collective, filled while it
// is being sent: bytes [0, ready) may be read. Aligned to 64 bytes.
// Thread-safe.
class UpstreamInput {
 public:
  // Its memory comes from `buffers` (and goes back there with it), or from
  // malloc when null: a relay reuses warm buffers from one call to the
  // next rather than faulting fresh pages in for each.
  explicit UpstreamInput(size_t bytes, BufferPool* buffers = nullptr);
  UpstreamInput(const UpstreamInput&) = delete;
  UpstreamInput& operator=(const UpstreamInput&) = delete;

  char* data() { return static_cast<char*>(buffer_.get()); }
  size_t size() const { return bytes_; }

  // Bytes [0, end) are ready to be read (end never goes back).
  void MarkReady(size_t end);
  // The input will never be whole (the collective failed on the relay):
  // Await returns `why` from now on.
  void Abandon(const absl::Status& why);
  // Blocks until bytes [0, end) are ready (OK), the input is abandoned (its
  // status), or `deadline` passes (DEADLINE_EXCEEDED).
  absl::Status Await(size_t end, absl::Time deadline) const;
  // Bytes ready now.
  size_t ready() const;

 private:
  const size_t bytes_;
  const Buffer buffer_;
  mutable absl::Mutex mu_;
  size_t ready_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status abandoned_ ABSL_GUARDED_BY(mu_);
};

// What one upstream call gave back: the result's tensors (their specs and
// bytes, each tensor's bytes at its own pointer), empty for a rank that
// gets none.
struct UpstreamResult {
  std::vector<TensorSpec> specs;
  std::vector<const void*> data;  // data[i]: specs[i]'s bytes
  // Owns the bytes `data` points to.
  std::shared_ptr<const void> owner;
};

// One epoch's session upstream, holding the relay's ranks of one job.
class UpstreamSession {
 public:
  virtual ~UpstreamSession() = default;
  // Starts one call: `header` as the relay forwards it (rank, ranks, group,
  // sequence or name, kind, tensors, root, timeout and the kind's own
  // fields; the session fills job, epoch, session id and attempt id), its
  // payload `input` (laid out as header.tensors), read as it is marked
  // ready. `into` (an all-reduce's, or null): where its result is written
  // as it arrives, `into->landed` told of each range (so that the relay
  // hands it on before the whole is in); the result `done` gets is then
  // over that memory. `done` is called once, from another thread.
  virtual void Start(
      v1::CollectiveHeader header, std::shared_ptr<UpstreamInput> input,
      std::shared_ptr<const ResultInto> into,
      std::function<void(absl::StatusOr<UpstreamResult>)> done) = 0;
  // Leaves the job upstream, ending its epoch there with `cause` (the
  // relay ends its part of the epoch: it let go of the job, or a rank's
  // loss could not be reported with LoseRanks).
  virtual void Leave(const std::string& cause) = 0;
  // Tells upstream that `ranks` of this session were lost (`cause` says
  // how; empty: they departed on purpose): each is lost (or departs) there
  // as a directly connected rank's session would (LeaveRequest.ranks), and
  // the session goes on holding the others.
  // Blocks for upstream's answer (a second or so). OK when every shard
  // took it.
  virtual absl::Status LoseRanks(const std::vector<int>& ranks,
                                 const std::string& cause) = 0;
  // The first quorum step its ranks take part in: nonzero when the job
  // admitted them into its running epoch (JobReady.quorum_steps_started:
  // a lost rank joining again), else 0.
  virtual uint64_t FirstQuorumStep() const { return 0; }
};

// Opens upstream sessions.
class Upstream {
 public:
  virtual ~Upstream() = default;
  // Joins `job` of `world_size` ranks upstream, holding `ranks` (sorted),
  // with the job's `token` when tokens are on; blocks until the job is
  // ready upstream, or the join failed. `given_up` is polled meanwhile (at
  // least once a second): once it is true, Open returns CANCELLED (the
  // relay stops, or the ranks it joins for have gone). `ended` is called
  // once, from another thread, if the session ends without Leave (its
  // epoch aborted upstream, a shard lost), with why.
  virtual absl::StatusOr<std::unique_ptr<UpstreamSession>> Open(
      const std::string& job, int world_size, const std::vector<int>& ranks,
      std::function<bool()> given_up,
      std::function<void(const absl::Status&)> ended) = 0;
};

}  // namespace reducer

#endif  // REDUCER_SERVER_RELAY_UPSTREAM_H_
