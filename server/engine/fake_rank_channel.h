// FakeRankChannel: the tests' RankChannel, for the engine's tests and the
// jobs' alike. It records everything a Collective (or a Job, through one)
// does to one rank's call: every result message as sent, how the call
// ended, how often reading was resumed, and the writes whose OnWriteDone
// the test owes.
// Thread-safe: reductions on the pool and timers call in from their threads.
//
//   auto channel = std::make_shared<FakeRankChannel>();
//   collective->Attach(channel, rank, fingerprint, "");
//   ASSERT_TRUE(channel->WaitEnded());
//   EXPECT_TRUE(channel->finished_ok());
//   EXPECT_EQ(channel->result(), expected_bytes);
#ifndef REDUCER_SERVER_ENGINE_FAKE_RANK_CHANNEL_H_
#define REDUCER_SERVER_ENGINE_FAKE_RANK_CHANNEL_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/fingerprint.h"
#include "server/engine/rank_channel.h"

namespace reducer {

// One result message as the engine handed it to a rank's channel, its
// pieces joined.
struct SentMessage {
  // Where `data` goes in the rank's result bytes.
  uint64_t offset = 0;
  // Whether the message carried result specs (the rank's first message
  // only), and the specs.
  bool has_specs = false;
  std::vector<TensorSpec> result;
  std::string data;
  // Where each piece's bytes lie, and what owns them: two messages whose
  // pieces are the same bytes of the same owner were not copied apart
  // (what lets same-host sessions write one result once for several ranks:
  // server/shm/results.h).
  std::vector<std::pair<const ByteOwner*, const char*>> pieces;
  // Sent with `last`: the call ended with OK in the same write.
  bool last = false;
};

class FakeRankChannel final : public RankChannel {
 public:
  // How long the Wait methods wait by default for what another thread does
  // (a reduction on the pool, a timer): far above the milliseconds these
  // take, so that only a hang fails a test.
  static constexpr absl::Duration kDefaultWait = absl::Seconds(20);

  void Send(ResultMessage message, bool last) override;
  void FinishWhenSent() override;
  void Fail(const absl::Status& status) override;
  void ResumeReading() override;

  // A message counts as written to the client once sent, and lets go of
  // its `hold` (ResultMessage::hold) then. From KeepUnwritten() on, the
  // channel keeps each message's hold, as a transport does while its
  // client has not read it, until WriteKept() says they were written.
  void KeepUnwritten();
  void WriteKept();

  // True once the call ended (finished OK, or failed) within `timeout`.
  bool WaitEnded(absl::Duration timeout = kDefaultWait);
  // True once at least `n` messages were sent within `timeout`.
  bool WaitMessages(size_t n, absl::Duration timeout = kDefaultWait);

  // The result as the client would assemble it: each message's data at its
  // offset, '\xee' where none came. Overlaps or gaps are left for the
  // caller's comparison to show.
  std::string result();
  // Every result byte sent, in the order sent, and how many there were.
  std::string bytes();
  size_t byte_count();
  // Every message, in the order sent.
  std::vector<SentMessage> sent() { return Read(&FakeRankChannel::messages_); }
  int message_count();
  // Messages that carried result specs, and the specs of the latest one.
  int headers();
  std::vector<TensorSpec> specs();
  // Messages sent with last == false whose OnWriteDone the test has not
  // delivered yet; resets the count (the caller delivers them).
  int TakeUnacknowledged();
  // The call ended with OK (FinishWhenSent, or a message sent with last).
  bool finished_ok() { return Read(&FakeRankChannel::finished_ok_); }
  // The status of the latest Fail (OK if none), and how many there were.
  absl::Status failure() { return Read(&FakeRankChannel::failure_); }
  int fail_calls() { return Read(&FakeRankChannel::fail_calls_); }
  // How many times reading was resumed.
  int resumes() { return Read(&FakeRankChannel::resumes_); }

 private:
  // A copy of the member `field`, read under the lock.
  template <typename T>
  T Read(T FakeRankChannel::*field) {
    absl::MutexLock lock(&mu_);
    return this->*field;
  }

  bool Ended() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return finished_ok_ || fail_calls_ > 0;
  }

  absl::Mutex mu_;
  std::vector<SentMessage> messages_ ABSL_GUARDED_BY(mu_);
  int unacknowledged_ ABSL_GUARDED_BY(mu_) = 0;
  bool finished_ok_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status failure_ ABSL_GUARDED_BY(mu_);
  int fail_calls_ ABSL_GUARDED_BY(mu_) = 0;
  int resumes_ ABSL_GUARDED_BY(mu_) = 0;
  bool keep_unwritten_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::shared_ptr<const void>> unwritten_holds_
      ABSL_GUARDED_BY(mu_);
};

// Every result byte `channel` got (FakeRankChannel::bytes), as values of
// type T.
template <typename T>
std::vector<T> ResultValues(FakeRankChannel& channel) {
  const std::string bytes = channel.bytes();
  std::vector<T> out(bytes.size() / sizeof(T));
  std::memcpy(out.data(), bytes.data(), out.size() * sizeof(T));
  return out;
}

}  // namespace reducer

#endif  // REDUCER_SERVER_ENGINE_FAKE_RANK_CHANNEL_H_
