// ForwardedMessage: a point-to-point message held on a relay (its send
// matched here, its receive not come) that goes upstream after all: before
// a match of its destination, or before its source's loss is reported
// upstream (local_messages.h, rules 4 and 5). It is the
// destination's call as the job's engine sees it: the held bytes it is
// handed (RankChannel::Send) fill the payload of the source's Send, which
// it starts upstream at once with the source's header, as the source would
// have. The source's own call ended OK long ago (a buffered send), so the
// upstream call's outcome is logged, not returned: a failure there is
// upstream's, as for a directly connected Send whose Receive never comes.
//
// Memory: the payload's copy upstream lives until upstream took it; the
// engine's copy is released as the message is delivered here.
//
// Thread-safe.
#ifndef REDUCER_SERVER_RELAY_FORWARDED_MESSAGE_H_
#define REDUCER_SERVER_RELAY_FORWARDED_MESSAGE_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "proto/reducer/v1/reducer.pb.h"
#include "server/engine/rank_channel.h"
#include "server/relay/upstream.h"

namespace reducer {

class ForwardedMessage final : public RankChannel {
 public:
  // Starts `send` (the source's header, of `bytes` payload bytes) upstream
  // on `session`; `done` gets its outcome, once, from another thread.
  ForwardedMessage(UpstreamSession& session, v1::CollectiveHeader send,
                   size_t bytes, std::function<void(absl::Status)> done);

  // RankChannel: the message's bytes, at their offsets.
  void Send(ResultMessage message, bool last) override;
  void FinishWhenSent() override {}
  // The message cannot be handed over: the upstream call fails.
  void Fail(const absl::Status& status) override;
  void ResumeReading() override {}

 private:
  const std::shared_ptr<UpstreamInput> input_;
  absl::Mutex mu_;
  // Bytes [0, filled_) are in; later pieces that came early, by offset.
  size_t filled_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<uint64_t, uint64_t> early_ ABSL_GUARDED_BY(mu_);  // begin -> end
};

}  // namespace reducer

#endif  // REDUCER_SERVER_RELAY_FORWARDED_MESSAGE_H_
