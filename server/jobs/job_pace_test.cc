// A Job sizes its reductions' chunks to the pace of its inputs
// (server/engine/chunk_pacing.h): after an all-reduce whose payload came
// slowly, its sessions are told a smaller chunk (JobPace) and the next
// all-reduce is reduced and answered in chunks of that size, with the same
// result; with --chunk_time 0 nothing changes.
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/engine/string_bytes.h"
#include "server/jobs/fake_job_channels.h"
#include "server/jobs/job.h"

namespace reducer {
namespace {

constexpr int kWorld = 2;
constexpr size_t kMessageBytes = 64 << 10;
constexpr int kMessages = 8;  // 512 KiB per rank
constexpr size_t kFloats = kMessages * kMessageBytes / sizeof(float);

EngineOptions PacedOptions(absl::Duration chunk_time) {
  EngineOptions options;
  options.chunk_time = chunk_time;
  return options;
}

class JobPaceTest : public ::testing::TestWithParam<bool> {
 protected:
  // The parameter: whether pacing is on (--chunk_time 20 ms, or 0).
  JobPaceTest()
      : server_(PacedOptions(GetParam() ? absl::Milliseconds(20) : absl::ZeroDuration())),
        job_("j1", kWorld, server_.env()) {
    for (int r = 0; r < kWorld; ++r) {
      sessions_.push_back(std::make_shared<FakeSession>());
      EXPECT_TRUE(job_.Join(r, kWorld, absl::StrCat("s", r), sessions_[r]).ok());
    }
  }

  static v1::CollectiveHeader AllReduce(int rank, uint64_t sequence) {
    v1::CollectiveHeader h;
    h.set_job("j1");
    h.set_epoch(1);
    h.set_session_id(absl::StrCat("s", rank));
    h.set_rank(rank);
    h.set_sequence(sequence);
    h.set_kind(v1::COLLECTIVE_KIND_ALL_REDUCE);
    h.set_timeout_ms(60000);
    v1::TensorSpec* tensor = h.add_tensors();
    tensor->set_dtype(v1::DATA_TYPE_FLOAT32);
    tensor->add_shape(static_cast<int64_t>(kFloats));
    tensor->set_op(v1::REDUCE_OP_SUM);
    return h;
  }

  // Rank r's input: element i is r * 1000 + i % 1000.
  static std::vector<float> Input(int rank) {
    std::vector<float> in(kFloats);
    for (size_t i = 0; i < kFloats; ++i) in[i] = static_cast<float>(rank * 1000 + i % 1000);
    return in;
  }

  // What rank 0 got of one all-reduce.
  struct Outcome {
    std::vector<float> result;
    int messages = 0;  // result messages: one per chunk
  };

  // Every rank's all-reduce `sequence`, its payload sent a 64 KiB message
  // at a time, `gap` apart.
  Outcome RunAllReduce(uint64_t sequence, absl::Duration gap) {
    std::vector<std::shared_ptr<FakeRankChannel>> calls;
    std::vector<std::shared_ptr<Collective>> collectives;
    std::vector<std::vector<float>> inputs;
    for (int r = 0; r < kWorld; ++r) {
      calls.push_back(std::make_shared<FakeRankChannel>());
      absl::StatusOr<std::shared_ptr<Collective>> c = job_.Attach(AllReduce(r, sequence), calls[r]);
      EXPECT_TRUE(c.ok()) << c.status();
      if (!c.ok()) return {};
      collectives.push_back(*c);
      inputs.push_back(Input(r));
    }
    for (int m = 0; m < kMessages; ++m) {
      if (m > 0) absl::SleepFor(gap);
      for (int r = 0; r < kWorld; ++r) {
        Payload payload;
        payload.Append(StringBytes(std::string(
            reinterpret_cast<const char*>(inputs[r].data()) + m * kMessageBytes, kMessageBytes)));
        collectives[r]->OnData(r, m * kMessageBytes, std::move(payload));
      }
    }
    for (auto& call : calls) {
      const absl::Time deadline = absl::Now() + absl::Seconds(20);
      while (!call->finished_ok() && call->failure().ok() && absl::Now() < deadline) {
        absl::SleepFor(absl::Milliseconds(2));
      }
      EXPECT_TRUE(call->finished_ok()) << call->failure();
    }
    const std::string bytes = calls[0]->bytes();
    Outcome out;
    out.result.resize(bytes.size() / sizeof(float));
    std::memcpy(out.result.data(), bytes.data(), out.result.size() * sizeof(float));
    out.messages = calls[0]->message_count();
    return out;
  }

  std::vector<uint64_t> PacesTold(int rank) {
    std::vector<uint64_t> told;
    for (const v1::JoinEvent& e : sessions_[rank]->events()) {
      if (e.has_pace()) told.push_back(e.pace().chunk_bytes());
    }
    return told;
  }

  JobTestEnv server_;
  Job job_;
  std::vector<std::shared_ptr<FakeSession>> sessions_;
};

TEST_P(JobPaceTest, SlowInputsMakeSmallerChunksAndTheSessionsAreTold) {
  std::vector<float> want(kFloats);
  for (size_t i = 0; i < kFloats; ++i) want[i] = static_cast<float>(1000 + 2 * (i % 1000));
  const size_t max_chunk = EngineOptions().chunk_bytes;
  // Before any pace: 256 KiB chunks (two for the 512 KiB), or with pacing
  // off 1 MiB (one).
  EXPECT_EQ(job_.Snapshot().chunk_bytes, GetParam() ? size_t{256} << 10 : max_chunk);
  // 7 x 64 KiB in 7 x 40 ms: about 1.6 MB/s, 33 KB in 20 ms, so the
  // smallest chunk, 64 KiB (slower on a busy machine: the same).
  Outcome slow = RunAllReduce(0, absl::Milliseconds(40));
  EXPECT_EQ(slow.result, want);
  EXPECT_EQ(slow.messages, GetParam() ? 2 : 1);
  // The pace is taken once the collective is done and the job makes its
  // next one, which already uses the new chunk.
  Outcome next = RunAllReduce(1, absl::ZeroDuration());
  EXPECT_EQ(next.result, want);
  const JobSnapshot snapshot = job_.Snapshot();
  if (!GetParam()) {
    EXPECT_EQ(next.messages, 1);
    EXPECT_EQ(snapshot.chunk_bytes, max_chunk);
    EXPECT_TRUE(PacesTold(0).empty());
    return;
  }
  EXPECT_EQ(next.messages, kMessages);  // 64 KiB chunks
  EXPECT_GT(snapshot.input_bytes_per_s, 0.2e6);
  EXPECT_LT(snapshot.input_bytes_per_s, 2.0e6);
  EXPECT_EQ(snapshot.chunk_bytes, size_t{64} << 10);
  for (int r = 0; r < kWorld; ++r) {
    EXPECT_THAT(PacesTold(r), ::testing::ElementsAre(64u << 10)) << "rank " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(PacingOnAndOff, JobPaceTest, ::testing::Bool());

}  // namespace
}  // namespace reducer
