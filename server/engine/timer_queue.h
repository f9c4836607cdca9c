// TimerQueue runs callbacks at given times of its Clock (server/engine/
// clock.h; the steady clock unless given another) on one background thread.
//
//   TimerQueue timers;
//   TimerQueue::Id id = timers.Schedule(
//       timers.clock().Now() + absl::Seconds(5), [] { LOG("stalled"); });
//   timers.Cancel(id);   // no-op if it already ran
//
// Times are the clock's, and so is the waiting: a step of the wall clock
// neither hastens nor delays a timer. With a FakeClock a timer runs soon
// after the clock is advanced past its time (the thread re-reads the clock
// every FakeClock::MaxSleep()), and never before.
//
// Thread-safe. Callbacks run one at a time on the timer thread, without any
// TimerQueue lock held, so they may call Schedule and Cancel. The destructor
// drops callbacks that have not run yet and joins the thread. The thread
// is woken only by a timer due sooner than the one it sleeps for (and by
// the destructor): a timer cancelled before it is due costs no wake-up, as
// most of the engine's stall warnings and deadlines are.
#ifndef REDUCER_SERVER_ENGINE_TIMER_QUEUE_H_
#define REDUCER_SERVER_ENGINE_TIMER_QUEUE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/engine/clock.h"

namespace reducer {

class TimerQueue {
 public:
  using Id = uint64_t;

  // `clock` must outlive the queue.
  explicit TimerQueue(const Clock* clock = &Clock::Steady());
  ~TimerQueue();
  TimerQueue(const TimerQueue&) = delete;
  TimerQueue& operator=(const TimerQueue&) = delete;

  // The clock whose times Schedule takes: read it to compute them.
  const Clock& clock() const { return *clock_; }

  // Runs `callback` at or soon after `when`, a time of clock(). Returns an id for Cancel.
  Id Schedule(absl::Time when, std::function<void()> callback);
  // Drops the callback if it has not started. Safe with unknown ids.
  void Cancel(Id id);

 private:
  void Run();

  const Clock* const clock_;
  absl::Mutex mu_;
  absl::CondVar wake_;  // signalled on a sooner Schedule and on shutdown
  // When the thread wakes by itself next. Cancel() leaves it be, so in the
  // common case (timers scheduled and cancelled well before they are due)
  // the thread stays asleep: waking it costs a context switch per timer.
  absl::Time wake_at_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  // Ordered by (time, id) so equal times run in scheduling order.
  std::map<std::pair<absl::Time, Id>, std::function<void()>> pending_
      ABSL_GUARDED_BY(mu_);
  std::map<Id, absl::Time> time_of_ ABSL_GUARDED_BY(mu_);
  Id next_id_ ABSL_GUARDED_BY(mu_) = 1;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // constructed last: Run() reads the fields above
};

}  // namespace reducer

#endif  // REDUCER_SERVER_ENGINE_TIMER_QUEUE_H_
