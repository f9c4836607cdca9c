// Tests for StreamShares and HeldStreamShares: per-tenant and silent-peer
// stream counts, refusals naming the holder and the flag, a stream that is
// its token's tenant's from the moment it opens, and shares given back when
// their holders go or their call does not attach.
#include "server/jobs/stream_shares.h"

#include <string>
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
    if (limit == RefusedLimit::kMaxStreamsPerTenant) ++refused_streams;
  }
  int refused_streams = 0;
};

// A tenant function that must not be asked.
std::string NotAsked() {
  ADD_FAILURE() << "the tenant was asked for a job the stream holds";
  return "not-asked";
}

// Shares of one stream per tenant, and the refusals counted.
class OneStreamPerTenantTest : public ::testing::Test {
 protected:
  RefusalCounter metrics_;
  StreamShares shares_{StreamShares::Holder::kTenant,
                       /*max_streams_per_tenant=*/1, &metrics_};
};
using StreamSharesTest = OneStreamPerTenantTest;
using HeldStreamSharesTest = OneStreamPerTenantTest;

TEST_F(StreamSharesTest, ATenantGetsItsLimitAndNoMore) {
  RefusalCounter metrics;
  StreamShares shares(StreamShares::Holder::kTenant,
                      /*max_streams_per_tenant=*/2, &metrics);
  absl::StatusOr<StreamShares::Share> first = shares.Take("hog");
  absl::StatusOr<StreamShares::Share> second = shares.Take("hog");
  ASSERT_THAT(first, IsOk());
  ASSERT_THAT(second, IsOk());
  absl::StatusOr<StreamShares::Share> third = shares.Take("hog");
  EXPECT_THAT(third.status(),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("tenant hog already holds 2 collective "
                                 "streams (--max_streams_per_tenant=2")));
  EXPECT_EQ(metrics.refused_streams, 1);
  // Another tenant is not touched by the first one's streams.
  EXPECT_THAT(shares.Take("other"), IsOk());
  EXPECT_EQ(shares.StreamsOf("hog"), 2);
}

TEST_F(StreamSharesTest, AShareGoesBackWhenDestroyedOrMovedOver) {
  {
    absl::StatusOr<StreamShares::Share> held = shares_.Take("tenant");
    ASSERT_THAT(held, IsOk());
    StreamShares::Share moved = *std::move(held);
    EXPECT_EQ(shares_.StreamsOf("tenant"), 1);
    EXPECT_FALSE(shares_.Take("tenant").ok());
  }
  EXPECT_EQ(shares_.StreamsOf("tenant"), 0);
  absl::StatusOr<StreamShares::Share> again = shares_.Take("tenant");
  ASSERT_THAT(again, IsOk());
  // Assigning over a held share gives the old one back first.
  *again = StreamShares::Share();
  EXPECT_EQ(shares_.StreamsOf("tenant"), 0);
}

TEST_F(HeldStreamSharesTest, OneStreamTakesOneShareOfEachTenantItAttachesTo) {
  {
    HeldStreamShares stream(&shares_, StreamShares::Share());
    ASSERT_THAT(stream.Hold("a/x", [] { return std::string("a"); }), IsOk());
    stream.Settle(/*attached=*/true);
    // A second call of the same job: nothing asked, no new share.
    ASSERT_THAT(stream.Hold("a/x", NotAsked), IsOk());
    stream.Settle(true);
    // Another job of the same tenant: its tenant is asked, no new share.
    ASSERT_THAT(stream.Hold("a/y", [] { return std::string("a"); }), IsOk());
    stream.Settle(true);
    ASSERT_THAT(stream.Hold("b", [] { return std::string("b"); }), IsOk());
    stream.Settle(true);
    EXPECT_EQ(shares_.StreamsOf("a"), 1);
    EXPECT_EQ(shares_.StreamsOf("b"), 1);
    HeldStreamShares other_stream(&shares_, StreamShares::Share());
    EXPECT_THAT(other_stream.Hold("a/z", [] { return std::string("a"); }),
                StatusIs(absl::StatusCode::kResourceExhausted,
                         HasSubstr("tenant a already holds 1")));
    EXPECT_EQ(metrics_.refused_streams, 1);
  }
  EXPECT_EQ(shares_.StreamsOf("a"), 0);
  EXPECT_EQ(shares_.StreamsOf("b"), 0);
}

TEST_F(HeldStreamSharesTest, GiveBackReturnsEveryShareAtOnce) {
  HeldStreamShares stream(&shares_, StreamShares::Share());
  ASSERT_THAT(stream.Hold("a", [] { return std::string("a"); }), IsOk());
  stream.Settle(true);
  ASSERT_THAT(stream.Hold("b", [] { return std::string("b"); }), IsOk());
  stream.Settle(true);
  stream.GiveBack();
  EXPECT_EQ(shares_.StreamsOf("a"), 0);
  EXPECT_EQ(shares_.StreamsOf("b"), 0);
  HeldStreamShares next(&shares_, StreamShares::Share());
  EXPECT_THAT(next.Hold("a", [] { return std::string("a"); }), IsOk());
}

// Calls that name jobs no one joined hold nothing: without that, one
// stream naming a million such jobs would hold a million entries.
TEST_F(HeldStreamSharesTest, AShareTakenForACallThatDidNotAttachGoesBack) {
  HeldStreamShares stream(&shares_, StreamShares::Share());
  for (const char* job : {"nobody-1", "nobody-2", "nobody-3"}) {
    ASSERT_THAT(stream.Hold(job, [job] { return std::string(job); }), IsOk());
    EXPECT_EQ(shares_.StreamsOf(job), 1);
    stream.Settle(/*attached=*/false);
    EXPECT_EQ(shares_.StreamsOf(job), 0);
  }
  // A share the stream held before is kept when a later call fails.
  ASSERT_THAT(stream.Hold("a", [] { return std::string("a"); }), IsOk());
  stream.Settle(true);
  ASSERT_THAT(stream.Hold("a", NotAsked), IsOk());
  stream.Settle(false);
  EXPECT_EQ(shares_.StreamsOf("a"), 1);
}

TEST_F(HeldStreamSharesTest, AStreamIsItsPeersSilentOneUntilACallAttaches) {
  RefusalCounter metrics;
  StreamShares tenants(StreamShares::Holder::kTenant, 4, &metrics);
  StreamShares silent(StreamShares::Holder::kSilentPeer, 1, &metrics);
  absl::StatusOr<StreamShares::Share> first = silent.Take("ipv4:10.0.0.7");
  ASSERT_THAT(first, IsOk());
  // The peer's second silent stream is refused, naming what it did not do.
  EXPECT_THAT(silent.Take("ipv4:10.0.0.7").status(),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("peer ipv4:10.0.0.7 already holds 1 "
                                 "collective streams that sent no call yet "
                                 "(--max_streams_per_tenant=1")));
  EXPECT_THAT(silent.Take("ipv4:10.0.0.8"), IsOk());  // another peer
  HeldStreamShares stream(&tenants, *std::move(first));
  EXPECT_EQ(silent.StreamsOf("ipv4:10.0.0.7"), 1);
  // A call that does not attach leaves the stream silent.
  ASSERT_THAT(stream.Hold("nobody", [] { return std::string("nobody"); }),
              IsOk());
  stream.Settle(false);
  EXPECT_EQ(silent.StreamsOf("ipv4:10.0.0.7"), 1);
  ASSERT_THAT(stream.Hold("a", [] { return std::string("a"); }), IsOk());
  stream.Settle(true);  // its first call attached
  EXPECT_EQ(silent.StreamsOf("ipv4:10.0.0.7"), 0);
  EXPECT_EQ(tenants.StreamsOf("a"), 1);
  stream.GiveBack();
  EXPECT_EQ(tenants.StreamsOf("a"), 0);
}

// With tokens, a stream is its token's tenant's as it opens: its opening
// share becomes the share its tenant's calls hold (no second share is
// taken, so a tenant at its limit still attaches on its own streams),
// while the silent streams of one tenant leave another's share alone.
TEST_F(HeldStreamSharesTest, AStreamIsItsTokensTenantsFromTheMomentItOpens) {
  RefusalCounter metrics;
  StreamShares tenants(StreamShares::Holder::kTenant, 2, &metrics);
  absl::StatusOr<StreamShares::Share> a1 = tenants.Take("A");
  absl::StatusOr<StreamShares::Share> a2 = tenants.Take("A");
  ASSERT_THAT(a1, IsOk());
  ASSERT_THAT(a2, IsOk());
  EXPECT_THAT(tenants.Take("A").status(),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("tenant A already holds 2")));
  absl::StatusOr<StreamShares::Share> b = tenants.Take("B");
  ASSERT_THAT(b, IsOk());  // B's stream, from wherever, is its own

  HeldStreamShares stream(&tenants, *std::move(a1));
  ASSERT_THAT(stream.Hold("A/job", [] { return std::string("A"); }), IsOk());
  stream.Settle(true);
  EXPECT_EQ(tenants.StreamsOf("A"), 2);
  // A call of another tenant's job (lines sharing one token) takes that
  // tenant's share besides.
  ASSERT_THAT(stream.Hold("C/job", [] { return std::string("C"); }), IsOk());
  stream.Settle(true);
  EXPECT_EQ(tenants.StreamsOf("C"), 1);
  stream.GiveBack();
  EXPECT_EQ(tenants.StreamsOf("A"), 1);
  EXPECT_EQ(tenants.StreamsOf("C"), 0);

  // A first call that does not attach leaves the opening share in place.
  HeldStreamShares failing(&tenants, *std::move(a2));
  ASSERT_THAT(failing.Hold("A/none", [] { return std::string("A"); }), IsOk());
  failing.Settle(false);
  EXPECT_EQ(tenants.StreamsOf("A"), 1);
  failing.GiveBack();
  EXPECT_EQ(tenants.StreamsOf("A"), 0);
  EXPECT_EQ(tenants.StreamsOf("B"), 1);
}

}  // namespace
}  // namespace reducer
