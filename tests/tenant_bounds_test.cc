// Bounds per tenant, with a real reducerd and a tokens file of two tenants,
// A and B, spoken to over the wire API (tests/raw_client.h): tenant A's
// jobs, however many and however named under its line, take no more than
// A's share of the jobs and of the memory budget, so tenant B's Join and
// all-reduce still get in; and a rank sending a flood of malformed calls
// leaves reducerd's resident memory flat and its log short.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/reducer/v1/reducer.grpc.pb.h"
#include "proto/reducer/v1/reducer.pb.h"
#include "proto/reducer/v1/status_conversion.h"
#include "tests/fault_test_base.h"
#include "tests/raw_client.h"
#include "tests/status_matchers.h"

namespace reducer {
namespace testing {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr char kTokenA[] = "token-of-tenant-a";
constexpr char kTokenB[] = "token-of-tenant-b";

// `printf %s TOKEN | sha256sum`, as docs/security.md has users write it.
std::string Sha256Hex(const std::string& token) {
  std::string out;
  FILE* pipe =
      popen(absl::StrCat("printf %s '", token, "' | sha256sum").c_str(), "r");
  if (pipe == nullptr) return out;
  char buffer[256];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0)
    out.append(buffer, n);
  pclose(pipe);
  return out.substr(0, 64);
}

// Join streams on one channel, each holding its one-rank job open until
// the object goes.
class JoinStreams {
 public:
  explicit JoinStreams(const std::string& address)
      : stub_(v1::Reducer::NewStub(grpc::CreateChannel(
            address, grpc::InsecureChannelCredentials()))) {}
  ~JoinStreams() {
    for (Open& open : open_) {
      open.context->TryCancel();
      open.reader->Finish().ok();
    }
  }

  // Joins rank 0 of one-rank job `job` with `token`: OK once JobReady came
  // (the stream then stays open), else the stream's status.
  absl::Status Join(const std::string& job, const std::string& token) {
    auto context = std::make_unique<grpc::ClientContext>();
    context->AddMetadata("authorization", absl::StrCat("Bearer ", token));
    context->set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
    v1::JoinRequest request;
    request.set_job(job);
    request.set_rank(0);
    request.set_world_size(1);
    request.set_session_id(absl::StrCat("session-of-", job));
    std::unique_ptr<grpc::ClientReader<v1::JoinEvent>> reader =
        stub_->Join(context.get(), request);
    v1::JoinEvent event;
    if (reader->Read(&event) && event.has_ready()) {
      open_.push_back(Open{std::move(context), std::move(reader)});
      return absl::OkStatus();
    }
    return FromGrpcStatus(reader->Finish());
  }

 private:
  struct Open {
    std::unique_ptr<grpc::ClientContext> context;
    std::unique_ptr<grpc::ClientReader<v1::JoinEvent>> reader;
  };
  std::unique_ptr<v1::Reducer::Stub> stub_;
  std::vector<Open> open_;
};

class TenantBoundsTest : public FaultTest {
 protected:
  absl::Duration TimeLimit() const override { return absl::Seconds(150); }

  // Tenant A's and tenant B's names: their lines of the tokens file.
  std::string TenantA() const { return Job("A"); }
  std::string TenantB() const { return Job("B"); }

  // --job_tokens_file= a file with the lines of tenants A and B.
  std::string TokensFlag() {
    const std::string path = absl::StrCat(scratch_dir_, "/tokens");
    WriteFile(path, absl::StrCat(TenantA(), " ", Sha256Hex(kTokenA), "\n",
                                 TenantB(), " ", Sha256Hex(kTokenB), "\n"));
    return "--job_tokens_file=" + path;
  }

  static void WriteFile(const std::string& path, const std::string& text) {
    FILE* f = std::fopen(path.c_str(), "w");
    ASSERT_NE(f, nullptr) << path;
    std::fputs(text.c_str(), f);
    std::fclose(f);
  }

  // Every rank of job `job` of `world` ranks, joined at once with `token`.
  std::vector<std::unique_ptr<RawSession>> JoinAll(const std::string& job,
                                                   int world,
                                                   const std::string& token) {
    std::vector<absl::StatusOr<std::unique_ptr<RawSession>>> joined(world);
    std::vector<std::thread> threads;
    for (int r = 0; r < world; ++r) {
      threads.emplace_back([&, r] {
        joined[r] = RawSession::Join(server()->address(), job, r, world,
                                     absl::Seconds(60), token);
      });
    }
    for (std::thread& t : threads) t.join();
    std::vector<std::unique_ptr<RawSession>> sessions;
    for (int r = 0; r < world; ++r) {
      EXPECT_TRUE(joined[r].ok())
          << job << " rank " << r << ": " << joined[r].status();
      if (joined[r].ok()) sessions.push_back(*std::move(joined[r]));
    }
    return sessions;
  }

  // Rank 0's buffered send of `bytes` (float32) to rank 1, in messages of
  // 1 MiB, that nobody receives: the call's status.
  static absl::Status SendUnreceived(RawSession& rank0, size_t bytes) {
    std::vector<v1::CollectiveRequest> requests;
    v1::CollectiveRequest first;
    v1::CollectiveHeader* h = first.mutable_header();
    *h = rank0.Header(v1::COLLECTIVE_KIND_SEND_RECEIVE);
    h->set_name("p2p 0>1 tag 7 #0");
    h->set_root(0);
    h->add_group(0);
    h->add_group(1);
    v1::TensorSpec* t = h->add_tensors();
    t->set_dtype(v1::DATA_TYPE_FLOAT32);
    t->add_shape(static_cast<int64_t>(bytes / 4));
    requests.push_back(first);
    constexpr size_t kMessage = 1 << 20;
    for (size_t offset = 0; offset < bytes; offset += kMessage) {
      if (offset > 0) requests.emplace_back();
      requests.back().set_offset(offset);
      requests.back().set_data(
          std::string(std::min(kMessage, bytes - offset), '\1'));
    }
    return rank0.Call(requests, absl::Seconds(30)).status;
  }
};

// Tenant A, with its one token, Joins one-rank jobs A/j0, A/j1, ... until
// refused: it is refused at --max_jobs_per_tenant (256), named, long before
// --max_jobs, and tenant B's Join gets in.
TEST_F(TenantBoundsTest, ATenantsJoinsLeaveJobsForAnother) {
  ASSERT_TRUE(StartServer({TokensFlag(), "--max_jobs=300"}));
  JoinStreams streams(server()->address());
  absl::Status refused;
  int admitted = 0;
  for (; admitted < 300; ++admitted) {
    refused = streams.Join(absl::StrCat(TenantA(), "/j", admitted), kTokenA);
    if (!refused.ok()) break;
  }
  EXPECT_EQ(admitted, 256);
  EXPECT_THAT(refused,
              StatusIs(absl::StatusCode::kResourceExhausted,
                       AllOf(HasSubstr(absl::StrCat("its tenant ", TenantA(),
                                                    " already has 256 jobs")),
                             HasSubstr("--max_jobs_per_tenant=256"))));
  EXPECT_THAT(streams.Join(TenantB(), kTokenB), IsOk());
  EXPECT_THAT(streams.Join(absl::StrCat(TenantB(), "/other"), kTokenB), IsOk());
}

// Tenant A's jobs A/x and A/y each send 31 MB that nobody receives, with a
// budget of 64 MB: A/x's send holds A's share (half the budget), A/y's is
// refused naming A's share, and tenant B's 1 MiB all-reduce runs.
TEST_F(TenantBoundsTest, ATenantsSendsHoldOneShareAndAnotherGetsItsOwn) {
  ASSERT_TRUE(StartServer({TokensFlag(), "--memory_budget_bytes=64000000"}));
  std::vector<std::unique_ptr<RawSession>> x =
      JoinAll(absl::StrCat(TenantA(), "/x"), 2, kTokenA);
  std::vector<std::unique_ptr<RawSession>> y =
      JoinAll(absl::StrCat(TenantA(), "/y"), 2, kTokenA);
  std::vector<std::unique_ptr<RawSession>> b = JoinAll(TenantB(), 1, kTokenB);
  ASSERT_EQ(x.size(), 2u);
  ASSERT_EQ(y.size(), 2u);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_THAT(SendUnreceived(*x[0], 31'000'000), IsOk());
  EXPECT_THAT(
      SendUnreceived(*y[0], 31'000'000),
      StatusIs(absl::StatusCode::kResourceExhausted,
               AllOf(HasSubstr(absl::StrCat("tenant ", TenantA(),
                                            "'s share of the memory budget, "
                                            "32000000 bytes")),
                     HasSubstr("--max_tenant_memory_fraction=0.5"),
                     HasSubstr("other tenants keep the rest"))));
  v1::CollectiveRequest all_reduce = b[0]->AllReduceRequest({262144});
  all_reduce.set_data(std::string(1 << 20, '\0'));
  const RawCallResult reduced = b[0]->Call({all_reduce}, absl::Seconds(30));
  EXPECT_THAT(reduced.status, IsOk());
  EXPECT_TRUE(reduced.data == std::string(1 << 20, '\0'))
      << reduced.data.size() << " result bytes, not 1 MiB of zeros";
}

// Rank 0 of a job of 64 sends 200,000 calls with a malformed dtype, each
// naming a collective its peers have not called: reducerd's resident
// memory stays flat (each once kept a whole collective of 64 ranks), and
// its log gets about a line a second, the rest counted.
TEST_F(TenantBoundsTest, MalformedCallsKeepReducerdFlatAndItsLogShort) {
  ASSERT_TRUE(StartServer());
  constexpr int kWorld = 64;
  constexpr int kCalls = 200'000;
  constexpr int kCallsPerStream = 5'000;
  std::vector<std::unique_ptr<RawSession>> ranks =
      JoinAll(Job("wide"), kWorld, "");
  ASSERT_EQ(ranks.size(), static_cast<size_t>(kWorld));
  const int64_t rss_before_kib = ServerRssKib();
  const absl::Time start = absl::Now();
  int answered = 0;
  for (int first = 0; first < kCalls; first += kCallsPerStream) {
    std::vector<v1::CollectiveRequest> calls;
    for (int i = first; i < first + kCallsPerStream; ++i) {
      v1::CollectiveRequest call = ranks[0]->AllReduceRequest({4});
      call.mutable_header()->set_sequence(i);
      call.mutable_header()->mutable_tensors(0)->set_dtype(
          static_cast<v1::DataType>(999));
      call.set_call_id(i - first + 1);
      calls.push_back(std::move(call));
    }
    const RawCallResult result = ranks[0]->Call(
        calls, absl::Seconds(60), /*half_close=*/true, /*many_calls=*/true);
    ASSERT_THAT(result.status, IsOk());
    for (const v1::CollectiveResponse& response : result.responses) {
      if (!response.has_status()) continue;
      ++answered;
      ASSERT_THAT(FromCallStatus(response.status()),
                  StatusIs(absl::StatusCode::kInvalidArgument,
                           HasSubstr("rank 0 sent a bad request")));
    }
  }
  const absl::Duration took = absl::Now() - start;
  EXPECT_EQ(answered, kCalls);
  // 200,000 such calls once took reducerd 3.5 GiB further.
  const int64_t rss_after_kib = ServerRssKib();
  if (RssChecksApply()) {
    EXPECT_LE(rss_after_kib - rss_before_kib, 64 * 1024)
        << "reducerd grew from " << rss_before_kib << " KiB to "
        << rss_after_kib << " KiB";
  }
  // A line a second at most, and one more that counts what came after.
  int lines = 0;
  bool counted = false;
  for (absl::string_view line : absl::StrSplit(server()->Stderr(), '\n')) {
    if (!absl::StrContains(line, "sent a bad request")) continue;
    ++lines;
    counted = counted || absl::StrContains(line, "more like this suppressed");
  }
  EXPECT_GE(lines, 1);
  EXPECT_LE(lines, absl::ToInt64Seconds(took) + 2);
  if (took > absl::Seconds(2)) {
    EXPECT_TRUE(counted);
  }
}

}  // namespace
}  // namespace testing
}  // namespace reducer
