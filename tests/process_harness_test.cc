#include "tests/process_harness.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/status_matchers.h"

namespace reducer {
namespace testing {
namespace {

using ::testing::HasSubstr;

// How a fault on a protected page ends the process: SIGSEGV, or under
// AddressSanitizer (abort_on_error=1) its SEGV report and then SIGABRT.
#if defined(__SANITIZE_ADDRESS__)
constexpr int kFaultSignal = SIGABRT;
constexpr char kFaultMessage[] = "SEGV";
#else
constexpr int kFaultSignal = SIGSEGV;
constexpr char kFaultMessage[] = "";
#endif

std::unique_ptr<ChildProcess> StartShell(const std::string& script,
                                         const std::string& name) {
  absl::StatusOr<std::unique_ptr<ChildProcess>> child =
      ChildProcess::Start({"/bin/sh", "-c", script}, name);
  EXPECT_TRUE(child.ok()) << child.status();
  return child.ok() ? *std::move(child) : nullptr;
}

TEST(ChildProcessTest, ReportsExitCodeAndCapturesOutput) {
  std::unique_ptr<ChildProcess> child =
      StartShell("echo to-stdout; echo to-stderr >&2; exit 3", "exit3");
  ASSERT_NE(child, nullptr);
  const ProcessResult result = child->Wait(absl::Seconds(10));
  EXPECT_TRUE(result.exited);
  EXPECT_EQ(result.exit_code, 3);
  EXPECT_FALSE(result.timed_out);
  EXPECT_FALSE(result.Succeeded());
  EXPECT_EQ(result.stdout_text, "to-stdout\n");
  EXPECT_EQ(result.stderr_text, "to-stderr\n");
  EXPECT_THAT(result.Describe(), HasSubstr("exit3: exit code 3"));
  EXPECT_THAT(result.Describe(), HasSubstr("to-stderr"));
}

TEST(ChildProcessTest, ZeroExitSucceeds) {
  std::unique_ptr<ChildProcess> child = StartShell("exit 0", "exit0");
  ASSERT_NE(child, nullptr);
  EXPECT_TRUE(child->Wait(absl::Seconds(10)).Succeeded());
}

TEST(ChildProcessTest, WaitKillsAChildPastItsTimeout) {
  std::unique_ptr<ChildProcess> child = StartShell("exec sleep 30", "sleeper");
  ASSERT_NE(child, nullptr);
  const absl::Time start = absl::Now();
  const ProcessResult result = child->Wait(absl::Milliseconds(200));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_TRUE(result.timed_out);
  EXPECT_FALSE(result.exited);
  EXPECT_EQ(result.term_signal, SIGKILL);
  EXPECT_FALSE(child->IsRunning());
}

TEST(ChildProcessTest, SignalEndsTheChild) {
  std::unique_ptr<ChildProcess> child = StartShell("exec sleep 30", "signalled");
  ASSERT_NE(child, nullptr);
  EXPECT_TRUE(child->IsRunning());
  EXPECT_TRUE(child->Signal(SIGTERM));
  const ProcessResult result = child->Wait(absl::Seconds(10));
  EXPECT_FALSE(result.timed_out);
  EXPECT_EQ(result.term_signal, SIGTERM);
  EXPECT_FALSE(child->Signal(SIGTERM));  // already reaped
}

TEST(ChildProcessTest, ExecFailureIsExitCode127) {
  absl::StatusOr<std::unique_ptr<ChildProcess>> child =
      ChildProcess::Start({"/nonexistent/binary"}, "noexec");
  ASSERT_TRUE(child.ok()) << child.status();
  const ProcessResult result = (*child)->Wait(absl::Seconds(10));
  EXPECT_EQ(result.exit_code, 127);
  EXPECT_THAT(result.stderr_text, HasSubstr("execv failed"));
}

TEST(ChildProcessTest, WaitAllKillsOnlyTheChildrenStillRunning) {
  std::vector<std::unique_ptr<ChildProcess>> children;
  children.push_back(StartShell("exit 0", "quick"));
  children.push_back(StartShell("exec sleep 30", "slow"));
  children.push_back(StartShell("exit 5", "failing"));
  const std::vector<ProcessResult> results =
      WaitAll(children, absl::Milliseconds(500));
  ASSERT_EQ(results.size(), 3u);
  EXPECT_TRUE(results[0].Succeeded());
  EXPECT_EQ(results[0].name, "quick");
  EXPECT_TRUE(results[1].timed_out);
  EXPECT_EQ(results[2].exit_code, 5);
}

TEST(PickFreeLoopbackPortTest, ReturnsAPortThatCanBeBound) {
  absl::StatusOr<int> port = PickFreeLoopbackPort();
  ASSERT_TRUE(port.ok()) << port.status();
  EXPECT_GT(*port, 0);
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr;
  std::memset(&addr, 0, sizeof(addr));
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(*port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0)
      << std::strerror(errno);
  close(fd);
}

TEST(RunfilePathTest, FindsItsOwnBinaryAndRejectsMissingFiles) {
  EXPECT_TRUE(RunfilePath("tests/process_harness_test").ok());
  absl::StatusOr<std::string> missing = RunfilePath("tests/no_such_file");
  EXPECT_THAT(missing.status(), StatusIs(absl::StatusCode::kNotFound));
}

TEST(ReadOnlyBufferTest, HoldsACopyOfTheBytes) {
  const double values[] = {1.5, -2.25, 3.0};
  absl::StatusOr<ReadOnlyBuffer> buffer =
      ReadOnlyBuffer::Create(values, sizeof(values));
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  EXPECT_EQ(buffer->size(), sizeof(values));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(buffer->data()) % alignof(double), 0u);
  EXPECT_EQ(std::memcmp(buffer->data(), values, sizeof(values)), 0);
}

TEST(ReadOnlyBufferTest, EmptyBufferIsValid) {
  absl::StatusOr<ReadOnlyBuffer> buffer = ReadOnlyBuffer::Create(nullptr, 0);
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  EXPECT_EQ(buffer->size(), 0u);
}

TEST(ReadOnlyBufferDeathTest, WriteFaults) {
  const int values[] = {1, 2, 3};
  absl::StatusOr<ReadOnlyBuffer> buffer =
      ReadOnlyBuffer::Create(values, sizeof(values));
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  volatile int* p = static_cast<int*>(buffer->mutable_data());
  EXPECT_EXIT(p[1] = 7, ::testing::KilledBySignal(kFaultSignal), kFaultMessage);
}

TEST(ReadOnlyBufferDeathTest, ReadPastTheEndFaults) {
  const char bytes[] = {'a', 'b', 'c'};
  absl::StatusOr<ReadOnlyBuffer> buffer =
      ReadOnlyBuffer::Create(bytes, sizeof(bytes));
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  const volatile char* p = static_cast<const char*>(buffer->data());
  EXPECT_EQ(p[2], 'c');
  EXPECT_EXIT((void)p[3], ::testing::KilledBySignal(kFaultSignal),
              kFaultMessage);
}

TEST(ReadOnlyBufferTest, SetWritableAllowsWrites) {
  const int values[] = {1, 2, 3};
  absl::StatusOr<ReadOnlyBuffer> buffer =
      ReadOnlyBuffer::Create(values, sizeof(values));
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  ASSERT_TRUE(buffer->SetWritable(true).ok());
  static_cast<int*>(buffer->mutable_data())[1] = 7;
  EXPECT_EQ(static_cast<const int*>(buffer->data())[1], 7);
  ASSERT_TRUE(buffer->SetWritable(false).ok());
}

TEST(ReadVmRssKibTest, ReadsALiveProcessAndRefusesAGoneOne) {
  absl::StatusOr<int64_t> self = ReadVmRssKib(getpid());
  ASSERT_TRUE(self.ok()) << self.status();
  EXPECT_GT(*self, 0);
  std::unique_ptr<ChildProcess> child = StartShell("exit 0", "rss_gone");
  ASSERT_NE(child, nullptr);
  const pid_t pid = child->pid();
  child->Wait(absl::Seconds(10));
  EXPECT_FALSE(ReadVmRssKib(pid).ok());
}

}  // namespace
}  // namespace testing
}  // namespace reducer
