// NativeWork: a c10d::Work over a collective started through the native API
// (python/csrc/native_api.h), the torch backend's all-reduce without Python
// in its path; WorkCompleter, the thread that collects works handed to it.
//
//   auto completer = std::make_shared<WorkCompleter>();
//   auto work = c10::make_intrusive<NativeWork>(
//       tensor, connection->AllReduceInPlace(...), completer, "all_reduce ...");
//   work->wait();               // collects on this thread
//   work->getFuture()->then(...) // or: the completer collects, completes it
//
// Contract (as the Python backend's TorchWork, reducer/_torch_work.py):
// exactly one thread collects a work, whichever asks first. wait() without a
// timeout collects on the caller's thread (no hand-off between threads, which
// on a small collective costs more than the rest of the call); getFuture(),
// wait(timeout) and an isCompleted() that finds the answer ready hand it to
// the group's WorkCompleter. The tensor changes only once the whole result
// has arrived (all or nothing), and only then does the work count as
// completed. A future's value is the list of output tensors, as torch's own
// backends give it. A failed collective raises reducer's error class for its
// code (reducer.DeadlineExceeded, reducer.Aborted, ...) from wait(), the
// future, and what exception() returns.
#ifndef REDUCER_PYTHON_CSRC_TORCH_NATIVE_WORK_H_
#define REDUCER_PYTHON_CSRC_TORCH_NATIVE_WORK_H_

#include <torch/csrc/distributed/c10d/Work.hpp>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "python/csrc/native_api.h"
#include "python/csrc/status_exception.h"

namespace reducer::python {

class NativeWork;

// A thread that collects the works handed to it, in the order they came,
// and completes their futures (whose callbacks run on it). Thread-safe.
// Started by the first Submit. Destroying it never blocks: the thread ends
// by itself once what was submitted is collected (each collection is
// bounded by its collective's deadline), so a group dropped while holding
// the GIL never waits for a future's callback that needs the GIL.
class WorkCompleter {
 public:
  WorkCompleter();
  ~WorkCompleter();
  WorkCompleter(const WorkCompleter&) = delete;
  WorkCompleter& operator=(const WorkCompleter&) = delete;

  // `work` must be claimed by the caller (NativeWork::Claim).
  void Submit(c10::intrusive_ptr<NativeWork> work);

 private:
  // What the thread shares with the completer; the thread holds it too, so
  // it outlives a completer destroyed first (even on the thread itself,
  // when a future's callback dropped the group's last reference).
  struct Queue {
    std::mutex mu;
    std::condition_variable changed;
    std::deque<c10::intrusive_ptr<NativeWork>> works;  // guarded by mu
    bool stopping = false;                             // guarded by mu
    bool started = false;                              // guarded by mu
  };
  static void Loop(std::shared_ptr<Queue> queue);

  const std::shared_ptr<Queue> queue_;
};

class NativeWork : public c10d::Work {
 public:
  // `tensor` is the in-place all-reduce's buffer, which `pending` writes;
  // `what` names the collective and its group in errors ("all_reduce in job
  // J (rank R)"), shared by the group's works (made once, not per call).
  NativeWork(at::Tensor tensor, std::unique_ptr<NativePending> pending,
             std::shared_ptr<WorkCompleter> completer,
             std::shared_ptr<const std::string> what);
  ~NativeWork() override;

  // torch's Work API.
  // Never blocks: true once the tensor holds the result (or it failed).
  bool isCompleted() override;
  std::vector<at::Tensor> result() override;
  // kNoTimeout (zero): until the collective ends. A positive timeout throws
  // StatusError(DEADLINE_EXCEEDED) when it has not ended by then; the
  // collective itself goes on. Rethrows the collective's error.
  bool wait(std::chrono::milliseconds timeout = ::kNoTimeout) override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;

  // For WorkCompleter: waits for the outcome and finishes the work (and
  // completes its future). Run once, by the thread that claimed it.
  void Collect();

 private:
  // True when the caller is now the one thread that collects.
  bool Claim();
  // Completes `future` with the outcome (collected, final).
  void Settle(c10::ivalue::Future& future);

  const at::Tensor tensor_;
  std::unique_ptr<NativePending> pending_;  // the collector's; null once done
  const std::shared_ptr<WorkCompleter> completer_;
  const std::shared_ptr<const std::string> what_;
  // Guarded by the base's mutex_ (completed_ and exception_ too):
  bool claimed_ = false;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

}  // namespace reducer::python

#endif  // REDUCER_PYTHON_CSRC_TORCH_NATIVE_WORK_H_
