// reducerd's reload, with real processes: SIGHUP (what the unit's
// `systemctl reload` sends) makes reducerd read its --job_tokens_file at
// once, even a change its own watcher cannot see, tells the service manager
// RELOADING=1 then READY=1 from its main process, logs one line saying what
// it re-read, and goes on serving; a tokens file that cannot be used keeps
// the tokens read before, and the log says why.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/fake_notify_socket.h"
#include "tests/fault_test_base.h"
#include "tests/process_harness.h"
#include "tests/token_hash.h"

namespace reducer {
namespace testing {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr char kTokenA[] = "token-of-job-a-5d1c08";
constexpr char kTokenC[] = "token-of-job-c-9ae473";
constexpr absl::Duration kReceiveLimit = absl::Seconds(10);

// CLOCK_MONOTONIC in microseconds, as MONOTONIC_USEC= carries it.
int64_t MonotonicMicros() {
  struct timespec now {};
  clock_gettime(CLOCK_MONOTONIC, &now);
  return int64_t{now.tv_sec} * 1000000 + int64_t{now.tv_nsec} / 1000;
}

class ReloadTest : public FaultTest {
 protected:
  void TearDown() override {
    manager_.reset();
    if (!socket_dir_.empty()) rmdir(socket_dir_.c_str());
    FaultTest::TearDown();
  }

  // Starts reducerd with `flags` under a fake service manager; true once
  // it said READY=1 naming its address.
  bool StartUnderManager(const std::vector<std::string>& flags) {
    socket_dir_ = ShortTempDir();
    EXPECT_FALSE(socket_dir_.empty());
    if (socket_dir_.empty()) return false;
    const std::string path = socket_dir_ + "/notify";
    manager_ = std::make_unique<FakeNotifySocket>(path);
    EXPECT_TRUE(manager_->status().ok()) << manager_->status();
    // reducerd inherits the environment (and nothing else here reads it).
    setenv("NOTIFY_SOCKET", path.c_str(), 1);
    const bool started = StartServer(flags);
    unsetenv("NOTIFY_SOCKET");
    if (!started) return false;
    pid_t sender = 0;
    EXPECT_EQ(manager_->Receive(kReceiveLimit, &sender), Ready(""));
    return sender == server()->pid();
  }

  std::string Ready(const std::string& suffix) {
    return absl::StrCat("READY=1\nSTATUS=serving on ", server()->address(),
                        suffix);
  }

  // Sends SIGHUP and expects RELOADING=1 (with MONOTONIC_USEC= of a time
  // between the signal and now), then READY=1 with STATUS=serving on ...
  // followed by `status_suffix`, both from reducerd's own PID.
  void ReloadAndExpect(const std::string& status_suffix) {
    const int64_t before_us = MonotonicMicros();
    ASSERT_EQ(kill(server()->pid(), SIGHUP), 0);
    pid_t sender = 0;
    const std::string reloading = manager_->Receive(kReceiveLimit, &sender);
    const int64_t after_us = MonotonicMicros();
    EXPECT_EQ(sender, server()->pid()) << "systemd accepts only the main PID";
    std::vector<std::string> lines = absl::StrSplit(reloading, '\n');
    ASSERT_EQ(lines.size(), 3u) << reloading;
    EXPECT_EQ(lines[0], "RELOADING=1");
    int64_t monotonic_us = 0;
    ASSERT_THAT(lines[1], StartsWith("MONOTONIC_USEC="));
    ASSERT_TRUE(absl::SimpleAtoi(lines[1].substr(15), &monotonic_us))
        << lines[1];
    EXPECT_GE(monotonic_us, before_us);
    EXPECT_LE(monotonic_us, after_us);
    EXPECT_EQ(lines[2], "STATUS=reloading");
    EXPECT_EQ(manager_->Receive(kReceiveLimit, &sender), Ready(status_suffix));
    EXPECT_EQ(sender, server()->pid());
  }

  // One rank-0-of-1 worker of `job` with `token` that connects and
  // all-reduces once; its result.
  ProcessResult ConnectOnce(const std::string& job, const std::string& token) {
    WorkerSpec spec;
    spec.job = job;
    spec.steps = "allreduce";
    spec.extra_flags = {"--token=" + token, "--timeout_s=10"};
    spec.name = absl::StrCat(job, ".probe", probes_++);
    std::vector<std::unique_ptr<ChildProcess>> one;
    one.push_back(StartWorker(spec));
    return WaitWorkers(one, absl::Seconds(30))[0];
  }

  std::unique_ptr<FakeNotifySocket> manager_;
  std::string socket_dir_;
  int probes_ = 0;
};

// A line added for a new job is taken on SIGHUP, though the file's size,
// inode and modification time are those of the version read at start (so
// the refresh reducerd does on its own, which looks for a change in those,
// never takes it): the new job's token is accepted right after READY=1,
// the old job's still is. Then a malformed file: the reload fails, the
// log names the file and line, both tokens still work, and the manager
// hears READY=1 again, the status saying the reload failed.
TEST_F(ReloadTest, SighupRereadsTheTokensFileAndABrokenOneKeepsTheOld) {
  const std::string tokens = absl::StrCat(scratch_dir_, "/tokens");
  const std::string line_a =
      absl::StrCat(Job("a"), " ", Sha256Hex(kTokenA), "\n");
  const std::string line_c =
      absl::StrCat(Job("c"), " ", Sha256Hex(kTokenC), "\n");
  // Job c's line, held by a comment of its length until it is written.
  const std::string placeholder = std::string(line_c.size() - 1, '#') + "\n";
  std::ofstream(tokens) << line_a << placeholder;
  struct stat at_start {};
  ASSERT_EQ(stat(tokens.c_str(), &at_start), 0);
  ASSERT_TRUE(StartUnderManager({"--job_tokens_file=" + tokens}));

  ExpectStep(ConnectOnce(Job("a"), kTokenA), "1", absl::StatusCode::kOk);
  ExpectStep(ConnectOnce(Job("c"), kTokenC), "0",
             absl::StatusCode::kPermissionDenied, {"has no token"});

  // Rewritten in place, same size; the modification time set back.
  {
    std::fstream file(tokens, std::ios::in | std::ios::out);
    file.seekp(static_cast<std::streamoff>(line_a.size()));
    file << line_c;
  }
  const struct timespec times[2] = {at_start.st_atim, at_start.st_mtim};
  ASSERT_EQ(utimensat(AT_FDCWD, tokens.c_str(), times, 0), 0);
  struct stat rewritten {};
  ASSERT_EQ(stat(tokens.c_str(), &rewritten), 0);
  ASSERT_EQ(rewritten.st_ino, at_start.st_ino);
  ASSERT_EQ(rewritten.st_size, at_start.st_size);
  ASSERT_EQ(rewritten.st_mtim.tv_nsec, at_start.st_mtim.tv_nsec);
  ASSERT_EQ(rewritten.st_mtim.tv_sec, at_start.st_mtim.tv_sec);
  // Past the refresh interval (1 s): reducerd looked and saw no change.
  absl::SleepFor(absl::Milliseconds(1500));
  ExpectStep(ConnectOnce(Job("c"), kTokenC), "0",
             absl::StatusCode::kPermissionDenied, {"has no token"});

  ASSERT_NO_FATAL_FAILURE(ReloadAndExpect(""));
  ExpectStep(ConnectOnce(Job("c"), kTokenC), "1", absl::StatusCode::kOk);
  ExpectStep(ConnectOnce(Job("a"), kTokenA), "1", absl::StatusCode::kOk);
  EXPECT_THAT(
      server()->Stderr(),
      HasSubstr(absl::StrCat("reload: re-read --job_tokens_file ", tokens,
                             ": 2 jobs; flags unchanged until a restart")));

  std::ofstream(tokens, std::ios::trunc)
      << line_a << Job("d") << " not-a-hash\n";
  ASSERT_NO_FATAL_FAILURE(
      ReloadAndExpect(" (last reload failed: see the log)"));
  EXPECT_THAT(server()->Stderr(),
              HasSubstr(absl::StrCat("reload: --job_tokens_file ", tokens,
                                     " line 2: expected `JOB SHA256_HEX`")));
  EXPECT_THAT(server()->Stderr(),
              HasSubstr("; keeping the tokens read before;"));
  ExpectStep(ConnectOnce(Job("c"), kTokenC), "1", absl::StatusCode::kOk);
  ExpectStep(ConnectOnce(Job("a"), kTokenA), "1", absl::StatusCode::kOk);

  // SIGHUP did not stop it: SIGTERM still drains and exits 0.
  const pid_t server_pid = server()->pid();
  EXPECT_EQ(server()->StopDrained(), "");
  pid_t sender = 0;
  EXPECT_EQ(manager_->Receive(kReceiveLimit, &sender),
            "STOPPING=1\nSTATUS=draining");
  EXPECT_EQ(sender, server_pid);
  for (const char* token : {kTokenA, kTokenC}) {
    EXPECT_THAT(server()->Logs(), ::testing::Not(HasSubstr(token)));
  }
}

// Without a tokens file a reload has nothing to re-read, says so, and
// reducerd serves on.
TEST_F(ReloadTest, SighupWithoutTokensFileSaysSoAndServesOn) {
  ASSERT_TRUE(StartUnderManager({}));
  ASSERT_NO_FATAL_FAILURE(ReloadAndExpect(""));
  EXPECT_THAT(server()->Stderr(),
              HasSubstr("reload: no --job_tokens_file to re-read; flags "
                        "unchanged until a restart"));
  ExpectStep(ConnectOnce(Job(), "any"), "1", absl::StatusCode::kOk);
  EXPECT_EQ(server()->StopDrained(), "");
}

}  // namespace
}  // namespace testing
}  // namespace reducer
