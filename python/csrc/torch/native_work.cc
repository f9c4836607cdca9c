#include "python/csrc/torch/native_work.h"

#include <thread>
#include <utility>

#include "python/csrc/released_gil.h"

namespace reducer::python {
namespace {

constexpr int kDeadlineExceeded = 4;  // absl::StatusCode::kDeadlineExceeded

}  // namespace

WorkCompleter::WorkCompleter() : queue_(std::make_shared<Queue>()) {}

WorkCompleter::~WorkCompleter() {
  std::lock_guard<std::mutex> lock(queue_->mu);
  queue_->stopping = true;
  queue_->changed.notify_all();
}

void WorkCompleter::Submit(c10::intrusive_ptr<NativeWork> work) {
  std::lock_guard<std::mutex> lock(queue_->mu);
  queue_->works.push_back(std::move(work));
  if (!queue_->started) {
    queue_->started = true;
    std::thread(&WorkCompleter::Loop, queue_).detach();
  } else {
    queue_->changed.notify_one();
  }
}

void WorkCompleter::Loop(std::shared_ptr<Queue> queue) {
  std::unique_lock<std::mutex> lock(queue->mu);
  while (true) {
    queue->changed.wait(
        lock, [&] { return queue->stopping || !queue->works.empty(); });
    if (queue->works.empty()) return;  // stopping, and nothing left
    c10::intrusive_ptr<NativeWork> work = std::move(queue->works.front());
    queue->works.pop_front();
    lock.unlock();
    work->Collect();
    work.reset();  // may drop the completer's last reference: queue stays
    lock.lock();
  }
}

NativeWork::NativeWork(at::Tensor tensor,
                       std::unique_ptr<NativePending> pending,
                       std::shared_ptr<WorkCompleter> completer,
                       std::shared_ptr<const std::string> what)
    : c10d::Work(-1, c10d::OpType::ALLREDUCE, "reducer:all_reduce"),
      tensor_(std::move(tensor)),
      pending_(std::move(pending)),
      completer_(std::move(completer)),
      what_(std::move(what)) {}

NativeWork::~NativeWork() {
  if (pending_ == nullptr) return;
  // Never waited for: the collective still uses the tensor, so its
  // destruction waits for it; without the GIL, which other threads may need
  // meanwhile.
  if (Py_IsInitialized() && PyGILState_Check()) {
    ReleasedGil released;
    pending_.reset();
  } else {
    pending_.reset();
  }
}

bool NativeWork::Claim() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (claimed_) return false;
  claimed_ = true;
  return true;
}

void NativeWork::Collect() {
  NativeOutcome outcome = pending_->Wait();
  pending_.reset();
  std::exception_ptr error;
  if (outcome.code != 0) {
    error = std::make_exception_ptr(
        StatusError(outcome.code, outcome.message));
  }
  c10::intrusive_ptr<c10::ivalue::Future> future;
  std::function<void()> record_end;
  {
    // Completed and the future read in one step, so that exactly one of
    // this and getFuture() completes the future.
    std::lock_guard<std::mutex> lock(mutex_);
    completed_ = true;
    exception_ = error;
    future = future_;
    record_end = std::move(recordFunctionEndCallback_);
    recordFunctionEndCallback_ = nullptr;
  }
  if (record_end) record_end();
  cv_.notify_all();
  if (future) Settle(*future);
}

void NativeWork::Settle(c10::ivalue::Future& future) {
  if (exception_) {
    future.setError(exception_);
  } else {
    future.markCompleted(c10::IValue(std::vector<at::Tensor>{tensor_}));
  }
}

bool NativeWork::isCompleted() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (completed_) return true;
    // Unclaimed, nobody else asks the pending call while this lock is held.
    if (claimed_ || !pending_->Ready()) return false;
    claimed_ = true;
  }
  Collect();  // the answer is there: collecting it waits for no peer
  return true;
}

std::vector<at::Tensor> NativeWork::result() { return {tensor_}; }

bool NativeWork::wait(std::chrono::milliseconds timeout) {
  if (timeout <= ::kNoTimeout) {
    if (Claim()) {
      Collect();
    } else {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [&] { return completed_; });
    }
  } else {
    if (Claim()) {
      completer_->Submit(
          c10::intrusive_ptr<NativeWork>::unsafe_reclaim_from_nonowning(this));
    }
    std::unique_lock<std::mutex> lock(mutex_);
    if (!cv_.wait_for(lock, timeout, [&] { return completed_; })) {
      throw StatusError(
          kDeadlineExceeded,
          *what_ + ": Work.wait(timeout=" + std::to_string(timeout.count()) +
              " ms) timed out before the collective ended (it goes on; a "
              "rank that never calls it fails it at the collective's own "
              "deadline)");
    }
  }
  std::lock_guard<std::mutex> lock(mutex_);
  if (exception_) std::rethrow_exception(exception_);
  return true;
}

c10::intrusive_ptr<c10::ivalue::Future> NativeWork::getFuture() {
  bool settle_now = false;
  bool hand_over = false;
  c10::intrusive_ptr<c10::ivalue::Future> future;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (future_) return future_;
    future = future_ = c10::make_intrusive<c10::ivalue::Future>(
        c10::ListType::create(c10::TensorType::get()));
    settle_now = completed_;
    hand_over = !completed_ && !claimed_;
    claimed_ = true;
  }
  if (settle_now) {
    Settle(*future);
  } else if (hand_over) {
    completer_->Submit(
        c10::intrusive_ptr<NativeWork>::unsafe_reclaim_from_nonowning(this));
  }
  return future;
}

}  // namespace reducer::python
