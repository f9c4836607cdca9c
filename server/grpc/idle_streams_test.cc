// Tests for IdleStreams: watched streams are asked whether they were idle
// since a timeout ago, forgotten ones are not, and nothing runs when the
// timeout is off.
#include "server/grpc/idle_streams.h"

#include <memory>
#include <utility>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/matchers.h"

namespace reducer {
namespace {

// Records what it was asked.
class FakeStream final : public IdleStreams::Stream {
 public:
  void CloseIfIdleSince(absl::Time cutoff,
                        const absl::Status& status) override {
    absl::MutexLock lock(&mu_);
    ++asked_;
    last_cutoff_ = cutoff;
    asked_at_ = Clock::Steady().Now();
    last_status_ = status;
  }
  // Waits until asked at least `times` times in all.
  void AwaitAsked(int times) {
    std::pair<FakeStream*, int> wanted(this, times);
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](std::pair<FakeStream*, int>* arg)
             ABSL_NO_THREAD_SAFETY_ANALYSIS {  // Await holds mu_
               return arg->first->asked_ >= arg->second;
             },
        &wanted));
  }
  int asked() {
    absl::MutexLock lock(&mu_);
    return asked_;
  }
  absl::Time last_cutoff() {
    absl::MutexLock lock(&mu_);
    return last_cutoff_;
  }
  absl::Time asked_at() {
    absl::MutexLock lock(&mu_);
    return asked_at_;
  }
  absl::Status last_status() {
    absl::MutexLock lock(&mu_);
    return last_status_;
  }

 private:
  absl::Mutex mu_;
  int asked_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time last_cutoff_ ABSL_GUARDED_BY(mu_);
  absl::Time asked_at_ ABSL_GUARDED_BY(mu_);
  absl::Status last_status_ ABSL_GUARDED_BY(mu_);
};

constexpr absl::Duration kTimeout = absl::Milliseconds(80);

TEST(IdleStreamsTest, AWatchedStreamIsAskedWithACutoffATimeoutAgo) {
  const absl::Time before = Clock::Steady().Now();
  IdleStreams idle(kTimeout);
  auto stream = std::make_shared<FakeStream>();
  idle.Watch(stream.get(), stream);
  stream->AwaitAsked(2);
  // The cutoff is a timeout before the look (asked_at is taken after it),
  // on the steady clock the streams stamp their activity with.
  EXPECT_LE(stream->last_cutoff() + kTimeout, stream->asked_at());
  EXPECT_GE(stream->last_cutoff() + kTimeout, before);
  EXPECT_THAT(stream->last_status(),
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr("nothing happened on it for "
                                 "--stream_idle_timeout=80ms")));
}

TEST(IdleStreamsTest, AForgottenStreamIsNotAskedAgain) {
  IdleStreams idle(kTimeout);
  auto forgotten = std::make_shared<FakeStream>();
  auto watched = std::make_shared<FakeStream>();
  idle.Watch(forgotten.get(), forgotten);
  idle.Watch(watched.get(), watched);
  forgotten->AwaitAsked(1);
  idle.Forget(forgotten.get());
  // At most one look was under way as it was forgotten; two more looks
  // after that one do not ask it.
  const int asked_when_forgotten = forgotten->asked();
  watched->AwaitAsked(watched->asked() + 3);
  EXPECT_LE(forgotten->asked(), asked_when_forgotten + 1);
}

TEST(IdleStreamsTest, OffWatchesNothing) {
  IdleStreams idle(absl::ZeroDuration());
  EXPECT_FALSE(idle.on());
  auto stream = std::make_shared<FakeStream>();
  idle.Watch(stream.get(), stream);
  idle.Forget(stream.get());
  EXPECT_EQ(stream->asked(), 0);
}

}  // namespace
}  // namespace reducer
