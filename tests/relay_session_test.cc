// The client library's side of a relay (client/internal/client_session.h),
// against real reducerd processes, with one shard and with two: a session
// holding ranks 0-2 (ClientSession::OpenForRanks) beside an ordinary rank 3
// of a 4-rank job.
//
// - An all-reduce forwarded for ranks [0,1,2] carrying their sum, and a
//   reduce-scatter forwarded once per rank on the same session, give every
//   rank what it would get had each rank called alone (expected values
//   computed here from each rank's input).
// - A forwarded input whose bytes are let through an InputGate in two
//   halves, filled only as they are let through, arrives whole.
// - An all-reduce given memory for its result (ResultInto) gets it there,
//   every byte said to have landed, and its tensors lent over it; any
//   other kind given memory is refused.
// - OnEnd fires with reducerd's abort reason, naming rank 3, once rank 3's
//   process is killed.
// - LeaveWithCause ends the epoch: rank 3's next call fails ABORTED naming
//   the cause, and the relay's own session says it ended for it.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/internal/client_session.h"
#include "client/internal/input_gate.h"
#include "client/reducer_client.h"
#include "client/staging/host_memory_staging.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/reducer/v1/reducer.pb.h"
#include "tests/fault_test_base.h"
#include "tests/process_harness.h"
#include "tests/status_matchers.h"

namespace reducer {
namespace testing {
namespace {

using ::reducer::testing::StatusIs;
using ::testing::HasSubstr;

constexpr int kWorld = 4;
// float32 elements: 256 KiB, which two shards take in two partitions.
constexpr int kN = 1 << 16;
constexpr int kSlice = kN / kWorld;
constexpr int kTimeoutMs = 20000;

// Rank r's input: element i is r * kN + i (exact in float32, as are sums
// of four of them).
std::vector<float> Input(int rank) {
  std::vector<float> v(kN);
  for (int i = 0; i < kN; ++i) v[i] = static_cast<float>(rank * kN + i);
  return v;
}

// Element-wise sum of the inputs of `ranks`.
std::vector<float> SumOf(const std::vector<int>& ranks) {
  std::vector<float> sum(kN, 0.0f);
  for (int r : ranks) {
    const std::vector<float> x = Input(r);
    for (int i = 0; i < kN; ++i) sum[i] += x[i];
  }
  return sum;
}

// The relay's upstream staging: host memory only.
std::unique_ptr<DeviceStaging> HostOnly() {
  return NewHostMemoryStaging("a relay session holds host memory only");
}

std::vector<float> Values(const Tensor& t) {
  absl::Span<const float> v = t.values<float>();
  return std::vector<float>(v.begin(), v.end());
}

// A forwarded call of the whole job's group, number `sequence` of its
// call order, over one float32 tensor of kN elements summed.
v1::CollectiveHeader Forwarded(v1::CollectiveKind kind, int rank,
                               const std::vector<int>& ranks,
                               uint64_t sequence) {
  v1::CollectiveHeader header;
  header.set_kind(kind);
  header.set_rank(rank);
  for (int r : ranks) header.add_ranks(r);
  for (int r = 0; r < kWorld; ++r) header.add_group(r);
  header.set_sequence(sequence);
  v1::TensorSpec* tensor = header.add_tensors();
  tensor->set_dtype(v1::DATA_TYPE_FLOAT32);
  tensor->add_shape(kN);
  tensor->set_op(v1::REDUCE_OP_SUM);
  header.set_root(-1);
  header.set_timeout_ms(kTimeoutMs);
  return header;
}

absl::Time CallDeadline() {
  return absl::Now() + absl::Milliseconds(kTimeoutMs) + absl::Seconds(5);
}

// Lets payload bytes through as the test opens them; remembers the
// furthest end a transport awaited.
class OpenedGate final : public InputGate {
 public:
  void Open(size_t end) {
    absl::MutexLock lock(&mu_);
    open_ = end;
    opened_.SignalAll();
  }
  size_t largest_awaited() const {
    absl::MutexLock lock(&mu_);
    return largest_awaited_;
  }
  absl::Status Await(size_t end, absl::Time deadline) const override {
    absl::MutexLock lock(&mu_);
    largest_awaited_ = std::max(largest_awaited_, end);
    while (open_ < end) {
      if (opened_.WaitWithDeadline(&mu_, deadline) && open_ < end) {
        return absl::DeadlineExceededError("the test's gate stayed shut");
      }
    }
    return absl::OkStatus();
  }

 private:
  mutable absl::Mutex mu_;
  mutable absl::CondVar opened_;
  size_t open_ ABSL_GUARDED_BY(mu_) = 0;
  mutable size_t largest_awaited_ ABSL_GUARDED_BY(mu_) = 0;
};

class RelaySessionTest : public FaultTest {
 protected:
  // Starts `shards` reducerd processes; target_ names them all.
  void StartShards(int shards) {
    ASSERT_TRUE(StartServer());
    std::vector<std::string> addresses = {server()->address()};
    for (int s = 1; s < shards; ++s) {
      absl::StatusOr<std::unique_ptr<ReducerdProcess>> more =
          ReducerdProcess::Start();
      ASSERT_THAT(more, IsOk());
      addresses.push_back((*more)->address());
      more_shards_.push_back(*std::move(more));
    }
    target_ = absl::StrJoin(addresses, ",");
  }

  ClientOptions Options(int rank) const {
    ClientOptions options;
    options.target = target_;
    options.job = Job();
    options.rank = rank;
    options.world_size = kWorld;
    options.local_world_size = 3;
    options.timeout = absl::Seconds(30);
    return options;
  }

  // Opens the relay's session of ranks 0-2 while `join_rank3` joins rank 3
  // (each waits for the other).
  template <typename JoinRank3>
  void OpenRelayWith(JoinRank3 join_rank3) {
    absl::StatusOr<std::unique_ptr<ClientSession>> relay;
    std::thread t([&] {
      relay = ClientSession::OpenForRanks(Options(0), {0, 1, 2}, HostOnly());
    });
    join_rank3();
    t.join();
    ASSERT_THAT(relay, IsOk());
    relay_ = *std::move(relay);
    EXPECT_EQ(relay_->ranks(), std::vector<int>({0, 1, 2}));
  }

  void OpenRelayAndClient() {
    absl::StatusOr<std::unique_ptr<Client>> rank3;
    OpenRelayWith([&] { rank3 = Client::Connect(Options(3)); });
    ASSERT_THAT(rank3, IsOk());
    rank3_ = *std::move(rank3);
  }

  // Rank 3's all-reduce of its input, connected directly, beside a
  // forwarded one: on the thread returned, which sets `alone`.
  std::thread Rank3AllReduce(absl::StatusOr<Tensor>* alone) {
    return std::thread([this, alone] {
      const std::vector<float> input = Input(3);
      *alone = rank3_->AllReduce(TensorView::Of<float>(input), ReduceOp::kSum);
    });
  }

  // Every forwarded call, and rank 3's, as described at the top.
  void RunForwardedCalls() {
    ASSERT_NO_FATAL_FAILURE(OpenRelayAndClient());
    const std::vector<float> input3 = Input(3);
    const std::vector<float> total = SumOf({0, 1, 2, 3});

    // All-reduce: ranks [0,1,2] as one contribution, their sum.
    {
      const std::vector<float> relay_sum = SumOf({0, 1, 2});
      absl::StatusOr<Tensor> alone;
      std::thread t = Rank3AllReduce(&alone);
      std::unique_ptr<PendingCollective> call = relay_->StartForwarded(
          Forwarded(v1::COLLECTIVE_KIND_ALL_REDUCE, 0, {0, 1, 2}, 0),
          {relay_sum.data()}, nullptr, CallDeadline());
      absl::StatusOr<std::vector<Tensor>> forwarded = call->Wait();
      t.join();
      ASSERT_THAT(forwarded, IsOk());
      ASSERT_EQ(forwarded->size(), 1u);
      EXPECT_EQ(Values((*forwarded)[0]), total);
      ASSERT_THAT(alone, IsOk());
      EXPECT_EQ(Values(*alone), total);
    }

    // Reduce-scatter: one call per rank on the one session, at once.
    {
      std::vector<std::vector<float>> inputs;
      for (int r = 0; r < 3; ++r) inputs.push_back(Input(r));
      absl::StatusOr<Tensor> alone;
      std::thread t([&] {
        alone = rank3_->ReduceScatter(TensorView::Of<float>(input3),
                                      ReduceOp::kSum);
      });
      std::vector<std::unique_ptr<PendingCollective>> calls(3);
      std::vector<std::thread> starters;
      for (int r = 0; r < 3; ++r) {
        starters.emplace_back([&, r] {
          calls[r] = relay_->StartForwarded(
              Forwarded(v1::COLLECTIVE_KIND_REDUCE_SCATTER, r, {}, 1),
              {inputs[r].data()}, nullptr, CallDeadline());
        });
      }
      for (std::thread& s : starters) s.join();
      std::vector<absl::StatusOr<std::vector<Tensor>>> slices;
      for (int r = 0; r < 3; ++r) slices.push_back(calls[r]->Wait());
      t.join();
      for (int r = 0; r < 3; ++r) {
        SCOPED_TRACE(absl::StrCat("rank ", r));
        ASSERT_THAT(slices[r], IsOk());
        ASSERT_EQ(slices[r]->size(), 1u);
        EXPECT_EQ(Values((*slices[r])[0]),
                  std::vector<float>(total.begin() + r * kSlice,
                                     total.begin() + (r + 1) * kSlice));
      }
      ASSERT_THAT(alone, IsOk());
      EXPECT_EQ(Values(*alone),
                std::vector<float>(total.begin() + 3 * kSlice, total.end()));
    }

    // A gated all-reduce input, filled and let through in two halves.
    {
      const std::vector<float> relay_sum = SumOf({0, 1, 2});
      std::vector<float> filling(kN, -1.0e6f);  // wrong until filled
      OpenedGate gate;
      constexpr size_t kHalf = kN / 2;
      std::thread filler([&] {
        absl::SleepFor(absl::Milliseconds(200));
        std::memcpy(filling.data(), relay_sum.data(), kHalf * sizeof(float));
        gate.Open(kHalf * sizeof(float));
        absl::SleepFor(absl::Milliseconds(200));
        std::memcpy(filling.data() + kHalf, relay_sum.data() + kHalf,
                    (kN - kHalf) * sizeof(float));
        gate.Open(kN * sizeof(float));
      });
      absl::StatusOr<Tensor> alone;
      std::thread t = Rank3AllReduce(&alone);
      std::unique_ptr<PendingCollective> call = relay_->StartForwarded(
          Forwarded(v1::COLLECTIVE_KIND_ALL_REDUCE, 0, {0, 1, 2}, 2),
          {filling.data()}, &gate, CallDeadline());
      absl::StatusOr<std::vector<Tensor>> forwarded = call->Wait();
      filler.join();
      t.join();
      EXPECT_GT(gate.largest_awaited(), 0u);  // the transport asked the gate
      ASSERT_THAT(forwarded, IsOk());
      EXPECT_EQ(Values((*forwarded)[0]), total);
      ASSERT_THAT(alone, IsOk());
      EXPECT_EQ(Values(*alone), total);
    }

    // An all-reduce into memory given: its result lands there (each
    // shard's partition as it comes), and the tensors are lent over it.
    {
      const std::vector<float> relay_sum = SumOf({0, 1, 2});
      auto memory = std::make_shared<std::vector<float>>(kN, -1.0f);
      auto into = std::make_shared<ResultInto>();
      into->specs = {TensorSpec{DataType::kFloat32, {kN}}};
      into->data = {reinterpret_cast<char*>(memory->data())};
      into->offsets = {0};
      into->owner = memory;
      absl::Mutex mu;
      std::vector<std::pair<size_t, size_t>> landed;
      into->landed = [&](size_t begin, size_t end) {
        absl::MutexLock lock(&mu);
        landed.emplace_back(begin, end);
      };
      // Only an all-reduce's result goes to memory given.
      EXPECT_THAT(relay_
                      ->StartForwarded(
                          Forwarded(v1::COLLECTIVE_KIND_BROADCAST, 0, {}, 3),
                          {relay_sum.data()}, nullptr, CallDeadline(), into)
                      ->Wait(),
                  StatusIs(absl::StatusCode::kInvalidArgument,
                           HasSubstr("only an all-reduce's result")));
      absl::StatusOr<Tensor> alone;
      std::thread t = Rank3AllReduce(&alone);
      std::unique_ptr<PendingCollective> call = relay_->StartForwarded(
          Forwarded(v1::COLLECTIVE_KIND_ALL_REDUCE, 0, {0, 1, 2}, 3),
          {relay_sum.data()}, nullptr, CallDeadline(), into);
      absl::StatusOr<std::vector<Tensor>> forwarded = call->Wait();
      t.join();
      ASSERT_THAT(forwarded, IsOk());
      ASSERT_EQ(forwarded->size(), 1u);
      EXPECT_EQ((*forwarded)[0].data(), memory->data());
      EXPECT_EQ(*memory, total);
      ASSERT_THAT(alone, IsOk());
      EXPECT_EQ(Values(*alone), total);
      // Every byte was said to have landed, in ranges within the result.
      absl::MutexLock lock(&mu);
      std::vector<int> told(kN * sizeof(float), 0);
      for (const auto& [begin, end] : landed) {
        ASSERT_LE(end, told.size());
        for (size_t b = begin; b < end; ++b) ++told[b];
      }
      EXPECT_EQ(std::count(told.begin(), told.end(), 0), 0);
    }
    EXPECT_THAT(relay_->status(), IsOk());
  }

  // rank 3 a fault_worker that joins and hangs; killed, the relay's OnEnd
  // says why.
  void RunOnEndAfterRank3Killed() {
    std::unique_ptr<ChildProcess> rank3;
    OpenRelayWith([&] {
      WorkerSpec spec;
      spec.job = Job();
      spec.rank = 3;
      spec.world_size = kWorld;
      spec.steps = "hang";
      spec.target = target_;
      rank3 = StartWorker(spec);
    });
    ASSERT_NE(rank3, nullptr);
    absl::Notification ended;
    absl::Status reason;
    int calls = 0;
    relay_->OnEnd([&](const absl::Status& status) {
      reason = status;
      ++calls;
      ended.Notify();
    });
    absl::SleepFor(absl::Milliseconds(300));
    EXPECT_FALSE(ended.HasBeenNotified());  // nothing ended yet
    rank3.reset();                          // SIGKILL
    ASSERT_TRUE(ended.WaitForNotificationWithTimeout(absl::Seconds(20)));
    EXPECT_THAT(reason,
                StatusIs(absl::StatusCode::kAborted, HasSubstr("rank 3")));
    EXPECT_EQ(calls, 1);
    EXPECT_EQ(relay_->status(), reason);
    // The session refuses calls from then on, with the same reason.
    std::vector<float> input = SumOf({0, 1, 2});
    EXPECT_THAT(relay_
                    ->StartForwarded(Forwarded(v1::COLLECTIVE_KIND_ALL_REDUCE,
                                               0, {0, 1, 2}, 0),
                                     {input.data()}, nullptr, CallDeadline())
                    ->Wait()
                    .status(),
                StatusIs(absl::StatusCode::kAborted, HasSubstr("rank 3")));
  }

  void RunLeaveWithCause() {
    ASSERT_NO_FATAL_FAILURE(OpenRelayAndClient());
    const std::string cause =
        "relay on host h1 lost rank 1 (its process exited)";
    absl::Notification ended;
    absl::Status reason;
    relay_->OnEnd([&](const absl::Status& status) {
      reason = status;
      ended.Notify();
    });
    EXPECT_THAT(relay_->LeaveWithCause(cause), IsOk());
    EXPECT_THAT(relay_->status(),
                StatusIs(absl::StatusCode::kAborted, HasSubstr(cause)));
    ASSERT_TRUE(ended.WaitForNotificationWithTimeout(absl::Seconds(10)));
    EXPECT_THAT(reason, StatusIs(absl::StatusCode::kAborted, HasSubstr(cause)));
    const std::vector<float> input3 = Input(3);
    EXPECT_THAT(rank3_->AllReduce(TensorView::Of<float>(input3), ReduceOp::kSum)
                    .status(),
                StatusIs(absl::StatusCode::kAborted, HasSubstr(cause)));
    // Once is enough: a second Leave says the session is over.
    EXPECT_THAT(relay_->LeaveWithCause("again"),
                StatusIs(absl::StatusCode::kAborted, HasSubstr(cause)));
  }

  void TearDown() override {
    relay_.reset();
    rank3_.reset();
    more_shards_.clear();
    FaultTest::TearDown();
  }

  std::string target_;
  std::vector<std::unique_ptr<ReducerdProcess>> more_shards_;
  std::unique_ptr<ClientSession> relay_;
  std::unique_ptr<Client> rank3_;
};

TEST_F(RelaySessionTest, ForwardedCallsOneShard) {
  ASSERT_NO_FATAL_FAILURE(StartShards(1));
  RunForwardedCalls();
}

TEST_F(RelaySessionTest, ForwardedCallsTwoShards) {
  ASSERT_NO_FATAL_FAILURE(StartShards(2));
  RunForwardedCalls();
}

TEST_F(RelaySessionTest, OnEndNamesAKilledRankOneShard) {
  ASSERT_NO_FATAL_FAILURE(StartShards(1));
  RunOnEndAfterRank3Killed();
}

TEST_F(RelaySessionTest, OnEndNamesAKilledRankTwoShards) {
  ASSERT_NO_FATAL_FAILURE(StartShards(2));
  RunOnEndAfterRank3Killed();
}

TEST_F(RelaySessionTest, LeaveWithCauseAbortsTheOtherRankOneShard) {
  ASSERT_NO_FATAL_FAILURE(StartShards(1));
  RunLeaveWithCause();
}

TEST_F(RelaySessionTest, LeaveWithCauseAbortsTheOtherRankTwoShards) {
  ASSERT_NO_FATAL_FAILURE(StartShards(2));
  RunLeaveWithCause();
}

TEST_F(RelaySessionTest, OpenForRanksRefusesRanksOutOfOrder) {
  ClientOptions options;
  options.job = Job();
  options.world_size = kWorld;
  EXPECT_THAT(ClientSession::OpenForRanks(options, {1, 0}, HostOnly()).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("must be sorted")));
  EXPECT_THAT(ClientSession::OpenForRanks(options, {2, 4}, HostOnly()).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("within a world of 4")));
}

}  // namespace
}  // namespace testing
}  // namespace reducer
