// Uneven all-to-all (CollectiveKind::kAllToAllV) through a Collective and
// its ExchangeStrategy, with recording rank channels: uneven matrices with
// rows of zero, payload that arrives before every rank attached and in
// messages that span parts, an exchange of nothing at all, each rank's own
// result spec, and the pairwise check of expected rows, which fails every
// rank naming both ranks and both numbers. Expected results are put
// together here row by row from the inputs, apart from the strategy's
// offsets.
#include "server/engine/exchange_strategy.h"

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "core/data_type.h"
#include "core/fingerprint.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/engine/collective.h"
#include "server/engine/collective_test_base.h"
#include "server/engine/fake_rank_channel.h"
#include "tests/matchers.h"

namespace reducer {
namespace {

// Row r of rank i: kCols int32 values 1000 * i + 10 * r + c + 1, so that
// every row of every rank differs.
constexpr int kCols = 3;
constexpr size_t kRowBytes = kCols * sizeof(int32_t);

std::string Rows(int rank, int64_t rows) {
  std::vector<int32_t> v;
  for (int64_t r = 0; r < rows; ++r) {
    for (int c = 0; c < kCols; ++c) {
      v.push_back(static_cast<int32_t>(1000 * rank + 10 * r + c + 1));
    }
  }
  std::string out(v.size() * sizeof(int32_t), '\0');
  if (!v.empty()) std::memcpy(out.data(), v.data(), out.size());
  return out;
}

TensorSpec Ints(int64_t rows) {
  TensorSpec t;
  t.dtype = DataType::kInt32;
  t.shape = {rows, kCols};
  return t;
}

int64_t Sum(const std::vector<int64_t>& v) {
  int64_t s = 0;
  for (int64_t x : v) s += x;
  return s;
}

Fingerprint AllToAllV(std::vector<int> group, std::vector<int64_t> send,
                      std::vector<int64_t> recv = {}) {
  Fingerprint fp;
  fp.kind = CollectiveKind::kAllToAllV;
  fp.group = std::move(group);
  fp.tensors = {Ints(Sum(send))};
  fp.send_rows = std::move(send);
  fp.recv_rows = std::move(recv);
  return fp;
}

// What rank j gets from `send` (send[i][j]: rows rank i sends rank j):
// every rank's rows for it, in rank order, cut by hand from Rows(i, ...).
std::string Expected(const std::vector<std::vector<int64_t>>& send, size_t j) {
  std::string out;
  for (size_t i = 0; i < send.size(); ++i) {
    int64_t before = 0;
    for (size_t k = 0; k < j; ++k) before += send[i][k];
    out += Rows(static_cast<int>(i), Sum(send[i]))
               .substr(before * kRowBytes, send[i][j] * kRowBytes);
  }
  return out;
}

class AllToAllVTest : public CollectiveTestBase {
 protected:
  AllToAllVTest() { options_.chunk_bytes = 64; }

  // The calls of a group of two.
  const std::shared_ptr<FakeRankChannel> a_ =
      std::make_shared<FakeRankChannel>();
  const std::shared_ptr<FakeRankChannel> b_ =
      std::make_shared<FakeRankChannel>();

  std::shared_ptr<Collective> Make(std::vector<int> group) {
    return MakeCollective(CollectiveKind::kAllToAllV, std::move(group),
                          "alltoallv #0");
  }

  // Runs the exchange `send` over ranks 0..n-1, rank 0's payload fed
  // before the others attach, in messages of `message_bytes`, and checks
  // every rank's result against Expected.
  void RunAndCheck(const std::vector<std::vector<int64_t>>& send,
                   size_t message_bytes) {
    const int n = static_cast<int>(send.size());
    std::vector<int> group;
    for (int i = 0; i < n; ++i) group.push_back(i);
    std::shared_ptr<Collective> c = Make(group);
    std::vector<std::shared_ptr<FakeRankChannel>> ch;
    for (int i = 0; i < n; ++i)
      ch.push_back(std::make_shared<FakeRankChannel>());
    ASSERT_TRUE(c->Attach(ch[0], 0, AllToAllV(group, send[0]), ""));
    Feed(*c, 0, Rows(0, Sum(send[0])), message_bytes);  // held back
    for (int i = 1; i < n; ++i) {
      ASSERT_TRUE(c->Attach(ch[i], i, AllToAllV(group, send[i]), ""));
    }
    for (int i = 1; i < n; ++i) {
      Feed(*c, i, Rows(i, Sum(send[i])), message_bytes);
    }
    for (int j = 0; j < n; ++j) {
      SCOPED_TRACE(absl::StrCat("rank ", j));
      ASSERT_TRUE(ch[j]->WaitEnded());
      EXPECT_TRUE(ch[j]->finished_ok()) << ch[j]->failure();
      int64_t rows = 0;
      for (int i = 0; i < n; ++i) rows += send[i][j];
      ASSERT_THAT(ch[j]->specs(), SizeIs(1));
      EXPECT_EQ(ch[j]->specs()[0], Ints(rows));
      EXPECT_EQ(ch[j]->headers(), 1);
      EXPECT_EQ(ch[j]->result(), Expected(send, j));
    }
    EXPECT_TRUE(c->done());
    EXPECT_EQ(memory_->used(), 0u);
  }
};

TEST_F(AllToAllVTest, UnevenRowsWithZerosReachEachRankInRankOrder) {
  // Messages of 20 bytes: never a whole number of 12-byte rows, so most
  // span two parts, some three.
  RunAndCheck({{2, 0, 3}, {1, 4, 0}, {0, 0, 5}}, 20);
  RunAndCheck({{0, 1}, {7, 0}}, 8);
  RunAndCheck({{1, 2, 0, 3}, {0, 0, 0, 0}, {4, 1, 1, 0}, {0, 6, 2, 1}}, 36);
}

TEST_F(AllToAllVTest, AnExchangeOfNothingEndsWithEmptyResults) {
  RunAndCheck({{0, 0, 0}, {0, 0, 0}, {0, 0, 0}}, 12);
}

TEST_F(AllToAllVTest, ARankThatGetsNothingEndsOnceItsInputIsIn) {
  // Rank 1 gets no row, and sends its own to rank 0 only.
  RunAndCheck({{1, 0, 2}, {3, 0, 0}, {0, 0, 1}}, 1000);
}

TEST_F(AllToAllVTest, ExpectedRowsThatDisagreeFailEveryRankNamingBoth) {
  const std::vector<int> group = {0, 1, 2};
  std::shared_ptr<Collective> c = Make(group);
  std::vector<std::shared_ptr<FakeRankChannel>> ch;
  for (int i = 0; i < 3; ++i) ch.push_back(std::make_shared<FakeRankChannel>());
  // Rank 1 agrees with rank 0; rank 2 expects 4 rows from rank 0, which
  // sends it 3.
  ASSERT_TRUE(c->Attach(ch[0], 0, AllToAllV(group, {1, 1, 3}), ""));
  ASSERT_TRUE(c->Attach(ch[1], 1, AllToAllV(group, {2, 0, 0}, {1, 0, 0}), ""));
  EXPECT_FALSE(c->Attach(ch[2], 2, AllToAllV(group, {0, 0, 1}, {4, 0, 1}), ""));
  for (int i = 0; i < 3; ++i) {
    SCOPED_TRACE(absl::StrCat("rank ", i));
    ASSERT_TRUE(ch[i]->WaitEnded());
    EXPECT_THAT(
        ch[i]->failure(),
        StatusIs(absl::StatusCode::kFailedPrecondition,
                 "alltoallv #0 in job j1: mismatched rows: rank 0 sends "
                 "3 rows to rank 2, but rank 2 expects 4 from rank 0"));
    EXPECT_EQ(ch[i]->byte_count(), 0u);
  }
  EXPECT_EQ(memory_->used(), 0u);
}

TEST_F(AllToAllVTest, ARankThatAttachesAfterAnExpectationIsCheckedAgainstIt) {
  // Rank 2 attached first, expecting 1 row from rank 1; rank 1 sends it 2.
  const std::vector<int> group = {0, 1, 2};
  std::shared_ptr<Collective> c = Make(group);
  auto two = std::make_shared<FakeRankChannel>();
  auto one = std::make_shared<FakeRankChannel>();
  ASSERT_TRUE(c->Attach(two, 2, AllToAllV(group, {0, 0, 0}, {0, 1, 0}), ""));
  EXPECT_FALSE(c->Attach(one, 1, AllToAllV(group, {0, 0, 2}), ""));
  for (auto* channel : {one.get(), two.get()}) {
    ExpectFailed(*channel, absl::StatusCode::kFailedPrecondition,
                 "mismatched rows: rank 1 sends 2 rows to rank 2, but rank 2 "
                 "expects 1 from rank 1");
  }
}

TEST_F(AllToAllVTest, WhatARankExpectsFromItselfIsCheckedToo) {
  const std::vector<int> group = {0, 1};
  std::shared_ptr<Collective> c = Make(group);
  ASSERT_TRUE(c->Attach(a_, 0, AllToAllV(group, {1, 1}), ""));
  EXPECT_FALSE(c->Attach(b_, 1, AllToAllV(group, {2, 0}, {1, 3}), ""));
  for (auto* channel : {a_.get(), b_.get()}) {
    ExpectFailed(*channel, absl::StatusCode::kFailedPrecondition,
                 "mismatched rows: rank 1 sends 0 rows to rank 1, but rank 1 "
                 "expects 3 from rank 1");
  }
}

TEST_F(AllToAllVTest, ExpectedRowsThatAgreeChangeNothing) {
  const std::vector<int> group = {1, 4};  // global ranks 1 and 4
  std::shared_ptr<Collective> c = Make(group);
  ASSERT_TRUE(c->Attach(a_, 1, AllToAllV(group, {1, 2}, {1, 0}), ""));
  ASSERT_TRUE(c->Attach(b_, 4, AllToAllV(group, {0, 1}, {2, 1}), ""));
  Feed(*c, 1, Rows(0, 3), 24);
  Feed(*c, 4, Rows(1, 1), 24);
  ASSERT_TRUE(a_->WaitEnded());
  ASSERT_TRUE(b_->WaitEnded());
  EXPECT_TRUE(a_->finished_ok()) << a_->failure();
  EXPECT_TRUE(b_->finished_ok()) << b_->failure();
  EXPECT_EQ(a_->result(), Expected({{1, 2}, {0, 1}}, 0));
  EXPECT_EQ(b_->result(), Expected({{1, 2}, {0, 1}}, 1));
}

TEST_F(AllToAllVTest, OtherDimensionsMustAgree) {
  const std::vector<int> group = {0, 1};
  std::shared_ptr<Collective> c = Make(group);
  ASSERT_TRUE(c->Attach(a_, 0, AllToAllV(group, {1, 1}), ""));
  Fingerprint wide = AllToAllV(group, {0, 1});
  wide.tensors[0].shape = {1, kCols + 1};
  EXPECT_FALSE(c->Attach(b_, 1, wide, ""));
  ExpectFailed(
      *b_, absl::StatusCode::kFailedPrecondition,
      "mismatched shapes: rank 0 sent [2,3] int32, rank 1 sent [1,4] int32");
}

}  // namespace
}  // namespace reducer
