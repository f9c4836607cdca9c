// StreamShares: how many collective streams each holder holds, capped per
// holder (--max_streams_per_tenant) so that no tenant (a line of the tokens
// file and every job under it; without tokens, a job name), buggy or
// hostile, can take every slot of --max_concurrent_calls and shut the
// others out. Two tables of holders:
//   - kTenant: a tenant holds a stream from the moment it opens when the
//     stream carries the tenant's token (silent or not: a stream is its
//     token's tenant's before it says anything), and once a call of one of
//     the tenant's jobs attaches on it;
//   - kSilentPeer: without a tokens file, nothing says whose a stream is
//     until a call of some job attaches on it, so its peer (the client's
//     address, without its port) holds it until then. A healthy client
//     sends its first call as it opens a stream, so this bounds the
//     streams that stay silent even with --stream_idle_timeout off (which
//     closes them as well). Without tokens, tenants are not kept apart
//     anyway: any client may name any job.
// A HeldStreamShares holds one stream's shares and gives them back when the
// stream ends. Thread-safe; a table holds only holders with streams.
#ifndef REDUCER_SERVER_JOBS_STREAM_SHARES_H_
#define REDUCER_SERVER_JOBS_STREAM_SHARES_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "server/metrics/metrics_sink.h"

namespace reducer {

class StreamShares {
 public:
  // What a table's holders are; it only changes what refusals say.
  enum class Holder { kTenant, kSilentPeer };

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
    // Whether it is a share of `shares`' table.
    bool Of(const StreamShares* shares) const { return shares_ == shares; }

   private:
    friend class StreamShares;
    Share(StreamShares* shares, std::string holder)
        : shares_(shares), holder_(std::move(holder)) {}
    void GiveBack();

    StreamShares* shares_ = nullptr;  // null: holds nothing
    std::string holder_;
  };

  // `metrics` (not owned) counts refusals. Must outlive every Share.
  StreamShares(Holder holder, int max_streams_per_tenant, MetricsSink* metrics);

  // A share of `holder`, or RESOURCE_EXHAUSTED naming it and
  // --max_streams_per_tenant when it already holds that many streams.
  absl::StatusOr<Share> Take(absl::string_view holder);

  // Streams `holder` holds now.
  int StreamsOf(absl::string_view holder) const;

 private:
  void GiveBack(const std::string& holder);

  const Holder holder_;
  const int max_streams_per_tenant_;
  MetricsSink* const metrics_;  // not owned
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, int> streams_ ABSL_GUARDED_BY(mu_);
};

// The shares one stream holds: the one it took as it opened (of its token's
// tenant, or of its peer's silent streams) until a call attaches on it,
// then one of each tenant whose calls attached on it; given back by
// GiveBack (when the stream ends) or when destroyed. A share taken for a
// call that then did not attach goes back at once, so that calls naming
// jobs that do not exist hold nothing. Thread-safe; Hold and Settle come
// in pairs, one call at a time.
class HeldStreamShares {
 public:
  // `tenant_shares` (kTenant) outlives this; `opening` is the share the
  // stream took as it opened (empty: none).
  HeldStreamShares(StreamShares* tenant_shares, StreamShares::Share opening)
      : shares_(tenant_shares), opening_(std::move(opening)) {}

  // Before a call of `job` attaches: OK when the stream holds a share of
  // the job's tenant already or took one now (its opening share, when that
  // is the tenant's, becomes it); else StreamShares::Take's error, and the
  // stream keeps what it held. `tenant_of` names the job's tenant; it is
  // asked only for a job other than the last one that attached.
  absl::Status Hold(absl::string_view job,
                    absl::FunctionRef<std::string()> tenant_of);

  // After an OK Hold: whether the call attached. If it did, the stream's
  // opening share goes back (it holds a tenant's now); if not, what Hold
  // took for it goes back.
  void Settle(bool attached);

  // Gives every share back; a later Hold takes them anew.
  void GiveBack();

 private:
  // What the last Hold did, for Settle.
  enum class Took { kNothing, kNewShare, kOpeningShare };

  StreamShares* const shares_;  // not owned
  absl::Mutex mu_;
  // One per tenant whose calls attached on the stream.
  std::vector<StreamShares::Share> held_ ABSL_GUARDED_BY(mu_);
  StreamShares::Share opening_ ABSL_GUARDED_BY(mu_);
  // The job of the last call that attached: its tenant is held.
  std::string last_job_ ABSL_GUARDED_BY(mu_);
  std::string pending_job_ ABSL_GUARDED_BY(mu_);     // Hold's, until Settle
  Took took_ ABSL_GUARDED_BY(mu_) = Took::kNothing;  // held_.back() if any
};

}  // namespace reducer

#endif  // REDUCER_SERVER_JOBS_STREAM_SHARES_H_
