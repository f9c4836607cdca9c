#include "server/security/job_tokens.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/matchers.h"

namespace reducer {
namespace {

// A well-formed hash (64 hex digits) for the file-format tests.
constexpr char kHashA[] =
    "e0a9b1a8ee2a0f1ac5fa16e5ac2e8b1ee0fe2d4dbbb4cc5f9ad2b5bcc34a4fa3";

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return absl::StrCat(dir != nullptr ? dir : "/tmp", "/", name);
}

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
}

PresentedToken Present(const std::string& token) {
  const std::string header = "Bearer " + token;
  return PresentToken(&header);
}

std::string Hex(const TokenHash& hash) {
  std::string hex;
  for (uint8_t b : hash) absl::StrAppend(&hex, absl::Hex(b, absl::kZeroPad2));
  return hex;
}

TEST(HashTokenTest, MatchesSha256sum) {
  // Independent reference: coreutils' sha256sum of the same bytes.
  const std::string path = TempPath("sum.txt");
  ASSERT_EQ(std::system(("printf %s secret-a | sha256sum > " + path).c_str()), 0);
  std::ifstream in(path);
  std::string expected;
  in >> expected;
  EXPECT_EQ(Hex(HashToken("secret-a")), expected);
}

TEST(BearerTokenTest, ParsesSchemeCaseInsensitively) {
  EXPECT_EQ(BearerToken("Bearer abc"), "abc");
  EXPECT_EQ(BearerToken("bearer abc"), "abc");
  EXPECT_EQ(BearerToken("Basic abc"), "");
  EXPECT_EQ(BearerToken("Bearer "), "");
  EXPECT_FALSE(PresentToken(nullptr).present);
}

class JobTokensTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = TempPath(absl::StrCat("tokens_", ::testing::UnitTest::GetInstance()
                                               ->current_test_info()
                                               ->name()));
    WriteFile(path_, absl::StrCat("# comment\n\njob-a ", Hex(HashToken("secret-a")),
                                  "\njob-b ", Hex(HashToken("secret-b")), "\n"));
  }
  std::string path_;
};

TEST_F(JobTokensTest, ChecksEachCase) {
  auto tokens = JobTokens::Load(path_, absl::Milliseconds(1));
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  EXPECT_TRUE((*tokens)->Check("job-a", Present("secret-a")).ok());
  EXPECT_TRUE((*tokens)->Check("job-b", Present("secret-b")).ok());
  EXPECT_THAT((*tokens)->Check("job-a", PresentedToken{}),
              StatusIs(absl::StatusCode::kUnauthenticated, HasSubstr("job-a")));
  EXPECT_THAT(
      (*tokens)->Check("job-b", Present("secret-a")),
      StatusIs(absl::StatusCode::kPermissionDenied,
               AllOf(HasSubstr("another job"), Not(HasSubstr("secret-a")))));
  EXPECT_THAT((*tokens)->Check("job-a", Present("wrong")),
              StatusIs(absl::StatusCode::kUnauthenticated));
  EXPECT_THAT((*tokens)->Check("job-c", Present("secret-a")),
              StatusIs(absl::StatusCode::kPermissionDenied,
                       HasSubstr("job-c has no token")));
}

// A line for JOB governs every JOB/... job (the torch backend's jobs) that
// has no line of its own nor a longer prefix line; names that merely start
// with JOB do not count.
TEST(JobTokensPrefixTest, ALineCoversItsJobsSlashNames) {
  const std::string path = TempPath("prefix_tokens");
  WriteFile(path, absl::StrCat("train ", Hex(HashToken("secret-train")), "\n",
                               "train/pinned ", Hex(HashToken("secret-pinned")),
                               "\n", "other ", Hex(HashToken("secret-other")),
                               "\n"));
  auto tokens = JobTokens::Load(path);
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  const PresentedToken train = Present("secret-train");
  EXPECT_TRUE((*tokens)->Check("train", train).ok());
  EXPECT_TRUE((*tokens)->Check("train/x", train).ok());
  EXPECT_TRUE((*tokens)->Check("train/x/y", train).ok());
  EXPECT_TRUE((*tokens)->Check("train/pinned/z", Present("secret-pinned")).ok());

  // Not a prefix at a '/': no line governs these.
  for (const char* job : {"trainX", "train-x", "trai"}) {
    SCOPED_TRACE(job);
    EXPECT_THAT(
        (*tokens)->Check(job, train),
        StatusIs(absl::StatusCode::kPermissionDenied,
                 HasSubstr(absl::StrCat("job ", job, " has no token"))));
  }

  // An exact line wins over the prefix line, and over a shorter prefix.
  EXPECT_TRUE((*tokens)->Check("train/pinned", Present("secret-pinned")).ok());
  EXPECT_THAT(
      (*tokens)->Check("train/pinned", train),
      StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("another job")));
  EXPECT_THAT((*tokens)->Check("train/pinned/z", train),
              StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_THAT((*tokens)->Check("train/x", Present("secret-pinned")),
              StatusIs(absl::StatusCode::kPermissionDenied));

  // Another job's token, a wrong one, none: the usual codes, naming the job
  // and the governing line, never the token.
  EXPECT_THAT(
      (*tokens)->Check("train/x", Present("secret-other")),
      StatusIs(absl::StatusCode::kPermissionDenied,
               AllOf(HasSubstr("job train/x (tokens-file line train)"),
                     HasSubstr("another job"), Not(HasSubstr("secret")))));
  EXPECT_THAT((*tokens)->Check("train/x", Present("wrong-token-5")),
              StatusIs(absl::StatusCode::kUnauthenticated,
                       AllOf(HasSubstr("job train/x (tokens-file line train)"),
                             Not(HasSubstr("wrong-token-5")))));
  // How to send one, in each client's words.
  EXPECT_THAT((*tokens)->Check("train/x", PresentedToken{}),
              StatusIs(absl::StatusCode::kUnauthenticated,
                       AllOf(HasSubstr("job train/x"),
                             HasSubstr("ClientOptions::token"),
                             HasSubstr("token="), HasSubstr("REDUCER_TOKEN"))));
}

TEST(JobTokensTenantTest, ATenantIsTheGoverningLine) {
  const std::string path = TempPath("tenant_tokens");
  WriteFile(path, absl::StrCat("train ", Hex(HashToken("secret-train")), "\n",
                               "train/pinned ", Hex(HashToken("secret-pinned")),
                               "\n", "b ", Hex(HashToken("shared")), "\n", "a ",
                               Hex(HashToken("shared")), "\n"));
  auto tokens = JobTokens::Load(path);
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  EXPECT_EQ((*tokens)->TenantOf("train"), "train");
  EXPECT_EQ((*tokens)->TenantOf("train/x/y"), "train");
  EXPECT_EQ((*tokens)->TenantOf("train/pinned/z"), "train/pinned");
  // No line governs it: its own tenant.
  EXPECT_EQ((*tokens)->TenantOf("trainX"), "trainX");
  EXPECT_EQ(TenantOf(tokens->get(), "train/x"), "train");
  EXPECT_EQ(TenantOf(nullptr, "train/x"), "train/x");

  EXPECT_EQ((*tokens)->TenantOfToken(Present("secret-pinned")), "train/pinned");
  EXPECT_EQ((*tokens)->TenantOfToken(Present("shared")), "a");  // smallest
  EXPECT_EQ((*tokens)->TenantOfToken(Present("unknown")), "");
  EXPECT_EQ((*tokens)->TenantOfToken(PresentedToken{}), "");
}

TEST_F(JobTokensTest, CheckAnyJobKnowsEveryJobsTokenAndNoOther) {
  auto tokens = JobTokens::Load(path_, absl::Milliseconds(1));
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  EXPECT_TRUE((*tokens)->CheckAnyJob(Present("secret-a")).ok());
  EXPECT_TRUE((*tokens)->CheckAnyJob(Present("secret-b")).ok());
  EXPECT_THAT((*tokens)->CheckAnyJob(PresentedToken{}),
              StatusIs(absl::StatusCode::kUnauthenticated));
  EXPECT_THAT((*tokens)->CheckAnyJob(Present("bogus-token-9")),
              StatusIs(absl::StatusCode::kUnauthenticated,
                       AllOf(HasSubstr("not one reducerd knows"),
                             Not(HasSubstr("bogus-token-9")))));
}

TEST_F(JobTokensTest, ReadsTheFileAgainWhenASymlinkIsSwapped) {
  const std::string v1 = path_ + ".v1";
  const std::string v2 = path_ + ".v2";
  const std::string link = path_ + ".link";
  WriteFile(v1, absl::StrCat("job-a ", Hex(HashToken("secret-a")), "\n"));
  WriteFile(v2, absl::StrCat("job-a ", Hex(HashToken("rotated")), "\n"));
  std::remove(link.c_str());
  ASSERT_EQ(symlink(v1.c_str(), link.c_str()), 0);
  auto tokens = JobTokens::Load(link, absl::Milliseconds(1));
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  EXPECT_TRUE((*tokens)->Check("job-a", Present("secret-a")).ok());
  // Swap as Kubernetes does: a new link renamed over the old one.
  const std::string tmp = link + ".tmp";
  ASSERT_EQ(symlink(v2.c_str(), tmp.c_str()), 0);
  ASSERT_EQ(std::rename(tmp.c_str(), link.c_str()), 0);
  absl::SleepFor(absl::Milliseconds(5));
  EXPECT_TRUE((*tokens)->Check("job-a", Present("rotated")).ok());
  EXPECT_THAT((*tokens)->Check("job-a", Present("secret-a")),
              StatusIs(absl::StatusCode::kUnauthenticated));
}

TEST_F(JobTokensTest, AMalformedNewVersionKeepsTheOldTokens) {
  auto tokens = JobTokens::Load(path_, absl::Milliseconds(1));
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  WriteFile(path_, "job-a not-a-hash-and-longer-than-before\n");
  absl::SleepFor(absl::Milliseconds(5));
  EXPECT_TRUE((*tokens)->Check("job-a", Present("secret-a")).ok());
}

// A reload reads the file at once: a line added is in force right after
// ReadNow, long before the refresh interval would look at the file again.
TEST_F(JobTokensTest, ReadNowTakesALineAddedWithoutWaiting) {
  auto tokens = JobTokens::Load(path_, absl::Hours(1));
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  std::ofstream(path_, std::ios::app)
      << "job-c " << Hex(HashToken("secret-c")) << "\n";
  // Within the interval the file is not looked at: job-c is unknown yet.
  EXPECT_THAT((*tokens)->Check("job-c", Present("secret-c")),
              StatusIs(absl::StatusCode::kPermissionDenied,
                       HasSubstr("job-c has no token")));
  absl::StatusOr<size_t> jobs = (*tokens)->ReadNow();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  EXPECT_EQ(*jobs, 3u);
  EXPECT_TRUE((*tokens)->Check("job-c", Present("secret-c")).ok());
  EXPECT_TRUE((*tokens)->CheckAnyJob(Present("secret-c")).ok());
  // The lines that were there before still hold.
  EXPECT_TRUE((*tokens)->Check("job-a", Present("secret-a")).ok());
  EXPECT_TRUE((*tokens)->Check("job-b", Present("secret-b")).ok());
}

// A line removed is out of force right after ReadNow too (a revoked token).
TEST_F(JobTokensTest, ReadNowDropsARemovedLine) {
  auto tokens = JobTokens::Load(path_, absl::Hours(1));
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  WriteFile(path_, absl::StrCat("job-a ", Hex(HashToken("secret-a")), "\n"));
  absl::StatusOr<size_t> jobs = (*tokens)->ReadNow();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  EXPECT_EQ(*jobs, 1u);
  EXPECT_THAT((*tokens)->Check("job-b", Present("secret-b")),
              StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_TRUE((*tokens)->Check("job-a", Present("secret-a")).ok());
}

// A file that cannot be used (a malformed line, a job listed twice, gone)
// fails the reload with Load's error, naming the file, and the tokens read
// before stay in force; a good file read again afterwards is taken.
TEST_F(JobTokensTest, ReadNowOfABrokenFileKeepsTheOldTokens) {
  auto tokens = JobTokens::Load(path_, absl::Hours(1));
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  WriteFile(path_, absl::StrCat("job-a ", Hex(HashToken("rotated")), "\n",
                                "job-c not-a-hash\n"));
  EXPECT_THAT((*tokens)->ReadNow(), StatusIs(absl::StatusCode::kInvalidArgument,
                                             HasSubstr(path_ + " line 2")));
  WriteFile(path_, absl::StrCat("job-a ", Hex(HashToken("rotated")), "\n",
                                "job-a ", Hex(HashToken("rotated")), "\n"));
  EXPECT_THAT((*tokens)->ReadNow(), StatusIs(absl::StatusCode::kInvalidArgument,
                                             HasSubstr("listed twice")));
  ASSERT_EQ(std::remove(path_.c_str()), 0);
  EXPECT_THAT((*tokens)->ReadNow(),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr(path_)));
  // Throughout, the first file's tokens held, and no half of a new one.
  EXPECT_TRUE((*tokens)->Check("job-a", Present("secret-a")).ok());
  EXPECT_TRUE((*tokens)->Check("job-b", Present("secret-b")).ok());
  EXPECT_THAT((*tokens)->Check("job-a", Present("rotated")),
              StatusIs(absl::StatusCode::kUnauthenticated));

  WriteFile(path_, absl::StrCat("job-a ", Hex(HashToken("rotated")), "\n"));
  absl::StatusOr<size_t> jobs = (*tokens)->ReadNow();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  EXPECT_EQ(*jobs, 1u);
  EXPECT_TRUE((*tokens)->Check("job-a", Present("rotated")).ok());
  EXPECT_THAT((*tokens)->Check("job-a", Present("secret-a")),
              StatusIs(absl::StatusCode::kUnauthenticated));
}

TEST(JobTokensLoadTest, NamesTheFileAndLineOfAMalformedLine) {
  const std::string path = TempPath("bad_tokens");
  WriteFile(path, absl::StrCat("job-a ", kHashA, "\njob-b 1234\n"));
  auto tokens = JobTokens::Load(path);
  ASSERT_FALSE(tokens.ok());
  EXPECT_THAT(tokens, StatusIs(absl::StatusCode::kInvalidArgument,
                               HasSubstr(path + " line 2")));
  WriteFile(path, absl::StrCat("job-a ", kHashA, "\njob-a ", kHashA, "\n"));
  EXPECT_THAT(JobTokens::Load(path).status().message(),
              HasSubstr("listed twice"));
  EXPECT_THAT(JobTokens::Load(path + ".absent"),
              StatusIs(absl::StatusCode::kNotFound));
}

}  // namespace
}  // namespace reducer
