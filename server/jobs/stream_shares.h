// StreamShares: how many collective streams each holder holds, capped per
// holder (--max_streams_per_job) so that no job, and no peer whose streams
// say nothing, buggy or hostile, can take every slot of
// --max_concurrent_calls and shut the others out. Two tables of holders:
//   - kJob: a job holds a stream once a call of the job attaches on it;
//   - kSilentPeer: a peer (the client's address, without its port) holds
//     each stream it opened until a call of it attaches on it. A healthy
//     client sends its first call as it opens a stream, so this bounds the
//     streams that stay silent without any timeout.
// A HeldStreamShares holds one stream's shares and gives them back when the
// stream ends. Thread-safe; a table holds only holders with streams.
#ifndef REDUCER_SERVER_JOBS_STREAM_SHARES_H_
#define REDUCER_SERVER_JOBS_STREAM_SHARES_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "server/metrics/metrics_sink.h"

namespace reducer {

class StreamShares {
 public:
  // What a table's holders are; it only changes what refusals say.
  enum class Holder { kJob, kSilentPeer };

  // One stream's share of one holder; gives it back when destroyed.
  // Move-only.
  class Share {
   public:
    Share() = default;
    Share(Share&& other) noexcept;
    Share& operator=(Share&& other) noexcept;
    Share(const Share&) = delete;
    Share& operator=(const Share&) = delete;
    ~Share();

    // Whose share it is; empty when it holds nothing.
    const std::string& holder() const { return holder_; }

   private:
    friend class StreamShares;
    Share(StreamShares* shares, std::string holder)
        : shares_(shares), holder_(std::move(holder)) {}
    void GiveBack();

    StreamShares* shares_ = nullptr;  // null: holds nothing
    std::string holder_;
  };

  // `metrics` (not owned) counts refusals. Must outlive every Share.
  StreamShares(Holder holder, int max_streams_per_job, MetricsSink* metrics);

  // A share of `holder`, or RESOURCE_EXHAUSTED naming it and
  // --max_streams_per_job when it already holds that many streams.
  absl::StatusOr<Share> Take(absl::string_view holder);

  // Streams `holder` holds now.
  int StreamsOf(absl::string_view holder) const;

 private:
  void GiveBack(const std::string& holder);

  const Holder holder_;
  const int max_streams_per_job_;
  MetricsSink* const metrics_;  // not owned
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, int> streams_ ABSL_GUARDED_BY(mu_);
};

// The shares one stream holds: its silent peer's until its first call, then
// one of each job it attached calls to; given back by GiveBack (when the
// stream ends) or when destroyed. Thread-safe.
class HeldStreamShares {
 public:
  // `job_shares` (kJob) outlives this; `silent` is the stream's share of its
  // peer's silent streams (empty: none), held until the first Hold.
  HeldStreamShares(StreamShares* job_shares, StreamShares::Share silent)
      : shares_(job_shares), silent_(std::move(silent)) {}

  // OK when the stream already holds a share of `job` or has taken one now
  // (its silent share then goes back); else StreamShares::Take's error.
  absl::Status Hold(absl::string_view job);

  // Gives every share back; a later Hold takes them anew.
  void GiveBack();

 private:
  StreamShares* const shares_;  // not owned
  absl::Mutex mu_;
  std::vector<StreamShares::Share> held_ ABSL_GUARDED_BY(mu_);  // one per job
  StreamShares::Share silent_ ABSL_GUARDED_BY(mu_);
};

}  // namespace reducer

#endif  // REDUCER_SERVER_JOBS_STREAM_SHARES_H_
