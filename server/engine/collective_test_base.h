// Test helper: the fixture every in-process test of a Collective builds on.
// It holds the parts of the server a Collective uses (options, memory
// budget, chunk pool, timers, reduction pool, a null metrics sink and log,
// and kept results when asked for; with use_fake_clock_, timers and
// deadlines on clock_, a FakeClock the test advances), makes collectives
// over them, and feeds
// payload as a client would. Expected results stay in each test, computed
// in closed form, never by the engine's own code.
//
//   class MyTest : public CollectiveTestBase {};
//   TEST_F(MyTest, Works) {
//     options_.chunk_bytes = 64;  // before the first MakeCollective
//     auto c = MakeCollective(CollectiveKind::kAllReduce, {0, 1}, "t1");
//     auto ch = Channels(2);
//     c->Attach(ch[0], 0, fp, "");
//     Feed(*c, 0, bytes);
//   }
#ifndef REDUCER_SERVER_ENGINE_COLLECTIVE_TEST_BASE_H_
#define REDUCER_SERVER_ENGINE_COLLECTIVE_TEST_BASE_H_

#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/data_type.h"
#include "core/fingerprint.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/engine/chunk_pool.h"
#include "server/engine/clock.h"
#include "server/engine/collective.h"
#include "server/engine/engine_options.h"
#include "server/engine/fake_rank_channel.h"
#include "server/engine/kept_results.h"
#include "server/engine/memory_budget.h"
#include "server/engine/shared_bytes.h"
#include "server/engine/string_bytes.h"
#include "server/engine/thread_pool.h"
#include "server/engine/timer_queue.h"
#include "server/log.h"
#include "server/metrics/metrics_sink.h"
#include "tests/matchers.h"

namespace reducer {

// How long a test waits for something another thread does (a reduction on
// the pool, a timer) before it gives up: far above the milliseconds these
// take, so only a hang fails it.
inline constexpr absl::Duration kWait = absl::Seconds(20);

inline TensorSpec Spec(DataType dtype, std::vector<int64_t> shape) {
  TensorSpec t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  return t;
}

inline Fingerprint Fp(CollectiveKind kind, std::vector<TensorSpec> tensors,
                      std::vector<int> group, int root = -1) {
  Fingerprint fp;
  fp.kind = kind;
  fp.root = root;
  fp.group = std::move(group);
  fp.tensors = std::move(tensors);
  return fp;
}

// A float32 [n] all-reduce's fingerprint over `group`.
inline Fingerprint FloatAllReduce(int64_t n, std::vector<int> group) {
  return Fp(CollectiveKind::kAllReduce, {Spec(DataType::kFloat32, {n})},
            std::move(group));
}

template <typename T>
std::string Bytes(const std::vector<T>& values) {
  std::string out(values.size() * sizeof(T), '\0');
  if (!out.empty()) std::memcpy(out.data(), values.data(), out.size());
  return out;
}

// The bytes of part `i` of `values`, cut into parts of `n` elements each.
template <typename T>
std::string PartBytes(const std::vector<T>& values, int i, int n) {
  return Bytes(
      std::vector<T>(values.begin() + n * i, values.begin() + n * (i + 1)));
}

// A payload message of `bytes`, split in two pieces (as a received buffer
// may be) so that copies across piece boundaries are exercised.
inline Payload Range(const std::string& bytes) {
  auto owner = std::make_shared<const StringOwner>(bytes);
  const char* data = owner->bytes().data();
  const size_t half = bytes.size() / 2;
  Payload range;
  range.Append(SharedBytes(owner, data, half));
  range.Append(SharedBytes(owner, data + half, bytes.size() - half));
  return range;
}

// `n` fresh channels, index r for rank r.
inline std::vector<std::shared_ptr<FakeRankChannel>> Channels(int n) {
  std::vector<std::shared_ptr<FakeRankChannel>> ch(n);
  for (auto& p : ch) p = std::make_shared<FakeRankChannel>();
  return ch;
}

// Rank r's AllReduce / ReduceScatter input: element i is (r + 1) * (i + 1).
inline std::vector<float> Ramp(int rank, int n) {
  std::vector<float> v(n);
  for (int i = 0; i < n; ++i) v[i] = static_cast<float>((rank + 1) * (i + 1));
  return v;
}

// The sum over ranks 0..w-1 of Ramp: element i is w(w+1)/2 * (i + 1).
inline std::vector<float> RampSum(int w, int n) {
  std::vector<float> v(n);
  for (int i = 0; i < n; ++i)
    v[i] = static_cast<float>(w * (w + 1) / 2 * (i + 1));
  return v;
}

inline void ExpectSpec(const TensorSpec& spec, DataType dtype,
                       std::vector<int64_t> shape) {
  EXPECT_EQ(spec.dtype, dtype);
  EXPECT_EQ(spec.shape, shape);
}

// The specs are in the first message and in no other.
inline void ExpectSpecsOnlyFirst(FakeRankChannel& ch) {
  std::vector<SentMessage> messages = ch.sent();
  ASSERT_THAT(messages, ::testing::Not(::testing::IsEmpty()));
  for (size_t i = 1; i < messages.size(); ++i) {
    EXPECT_THAT(messages[i].result, ::testing::IsEmpty()) << "message " << i;
  }
}

// `ch`'s call ended OK with the result bytes `expected`, and its first
// message alone carried the one result spec, `dtype` `shape`.
inline void ExpectResult(FakeRankChannel& ch, const std::string& expected,
                         DataType dtype, std::vector<int64_t> shape) {
  ASSERT_TRUE(ch.WaitEnded());
  EXPECT_TRUE(ch.finished_ok()) << ch.failure();
  EXPECT_EQ(ch.result(), expected);
  std::vector<SentMessage> messages = ch.sent();
  ASSERT_THAT(messages, ::testing::Not(::testing::IsEmpty()));
  ASSERT_THAT(messages[0].result, ::testing::SizeIs(1));
  ExpectSpec(messages[0].result[0], dtype, std::move(shape));
  ExpectSpecsOnlyFirst(ch);
}

// `ch`'s call ended failed with `code`, its message containing `text`.
inline void ExpectFailed(FakeRankChannel& ch, absl::StatusCode code,
                         const std::string& text) {
  ASSERT_TRUE(ch.WaitEnded());
  EXPECT_THAT(ch.failure(), StatusIs(code, HasSubstr(text)));
}

// Holds both reduction threads until Release() (or destruction), so that a
// test can act while every input is in but no result has been sent yet. The
// held tasks share the notification, so it outlives their waits.
class PoolHold {
 public:
  explicit PoolHold(ThreadPool& pool)
      : released_(std::make_shared<absl::Notification>()) {
    for (int i = 0; i < 2; ++i) {
      pool.Schedule(
          [released = released_] { released->WaitForNotification(); });
    }
  }
  ~PoolHold() { Release(); }
  void Release() {
    if (!released_->HasBeenNotified()) released_->Notify();
  }

 private:
  std::shared_ptr<absl::Notification> released_;
};

// The kept result as the client would assemble it; empty if none is kept.
inline std::string KeptBytes(KeptResults& kept, const std::string& attempt,
                             int rank) {
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

// `n` int32 values, element k being 1000 * tag + k.
inline std::vector<int32_t> Tagged(int tag, int n) {
  std::vector<int32_t> v(n);
  for (int k = 0; k < n; ++k) v[k] = 1000 * tag + k;
  return v;
}

class CollectiveTestBase : public ::testing::Test {
 public:
  // A collective of `kind` over `group`, named `name` (`allreduce "t1"`) in
  // job j1, epoch 1, with its timers started. The budget, the chunk pool
  // and, with keep_results_, the kept results are made at the first call,
  // from options_ and memory_budget_bytes_ as set by then.
  std::shared_ptr<Collective> MakeCollective(
      CollectiveKind kind, std::vector<int> group, const std::string& name,
      absl::Duration timeout = absl::Seconds(60)) {
    if (memory_ == nullptr) {
      memory_ = std::make_unique<MemoryBudget>(memory_budget_bytes_);
    }
    if (chunks_ == nullptr) {
      chunks_ = std::make_unique<ChunkPool>(options_.chunk_bytes, 16);
    }
    if (use_fake_clock_ && fake_timers_ == nullptr) {
      fake_timers_ = std::make_unique<TimerQueue>(&clock_);
    }
    TimerQueue* timers = use_fake_clock_ ? fake_timers_.get() : &timers_;
    if (keep_results_ && kept_ == nullptr) {
      kept_ = std::make_shared<KeptResults>(&kept_memory_, absl::Seconds(30),
                                            KeptResults::kEntryBytes,
                                            &timers->clock());
    }
    CollectiveEnv env{&options_,     &pool_,    timers, memory_.get(),
                      chunks_.get(), &metrics_, &log_};
    if (keep_results_) {
      env.kept_memory = &kept_memory_;
      env.kept = kept_;
    }
    auto c = std::make_shared<Collective>(
        env, CollectiveLabel{"j1", 1, name, kind},
        absl::StrCat(name, " in job j1"), std::move(group), timeout);
    c->StartTimers();
    return c;
  }

  // A collective of `kind` over `group` named `kind "t<n>"`, the n-th made.
  std::shared_ptr<Collective> Make(CollectiveKind kind, std::vector<int> group,
                                   absl::Duration timeout = absl::Seconds(60)) {
    const std::string name =
        absl::StrCat(CollectiveKindName(kind), " \"t", ++made_, "\"");
    return MakeCollective(kind, std::move(group), name, timeout);
  }

  // The memory budget, once a collective was made.
  MemoryBudget& memory() { return *memory_; }

 protected:
  // A float32 [n] all-reduce over `group` (ranks 0..k), made by Make, with
  // a channel per rank (index r for rank r) and the fingerprint every rank
  // attaches with.
  struct AllReduceSetup {
    std::shared_ptr<Collective> c;
    std::vector<std::shared_ptr<FakeRankChannel>> ch;
    Fingerprint fp;
  };
  AllReduceSetup MakeAllReduce(int64_t n, std::vector<int> group) {
    AllReduceSetup setup;
    setup.ch = Channels(group.back() + 1);
    setup.fp = FloatAllReduce(n, group);
    setup.c = Make(CollectiveKind::kAllReduce, std::move(group));
    return setup;
  }

  // Feeds `bytes` as `rank`'s payload from `offset`, in messages of at most
  // `message_bytes`, ignoring back-pressure (the engine must cope with a
  // client that sends a window's worth ahead). Returns the last OnData.
  static bool Feed(Collective& c, int rank, const std::string& bytes,
                   size_t message_bytes = 48, uint64_t offset = 0) {
    bool may_read = true;
    for (size_t pos = 0; pos < bytes.size(); pos += message_bytes) {
      may_read =
          c.OnData(rank, offset + pos, Range(bytes.substr(pos, message_bytes)));
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
      c.Attach(ch[r], r, FloatAllReduce(n, {0, 1, 2}),
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
      const std::function<
          void(const std::vector<std::shared_ptr<FakeRankChannel>>&)>& act,
      bool attempt_ids = false) {
    options_.offload_bytes = 64;
    auto ch = Channels(3);
    const Fingerprint fp = FloatAllReduce(n, {0, 1, 2});
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
  bool keep_results_ = false;  // collectives keep results (1 MiB of room)
  // Collectives made from now on time out (and warn, and expire kept
  // results) on clock_, which moves only by clock_.Advance.
  bool use_fake_clock_ = false;
  FakeClock clock_;
  MetricsSink metrics_;        // counts nothing
  Logger log_;
  std::unique_ptr<MemoryBudget> memory_;
  MemoryBudget kept_memory_{1 << 20};
  std::unique_ptr<ChunkPool> chunks_;
  // Holds chunks of chunks_: goes first.
  std::shared_ptr<KeptResults> kept_;
  TimerQueue timers_;
  std::unique_ptr<TimerQueue> fake_timers_;  // on clock_, made when first used
  ThreadPool pool_{2};
  int made_ = 0;  // collectives Make made
};

// The fixture of the Collective's own tests: chunks of 64 bytes, several
// from tensors of a few floats, and every result kept.
class CollectiveTest : public CollectiveTestBase {
 protected:
  CollectiveTest() {
    options_.chunk_bytes = 64;
    keep_results_ = true;
  }
};

}  // namespace reducer

#endif  // REDUCER_SERVER_ENGINE_COLLECTIVE_TEST_BASE_H_
