// Jobs of tenants, in process through a JobRegistry: a tenant's jobs, its
// memory share and its pending collectives are bounded per tenant, so that
// another tenant always gets its own; and a malformed call keeps no
// collective and logs at most a line a second per tenant.
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/reducer/v1/reducer.pb.h"
#include "server/engine/fake_rank_channel.h"
#include "server/jobs/fake_job_channels.h"
#include "server/jobs/job.h"
#include "server/jobs/job_registry.h"
#include "server/security/job_tokens.h"
#include "tests/matchers.h"

namespace reducer {
namespace {

// A memory budget of 8 MB: each tenant's and each job's share is 4 MB.
constexpr size_t kBudget = 8'000'000;

// A tokens file with the lines of tenants A and B; null when `tokens` is
// false (each job name its own tenant).
std::unique_ptr<JobTokens> TokensOfAAndB(bool tokens) {
  if (!tokens) return nullptr;
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string path =
      absl::StrCat(dir != nullptr ? dir : "/tmp", "/job_tenants_test_tokens");
  std::ofstream file(path);
  for (const char* tenant : {"A", "B"}) {
    file << tenant << " ";
    for (uint8_t b : HashToken(absl::StrCat("token-of-", tenant))) {
      file << absl::StrCat(absl::Hex(b, absl::kZeroPad2));
    }
    file << "\n";
  }
  file.close();
  absl::StatusOr<std::unique_ptr<JobTokens>> loaded = JobTokens::Load(path);
  EXPECT_TRUE(loaded.ok()) << loaded.status();
  return loaded.ok() ? *std::move(loaded) : nullptr;
}

class JobTenantsTest : public ::testing::Test {
 protected:
  // A registry on `options` and kBudget, with tenants A and B's tokens
  // file unless `tokens` is false.
  void Start(EngineOptions options, bool tokens = true) {
    env_ = std::make_unique<JobTestEnv>(std::move(options), kBudget);
    tokens_ = TokensOfAAndB(tokens);
    registry_ = std::make_unique<JobRegistry>(env_->env(), tokens_.get());
  }

  // Joins every rank of job `job` of `world` ranks (sessions "<job>:<r>").
  absl::Status JoinAll(const std::string& job, int world = 1) {
    for (int r = 0; r < world; ++r) {
      auto session = std::make_shared<FakeSession>();
      absl::Status joined = registry_->Join(
          MakeJoinRequest(job, r, world, Session(job, r)), session);
      if (!joined.ok()) return joined;
      sessions_[Session(job, r)] = std::move(session);
    }
    return absl::OkStatus();
  }
  static std::string Session(const std::string& job, int rank) {
    return absl::StrCat(job, ":", rank);
  }
  // The stream of rank `rank`'s session of job `job` (as JoinAll joined
  // it) ended: the registry's Leave with that session's own channel.
  void Close(const std::string& job, int rank) {
    registry_->Leave(job, Session(job, rank),
                     sessions_[Session(job, rank)].get(), "closed",
                     EpochEndReason::kSessionEnded);
  }

  // Rank `rank`'s header in job `job`, epoch 1.
  static v1::CollectiveHeader Header(const std::string& job, int rank,
                                     v1::CollectiveKind kind,
                                     uint64_t sequence = 0) {
    v1::CollectiveHeader h;
    h.set_job(job);
    h.set_epoch(1);
    h.set_session_id(Session(job, rank));
    h.set_rank(rank);
    h.set_sequence(sequence);
    h.set_kind(kind);
    h.set_timeout_ms(10000);
    return h;
  }
  // Rank 0's send to rank 1 of `floats` float32 values.
  static v1::CollectiveHeader Send(const std::string& job, int64_t floats) {
    v1::CollectiveHeader h = Header(job, 0, v1::COLLECTIVE_KIND_SEND_RECEIVE);
    h.set_name("p2p 0>1 tag 7 #0");
    h.set_root(0);
    h.add_group(0);
    h.add_group(1);
    v1::TensorSpec* t = h.add_tensors();
    t->set_dtype(v1::DATA_TYPE_FLOAT32);
    t->add_shape(floats);
    return h;
  }
  // Rank `rank`'s float32 [floats] sum all-reduce at `sequence`.
  static v1::CollectiveHeader AllReduce(const std::string& job, int rank,
                                        int64_t floats, uint64_t sequence = 0) {
    v1::CollectiveHeader h =
        Header(job, rank, v1::COLLECTIVE_KIND_ALL_REDUCE, sequence);
    v1::TensorSpec* t = h.add_tensors();
    t->set_dtype(v1::DATA_TYPE_FLOAT32);
    t->add_shape(floats);
    t->set_op(v1::REDUCE_OP_SUM);
    return h;
  }

  // Attaches `h` to its job on a new channel that nobody reads: the
  // channel, failed with the refusal if the job refused it.
  std::shared_ptr<FakeRankChannel> Attach(const v1::CollectiveHeader& h) {
    auto channel = std::make_shared<FakeRankChannel>();
    absl::StatusOr<std::shared_ptr<Job>> job = registry_->Find(h.job());
    if (!job.ok()) {
      channel->Fail(job.status());
      return channel;
    }
    absl::StatusOr<std::shared_ptr<Collective>> c = (*job)->Attach(h, channel);
    if (!c.ok() && !IsRefusedByCollective(c.status())) {
      channel->Fail(c.status());
    }
    return channel;
  }

  std::unique_ptr<JobTestEnv> env_;
  std::unique_ptr<JobTokens> tokens_;
  std::unique_ptr<JobRegistry> registry_;
  // The channel each session id was joined with (JoinAll).
  std::map<std::string, std::shared_ptr<FakeSession>> sessions_;
};

// Tenant A, with its one token, creates as many jobs as it may: tenant B's
// Join still gets in, and A is told its own bound.
TEST_F(JobTenantsTest, ATenantsJobsAreBoundedSoAnotherTenantStillGetsIn) {
  EngineOptions options;
  options.max_jobs = 8;
  options.max_jobs_per_tenant = 4;
  Start(options);
  for (int i = 0; i < 4; ++i) {
    ASSERT_THAT(JoinAll(absl::StrCat("A/j", i)), IsOk()) << i;
  }
  EXPECT_THAT(JoinAll("A/j4"),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       AllOf(HasSubstr("cannot create job A/j4: its tenant A "
                                       "already has 4 jobs"),
                             HasSubstr("--max_jobs_per_tenant=4"))));
  EXPECT_THAT(JoinAll("B"), IsOk());
  EXPECT_THAT(JoinAll("B/other"), IsOk());
  // A job of A freed makes room for another of A.
  Close("A/j0", 0);
  EXPECT_THAT(JoinAll("A/j4"), IsOk());
}

TEST_F(JobTenantsTest, WithoutTokensEachJobNameIsATenantOfItsOwn) {
  EngineOptions options;
  options.max_jobs_per_tenant = 1;
  Start(options, /*tokens=*/false);
  EXPECT_THAT(JoinAll("A"), IsOk());
  EXPECT_THAT(JoinAll("A/x"), IsOk());
  EXPECT_THAT(JoinAll("A/y"), IsOk());
}

// Tenant A's two jobs each buffer a send nobody receives: together they
// hold A's share, not a share each, and tenant B's all-reduce gets in.
TEST_F(JobTenantsTest, ATenantsJobsShareOneMemoryShareAndAnotherGetsItsOwn) {
  Start(EngineOptions());
  ASSERT_THAT(JoinAll("A/x", 2), IsOk());
  ASSERT_THAT(JoinAll("A/y", 2), IsOk());
  ASSERT_THAT(JoinAll("B"), IsOk());
  // 3.9 MB: within A/x's share and A's.
  std::shared_ptr<FakeRankChannel> x = Attach(Send("A/x", 975'000));
  EXPECT_THAT(x->failure(), IsOk());
  // Within A/y's own share, but not within what is left of A's.
  std::shared_ptr<FakeRankChannel> y = Attach(Send("A/y", 975'000));
  EXPECT_THAT(y->failure(),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       AllOf(HasSubstr("tenant A's share of the memory budget, "
                                       "4000000 bytes "
                                       "(--max_tenant_memory_fraction=0.5 of "
                                       "--memory_budget_bytes), is exhausted"),
                             HasSubstr("other tenants keep the rest"))));
  // B's 1 MiB all-reduce reserves about twice that: B's share has it.
  std::shared_ptr<FakeRankChannel> b = Attach(AllReduce("B", 0, 262'144));
  EXPECT_THAT(b->failure(), IsOk());
}

// A job over its own share, inside its tenant's, is told its job's share.
TEST_F(JobTenantsTest, AJobOverItsOwnShareIsToldItsJobsShare) {
  EngineOptions options;
  options.max_job_memory_fraction = 0.25;  // 2 MB of A's 4 MB
  Start(options);
  ASSERT_THAT(JoinAll("A/x", 2), IsOk());
  std::shared_ptr<FakeRankChannel> x = Attach(Send("A/x", 625'000));  // 2.5 MB
  EXPECT_THAT(x->failure(),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       AllOf(HasSubstr("job A/x's share of the memory budget"),
                             HasSubstr("--max_job_memory_fraction=0.25"),
                             Not(HasSubstr("tenant")))));
}

// A job's per-rank state counts in its tenant's share: a tenant cannot
// hold the budget with Joins alone.
TEST_F(JobTenantsTest, AJobsPerRankStateCountsInItsTenantsShare) {
  EngineOptions options;
  options.max_world_size = 1 << 20;
  Start(options);
  // The smallest power of two whose state is over a quarter of the budget
  // (half a share); its half was not, so it is under half the budget.
  int world = 1;
  while (Job::RankStateBytes(world) <= kBudget / 4) world *= 2;
  ASSERT_LT(Job::RankStateBytes(world), kBudget / 2);
  ASSERT_THAT(registry_->Join(MakeJoinRequest("A/x", 0, world, "x"),
                              std::make_shared<FakeSession>()),
              IsOk());
  // A second such job fits in the budget, but not in A's share.
  EXPECT_THAT(registry_->Join(MakeJoinRequest("A/y", 0, world, "y"),
                              std::make_shared<FakeSession>()),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       AllOf(HasSubstr("its tenant A's share"),
                             HasSubstr("--max_tenant_memory_fraction=0.5"))));
  EXPECT_THAT(registry_->Join(MakeJoinRequest("B", 0, world, "b"),
                              std::make_shared<FakeSession>()),
              IsOk());
}

// Pending collectives are bounded per job and per tenant: a tenant's jobs
// share its bound, another tenant has its own, and the count goes down as
// collectives end and jobs go.
TEST_F(JobTenantsTest, PendingCollectivesAreBoundedPerTenant) {
  EngineOptions options;
  options.max_pending_collectives_per_job = 2;
  options.max_pending_collectives_per_tenant = 3;
  Start(options);
  for (const char* job : {"A/x", "A/y", "A/z", "B"}) {
    ASSERT_THAT(JoinAll(job, 2), IsOk());
  }
  auto barrier = [](const std::string& job, int rank, uint64_t sequence) {
    return Header(job, rank, v1::COLLECTIVE_KIND_BARRIER, sequence);
  };
  EXPECT_THAT(Attach(barrier("A/x", 0, 0))->failure(), IsOk());
  EXPECT_THAT(Attach(barrier("A/x", 0, 1))->failure(), IsOk());
  EXPECT_THAT(Attach(barrier("A/x", 0, 2))->failure(),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("--max_pending_collectives_per_job=2")));
  EXPECT_THAT(Attach(barrier("A/y", 0, 0))->failure(), IsOk());
  EXPECT_THAT(
      Attach(barrier("A/y", 0, 1))->failure(),
      StatusIs(absl::StatusCode::kResourceExhausted,
               AllOf(HasSubstr("tenant A's jobs already have 3 collectives "
                               "waiting for ranks"),
                     HasSubstr("--max_pending_collectives_per_tenant=3"))));
  EXPECT_THAT(Attach(barrier("B", 0, 0))->failure(), IsOk());
  // A/x's two barriers end; its next collective forgets them.
  std::shared_ptr<FakeRankChannel> done0 = Attach(barrier("A/x", 1, 0));
  std::shared_ptr<FakeRankChannel> done1 = Attach(barrier("A/x", 1, 1));
  EXPECT_TRUE(done0->finished_ok());
  EXPECT_TRUE(done1->finished_ok());
  EXPECT_THAT(Attach(barrier("A/x", 0, 2))->failure(), IsOk());
  EXPECT_THAT(Attach(barrier("A/y", 0, 1))->failure(), IsOk());
  EXPECT_THAT(Attach(barrier("A/z", 0, 0))->failure(),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("--max_pending_collectives_per_tenant=3")));
  // A/x goes, and with it its pending collective.
  Close("A/x", 0);
  Close("A/x", 1);
  EXPECT_THAT(Attach(barrier("A/z", 0, 0))->failure(), IsOk());
}

// A malformed call fails the collective it names for the ranks that call
// it later, without making a Collective: each of them is told once.
TEST_F(JobTenantsTest, RanksCallingACollectiveFailedByAMalformedCallAreTold) {
  Start(EngineOptions());
  ASSERT_THAT(JoinAll("A", 3), IsOk());
  v1::CollectiveHeader bad = AllReduce("A", 0, 4);
  bad.mutable_tensors(0)->set_dtype(static_cast<v1::DataType>(999));
  EXPECT_THAT(Attach(bad)->failure(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("rank 0 sent a bad request")));
  for (int rank : {1, 2}) {
    EXPECT_THAT(Attach(AllReduce("A", rank, 4))->failure(),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("rank 0 sent a bad request")))
        << rank;
  }
  // Told once: a rank's next collective of that name is a new one.
  std::shared_ptr<FakeRankChannel> again = Attach(AllReduce("A", 1, 4));
  EXPECT_THAT(again->failure(), IsOk());
  EXPECT_FALSE(again->finished_ok());
}

// Rank 0 of a job of 64 sends 5000 malformed calls: they keep no
// collective (the job's next collective is not refused for the pending
// bound), their records stay within the bound and the memory budget, and
// they log one line, the next a second later counting the rest.
TEST_F(JobTenantsTest, MalformedCallsKeepNoCollectiveAndLogOneLineASecond) {
  absl::Time now = absl::FromUnixSeconds(1000);
  env_ = std::make_unique<JobTestEnv>(EngineOptions(), kBudget,
                                      [&now] { return now; });
  registry_ = std::make_unique<JobRegistry>(env_->env(), nullptr);
  constexpr int kWorld = 64;
  constexpr int kMalformed = 5000;
  ASSERT_THAT(JoinAll("j", kWorld), IsOk());
  const size_t before = env_->memory().used();
  ::testing::internal::CaptureStderr();
  for (int i = 0; i < kMalformed; ++i) {
    v1::CollectiveHeader bad = AllReduce("j", 0, 4, i);
    bad.mutable_tensors(0)->set_dtype(static_cast<v1::DataType>(999));
    ASSERT_THAT(Attach(bad)->failure(),
                StatusIs(absl::StatusCode::kInvalidArgument))
        << i;
  }
  now += absl::Milliseconds(1500);
  v1::CollectiveHeader last = AllReduce("j", 0, 4, kMalformed);
  last.mutable_tensors(0)->set_dtype(static_cast<v1::DataType>(999));
  ASSERT_THAT(Attach(last)->failure(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  const std::string log = ::testing::internal::GetCapturedStderr();
  std::vector<std::string> lines = absl::StrSplit(log, '\n', absl::SkipEmpty());
  ASSERT_THAT(lines, SizeIs(2)) << log.substr(0, 2000);
  EXPECT_THAT(lines[0], HasSubstr("rank 0 sent a bad request"));
  EXPECT_THAT(lines[1],
              HasSubstr("(4999 more like this suppressed in the last 1.5s)"));
  // Records of at most --max_pending_collectives_per_job collectives, each
  // well under 2 KiB here, counted in the budget.
  EXPECT_GT(env_->memory().used(), before);
  EXPECT_LT(env_->memory().used(),
            before + EngineOptions().max_pending_collectives_per_job * 2048);
  // The most recent failed collective is told to a rank that calls it.
  EXPECT_THAT(Attach(AllReduce("j", 1, 4, kMalformed))->failure(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("rank 0 sent a bad request")));
  // Every rank's next collective runs.
  std::vector<std::shared_ptr<FakeRankChannel>> barrier;
  for (int r = 0; r < kWorld; ++r) {
    barrier.push_back(
        Attach(Header("j", r, v1::COLLECTIVE_KIND_BARRIER, kMalformed + 1)));
  }
  for (int r = 0; r < kWorld; ++r) {
    EXPECT_THAT(barrier[r]->failure(), IsOk()) << r;
    EXPECT_TRUE(barrier[r]->finished_ok()) << r;
  }
}

}  // namespace
}  // namespace reducer
