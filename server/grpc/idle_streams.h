// IdleStreams: closes the collective streams (Collective and Collectives)
// on which nothing happened for --stream_idle_timeout: no message arrived,
// no call was in flight and no answer was left to write, all that long. A
// stream left open by a client that forgot it, or opened to hold a slot,
// gives its slot of --max_concurrent_calls and its tenant's share back.
//
// What counts as something happening: a message arriving (so a slow link
// that brings a chunk now and then is never cut; a message arrives whole,
// so one chunk must arrive within the timeout), a call in flight (a call
// waiting for other ranks keeps its stream however long it waits; the
// collective's own timeout bounds that), an answer being written. Session
// (Join) streams are never watched: a session is its rank's seat in a job,
// and keepalive pings find a vanished peer.
//
// A stream is closed UNAVAILABLE naming the flag, and a closed stream
// handles no message that arrives after: a call sent on it as it closed
// was not used, so the client library sends it again on a new stream (as
// for any UNAVAILABLE before an answer), and the client sees nothing.
//
//   IdleStreams idle(absl::Minutes(10));
//   idle.Watch(key, stream->weak_from_this());   // as the stream opens
//   idle.Forget(key);                            // as it ends
//
// One thread, which looks at every watched stream every eighth of the
// timeout, so a stream is closed between 1 and 1.125 timeouts after it went
// idle. Off (no thread) with a timeout of zero. Thread-safe.
#ifndef REDUCER_SERVER_GRPC_IDLE_STREAMS_H_
#define REDUCER_SERVER_GRPC_IDLE_STREAMS_H_

#include <memory>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/engine/clock.h"

namespace reducer {

class IdleStreams {
 public:
  // What a watched stream does.
  class Stream {
   public:
    // Ends the stream with `status` if it has been idle (see above) since
    // `cutoff` or before; else does nothing. Times are Clock::Steady()'s
    // (server/engine/clock.h), so a wall-clock step closes no stream. Called on IdleStreams'
    // thread, with no IdleStreams lock held.
    virtual void CloseIfIdleSince(absl::Time cutoff,
                                  const absl::Status& status) = 0;

   protected:
    ~Stream() = default;
  };

  // `timeout` zero (or less): off, and Watch does nothing.
  explicit IdleStreams(absl::Duration timeout);
  // Joins the thread.
  ~IdleStreams();
  IdleStreams(const IdleStreams&) = delete;
  IdleStreams& operator=(const IdleStreams&) = delete;

  bool on() const { return timeout_ > absl::ZeroDuration(); }

  // Watches `stream` under `key` (unique among the streams watched) until
  // Forget(key). A stream already gone is forgotten at the next look.
  void Watch(const void* key, std::weak_ptr<Stream> stream);
  // Stops watching the stream under `key`; nothing when there is none.
  void Forget(const void* key);

  // The status an idle stream is closed with.
  absl::Status ClosedStatus() const;

 private:
  void Run();

  const absl::Duration timeout_;
  absl::Mutex mu_;
  absl::flat_hash_map<const void*, std::weak_ptr<Stream>> watched_
      ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // started last; none when off
};

}  // namespace reducer

#endif  // REDUCER_SERVER_GRPC_IDLE_STREAMS_H_
