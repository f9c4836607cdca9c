#include "client/transport/grpc/completion_driver.h"

#include <algorithm>
#include <chrono>

namespace reducer {
namespace {

// How long callers must leave the queue alone before the background thread
// polls: far below the keepalive timeout, far above the gap between two
// collectives of a busy loop.
constexpr absl::Duration kIdleGrace = absl::Milliseconds(20);

// The background thread's longest poll; bounds how late it notices a stop
// if a kick were lost.
constexpr absl::Duration kBackgroundPoll = absl::Seconds(1);

}  // namespace

void CompletionDriver::Kick::OnComplete(bool /*ok*/) {
  absl::MutexLock lock(&driver_->mu_);
  driver_->kick_pending_ = false;
}

CompletionDriver::CompletionDriver() : background_([this] { RunBackground(); }) {}

CompletionDriver::~CompletionDriver() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    if (background_driving_) KickBackgroundLocked();
    background_cv_.Signal();
  }
  background_.join();
  alarm_.Cancel();  // a kick still pending completes (cancelled) at once
  cq_.Shutdown();
  void* tag = nullptr;
  bool ok = false;
  while (cq_.Next(&tag, &ok)) {
  }
}

void CompletionDriver::PollOnce(absl::Time deadline) {
  void* tag = nullptr;
  bool ok = false;
  if (cq_.AsyncNext(&tag, &ok, absl::ToChronoTime(deadline)) ==
      grpc::CompletionQueue::GOT_EVENT) {
    static_cast<Handler*>(tag)->OnComplete(ok);
  }
}

void CompletionDriver::KickBackgroundLocked() {
  if (kick_pending_) return;
  kick_pending_ = true;
  alarm_.Set(&cq_, std::chrono::system_clock::now(), &kick_);
}

bool CompletionDriver::DriveUntil(const std::function<bool()>& done,
                                  absl::Time deadline) {
  mu_.Lock();
  ++callers_;
  bool result = false;
  while (!(result = done()) && absl::Now() < deadline) {
    if (!driving_) {
      driving_ = true;
      mu_.Unlock();
      PollOnce(deadline);
      mu_.Lock();
      driving_ = false;
      // Other callers may be waiting for what this poll handled.
      if (callers_ > 1) callers_cv_.SignalAll();
      continue;
    }
    if (background_driving_) KickBackgroundLocked();
    callers_cv_.WaitWithDeadline(&mu_, deadline);
  }
  --callers_;
  last_caller_left_ = absl::Now();
  // Someone else may need to take over polling.
  if (callers_ > 0) callers_cv_.SignalAll();
  mu_.Unlock();
  return result;
}

void CompletionDriver::Wake() {
  absl::MutexLock lock(&mu_);
  if (callers_ == 0) return;
  if (driving_) KickBackgroundLocked();  // the poller looks again
  callers_cv_.SignalAll();               // so do the others
}

void CompletionDriver::PollReady() {
  {
    absl::MutexLock lock(&mu_);
    if (driving_) return;
    driving_ = true;
    ++callers_;  // keeps the background thread off meanwhile
  }
  void* tag = nullptr;
  bool ok = false;
  while (cq_.AsyncNext(&tag, &ok, std::chrono::system_clock::now()) ==
         grpc::CompletionQueue::GOT_EVENT) {
    static_cast<Handler*>(tag)->OnComplete(ok);
  }
  absl::MutexLock lock(&mu_);
  driving_ = false;
  --callers_;
  last_caller_left_ = absl::Now();
  if (callers_ > 0) callers_cv_.SignalAll();
}

void CompletionDriver::RunBackground() {
  mu_.Lock();
  while (!stopping_) {
    const absl::Time may_start = last_caller_left_ + kIdleGrace;
    if (driving_ || callers_ > 0 || absl::Now() < may_start) {
      // Callers never signal this thread: it checks back after the grace.
      background_cv_.WaitWithDeadline(
          &mu_, std::max(may_start, absl::Now() + kIdleGrace));
      continue;
    }
    driving_ = true;
    background_driving_ = true;
    mu_.Unlock();
    PollOnce(absl::Now() + kBackgroundPoll);
    mu_.Lock();
    driving_ = false;
    background_driving_ = false;
    if (callers_ > 0) callers_cv_.SignalAll();
  }
  mu_.Unlock();
}

}  // namespace reducer
