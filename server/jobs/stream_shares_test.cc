// Tests for StreamShares and HeldStreamShares: per-job and silent-peer
// stream counts, refusals naming the flag, and shares given back when their
// holders go.
#include "server/jobs/stream_shares.h"

#include <optional>
#include <utility>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/metrics/metrics_sink.h"
#include "tests/matchers.h"

namespace reducer {
namespace {

// Counts the refusals it is told of, by limit.
class RefusalCounter : public MetricsSink {
 public:
  void RequestRefused(absl::StatusCode, RefusedLimit limit) override {
    if (limit == RefusedLimit::kMaxStreamsPerJob) ++refused_streams;
  }
  int refused_streams = 0;
};

// Shares of one stream per job, and the refusals counted.
class OneStreamPerJobTest : public ::testing::Test {
 protected:
  RefusalCounter metrics_;
  StreamShares shares_{StreamShares::Holder::kJob, /*max_streams_per_job=*/1,
                       &metrics_};
};
using StreamSharesTest = OneStreamPerJobTest;
using HeldStreamSharesTest = OneStreamPerJobTest;

TEST_F(StreamSharesTest, AJobGetsItsLimitAndNoMore) {
  RefusalCounter metrics;
  StreamShares shares(StreamShares::Holder::kJob, /*max_streams_per_job=*/2, &metrics);
  absl::StatusOr<StreamShares::Share> first = shares.Take("hog");
  absl::StatusOr<StreamShares::Share> second = shares.Take("hog");
  ASSERT_THAT(first, IsOk());
  ASSERT_THAT(second, IsOk());
  absl::StatusOr<StreamShares::Share> third = shares.Take("hog");
  EXPECT_THAT(third.status(),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("--max_streams_per_job=2")));
  EXPECT_THAT(third.status().message(), HasSubstr("job hog"));
  EXPECT_EQ(metrics.refused_streams, 1);
  // Another job is not touched by the first one's streams.
  EXPECT_THAT(shares.Take("other"), IsOk());
  EXPECT_EQ(shares.StreamsOf("hog"), 2);
}

TEST_F(StreamSharesTest, AShareGoesBackWhenDestroyedOrMovedOver) {
  {
    absl::StatusOr<StreamShares::Share> held = shares_.Take("job");
    ASSERT_THAT(held, IsOk());
    StreamShares::Share moved = *std::move(held);
    EXPECT_EQ(shares_.StreamsOf("job"), 1);
    EXPECT_FALSE(shares_.Take("job").ok());
  }
  EXPECT_EQ(shares_.StreamsOf("job"), 0);
  absl::StatusOr<StreamShares::Share> again = shares_.Take("job");
  ASSERT_THAT(again, IsOk());
  // Assigning over a held share gives the old one back first.
  *again = StreamShares::Share();
  EXPECT_EQ(shares_.StreamsOf("job"), 0);
}

TEST_F(HeldStreamSharesTest, OneStreamTakesOneShareOfEachJobItAttachesTo) {
  {
    HeldStreamShares stream(&shares_, StreamShares::Share());
    EXPECT_THAT(stream.Hold("a"), IsOk());
    EXPECT_THAT(stream.Hold("a"), IsOk());  // a second call of the same job: no new share
    EXPECT_THAT(stream.Hold("b"), IsOk());
    EXPECT_EQ(shares_.StreamsOf("a"), 1);
    EXPECT_EQ(shares_.StreamsOf("b"), 1);
    HeldStreamShares other_stream(&shares_, StreamShares::Share());
    EXPECT_THAT(other_stream.Hold("a"),
                StatusIs(absl::StatusCode::kResourceExhausted));
    EXPECT_EQ(metrics_.refused_streams, 1);
  }
  EXPECT_EQ(shares_.StreamsOf("a"), 0);
  EXPECT_EQ(shares_.StreamsOf("b"), 0);
}

TEST_F(HeldStreamSharesTest, GiveBackReturnsEveryShareAtOnce) {
  HeldStreamShares stream(&shares_, StreamShares::Share());
  ASSERT_THAT(stream.Hold("a"), IsOk());
  ASSERT_THAT(stream.Hold("b"), IsOk());
  stream.GiveBack();
  EXPECT_EQ(shares_.StreamsOf("a"), 0);
  EXPECT_EQ(shares_.StreamsOf("b"), 0);
  HeldStreamShares next(&shares_, StreamShares::Share());
  EXPECT_THAT(next.Hold("a"), IsOk());
}

TEST_F(HeldStreamSharesTest, AStreamIsItsPeersSilentOneUntilItsFirstCall) {
  RefusalCounter metrics;
  StreamShares jobs(StreamShares::Holder::kJob, 4, &metrics);
  StreamShares silent(StreamShares::Holder::kSilentPeer, 1, &metrics);
  absl::StatusOr<StreamShares::Share> first = silent.Take("ipv4:10.0.0.7");
  ASSERT_THAT(first, IsOk());
  // The peer's second silent stream is refused, naming what it did not do.
  EXPECT_THAT(silent.Take("ipv4:10.0.0.7").status(),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("peer ipv4:10.0.0.7 already holds 1 "
                                 "collective streams that sent no call yet "
                                 "(--max_streams_per_job=1)")));
  EXPECT_THAT(silent.Take("ipv4:10.0.0.8"), IsOk());  // another peer
  HeldStreamShares stream(&jobs, *std::move(first));
  EXPECT_EQ(silent.StreamsOf("ipv4:10.0.0.7"), 1);
  ASSERT_THAT(stream.Hold("a"), IsOk());  // its first call
  EXPECT_EQ(silent.StreamsOf("ipv4:10.0.0.7"), 0);
  EXPECT_EQ(jobs.StreamsOf("a"), 1);
  stream.GiveBack();
  EXPECT_EQ(jobs.StreamsOf("a"), 0);
}

}  // namespace
}  // namespace reducer
