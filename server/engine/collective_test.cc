// Collective in process, through fake rank channels: each kind's result
// bytes and specs, mismatches, timeouts, cancellations, back-pressure and the
// memory budget. Expected results are computed here in closed form (rank r
// contributes r + 1 times a ramp), never by the engine's own code.
#include "server/engine/collective.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "core/data_type.h"
#include "core/fingerprint.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/engine/chunk_pool.h"
#include "server/engine/engine_options.h"
#include "server/engine/memory_budget.h"
#include "server/engine/rank_channel.h"
#include "server/engine/shared_bytes.h"
#include "server/engine/string_bytes.h"
#include "server/engine/thread_pool.h"
#include "server/engine/timer_queue.h"
#include "server/log.h"
#include "server/metrics/metrics_sink.h"

namespace reducer {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::SizeIs;

// How long a test waits for something another thread does (a reduction on
// the pool, a timer) before it gives up: far above the milliseconds these
// take, so only a hang fails it.
constexpr absl::Duration kWait = absl::Seconds(20);

// One result message as the engine handed it to a rank's channel.
struct SentMessage {
  uint64_t offset = 0;
  std::vector<TensorSpec> result;  // the result specs (first message)
  std::string data;
  bool last = false;
};

// Records everything a Collective does to one rank's call: every message
// (decoded), how the stream ended, and how often reading was resumed.
// Thread-safe: reductions on the pool and timers call in from their threads.
class FakeRankChannel final : public RankChannel {
 public:
  void Send(ResultMessage message, bool last) override {
    SentMessage sent;
    sent.offset = message.offset;
    if (message.result_specs != nullptr) sent.result = *message.result_specs;
    for (const SharedBytes& piece : message.data) {
      sent.data.append(piece.data(), piece.size());
    }
    sent.last = last;
    absl::MutexLock lock(&mu_);
    if (!last) ++unacknowledged_;
    messages_.push_back(std::move(sent));
    if (last) finished_ok_ = true;
  }
  void FinishWhenSent() override {
    absl::MutexLock lock(&mu_);
    finished_ok_ = true;
  }
  void Fail(const absl::Status& status) override {
    absl::MutexLock lock(&mu_);
    failure_ = status;
    ++fail_calls_;
  }
  void ResumeReading() override {
    absl::MutexLock lock(&mu_);
    ++resumes_;
  }

  // Waits until the stream ended (finished OK or failed); false on timeout.
  bool WaitEnded(absl::Duration timeout = kWait) {
    absl::MutexLock lock(&mu_);
    return mu_.AwaitWithTimeout(absl::Condition(this, &FakeRankChannel::Ended),
                                timeout);
  }
  // Waits until at least `n` messages were sent; false on timeout.
  bool WaitMessages(size_t n, absl::Duration timeout = kWait) {
    absl::MutexLock lock(&mu_);
    auto enough = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return messages_.size() >= n;
    };
    return mu_.AwaitWithTimeout(absl::Condition(&enough), timeout);
  }

  // The result as the client would assemble it: each message's data at its
  // offset. Overlaps or gaps are left for the caller's comparison to show.
  std::string Result() {
    absl::MutexLock lock(&mu_);
    std::string out;
    for (const SentMessage& m : messages_) {
      if (out.size() < m.offset + m.data.size()) {
        out.resize(m.offset + m.data.size(), '\xee');
      }
      std::memcpy(&out[m.offset], m.data.data(), m.data.size());
    }
    return out;
  }
  std::vector<SentMessage> messages() {
    absl::MutexLock lock(&mu_);
    return messages_;
  }
  // Messages sent with last == false whose OnWriteDone the test has not
  // delivered yet; resets the count (the caller delivers them).
  int TakeUnacknowledged() {
    absl::MutexLock lock(&mu_);
    const int n = unacknowledged_;
    unacknowledged_ = 0;
    return n;
  }
  bool finished_ok() {
    absl::MutexLock lock(&mu_);
    return finished_ok_;
  }
  absl::Status failure() {
    absl::MutexLock lock(&mu_);
    return failure_;
  }
  int fail_calls() {
    absl::MutexLock lock(&mu_);
    return fail_calls_;
  }
  int resumes() {
    absl::MutexLock lock(&mu_);
    return resumes_;
  }

 private:
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
};

template <typename T>
std::string Bytes(const std::vector<T>& values) {
  std::string out(values.size() * sizeof(T), '\0');
  std::memcpy(out.data(), values.data(), out.size());
  return out;
}

// Rank r's AllReduce / ReduceScatter input: element i is (r + 1) * (i + 1).
std::vector<float> Ramp(int rank, int n) {
  std::vector<float> v(n);
  for (int i = 0; i < n; ++i) v[i] = static_cast<float>((rank + 1) * (i + 1));
  return v;
}

// The sum over ranks 0..w-1 of Ramp: element i is w(w+1)/2 * (i + 1).
std::vector<float> RampSum(int w, int n) {
  std::vector<float> v(n);
  for (int i = 0; i < n; ++i) v[i] = static_cast<float>(w * (w + 1) / 2 * (i + 1));
  return v;
}

TensorSpec Spec(DataType dtype, std::vector<int64_t> shape) {
  TensorSpec t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  return t;
}

Fingerprint Fp(CollectiveKind kind, std::vector<TensorSpec> tensors,
               std::vector<int> group, int root = -1) {
  Fingerprint fp;
  fp.kind = kind;
  fp.tensors = std::move(tensors);
  fp.group = std::move(group);
  fp.root = root;
  return fp;
}

// A payload message of `bytes`, split in two pieces (as a received buffer
// may be) so that copies across piece boundaries are exercised.
Payload Range(const std::string& bytes) {
  auto owner = std::make_shared<const StringOwner>(bytes);
  const char* data = owner->bytes().data();
  const size_t half = bytes.size() / 2;
  Payload range;
  range.Append(SharedBytes(owner, data, half));
  range.Append(SharedBytes(owner, data + half, bytes.size() - half));
  return range;
}

void ExpectSpec(const TensorSpec& spec, DataType dtype,
                std::vector<int64_t> shape) {
  EXPECT_EQ(spec.dtype, dtype);
  EXPECT_EQ(spec.shape, shape);
}

// The specs are in the first message and in no other.
void ExpectSpecsOnlyFirst(FakeRankChannel& ch) {
  std::vector<SentMessage> messages = ch.messages();
  ASSERT_THAT(messages, Not(IsEmpty()));
  for (size_t i = 1; i < messages.size(); ++i) {
    EXPECT_THAT(messages[i].result, IsEmpty()) << "message " << i;
  }
}

// `n` fresh channels, index r for rank r.
std::vector<std::shared_ptr<FakeRankChannel>> Channels(int n) {
  std::vector<std::shared_ptr<FakeRankChannel>> ch(n);
  for (auto& p : ch) p = std::make_shared<FakeRankChannel>();
  return ch;
}

// Holds both reduction threads until Release() (or destruction), so that a
// test can act while every input is in but no result has been sent yet. The
// held tasks share the notification, so it outlives their waits.
class PoolHold {
 public:
  explicit PoolHold(ThreadPool& pool)
      : released_(std::make_shared<absl::Notification>()) {
    for (int i = 0; i < 2; ++i) {
      pool.Schedule([released = released_] { released->WaitForNotification(); });
    }
  }
  ~PoolHold() { Release(); }
  void Release() {
    if (!released_->HasBeenNotified()) released_->Notify();
  }

 private:
  std::shared_ptr<absl::Notification> released_;
};

class CollectiveTest : public ::testing::Test {
 protected:
  CollectiveTest() {
    options_.chunk_bytes = 64;  // several chunks from tensors of a few floats
  }

  // A collective of `kind` over `group`, with options_ as set by then.
  std::shared_ptr<Collective> Make(CollectiveKind kind, std::vector<int> group,
                                   absl::Duration timeout = absl::Seconds(60)) {
    if (memory_ == nullptr) {
      memory_ = std::make_unique<MemoryBudget>(memory_budget_bytes_);
    }
    if (chunks_ == nullptr) {
      chunks_ = std::make_unique<ChunkPool>(options_.chunk_bytes, 16);
    }
    const std::string name =
        absl::StrCat(CollectiveKindName(kind), " \"t", ++made_, "\"");
    auto c = std::make_shared<Collective>(
        CollectiveEnv{&options_, &pool_, &timers_, memory_.get(),
                      chunks_.get(), &metrics_, &log_, &kept_memory_, kept_},
        CollectiveLabel{"j1", 1, name, kind}, absl::StrCat(name, " in job j1"),
        std::move(group), timeout);
    c->StartTimers();
    return c;
  }

  // Feeds `bytes` as `rank`'s payload from `offset`, in messages of at most
  // `message_bytes`, ignoring back-pressure (the engine must cope with a
  // client that sends a window's worth ahead). Returns the last OnData.
  static bool Feed(Collective& c, int rank, const std::string& bytes,
                   size_t message_bytes = 48, uint64_t offset = 0) {
    bool may_read = true;
    for (size_t pos = 0; pos < bytes.size(); pos += message_bytes) {
      may_read = c.OnData(rank, offset + pos,
                          Range(bytes.substr(pos, message_bytes)));
    }
    return may_read;
  }

  // Delivers OnWriteDone for every message sent to `rank` so far.
  static void AcknowledgeWrites(Collective& c, int rank, FakeRankChannel& ch) {
    for (int n = ch.TakeUnacknowledged(); n > 0; --n) c.OnWriteDone(rank);
  }

  // Runs a float32 [n] AllReduce sum over ranks 0..2 on `c`, attaching and
  // feeding whole contributions in `order`; returns the channels, indexed
  // by rank, once every stream has ended.
  static std::vector<std::shared_ptr<FakeRankChannel>> RunAllReduce(
      Collective& c, const std::vector<int>& order, int n) {
    auto ch = Channels(3);
    for (int r : order) {
      c.Attach(ch[r], r,
               Fp(CollectiveKind::kAllReduce, {Spec(DataType::kFloat32, {n})},
                  {0, 1, 2}),
               absl::StrCat("attempt-", r));
      // Three chunks stay within the default window: no pause.
      EXPECT_TRUE(Feed(c, r, Bytes(Ramp(r, n))));
    }
    for (int r = 0; r < 3; ++r) {
      EXPECT_TRUE(ch[r]->WaitEnded()) << "rank " << r;
    }
    return ch;
  }

  // A float32 [n] all-reduce over ranks 0..2 on `c` (offload_bytes 64, so
  // every full chunk is reduced on the pool): every rank attaches and sends
  // its whole input while the pool is held, then `act` runs on the
  // channels (indexed by rank), before those chunks' results were sent,
  // then the pool is let go. Returns the channels.
  // With `attempt_ids`, rank r attaches as attempt "s<r>/0" (its result is
  // then kept).
  std::vector<std::shared_ptr<FakeRankChannel>> DecideThen(
      Collective& c, int n,
      const std::function<void(
          const std::vector<std::shared_ptr<FakeRankChannel>>&)>& act,
      bool attempt_ids = false) {
    options_.offload_bytes = 64;
    auto ch = Channels(3);
    const Fingerprint fp = Fp(CollectiveKind::kAllReduce,
                              {Spec(DataType::kFloat32, {n})}, {0, 1, 2});
    PoolHold hold(pool_);
    for (int r = 0; r < 3; ++r) {
      c.Attach(ch[r], r, fp, attempt_ids ? absl::StrCat("s", r, "/0") : "");
      Feed(c, r, Bytes(Ramp(r, n)));
    }
    act(ch);
    return ch;
  }

  // Waits until `c` is done and the budget is empty: the pool thread that
  // sent a rank its last result marks that rank finished (and releases its
  // reservation) just after the rank's stream ended. False on timeout.
  bool Settles(const Collective& c) {
    const absl::Time give_up = absl::Now() + kWait;
    while (!(c.done() && memory_->used() == 0)) {
      if (absl::Now() > give_up) return false;
      absl::SleepFor(absl::Milliseconds(1));
    }
    return true;
  }

  // Declared in destruction order's reverse: the pool joins first, running
  // reductions that still reference everything above it.
  EngineOptions options_;
  size_t memory_budget_bytes_ = size_t{2} << 30;  // reducerd's default
  MetricsSink metrics_;  // counts nothing
  Logger log_;
  std::unique_ptr<MemoryBudget> memory_;
  MemoryBudget kept_memory_{1 << 20};
  std::unique_ptr<ChunkPool> chunks_;
  // Holds chunks of chunks_: goes first.
  std::shared_ptr<KeptResults> kept_ =
      std::make_shared<KeptResults>(&kept_memory_, absl::Seconds(30));
  TimerQueue timers_;
  ThreadPool pool_{2};
  int made_ = 0;
};

TEST_F(CollectiveTest, AllReduceSumIsExactWhateverTheArrivalOrder) {
  // 40 floats = 160 bytes: chunks of 64, 64 and 32 bytes, fed in messages
  // of 48 bytes that straddle chunk boundaries. The two full chunks are
  // reduced on the pool, the short one inline.
  options_.offload_bytes = 64;
  constexpr int kN = 40;
  const std::string expected = Bytes(RampSum(3, kN));
  for (const std::vector<int>& order :
       {std::vector<int>{2, 1, 0}, std::vector<int>{0, 1, 2}}) {
    SCOPED_TRACE(absl::StrCat("rank ", order[0], " first"));
    std::shared_ptr<Collective> c = Make(CollectiveKind::kAllReduce, {0, 1, 2});
    std::vector<std::shared_ptr<FakeRankChannel>> ch =
        RunAllReduce(*c, order, kN);
    for (int r = 0; r < 3; ++r) {
      SCOPED_TRACE(absl::StrCat("rank ", r));
      EXPECT_TRUE(ch[r]->finished_ok()) << ch[r]->failure();
      EXPECT_EQ(ch[r]->Result(), expected);
      std::vector<SentMessage> messages = ch[r]->messages();
      // One message per chunk, the last one ending the stream.
      ASSERT_THAT(messages, SizeIs(3));
      EXPECT_TRUE(messages.back().last);
      ASSERT_THAT(messages[0].result, SizeIs(1));
      ExpectSpec(messages[0].result[0], DataType::kFloat32, {kN});
      ExpectSpecsOnlyFirst(*ch[r]);
    }
    EXPECT_TRUE(c->done());
    EXPECT_EQ(memory_->used(), 0u);
  }
}

// Whole-chunk pieces are held in place and the rest copied; mixed in one
// reduction, the sum is the same, and no piece outlives the collective.
TEST_F(CollectiveTest, AllReduceOfHeldAndCopiedPartsIsExact) {
  options_.offload_bytes = 64;
  constexpr int kN = 40;  // chunks of 64, 64 and 32 bytes
  std::shared_ptr<Collective> c = Make(CollectiveKind::kAllReduce, {0, 1, 2});
  auto ch = Channels(3);
  std::vector<std::weak_ptr<const StringOwner>> owners;
  for (int r = 0; r < 3; ++r) {
    c->Attach(ch[r], r,
              Fp(CollectiveKind::kAllReduce, {Spec(DataType::kFloat32, {kN})},
                 {0, 1, 2}),
              absl::StrCat("attempt-", r));
    // Rank 0: its whole input in one piece. Rank 1: the same, 4 bytes into
    // its storage (misaligned, so copied). Rank 2: one piece per chunk.
    const std::string input = Bytes(Ramp(r, kN));
    const size_t shift = r == 1 ? 4 : 0;
    auto owner = std::make_shared<const StringOwner>(
        std::string(shift, '\0') + input);
    owners.push_back(owner);
    const char* data = owner->bytes().data() + shift;
    const size_t message_bytes = r == 2 ? 64 : input.size();
    for (size_t pos = 0; pos < input.size(); pos += message_bytes) {
      Payload message;
      message.Append(SharedBytes(
          owner, data + pos, std::min(message_bytes, input.size() - pos)));
      EXPECT_TRUE(c->OnData(r, pos, std::move(message)));
    }
  }
  const std::string expected = Bytes(RampSum(3, kN));
  for (int r = 0; r < 3; ++r) {
    SCOPED_TRACE(absl::StrCat("rank ", r));
    ASSERT_TRUE(ch[r]->WaitEnded());
    EXPECT_TRUE(ch[r]->finished_ok()) << ch[r]->failure();
    EXPECT_EQ(ch[r]->Result(), expected);
    EXPECT_TRUE(owners[r].expired());
  }
  EXPECT_TRUE(c->done());
  EXPECT_EQ(memory_->used(), 0u);
}

TEST_F(CollectiveTest, ReduceScatterGivesEachRankItsSliceOfTheSum) {
  // [9,2] float32 = 72 bytes, 24 per rank; chunks [0,64) and [64,72), so
  // chunk 0 feeds all three slices and chunk 1 the end of rank 2's.
  constexpr int kN = 18;
  std::shared_ptr<Collective> c = Make(CollectiveKind::kReduceScatter, {0, 1, 2});
  auto ch = Channels(3);
  for (int r : {1, 0, 2}) {
    c->Attach(ch[r], r,
              Fp(CollectiveKind::kReduceScatter,
                 {Spec(DataType::kFloat32, {9, 2})}, {0, 1, 2}),
              "");
    Feed(*c, r, Bytes(Ramp(r, kN)), 40);
  }
  const std::vector<float> sum = RampSum(3, kN);
  for (int r = 0; r < 3; ++r) {
    SCOPED_TRACE(absl::StrCat("rank ", r));
    ASSERT_TRUE(ch[r]->WaitEnded());
    EXPECT_TRUE(ch[r]->finished_ok()) << ch[r]->failure();
    EXPECT_EQ(ch[r]->Result(),
              Bytes(std::vector<float>(sum.begin() + 6 * r,
                                       sum.begin() + 6 * (r + 1))));
    std::vector<SentMessage> messages = ch[r]->messages();
    ASSERT_THAT(messages, Not(IsEmpty()));
    ASSERT_THAT(messages[0].result, SizeIs(1));
    ExpectSpec(messages[0].result[0], DataType::kFloat32, {3, 2});
    ExpectSpecsOnlyFirst(*ch[r]);
  }
  // Rank 2's slice spans both chunks: two messages; the others one each.
  EXPECT_THAT(ch[0]->messages(), SizeIs(1));
  EXPECT_THAT(ch[1]->messages(), SizeIs(1));
  EXPECT_THAT(ch[2]->messages(), SizeIs(2));
  EXPECT_EQ(memory_->used(), 0u);
}

TEST_F(CollectiveTest, AllGatherConcatenatesUnevenContributionsInRankOrder) {
  // Rank r sends [r+1, 2] int32 holding 100 r + j: the gathered [6,2] is
  // the three contributions one after the other.
  std::shared_ptr<Collective> c = Make(CollectiveKind::kAllGather, {0, 1, 2});
  auto ch = Channels(3);
  std::vector<std::string> inputs;
  std::vector<int32_t> gathered;
  for (int r = 0; r < 3; ++r) {
    std::vector<int32_t> v;
    for (int j = 0; j < 2 * (r + 1); ++j) v.push_back(100 * r + j);
    gathered.insert(gathered.end(), v.begin(), v.end());
    inputs.push_back(Bytes(v));
  }
  auto fp = [](int r) {
    return Fp(CollectiveKind::kAllGather,
              {Spec(DataType::kInt32, {r + 1, 2})}, {0, 1, 2});
  };
  // Rank 1 sends before every header is in: held back, and its reading
  // paused until the others arrive.
  c->Attach(ch[1], 1, fp(1), "");
  EXPECT_FALSE(c->OnData(1, 0, Range(inputs[1])));
  EXPECT_THAT(ch[1]->messages(), IsEmpty());
  c->Attach(ch[2], 2, fp(2), "");
  c->Attach(ch[0], 0, fp(0), "");
  EXPECT_EQ(ch[1]->resumes(), 1);
  // Rank 2 in two messages, at offsets 0 and 12.
  c->OnData(2, 0, Range(inputs[2].substr(0, 12)));
  c->OnData(2, 12, Range(inputs[2].substr(12)));
  c->OnData(0, 0, Range(inputs[0]));
  for (int r = 0; r < 3; ++r) {
    SCOPED_TRACE(absl::StrCat("rank ", r));
    ASSERT_TRUE(ch[r]->WaitEnded());
    EXPECT_TRUE(ch[r]->finished_ok()) << ch[r]->failure();
    EXPECT_EQ(ch[r]->Result(), Bytes(gathered));
    std::vector<SentMessage> messages = ch[r]->messages();
    ASSERT_THAT(messages, SizeIs(4));
    ASSERT_THAT(messages[0].result, SizeIs(1));
    ExpectSpec(messages[0].result[0], DataType::kInt32, {6, 2});
    ExpectSpecsOnlyFirst(*ch[r]);
    // Rank 1's bytes land after rank 0's 8, rank 2's after 8 + 16.
    EXPECT_EQ(messages[0].offset, 8u);
    EXPECT_EQ(messages[1].offset, 24u);
    EXPECT_EQ(messages[2].offset, 36u);
    EXPECT_EQ(messages[3].offset, 0u);
    EXPECT_TRUE(messages[3].last);
  }
  EXPECT_EQ(memory_->used(), 0u);
}

TEST_F(CollectiveTest, ForwardingPausesReadersWhileAWindowOfWritesIsQueued) {
  // Window 1, two ranks: one forwarded message queues a write for each
  // rank, which fills the group's window of 1 x 2 queued messages; one of
  // them written, reading resumes.
  options_.window = 1;
  std::shared_ptr<Collective> c = Make(CollectiveKind::kAllGather, {0, 1});
  auto ch = Channels(2);
  const std::string in0 = Bytes(std::vector<int32_t>{1, 2, 3, 4});
  const std::string in1 = Bytes(std::vector<int32_t>{5, 6, 7, 8});
  for (int r = 0; r < 2; ++r) {
    c->Attach(ch[r], r,
              Fp(CollectiveKind::kAllGather, {Spec(DataType::kInt32, {2, 2})},
                 {0, 1}),
              "");
  }
  EXPECT_FALSE(c->OnData(0, 0, Range(in0.substr(0, 8))));
  EXPECT_EQ(ch[0]->resumes(), 0);
  AcknowledgeWrites(*c, 1, *ch[1]);
  EXPECT_EQ(ch[0]->resumes(), 1);
  AcknowledgeWrites(*c, 0, *ch[0]);
  c->OnData(0, 8, Range(in0.substr(8)));
  AcknowledgeWrites(*c, 0, *ch[0]);
  AcknowledgeWrites(*c, 1, *ch[1]);
  c->OnData(1, 0, Range(in1));
  for (int r = 0; r < 2; ++r) {
    SCOPED_TRACE(absl::StrCat("rank ", r));
    ASSERT_TRUE(ch[r]->WaitEnded());
    EXPECT_TRUE(ch[r]->finished_ok()) << ch[r]->failure();
    EXPECT_EQ(ch[r]->Result(), in0 + in1);
  }
  EXPECT_EQ(memory_->used(), 0u);
}

TEST_F(CollectiveTest, BroadcastSendsTheRootsTensorToEveryRank) {
  // Root 1 sends [5] float64; ranks 0 and 2 name no tensor and send nothing.
  std::shared_ptr<Collective> c = Make(CollectiveKind::kBroadcast, {0, 1, 2});
  auto ch = Channels(3);
  const std::string root_bytes = Bytes(std::vector<double>{1.5, -2, 3, 1e300, 0.25});
  c->Attach(ch[0], 0, Fp(CollectiveKind::kBroadcast, {}, {0, 1, 2}, 1), "");
  c->Attach(ch[1], 1,
            Fp(CollectiveKind::kBroadcast, {Spec(DataType::kFloat64, {5})},
               {0, 1, 2}, 1),
            "");
  c->Attach(ch[2], 2, Fp(CollectiveKind::kBroadcast, {}, {0, 1, 2}, 1), "");
  EXPECT_THAT(ch[0]->messages(), IsEmpty());
  c->OnData(1, 0, Range(root_bytes));
  for (int r = 0; r < 3; ++r) {
    SCOPED_TRACE(absl::StrCat("rank ", r));
    ASSERT_TRUE(ch[r]->WaitEnded());
    EXPECT_TRUE(ch[r]->finished_ok()) << ch[r]->failure();
    EXPECT_EQ(ch[r]->Result(), root_bytes);
    std::vector<SentMessage> messages = ch[r]->messages();
    ASSERT_THAT(messages, SizeIs(1));
    ASSERT_THAT(messages[0].result, SizeIs(1));
    ExpectSpec(messages[0].result[0], DataType::kFloat64, {5});
    EXPECT_TRUE(messages[0].last);
  }
  EXPECT_EQ(memory_->used(), 0u);
}

TEST_F(CollectiveTest, NonRootBroadcastPayloadFailsTheCollective) {
  std::shared_ptr<Collective> c = Make(CollectiveKind::kBroadcast, {0, 1});
  auto ch = Channels(2);
  c->Attach(ch[0], 0,
            Fp(CollectiveKind::kBroadcast, {Spec(DataType::kFloat32, {2})},
               {0, 1}, 0),
            "");
  c->Attach(ch[1], 1, Fp(CollectiveKind::kBroadcast, {}, {0, 1}, 0), "");
  EXPECT_FALSE(c->OnData(1, 0, Range(std::string(8, 'x'))));
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(ch[r]->failure().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(ch[r]->failure().message(),
                HasSubstr("a non-root rank sends no broadcast payload"));
  }
  EXPECT_EQ(memory_->used(), 0u);
}

TEST_F(CollectiveTest, BarrierEndsEveryRankOnceAllArrived) {
  std::shared_ptr<Collective> c = Make(CollectiveKind::kBarrier, {0, 1, 2});
  auto ch = Channels(3);
  c->Attach(ch[2], 2, Fp(CollectiveKind::kBarrier, {}, {0, 1, 2}), "");
  c->Attach(ch[0], 0, Fp(CollectiveKind::kBarrier, {}, {0, 1, 2}), "");
  EXPECT_FALSE(ch[0]->finished_ok());
  EXPECT_FALSE(ch[2]->finished_ok());
  EXPECT_FALSE(c->done());
  c->Attach(ch[1], 1, Fp(CollectiveKind::kBarrier, {}, {0, 1, 2}), "");
  for (int r = 0; r < 3; ++r) {
    SCOPED_TRACE(absl::StrCat("rank ", r));
    EXPECT_TRUE(ch[r]->finished_ok());
    EXPECT_EQ(ch[r]->fail_calls(), 0);
    std::vector<SentMessage> messages = ch[r]->messages();
    ASSERT_THAT(messages, SizeIs(1));
    EXPECT_THAT(messages[0].result, IsEmpty());
    EXPECT_THAT(messages[0].data, IsEmpty());
    EXPECT_TRUE(messages[0].last);
    EXPECT_TRUE(c->HasFinished(r));
  }
  EXPECT_TRUE(c->done());
  EXPECT_EQ(memory_->used(), 0u);
}

TEST_F(CollectiveTest, ShapeMismatchFailsEveryAttachedRank) {
  std::shared_ptr<Collective> c = Make(CollectiveKind::kAllReduce, {0, 1, 2});
  auto ch = Channels(3);
  auto fp = [](std::vector<int64_t> shape) {
    return Fp(CollectiveKind::kAllReduce,
              {Spec(DataType::kFloat32, std::move(shape))}, {0, 1, 2});
  };
  c->Attach(ch[0], 0, fp({4, 3}), "");
  c->Attach(ch[1], 1, fp({4, 3}), "");
  c->OnData(0, 0, Range(Bytes(Ramp(0, 12))));
  c->Attach(ch[2], 2, fp({4, 4}), "");
  for (int r = 0; r < 3; ++r) {
    SCOPED_TRACE(absl::StrCat("rank ", r));
    EXPECT_EQ(ch[r]->failure().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(ch[r]->failure().message(),
                HasSubstr("mismatched shapes: rank 0 sent [4,3] float32, "
                          "rank 2 sent [4,4] float32"));
    EXPECT_THAT(ch[r]->failure().message(), HasSubstr("in job j1"));
    EXPECT_EQ(ch[r]->fail_calls(), 1);
    EXPECT_THAT(ch[r]->messages(), IsEmpty());
  }
  EXPECT_TRUE(c->done());
  EXPECT_EQ(memory_->used(), 0u);
}

TEST_F(CollectiveTest, TimeoutFailsWaitingRanksNamingTheMissingOne) {
  std::shared_ptr<Collective> c =
      Make(CollectiveKind::kAllReduce, {0, 1, 2}, absl::Milliseconds(200));
  auto ch = Channels(3);
  const Fingerprint fp = Fp(CollectiveKind::kAllReduce,
                            {Spec(DataType::kFloat32, {4})}, {0, 1, 2});
  c->Attach(ch[0], 0, fp, "");
  c->Attach(ch[2], 2, fp, "");
  for (int r : {0, 2}) {
    SCOPED_TRACE(absl::StrCat("rank ", r));
    ASSERT_TRUE(ch[r]->WaitEnded());
    EXPECT_EQ(ch[r]->failure().code(), absl::StatusCode::kDeadlineExceeded);
    EXPECT_THAT(ch[r]->failure().message(),
                HasSubstr("timed out after 200ms: rank 1 never arrived "
                          "(ranks 0,2 waited)"));
  }
  EXPECT_TRUE(c->done());
  EXPECT_EQ(memory_->used(), 0u);
  // A late rank gets the same failure.
  c->Attach(ch[1], 1, fp, "");
  EXPECT_EQ(ch[1]->failure().code(), absl::StatusCode::kDeadlineExceeded);
}

TEST_F(CollectiveTest, RankCancelledBeforeAllArrivedIsDetachedAndMayRetry) {
  constexpr int kN = 20;
  std::shared_ptr<Collective> c = Make(CollectiveKind::kAllReduce, {0, 1, 2});
  auto ch = Channels(3);
  auto fp = Fp(CollectiveKind::kAllReduce, {Spec(DataType::kFloat32, {kN})},
               {0, 1, 2});
  c->Attach(ch[0], 0, fp, "a0");
  Feed(*c, 0, Bytes(Ramp(0, kN)));
  c->Attach(ch[1], 1, fp, "a1");
  const size_t reserved_before = memory_->used();
  c->OnRankCancelled(1, ch[1].get());
  // Detached: nothing sent to it, nothing failed, its reservation returned.
  EXPECT_EQ(ch[1]->fail_calls(), 0);
  EXPECT_LT(memory_->used(), reserved_before);
  EXPECT_FALSE(c->done());
  EXPECT_FALSE(c->all_attached());

  auto retry = std::make_shared<FakeRankChannel>();
  c->Attach(retry, 1, fp, "a1");
  Feed(*c, 1, Bytes(Ramp(1, kN)));
  // A second cancellation of the old call (it raced the retry) is ignored.
  c->OnRankCancelled(1, ch[1].get());
  EXPECT_FALSE(c->done());
  c->Attach(ch[2], 2, fp, "a2");
  EXPECT_TRUE(c->all_attached());
  Feed(*c, 2, Bytes(Ramp(2, kN)));
  const std::string expected = Bytes(RampSum(3, kN));  // rank 1 counted once
  for (FakeRankChannel* p : {ch[0].get(), retry.get(), ch[2].get()}) {
    ASSERT_TRUE(p->WaitEnded());
    EXPECT_TRUE(p->finished_ok()) << p->failure();
    EXPECT_EQ(p->Result(), expected);
  }
  EXPECT_THAT(ch[1]->messages(), IsEmpty());
  EXPECT_EQ(ch[1]->fail_calls(), 0);
  EXPECT_EQ(memory_->used(), 0u);
}

TEST_F(CollectiveTest, RetryOnANewStreamReplacesTheFirstBeforeData) {
  std::shared_ptr<Collective> c = Make(CollectiveKind::kBarrier, {0, 1});
  auto ch = Channels(2);
  auto retry = std::make_shared<FakeRankChannel>();
  const Fingerprint fp = Fp(CollectiveKind::kBarrier, {}, {0, 1});
  c->Attach(ch[0], 0, fp, "a0");
  c->Attach(retry, 0, fp, "a0");
  EXPECT_EQ(ch[0]->failure().code(), absl::StatusCode::kAborted);
  EXPECT_THAT(ch[0]->failure().message(),
              HasSubstr("rank 0's contribution was replaced by its retry"));
  // The same rank with a different attempt is a second contribution.
  auto twice = std::make_shared<FakeRankChannel>();
  c->Attach(twice, 0, fp, "other");
  EXPECT_EQ(twice->failure().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(twice->failure().message(), HasSubstr("rank 0 contributed twice"));
  c->Attach(ch[1], 1, fp, "a1");
  EXPECT_TRUE(retry->finished_ok());
  EXPECT_TRUE(ch[1]->finished_ok());
  EXPECT_TRUE(c->done());
  EXPECT_EQ(memory_->used(), 0u);
}

TEST_F(CollectiveTest, RankCancelledAfterAllArrivedAbortsEveryone) {
  constexpr int kN = 20;
  std::shared_ptr<Collective> c = Make(CollectiveKind::kAllReduce, {0, 1, 2});
  auto ch = Channels(3);
  auto fp = Fp(CollectiveKind::kAllReduce, {Spec(DataType::kFloat32, {kN})},
               {0, 1, 2});
  for (int r = 0; r < 3; ++r) c->Attach(ch[r], r, fp, "");
  c->OnData(0, 0, Range(Bytes(Ramp(0, kN)).substr(0, 16)));
  c->OnRankCancelled(1, ch[1].get());
  for (int r = 0; r < 3; ++r) {
    SCOPED_TRACE(absl::StrCat("rank ", r));
    EXPECT_EQ(ch[r]->failure().code(), absl::StatusCode::kAborted);
    EXPECT_THAT(ch[r]->failure().message(),
                HasSubstr("rank 1's call was cancelled"));
  }
  EXPECT_TRUE(c->done());
  EXPECT_EQ(memory_->used(), 0u);
  // Data still in flight from the others is dropped, not read on.
  EXPECT_FALSE(c->OnData(2, 0, Range(Bytes(Ramp(2, kN)))));
}

TEST_F(CollectiveTest, EpochEndOnceEveryInputIsInStillDeliversTheResult) {
  constexpr int kN = 40;
  std::shared_ptr<Collective> c = Make(CollectiveKind::kAllReduce, {0, 1, 2});
  auto ch = DecideThen(*c, kN, [&](const auto&) {
    EXPECT_FALSE(c->done());
    c->FailUnlessDecided(absl::AbortedError("epoch 1 aborted: rank 5 lost"));
  });
  const std::string expected = Bytes(RampSum(3, kN));
  for (int r = 0; r < 3; ++r) {
    SCOPED_TRACE(absl::StrCat("rank ", r));
    ASSERT_TRUE(ch[r]->WaitEnded());
    EXPECT_TRUE(ch[r]->finished_ok()) << ch[r]->failure();
    EXPECT_EQ(ch[r]->fail_calls(), 0);
    EXPECT_EQ(ch[r]->Result(), expected);
  }
  EXPECT_TRUE(Settles(*c)) << memory_->used() << " bytes still reserved";
}

TEST_F(CollectiveTest, EpochEndBeforeEveryInputIsInFailsEveryone) {
  constexpr int kN = 20;
  std::shared_ptr<Collective> c = Make(CollectiveKind::kAllReduce, {0, 1});
  auto ch = Channels(2);
  const auto fp = Fp(CollectiveKind::kAllReduce,
                     {Spec(DataType::kFloat32, {kN})}, {0, 1});
  for (int r = 0; r < 2; ++r) c->Attach(ch[r], r, fp, "");
  Feed(*c, 0, Bytes(Ramp(0, kN)));
  Feed(*c, 1, Bytes(Ramp(1, kN)).substr(0, 40));
  c->FailUnlessDecided(absl::AbortedError("epoch 1 aborted: rank 5 lost"));
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(ch[r]->failure().code(), absl::StatusCode::kAborted);
    EXPECT_FALSE(ch[r]->finished_ok());
  }
  EXPECT_TRUE(c->done());
  EXPECT_EQ(memory_->used(), 0u);
}

TEST_F(CollectiveTest, RankCancelledOnceEveryInputIsInEndsOnlyItsOwnCall) {
  constexpr int kN = 40;
  std::shared_ptr<Collective> c = Make(CollectiveKind::kAllReduce, {0, 1, 2});
  auto ch = DecideThen(*c, kN, [&](const auto& channels) {
    c->OnRankCancelled(1, channels[1].get());
  });
  const std::string expected = Bytes(RampSum(3, kN));
  for (int r : {0, 2}) {
    SCOPED_TRACE(absl::StrCat("rank ", r));
    ASSERT_TRUE(ch[r]->WaitEnded());
    EXPECT_TRUE(ch[r]->finished_ok()) << ch[r]->failure();
    EXPECT_EQ(ch[r]->Result(), expected);
  }
  // The cut-off rank's stream is gone: nothing more is sent to it, and it
  // is not failed either (its call already ended with the cancellation).
  EXPECT_EQ(ch[1]->fail_calls(), 0);
  EXPECT_FALSE(ch[1]->finished_ok());
  EXPECT_TRUE(Settles(*c)) << memory_->used() << " bytes still reserved";
}

// The kept result as the client would assemble it; empty if none is kept.
std::string KeptBytes(KeptResults& kept, const std::string& attempt, int rank) {
  std::optional<KeptResults::Kept> found = kept.Find(attempt, rank);
  if (!found.has_value()) return "";
  std::string out;
  for (const ResultMessage& m : found->messages) {
    uint64_t at = m.offset;
    for (const SharedBytes& piece : m.data) {
      if (out.size() < at + piece.size()) out.resize(at + piece.size(), '\xee');
      std::memcpy(&out[at], piece.data(), piece.size());
      at += piece.size();
    }
  }
  return out;
}

TEST_F(CollectiveTest, EveryRanksWholeResultIsKeptAsSent) {
  constexpr int kN = 40;
  std::shared_ptr<Collective> c = Make(CollectiveKind::kAllReduce, {0, 1, 2});
  auto ch = DecideThen(*c, kN, [](const auto&) {}, /*attempt_ids=*/true);
  for (int r = 0; r < 3; ++r) ASSERT_TRUE(ch[r]->WaitEnded());
  ASSERT_TRUE(Settles(*c)) << memory_->used() << " bytes still reserved";
  const std::string expected = Bytes(RampSum(3, kN));
  for (int r = 0; r < 3; ++r) {
    SCOPED_TRACE(absl::StrCat("rank ", r));
    EXPECT_EQ(KeptBytes(*kept_, absl::StrCat("s", r, "/0"), r), expected);
    // The first kept message carries the result's specs, as sent.
    std::optional<KeptResults::Kept> k =
        kept_->Find(absl::StrCat("s", r, "/0"), r);
    ASSERT_TRUE(k.has_value() && !k->messages.empty());
    ASSERT_NE(k->messages[0].result_specs, nullptr);
    EXPECT_EQ(k->messages[0].result_specs->at(0).shape, std::vector<int64_t>{kN});
    EXPECT_EQ(k->declared, std::vector<TensorSpec>{Spec(DataType::kFloat32, {kN})});
  }
  EXPECT_FALSE(kept_->Find("s0/0", 1).has_value());  // rank 0's, not 1's
  EXPECT_EQ(kept_memory_.used(),
            3u * (kN * sizeof(float) + KeptResults::kEntryBytes));
}

TEST_F(CollectiveTest, ACallCutOffOnceEveryInputIsInHasItsResultKept) {
  constexpr int kN = 40;
  std::shared_ptr<Collective> c = Make(CollectiveKind::kAllReduce, {0, 1, 2});
  auto ch = DecideThen(
      *c, kN,
      [&](const auto& channels) { c->OnRankCancelled(1, channels[1].get()); },
      /*attempt_ids=*/true);
  for (int r : {0, 2}) ASSERT_TRUE(ch[r]->WaitEnded());
  ASSERT_TRUE(Settles(*c)) << memory_->used() << " bytes still reserved";
  // The cut-off call got at most what was made before the cut (the inline
  // tail chunk), never its end; its whole result is kept.
  EXPECT_FALSE(ch[1]->finished_ok());
  EXPECT_LT(ch[1]->messages().size(), kept_->Find("s1/0", 1)->messages.size());
  EXPECT_EQ(KeptBytes(*kept_, "s1/0", 1), Bytes(RampSum(3, kN)));
}

TEST_F(CollectiveTest, AReplayResumesACutOffCallWithItsWholeResult) {
  constexpr int kN = 40;
  std::shared_ptr<Collective> c = Make(CollectiveKind::kAllReduce, {0, 1, 2});
  auto replay = std::make_shared<FakeRankChannel>();
  const std::vector<TensorSpec> declared = {Spec(DataType::kFloat32, {kN})};
  const std::vector<TensorSpec> other = {Spec(DataType::kFloat32, {kN / 2})};
  auto ch = DecideThen(
      *c, kN,
      [&](const auto& channels) {
        c->OnRankCancelled(1, channels[1].get());
        EXPECT_EQ(c->Resume(1, "s1/9", declared, replay).code(),
                  absl::StatusCode::kNotFound);  // another attempt
        EXPECT_EQ(c->Resume(1, "s1/0", other, replay).code(),
                  absl::StatusCode::kInvalidArgument);  // other tensors
        EXPECT_TRUE(c->Resume(1, "s1/0", declared, replay).ok());
      },
      /*attempt_ids=*/true);
  ASSERT_TRUE(replay->WaitEnded());
  EXPECT_TRUE(replay->finished_ok()) << replay->failure();
  EXPECT_EQ(replay->Result(), Bytes(RampSum(3, kN)));
  ASSERT_FALSE(replay->messages().empty());
  EXPECT_EQ(replay->messages()[0].result, std::vector<TensorSpec>{Spec(DataType::kFloat32, {kN})});
  for (int r : {0, 2}) ASSERT_TRUE(ch[r]->WaitEnded());
  AcknowledgeWrites(*c, 1, *replay);
  EXPECT_TRUE(Settles(*c)) << memory_->used() << " bytes still reserved";
}

TEST_F(CollectiveTest, AReplayTakesThePlaceOfACallNotYetSeenToEnd) {
  constexpr int kN = 40;
  std::shared_ptr<Collective> c = Make(CollectiveKind::kAllReduce, {0, 1, 2});
  auto replay = std::make_shared<FakeRankChannel>();
  auto ch = DecideThen(
      *c, kN,
      [&](const auto&) {
        EXPECT_TRUE(c->Resume(1, "s1/0", {Spec(DataType::kFloat32, {kN})}, replay)
                        .ok());
      },
      /*attempt_ids=*/true);
  ASSERT_TRUE(replay->WaitEnded());
  EXPECT_TRUE(replay->finished_ok()) << replay->failure();
  EXPECT_EQ(replay->Result(), Bytes(RampSum(3, kN)));
  EXPECT_EQ(ch[1]->failure().code(), absl::StatusCode::kAborted);
  EXPECT_THAT(ch[1]->failure().message(), HasSubstr("replaced by its replay"));
  for (int r : {0, 2}) ASSERT_TRUE(ch[r]->WaitEnded());
  AcknowledgeWrites(*c, 1, *replay);
  EXPECT_TRUE(Settles(*c)) << memory_->used() << " bytes still reserved";
}

TEST_F(CollectiveTest, AFailedCollectiveKeepsNothingAndGivesItsRoomBack) {
  constexpr int kN = 20;
  std::shared_ptr<Collective> c = Make(CollectiveKind::kAllReduce, {0, 1});
  auto ch = Channels(2);
  const auto fp = Fp(CollectiveKind::kAllReduce,
                     {Spec(DataType::kFloat32, {kN})}, {0, 1});
  for (int r = 0; r < 2; ++r) c->Attach(ch[r], r, fp, absl::StrCat("s", r, "/0"));
  Feed(*c, 0, Bytes(Ramp(0, kN)));
  EXPECT_GT(kept_memory_.used(), 0u);  // room taken once every header was in
  c->Fail(absl::AbortedError("epoch 1 aborted: rank 5 lost"));
  EXPECT_EQ(kept_memory_.used(), 0u);
  EXPECT_EQ(kept_->size(), 0u);
  EXPECT_EQ(c->Resume(0, "s0/0", {Spec(DataType::kFloat32, {kN})},
                      std::make_shared<FakeRankChannel>())
                .code(),
            absl::StatusCode::kNotFound);
}

TEST_F(CollectiveTest, WindowOfOneStopsReadingUntilChunksAreReducedAndWritten) {
  // Two ranks, 64 floats = 4 chunks of 64 bytes, window 1: each rank may
  // hold one staged chunk and one unwritten message.
  options_.window = 1;
  constexpr int kN = 64;
  constexpr int kChunks = 4;
  std::shared_ptr<Collective> c = Make(CollectiveKind::kAllReduce, {0, 1});
  auto ch = Channels(2);
  auto fp = Fp(CollectiveKind::kAllReduce, {Spec(DataType::kFloat32, {kN})},
               {0, 1});
  c->Attach(ch[0], 0, fp, "");
  c->Attach(ch[1], 1, fp, "");
  const std::string in0 = Bytes(Ramp(0, kN)), in1 = Bytes(Ramp(1, kN));
  for (int b = 0; b < kChunks; ++b) {
    SCOPED_TRACE(absl::StrCat("chunk ", b));
    // Rank 0's chunk is staged, waiting for rank 1's: the window is full.
    EXPECT_FALSE(c->OnData(0, 64 * b, Range(in0.substr(64 * b, 64))));
    EXPECT_EQ(ch[0]->resumes(), b);
    // Rank 1 completes the chunk; it is reduced (inline, being small) and
    // sent to both, whose unwritten message now fills the window.
    EXPECT_FALSE(c->OnData(1, 64 * b, Range(in1.substr(64 * b, 64))));
    ASSERT_THAT(ch[0]->messages(), SizeIs(b + 1));
    ASSERT_THAT(ch[1]->messages(), SizeIs(b + 1));
    EXPECT_EQ(ch[0]->resumes(), b);
    EXPECT_EQ(ch[1]->resumes(), b);
    if (b + 1 == kChunks) break;  // the last message ends the stream
    // Writing rank 0's message resumes rank 0 only.
    EXPECT_EQ(ch[0]->TakeUnacknowledged(), 1);
    c->OnWriteDone(0);
    EXPECT_EQ(ch[0]->resumes(), b + 1);
    EXPECT_EQ(ch[1]->resumes(), b);
    EXPECT_EQ(ch[1]->TakeUnacknowledged(), 1);
    c->OnWriteDone(1);
    EXPECT_EQ(ch[1]->resumes(), b + 1);
  }
  const std::string expected = Bytes(RampSum(2, kN));
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(ch[r]->finished_ok()) << ch[r]->failure();
    EXPECT_TRUE(ch[r]->messages().back().last);
    EXPECT_EQ(ch[r]->Result(), expected);
  }
  EXPECT_EQ(memory_->used(), 0u);
}

TEST_F(CollectiveTest, MemoryBudgetBelowOneRanksReservationIsRefused) {
  // A rank of a 256-byte AllReduce reserves min(256, window x chunk) twice
  // (staged in and queued out) = 512 bytes.
  memory_budget_bytes_ = 500;
  std::shared_ptr<Collective> c = Make(CollectiveKind::kAllReduce, {0, 1});
  auto ch = Channels(2);
  auto fp = Fp(CollectiveKind::kAllReduce, {Spec(DataType::kFloat32, {64})},
               {0, 1});
  c->Attach(ch[0], 0, fp, "");
  EXPECT_EQ(ch[0]->failure().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(ch[0]->failure().message(),
              HasSubstr("memory budget of 500 bytes (--memory_budget_bytes) is "
                        "exhausted: 0 bytes in use, rank 0 needs 512 more"));
  c->Attach(ch[1], 1, fp, "");
  EXPECT_EQ(ch[1]->failure().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(c->done());
  EXPECT_EQ(memory_->used(), 0u);
}

TEST_F(CollectiveTest, MemoryBudgetForOneRankOnlyRefusesTheSecondAndFreesTheFirst) {
  memory_budget_bytes_ = 600;
  std::shared_ptr<Collective> c = Make(CollectiveKind::kAllReduce, {0, 1});
  auto ch = Channels(2);
  auto fp = Fp(CollectiveKind::kAllReduce, {Spec(DataType::kFloat32, {64})},
               {0, 1});
  c->Attach(ch[0], 0, fp, "");
  EXPECT_EQ(memory_->used(), 512u);
  EXPECT_EQ(ch[0]->fail_calls(), 0);
  c->Attach(ch[1], 1, fp, "");
  for (int r = 0; r < 2; ++r) {
    SCOPED_TRACE(absl::StrCat("rank ", r));
    EXPECT_EQ(ch[r]->failure().code(), absl::StatusCode::kResourceExhausted);
    EXPECT_THAT(ch[r]->failure().message(),
                HasSubstr("512 bytes in use, rank 1 needs 512 more"));
    EXPECT_THAT(ch[r]->failure().message(), HasSubstr("--memory_budget_bytes"));
  }
  EXPECT_EQ(memory_->used(), 0u);
}

TEST_F(CollectiveTest, RankCancelledAfterSendingDataAbortsEveryoneEvenBeforeAllArrived) {
  // Its bytes are staged in a chunk: detaching it would lose them, so the
  // collective cannot go on without counting it twice or not at all.
  std::shared_ptr<Collective> c = Make(CollectiveKind::kAllReduce, {0, 1, 2});
  auto ch = Channels(3);
  auto fp = Fp(CollectiveKind::kAllReduce, {Spec(DataType::kFloat32, {4})},
               {0, 1, 2});
  c->Attach(ch[0], 0, fp, "a0");
  c->Attach(ch[1], 1, fp, "a1");
  c->OnData(1, 0, Range(Bytes(Ramp(1, 4))));
  c->OnRankCancelled(1, ch[1].get());
  for (int r : {0, 1}) {
    EXPECT_EQ(ch[r]->failure().code(), absl::StatusCode::kAborted);
    EXPECT_THAT(ch[r]->failure().message(),
                HasSubstr("rank 1's call was cancelled"));
  }
  c->Attach(ch[2], 2, fp, "a2");
  EXPECT_EQ(ch[2]->failure().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(memory_->used(), 0u);
}

TEST_F(CollectiveTest, TimeoutWithEveryRankArrivedNamesTheMissingPayload) {
  std::shared_ptr<Collective> c =
      Make(CollectiveKind::kAllReduce, {0, 1}, absl::Milliseconds(200));
  auto ch = Channels(2);
  auto fp = Fp(CollectiveKind::kAllReduce, {Spec(DataType::kFloat32, {20})},
               {0, 1});
  c->Attach(ch[0], 0, fp, "");
  c->Attach(ch[1], 1, fp, "");
  Feed(*c, 0, Bytes(Ramp(0, 20)));
  c->OnData(1, 0, Range(Bytes(Ramp(1, 20)).substr(0, 16)));
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(ch[r]->WaitEnded());
    EXPECT_EQ(ch[r]->failure().code(), absl::StatusCode::kDeadlineExceeded);
    EXPECT_THAT(ch[r]->failure().message(),
                HasSubstr("every rank arrived but payload is missing: rank 0 "
                          "has received 0 of 80 result bytes; rank 1 sent 16 "
                          "of 80 bytes"));
  }
  EXPECT_EQ(memory_->used(), 0u);
}

// A ReduceScatter rank finishes when it has its own slice and has sent its
// whole input, while its parts of chunks beyond its slice may still wait
// for slower ranks: its reservation stays until those are reduced. Here
// ranks 0 and 1 finish after chunk 0 while their 64-byte parts of chunk 1
// stay staged.
TEST_F(CollectiveTest, FinishedReduceScatterRankStagedChunksStayInTheBudget) {
  constexpr int kN = 18;  // [9,2] float32: chunks [0,64) and [64,72)
  std::shared_ptr<Collective> c = Make(CollectiveKind::kReduceScatter, {0, 1, 2});
  auto ch = Channels(3);
  for (int r = 0; r < 3; ++r) {
    c->Attach(ch[r], r,
              Fp(CollectiveKind::kReduceScatter,
                 {Spec(DataType::kFloat32, {9, 2})}, {0, 1, 2}),
              "");
  }
  // Each rank reserves min(72, window x chunk) in + window x chunk out.
  EXPECT_EQ(memory_->used(), 3u * (72 + 4 * 64));
  Feed(*c, 0, Bytes(Ramp(0, kN)), 64);
  Feed(*c, 1, Bytes(Ramp(1, kN)), 64);
  c->OnData(2, 0, Range(Bytes(Ramp(2, kN)).substr(0, 64)));  // chunk 0 only
  ASSERT_TRUE(ch[0]->WaitEnded());
  ASSERT_TRUE(ch[1]->WaitEnded());
  ASSERT_TRUE(ch[0]->finished_ok());
  // Held now: rank 2's reservation plus ranks 0 and 1's staged parts of
  // chunk 1, 64 bytes each.
  EXPECT_GE(memory_->used(), (72u + 4 * 64) + 2 * 64);
  c->OnData(2, 64, Range(Bytes(Ramp(2, kN)).substr(64)));
  ASSERT_TRUE(ch[2]->WaitEnded());
  EXPECT_TRUE(ch[2]->finished_ok()) << ch[2]->failure();
  EXPECT_EQ(memory_->used(), 0u);
}

// Total result payload bytes a rank was sent, over all its messages.
size_t BytesSentTo(FakeRankChannel& ch) {
  size_t total = 0;
  for (const SentMessage& m : ch.messages()) total += m.data.size();
  return total;
}

// `n` int32 values, element k being 1000 * tag + k.
std::vector<int32_t> Tagged(int tag, int n) {
  std::vector<int32_t> v(n);
  for (int k = 0; k < n; ++k) v[k] = 1000 * tag + k;
  return v;
}

TEST_F(CollectiveTest, ReduceSendsTheSumToTheRootOnlyAndNonRootsNoBytes) {
  // 40 floats = 160 bytes: chunks of 64, 64 and 32 (an uneven last chunk),
  // fed in messages of 48 bytes. Every root in turn.
  constexpr int kN = 40;
  const std::string expected = Bytes(RampSum(3, kN));
  for (int root = 0; root < 3; ++root) {
    SCOPED_TRACE(absl::StrCat("root ", root));
    std::shared_ptr<Collective> c = Make(CollectiveKind::kReduce, {0, 1, 2});
    auto ch = Channels(3);
    for (int r : {2, 0, 1}) {
      c->Attach(ch[r], r,
                Fp(CollectiveKind::kReduce, {Spec(DataType::kFloat32, {kN})},
                   {0, 1, 2}, root),
                "");
      Feed(*c, r, Bytes(Ramp(r, kN)));
    }
    for (int r = 0; r < 3; ++r) {
      SCOPED_TRACE(absl::StrCat("rank ", r));
      ASSERT_TRUE(ch[r]->WaitEnded());
      EXPECT_TRUE(ch[r]->finished_ok()) << ch[r]->failure();
      std::vector<SentMessage> messages = ch[r]->messages();
      ASSERT_THAT(messages, Not(IsEmpty()));
      if (r == root) {
        EXPECT_EQ(ch[r]->Result(), expected);
        EXPECT_EQ(BytesSentTo(*ch[r]), 160u);
        ASSERT_THAT(messages[0].result, SizeIs(1));
        ExpectSpec(messages[0].result[0], DataType::kFloat32, {kN});
        ExpectSpecsOnlyFirst(*ch[r]);
      } else {
        // One empty message with no specs: an empty result.
        EXPECT_EQ(BytesSentTo(*ch[r]), 0u);
        EXPECT_THAT(messages, SizeIs(1));
        EXPECT_THAT(messages[0].result, IsEmpty());
      }
    }
    EXPECT_TRUE(Settles(*c));
  }
}

TEST_F(CollectiveTest, ReduceNonRootsFinishOnceTheirInputIsInBeforeTheSum) {
  // Every full chunk is reduced on the pool, which is held: the non-roots
  // end while no reduction has run; the root ends once the pool is let go.
  options_.offload_bytes = 64;
  constexpr int kN = 32;  // two chunks of 64 bytes
  std::shared_ptr<Collective> c = Make(CollectiveKind::kReduce, {0, 1, 2});
  auto ch = Channels(3);
  {
    PoolHold hold(pool_);
    for (int r = 0; r < 3; ++r) {
      c->Attach(ch[r], r,
                Fp(CollectiveKind::kReduce, {Spec(DataType::kFloat32, {kN})},
                   {0, 1, 2}, 2),
                "");
      Feed(*c, r, Bytes(Ramp(r, kN)), 64);
    }
    EXPECT_TRUE(ch[0]->finished_ok());
    EXPECT_TRUE(ch[1]->finished_ok());
    EXPECT_FALSE(ch[2]->finished_ok());
  }
  ASSERT_TRUE(ch[2]->WaitEnded());
  EXPECT_TRUE(ch[2]->finished_ok()) << ch[2]->failure();
  EXPECT_EQ(ch[2]->Result(), Bytes(RampSum(3, kN)));
  EXPECT_TRUE(Settles(*c));
}

TEST_F(CollectiveTest, GatherConcatenatesInRankOrderAtTheRootOnly) {
  // Rank r sends [4 (r + 1), 2] int32 (32, 64, 96 bytes: more than a chunk
  // for ranks 1 and 2), in messages of 40 bytes; root 1.
  std::shared_ptr<Collective> c = Make(CollectiveKind::kGather, {0, 1, 2});
  auto ch = Channels(3);
  std::vector<int32_t> gathered;
  for (int r : {0, 1, 2}) {
    const std::vector<int32_t> v = Tagged(r, 8 * (r + 1));
    gathered.insert(gathered.end(), v.begin(), v.end());
  }
  for (int r : {2, 1, 0}) {
    c->Attach(ch[r], r,
              Fp(CollectiveKind::kGather,
                 {Spec(DataType::kInt32, {4 * (r + 1), 2})}, {0, 1, 2}, 1),
              "");
    Feed(*c, r, Bytes(Tagged(r, 8 * (r + 1))), 40);
  }
  for (int r = 0; r < 3; ++r) {
    SCOPED_TRACE(absl::StrCat("rank ", r));
    ASSERT_TRUE(ch[r]->WaitEnded());
    EXPECT_TRUE(ch[r]->finished_ok()) << ch[r]->failure();
    std::vector<SentMessage> messages = ch[r]->messages();
    ASSERT_THAT(messages, Not(IsEmpty()));
    if (r == 1) {
      EXPECT_EQ(ch[r]->Result(), Bytes(gathered));
      EXPECT_EQ(BytesSentTo(*ch[r]), 192u);
      ASSERT_THAT(messages[0].result, SizeIs(1));
      ExpectSpec(messages[0].result[0], DataType::kInt32, {24, 2});
      ExpectSpecsOnlyFirst(*ch[r]);
    } else {
      EXPECT_EQ(BytesSentTo(*ch[r]), 0u);
      EXPECT_THAT(messages, SizeIs(1));
      EXPECT_THAT(messages[0].result, IsEmpty());
    }
  }
  EXPECT_TRUE(Settles(*c));
}

TEST_F(CollectiveTest, ScatterSendsEachRankOnlyTheBytesOfItsPart) {
  // Root 2 sends [12, 2] int32 = 96 bytes in messages of 20 bytes (which
  // straddle the parts' boundaries at 32 and 64); ranks 0 and 1 send none.
  // Rank i gets elements [16 i, 16 (i + 1)) and not one byte more.
  std::shared_ptr<Collective> c = Make(CollectiveKind::kScatter, {0, 1, 2});
  auto ch = Channels(3);
  const std::vector<int32_t> input = Tagged(7, 24);
  c->Attach(ch[0], 0, Fp(CollectiveKind::kScatter, {}, {0, 1, 2}, 2), "");
  c->Attach(ch[2], 2,
            Fp(CollectiveKind::kScatter, {Spec(DataType::kInt32, {12, 2})},
               {0, 1, 2}, 2),
            "");
  // Before every header is in: held back.
  c->OnData(2, 0, Range(Bytes(input).substr(0, 20)));
  c->Attach(ch[1], 1, Fp(CollectiveKind::kScatter, {}, {0, 1, 2}, 2), "");
  Feed(*c, 2, Bytes(input).substr(20), 20, 20);
  for (int r = 0; r < 3; ++r) {
    SCOPED_TRACE(absl::StrCat("rank ", r));
    ASSERT_TRUE(ch[r]->WaitEnded());
    EXPECT_TRUE(ch[r]->finished_ok()) << ch[r]->failure();
    EXPECT_EQ(ch[r]->Result(),
              Bytes(std::vector<int32_t>(input.begin() + 8 * r,
                                         input.begin() + 8 * (r + 1))));
    EXPECT_EQ(BytesSentTo(*ch[r]), 32u);
    std::vector<SentMessage> messages = ch[r]->messages();
    ASSERT_THAT(messages, Not(IsEmpty()));
    ASSERT_THAT(messages[0].result, SizeIs(1));
    ExpectSpec(messages[0].result[0], DataType::kInt32, {4, 2});
    ExpectSpecsOnlyFirst(*ch[r]);
  }
  EXPECT_TRUE(Settles(*c));
}

TEST_F(CollectiveTest, AllToAllSendsPartJOfRankIToRankJAtOffsetI) {
  // Every rank sends [12, 2] int32 = 96 bytes (parts of 32), in messages
  // of 20 bytes. Rank j gets part j of ranks 0, 1, 2 in that order.
  constexpr int kRanks = 3;
  std::shared_ptr<Collective> c = Make(CollectiveKind::kAllToAll, {0, 1, 2});
  auto ch = Channels(kRanks);
  for (int r : {1, 2, 0}) {
    c->Attach(ch[r], r,
              Fp(CollectiveKind::kAllToAll, {Spec(DataType::kInt32, {12, 2})},
                 {0, 1, 2}),
              "");
    Feed(*c, r, Bytes(Tagged(r, 24)), 20);
  }
  for (int j = 0; j < kRanks; ++j) {
    SCOPED_TRACE(absl::StrCat("rank ", j));
    std::vector<int32_t> expected;
    for (int i = 0; i < kRanks; ++i) {
      for (int k = 8 * j; k < 8 * (j + 1); ++k) {
        expected.push_back(1000 * i + k);
      }
    }
    ASSERT_TRUE(ch[j]->WaitEnded());
    EXPECT_TRUE(ch[j]->finished_ok()) << ch[j]->failure();
    EXPECT_EQ(ch[j]->Result(), Bytes(expected));
    EXPECT_EQ(BytesSentTo(*ch[j]), 96u);
    std::vector<SentMessage> messages = ch[j]->messages();
    ASSERT_THAT(messages, Not(IsEmpty()));
    ASSERT_THAT(messages[0].result, SizeIs(1));
    ExpectSpec(messages[0].result[0], DataType::kInt32, {12, 2});
    ExpectSpecsOnlyFirst(*ch[j]);
  }
  EXPECT_TRUE(Settles(*c));
}

TEST_F(CollectiveTest, AllToAllShapeMismatchFailsEveryRankNamingBoth) {
  std::shared_ptr<Collective> c = Make(CollectiveKind::kAllToAll, {0, 1, 2});
  auto ch = Channels(3);
  auto fp = [](std::vector<int64_t> shape) {
    return Fp(CollectiveKind::kAllToAll,
              {Spec(DataType::kInt32, std::move(shape))}, {0, 1, 2});
  };
  c->Attach(ch[0], 0, fp({6, 2}), "");
  c->Attach(ch[1], 1, fp({6, 2}), "");
  c->Attach(ch[2], 2, fp({3, 2}), "");
  for (int r = 0; r < 3; ++r) {
    SCOPED_TRACE(absl::StrCat("rank ", r));
    EXPECT_EQ(ch[r]->failure().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(ch[r]->failure().message(),
                HasSubstr("mismatched shapes: rank 0 sent [6,2] int32, "
                          "rank 2 sent [3,2] int32"));
    EXPECT_THAT(ch[r]->messages(), IsEmpty());
  }
  EXPECT_TRUE(c->done());
  EXPECT_EQ(memory_->used(), 0u);
}

TEST_F(CollectiveTest, ReduceRootMismatchFailsEveryRankNamingBoth) {
  std::shared_ptr<Collective> c = Make(CollectiveKind::kReduce, {0, 1});
  auto ch = Channels(2);
  c->Attach(ch[0], 0,
            Fp(CollectiveKind::kReduce, {Spec(DataType::kFloat32, {4})},
               {0, 1}, 0),
            "");
  c->Attach(ch[1], 1,
            Fp(CollectiveKind::kReduce, {Spec(DataType::kFloat32, {4})},
               {0, 1}, 1),
            "");
  for (int r = 0; r < 2; ++r) {
    SCOPED_TRACE(absl::StrCat("rank ", r));
    EXPECT_EQ(ch[r]->failure().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(ch[r]->failure().message(),
                HasSubstr("mismatched roots: rank 0 sent 0, rank 1 sent 1"));
  }
  EXPECT_EQ(memory_->used(), 0u);
}

TEST_F(CollectiveTest, GatherWhoseRootNeverArrivesTimesOutNamingIt) {
  std::shared_ptr<Collective> c =
      Make(CollectiveKind::kGather, {0, 1, 2}, absl::Milliseconds(200));
  auto ch = Channels(3);
  for (int r : {0, 2}) {
    c->Attach(ch[r], r,
              Fp(CollectiveKind::kGather, {Spec(DataType::kInt32, {2})},
                 {0, 1, 2}, 1),
              "");
    Feed(*c, r, Bytes(Tagged(r, 2)));
  }
  for (int r : {0, 2}) {
    SCOPED_TRACE(absl::StrCat("rank ", r));
    ASSERT_TRUE(ch[r]->WaitEnded());
    EXPECT_EQ(ch[r]->failure().code(), absl::StatusCode::kDeadlineExceeded);
    EXPECT_THAT(ch[r]->failure().message(),
                HasSubstr("rank 1 never arrived (ranks 0,2 waited)"));
  }
  EXPECT_EQ(memory_->used(), 0u);
}

TEST_F(CollectiveTest, NonRootScatterPayloadFailsTheCollective) {
  std::shared_ptr<Collective> c = Make(CollectiveKind::kScatter, {0, 1});
  auto ch = Channels(2);
  c->Attach(ch[0], 0,
            Fp(CollectiveKind::kScatter, {Spec(DataType::kInt32, {2})},
               {0, 1}, 0),
            "");
  c->Attach(ch[1], 1, Fp(CollectiveKind::kScatter, {}, {0, 1}, 0), "");
  c->OnData(1, 0, Range(Bytes(Tagged(1, 1))));
  for (int r = 0; r < 2; ++r) {
    SCOPED_TRACE(absl::StrCat("rank ", r));
    EXPECT_EQ(ch[r]->failure().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(ch[r]->failure().message(),
                HasSubstr("a non-root rank sends no scatter payload"));
  }
}

}  // namespace
}  // namespace reducer
