// Test support for multi-process end-to-end tests: child processes with
// captured output and hard timeouts, a reducerd daemon on a free loopback
// port, and buffers on read-only pages.
//
//   absl::StatusOr<std::unique_ptr<ReducerdProcess>> server =
//       ReducerdProcess::Start();
//   ASSERT_TRUE(server.ok()) << server.status();
//   absl::StatusOr<std::unique_ptr<ChildProcess>> worker = ChildProcess::Start(
//       {RunfilePath("tests/e2e_worker").value(),
//        "--target=" + (*server)->address()}, "worker0");
//   ProcessResult result = (*worker)->Wait(absl::Seconds(60));
//   EXPECT_TRUE(result.Succeeded()) << result.Describe();
//
// Children are started with fork/exec from the calling thread and receive
// SIGKILL if that thread (normally the test's main thread) dies, so an
// aborted test leaves no process behind.
//
// Thread safety: ChildProcess and ReducerdProcess are not thread-safe; use
// each from one thread. ReadOnlyBuffer is safe for concurrent reads.
#ifndef REDUCER_TESTS_PROCESS_HARNESS_H_
#define REDUCER_TESTS_PROCESS_HARNESS_H_

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace reducer {
namespace testing {

// How a child process ended.
struct ProcessResult {
  std::string name;        // the name given to ChildProcess::Start
  bool exited = false;     // true: it called exit; exit_code is valid
  int exit_code = -1;
  int term_signal = 0;     // the signal that ended it, when !exited
  bool timed_out = false;  // Wait's timeout expired and the harness killed it
  std::string stdout_text;
  std::string stderr_text;

  bool Succeeded() const { return exited && exit_code == 0 && !timed_out; }
  // "worker3: exit code 1" (or "killed by signal 11", "timed out ..."),
  // followed by its stderr (and stdout when not empty).
  std::string Describe() const;
};

// The absolute path of a runfile, e.g. "server/reducerd", under
// $TEST_SRCDIR/reducer (or $RUNFILES_DIR/reducer). NOT_FOUND when neither
// variable is set or the file does not exist.
absl::StatusOr<std::string> RunfilePath(absl::string_view workspace_relative);

// A directory for test output: $TEST_TMPDIR, else a fresh /tmp directory
// created once per process.
std::string TestTempDir();

// The contents of the file at `path`; NOT_FOUND when it cannot be opened.
absl::StatusOr<std::string> ReadFileToString(const std::string& path);

// Binds the AF_INET socket `fd` to 127.0.0.1 on a port the kernel picks and
// returns that port; INTERNAL naming the call that failed otherwise. `fd`
// stays open either way.
absl::StatusOr<int> BindLoopbackAnyPort(int fd);

// A blocking TCP connection to 127.0.0.1:port: its fd, or -1 with errno
// set by the call that failed.
int ConnectLoopback(int port);

// A loopback TCP port that was free a moment ago (bound on port 0, read back
// and closed). Another process may take it before it is used; callers retry.
absl::StatusOr<int> PickFreeLoopbackPort();

// One child process started with fork/exec. Its stdout and stderr go to
// files in TestTempDir() named after it.
class ChildProcess {
 public:
  // Starts argv[0] (a path; no PATH search) with `argv`. `name` labels its
  // output files and messages; it must be unique among live children of this
  // test. INTERNAL when the log files cannot be opened or fork fails; a
  // failing exec shows up as exit code 127 with the reason on stderr.
  static absl::StatusOr<std::unique_ptr<ChildProcess>> Start(
      std::vector<std::string> argv, std::string name);

  // Kills the child with SIGKILL if it still runs, and reaps it.
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  // Waits for the child to end, at most `timeout`; past it, sends SIGKILL,
  // reaps it and reports timed_out. Once the child has ended, returns the
  // same result on every call.
  ProcessResult Wait(absl::Duration timeout);

  // True while the child has not ended (reaps it if it has).
  bool IsRunning();

  // Sends `signal`; false if the child has already been reaped.
  bool Signal(int signal);

  // What the child has written so far.
  std::string ReadStdout() const;
  std::string ReadStderr() const;

  pid_t pid() const { return pid_; }
  const std::string& name() const { return name_; }

 private:
  ChildProcess(std::string name, pid_t pid, std::string stdout_path,
               std::string stderr_path);
  // waitpid with `flags`; records the status once the child is reaped.
  // Returns true when the child has been reaped (now or before).
  bool Reap(int flags);
  ProcessResult MakeResult() const;

  const std::string name_;
  const pid_t pid_;
  const std::string stdout_path_;
  const std::string stderr_path_;

  bool reaped_ = false;
  int wait_status_ = 0;
  bool timed_out_ = false;
};

// Starts several children and waits for all of them with one deadline: the
// children still running at the deadline are killed and reported timed_out.
// Results come back in the order of `children`.
std::vector<ProcessResult> WaitAll(
    const std::vector<std::unique_ptr<ChildProcess>>& children,
    absl::Duration timeout);

// Where a ReducerdProcess runs, for daemons outside this process's network
// namespace (tests/netns_harness.h). The defaults are the loopback case.
struct ReducerdPlacement {
  // The address of --listen=HOST:PORT.
  std::string host = "127.0.0.1";
  // Put before reducerd's argv, e.g. {"/usr/sbin/ip", "netns", "exec", NS}.
  std::vector<std::string> command_prefix;
  // True when HOST:`port` accepts TCP connections, asked from where the
  // daemon can be reached; empty: a connection from this thread.
  std::function<bool(int port)> can_connect;
};

// A reducerd daemon on a free loopback port.
class ReducerdProcess {
 public:
  // Starts the reducerd binary of the runfiles (data = ["//server:reducerd"])
  // as `reducerd --listen=127.0.0.1:PORT <extra_flags>` and returns once it
  // has printed a line naming its address and accepts TCP connections.
  // If it exits before that (for instance because another process took the
  // port), retries on another port a few times. DEADLINE_EXCEEDED with its
  // output if it does not become ready within `ready_timeout`.
  static absl::StatusOr<std::unique_ptr<ReducerdProcess>> Start(
      std::vector<std::string> extra_flags = {},
      absl::Duration ready_timeout = absl::Seconds(30));

  // As Start, but on the given loopback `port` and without retrying on
  // another one: for restarting a daemon where its clients expect it.
  // Retries the same port until `ready_timeout` while the port is still
  // taken (for instance by connections of the previous daemon).
  static absl::StatusOr<std::unique_ptr<ReducerdProcess>> StartOnPort(
      int port, std::vector<std::string> extra_flags = {},
      absl::Duration ready_timeout = absl::Seconds(30));

  // As Start, placed as `placement` says (a port is picked as for Start;
  // any port free here is free in a namespace of its own, too).
  static absl::StatusOr<std::unique_ptr<ReducerdProcess>> StartPlaced(
      const ReducerdPlacement& placement,
      std::vector<std::string> extra_flags = {},
      absl::Duration ready_timeout = absl::Seconds(30));

  // Stop(absl::Seconds(10)) unless already stopped.
  ~ReducerdProcess();
  ReducerdProcess(const ReducerdProcess&) = delete;
  ReducerdProcess& operator=(const ReducerdProcess&) = delete;

  // "HOST:PORT" ("127.0.0.1:PORT" unless placed), for --target.
  const std::string& address() const { return address_; }
  int port() const { return port_; }
  pid_t pid() const { return process_->pid(); }

  // How long a test gives reducerd to drain and exit after SIGTERM.
  static constexpr absl::Duration kDrainGrace = absl::Seconds(15);

  // Sends SIGTERM and waits up to `grace` for the daemon to drain and exit;
  // then SIGKILL. The result says how it ended (exit code 0 expected).
  ProcessResult Stop(absl::Duration grace);

  // Stop(kDrainGrace): "" when the daemon drained and exited 0, else how it
  // ended (ProcessResult::Describe).
  std::string StopDrained();

  // Kills the daemon with SIGKILL (a crash: no drain) and reaps it.
  ProcessResult Kill();

  // Its stdout and stderr so far.
  std::string Logs() const;
  // Its stderr so far (where it logs).
  std::string Stderr() const;
  // The port of its `reducerd metrics on http://127.0.0.1:PORT/metrics`
  // line (started with --metrics_listen=127.0.0.1:0); 0 when it printed
  // none.
  int MetricsPort() const;

 private:
  // One start attempt on `port`: the daemon, once ready; NOT_FOUND with its
  // output if it exited before serving; DEADLINE_EXCEEDED if it still runs
  // but did not become ready by `deadline`.
  static absl::StatusOr<std::unique_ptr<ReducerdProcess>> StartAttempt(
      const std::string& binary, const ReducerdPlacement& placement, int port,
      const std::vector<std::string>& extra_flags, absl::Time deadline,
      absl::Duration ready_timeout);

  ReducerdProcess(std::unique_ptr<ChildProcess> process, std::string address,
                  int port);

  const std::unique_ptr<ChildProcess> process_;
  const std::string address_;
  const int port_;
  bool stopped_ = false;
};

// The resident set size of process `pid` in KiB (VmRSS in
// /proc/<pid>/status). NOT_FOUND when the process or the field is gone.
absl::StatusOr<int64_t> ReadVmRssKib(pid_t pid);

// Bytes on pages of their own, made read-only with mprotect, so that any
// write to them (by the code under test) ends the process with SIGSEGV. The
// bytes end exactly where a PROT_NONE guard page begins, so a read past the
// end faults too. Movable, not copyable; unmaps in the destructor.
class ReadOnlyBuffer {
 public:
  // Copies `size` bytes from `data` (may be null when size is 0) and
  // protects them. INTERNAL if mmap or mprotect fails.
  static absl::StatusOr<ReadOnlyBuffer> Create(const void* data, size_t size);

  ReadOnlyBuffer(ReadOnlyBuffer&& other) noexcept;
  ReadOnlyBuffer& operator=(ReadOnlyBuffer&& other) noexcept;
  ReadOnlyBuffer(const ReadOnlyBuffer&) = delete;
  ReadOnlyBuffer& operator=(const ReadOnlyBuffer&) = delete;
  ~ReadOnlyBuffer();

  // The bytes; aligned to the largest power of two dividing size(), capped
  // at the page size (so 8-byte elements are 8-byte aligned).
  const void* data() const { return data_; }
  // Writable address of the same bytes, for use after SetWritable(true).
  void* mutable_data() const { return data_; }
  size_t size() const { return size_; }

  // PROT_READ | PROT_WRITE (true) or PROT_READ (false) on the data pages.
  absl::Status SetWritable(bool writable);

 private:
  ReadOnlyBuffer(void* mapping, size_t mapping_size, size_t data_pages_size,
                 void* data, size_t size);
  void Release();

  void* mapping_ = nullptr;
  size_t mapping_size_ = 0;
  size_t data_pages_size_ = 0;  // the mapping minus the guard page
  void* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace testing
}  // namespace reducer

#endif  // REDUCER_TESTS_PROCESS_HARNESS_H_
