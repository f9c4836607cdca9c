// ClientUpstream against a real reducerd: a relay may let go of an
// upstream session on one of that session's own threads (the last call's
// `done`, or `ended`, ends the relay's epoch, which drops the session), and
// the session must end there without a thread joining itself (which
// std::thread reports by terminating the process) and without its calls'
// threads outliving their ClientSession.
#include "server/relay/client/client_upstream.h"

#include <memory>
#include <utility>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "client/client_options.h"
#include "core/fingerprint.h"
#include "gtest/gtest.h"
#include "proto/reducer/v1/wire_conversion.h"
#include "tests/process_harness.h"
#include "tests/status_matchers.h"

namespace reducer {
namespace testing {
namespace {

// The only reference to an upstream session, which a callback drops.
class Holder {
 public:
  void Set(std::unique_ptr<UpstreamSession> session) {
    absl::MutexLock lock(&mu_);
    session_ = std::move(session);
  }
  UpstreamSession* get() {
    absl::MutexLock lock(&mu_);
    return session_.get();
  }
  // Destroys the session on the calling thread.
  void Drop() {
    std::shared_ptr<UpstreamSession> last;
    {
      absl::MutexLock lock(&mu_);
      last = std::move(session_);
    }
    last.reset();
  }

 private:
  absl::Mutex mu_;
  std::shared_ptr<UpstreamSession> session_ ABSL_GUARDED_BY(mu_);
};

ClientOptions UpstreamOptions(const ReducerdProcess& shard) {
  ClientOptions options;
  options.target = shard.address();
  options.timeout = absl::Seconds(20);
  return options;
}

// A barrier of the job's one rank, as a relay forwards it.
v1::CollectiveHeader Barrier() {
  v1::CollectiveHeader header;
  header.set_rank(0);
  header.add_group(0);
  header.set_sequence(0);
  header.set_timeout_ms(10000);
  header.set_kind(static_cast<v1::CollectiveKind>(
      CollectiveKindToWire(CollectiveKind::kBarrier)));
  return header;
}

TEST(ClientUpstreamTest, ASessionDroppedByItsLastCallsDoneEndsThere) {
  absl::StatusOr<std::unique_ptr<ReducerdProcess>> shard =
      ReducerdProcess::Start();
  ASSERT_THAT(shard, IsOk());
  ClientUpstream upstream(UpstreamOptions(**shard));
  Holder holder;
  absl::StatusOr<std::unique_ptr<UpstreamSession>> session =
      upstream.Open("dropped-in-done", 1, {0}, /*given_up=*/nullptr,
                    [](const absl::Status&) {});
  ASSERT_THAT(session, IsOk());
  holder.Set(*std::move(session));
  absl::Notification done;
  absl::Status outcome = absl::UnknownError("not called");
  holder.get()->Start(Barrier(), std::make_shared<UpstreamInput>(0),
                      /*into=*/nullptr,
                      [&](absl::StatusOr<UpstreamResult> result) {
                        outcome = result.status();
                        holder.Drop();
                        done.Notify();
                      });
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(20)));
  EXPECT_THAT(outcome, IsOk());
  // The session ended on a thread of its own, closing its Join: the shard
  // drains and exits.
  EXPECT_EQ((*shard)->StopDrained(), "");
}

TEST(ClientUpstreamTest, ASessionDroppedByItsEndedCallbackEndsThere) {
  absl::StatusOr<std::unique_ptr<ReducerdProcess>> shard =
      ReducerdProcess::Start();
  ASSERT_THAT(shard, IsOk());
  ClientUpstream upstream(UpstreamOptions(**shard));
  Holder holder;
  absl::Notification ended;
  absl::Status why;
  absl::StatusOr<std::unique_ptr<UpstreamSession>> session =
      upstream.Open("dropped-in-ended", 1, {0}, /*given_up=*/nullptr,
                    [&](const absl::Status& status) {
                      why = status;
                      holder.Drop();
                      ended.Notify();
                    });
  ASSERT_THAT(session, IsOk());
  holder.Set(*std::move(session));
  (*shard)->Kill();
  ASSERT_TRUE(ended.WaitForNotificationWithTimeout(absl::Seconds(20)));
  EXPECT_FALSE(why.ok());
  // What is left of the session ends on a thread of its own; give it the
  // moment it takes before the process exits.
  absl::SleepFor(absl::Seconds(1));
}

}  // namespace
}  // namespace testing
}  // namespace reducer
