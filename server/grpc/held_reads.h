// HeldReads: the deadline on the reads a Collectives stream holds back.
//
// Why streams hold reads: while a small call waits for the other ranks,
// posting the stream's next read makes gRPC announce the freed flow-control
// window in an HTTP/2 message of its own, which costs reducerd a sendmsg
// and the client a wake-up and a recvmsg, per call. So a stream holds its
// next read until one of its calls is answered (CollectivesReactor), and
// the window update then travels with the answer.
//
// Why a deadline: ranks may start named collectives in different orders
// (rank 0 A then B, rank 1 B then A). Each stream would then hold the read
// of the call the other waits for, forever. HeldReads releases every read
// held for longer than `deadline`, so such calls still meet, later.
//
//   HeldReads held(absl::Milliseconds(2));
//   held.Hold(stream);   // stream->ReleaseHeldRead() within 1.5 x deadline,
//                        // unless the stream is gone by then
//
// One thread, asleep while nothing is held. Holds come in deadline order, so
// one wake-up releases every hold due, and wake-ups are at least half a
// deadline apart however many reads are held. Thread-safe.
#ifndef REDUCER_SERVER_GRPC_HELD_READS_H_
#define REDUCER_SERVER_GRPC_HELD_READS_H_

#include <deque>
#include <memory>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace reducer {

class HeldReads {
 public:
  // What holds a read back.
  class Holder {
   public:
    // Posts the held read, if it is still held (the holder may have
    // released it already, or ended). Called on HeldReads' thread, with no
    // HeldReads lock held.
    virtual void ReleaseHeldRead() = 0;

   protected:
    ~Holder() = default;
  };

  // Starts the thread.
  explicit HeldReads(absl::Duration deadline);
  // Drops the holds not yet due and joins the thread.
  ~HeldReads();
  HeldReads(const HeldReads&) = delete;
  HeldReads& operator=(const HeldReads&) = delete;

  // `holder` holds a read from now: its ReleaseHeldRead runs once the
  // deadline is past (between 1 and 1.5 deadlines from now), unless it is
  // destroyed first.
  void Hold(std::weak_ptr<Holder> holder);

 private:
  void Run();

  const absl::Duration deadline_;
  absl::Mutex mu_;
  // Oldest first: when each hold is due, and its holder.
  std::deque<std::pair<absl::Time, std::weak_ptr<Holder>>> held_
      ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace reducer

#endif  // REDUCER_SERVER_GRPC_HELD_READS_H_
