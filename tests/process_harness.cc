#include "tests/process_harness.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"

namespace reducer {
namespace testing {
namespace {

// How often Wait and ReducerdProcess::Start look at a child. Short enough
// that a test does not idle noticeably, long enough not to burn a core.
constexpr absl::Duration kPollInterval = absl::Milliseconds(10);

// Start attempts of reducerd: another process may take the port between
// PickFreeLoopbackPort and the daemon's bind.
constexpr int kReducerdStartAttempts = 3;

std::string ErrnoMessage(absl::string_view what) {
  return absl::StrCat(what, ": ", std::strerror(errno));
}

// The file's contents; empty when it cannot be read (a child's log file
// that does not exist yet).
std::string ReadFile(const std::string& path) {
  absl::StatusOr<std::string> contents = ReadFileToString(path);
  return contents.ok() ? *std::move(contents) : std::string();
}

bool FileExists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

// True when a TCP connection to host:port (an IPv4 literal) succeeds.
bool CanConnect(const std::string& host, int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in addr;
  std::memset(&addr, 0, sizeof(addr));
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
    close(fd);
    return false;
  }
  bool ok = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  return ok;
}

}  // namespace

std::string ProcessResult::Describe() const {
  std::string how;
  if (timed_out) {
    how = "timed out and was killed with SIGKILL";
  } else if (exited) {
    how = absl::StrCat("exit code ", exit_code);
  } else {
    how = absl::StrCat("killed by signal ", term_signal, " (",
                       strsignal(term_signal), ")");
  }
  std::string text = absl::StrCat(name, ": ", how, "\n--- ", name,
                                  " stderr ---\n", stderr_text);
  if (!stdout_text.empty()) {
    absl::StrAppend(&text, "\n--- ", name, " stdout ---\n", stdout_text);
  }
  absl::StrAppend(&text, "\n--- end of ", name, " ---\n");
  return text;
}

absl::StatusOr<std::string> ReadFileToString(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::stringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

absl::StatusOr<std::string> RunfilePath(absl::string_view workspace_relative) {
  for (const char* var : {"TEST_SRCDIR", "RUNFILES_DIR"}) {
    const char* dir = std::getenv(var);
    if (dir == nullptr || *dir == '\0') continue;
    std::string path = absl::StrCat(dir, "/reducer/", workspace_relative);
    if (FileExists(path)) return path;
    return absl::NotFoundError(absl::StrCat(
        "runfile ", path, " does not exist; is it in the test's data?"));
  }
  return absl::NotFoundError(absl::StrCat(
      "cannot find runfile ", workspace_relative,
      ": neither TEST_SRCDIR nor RUNFILES_DIR is set (run under bazel test)"));
}

std::string TestTempDir() {
  const char* dir = std::getenv("TEST_TMPDIR");
  if (dir != nullptr && *dir != '\0') return dir;
  static const std::string* const kDir = [] {
    char pattern[] = "/tmp/reducer_test.XXXXXX";
    const char* made = mkdtemp(pattern);
    return new std::string(made != nullptr ? made : "/tmp");
  }();
  return *kDir;
}

absl::StatusOr<int> BindLoopbackAnyPort(int fd) {
  sockaddr_in addr;
  std::memset(&addr, 0, sizeof(addr));
  addr.sin_family = AF_INET;
  addr.sin_port = 0;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    return absl::InternalError(ErrnoMessage("bind 127.0.0.1:0"));
  }
  socklen_t len = sizeof(addr);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return absl::InternalError(ErrnoMessage("getsockname"));
  }
  return static_cast<int>(ntohs(addr.sin_port));
}

int ConnectLoopback(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in addr;
  std::memset(&addr, 0, sizeof(addr));
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    const int error = errno;
    close(fd);
    errno = error;
    return -1;
  }
  return fd;
}

absl::StatusOr<int> PickFreeLoopbackPort() {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(ErrnoMessage("socket"));
  absl::StatusOr<int> port = BindLoopbackAnyPort(fd);
  close(fd);
  return port;
}

// ---------------------------------------------------------------------------
// ChildProcess

absl::StatusOr<std::unique_ptr<ChildProcess>> ChildProcess::Start(
    std::vector<std::string> argv, std::string name) {
  if (argv.empty()) return absl::InvalidArgumentError("empty argv");
  const std::string base = absl::StrCat(TestTempDir(), "/", name);
  const std::string stdout_path = base + ".stdout.txt";
  const std::string stderr_path = base + ".stderr.txt";
  int out_fd = open(stdout_path.c_str(),
                    O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (out_fd < 0) return absl::InternalError(ErrnoMessage(stdout_path));
  int err_fd = open(stderr_path.c_str(),
                    O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (err_fd < 0) {
    std::string message = ErrnoMessage(stderr_path);
    close(out_fd);
    return absl::InternalError(message);
  }

  // Everything the child needs is prepared before fork: after fork in a
  // multi-threaded parent only async-signal-safe calls are allowed.
  std::vector<char*> c_argv;
  c_argv.reserve(argv.size() + 1);
  for (std::string& arg : argv) c_argv.push_back(arg.data());
  c_argv.push_back(nullptr);
  static constexpr char kExecFailed[] = "ChildProcess: execv failed\n";
  const pid_t parent = getpid();

  pid_t pid = fork();
  if (pid < 0) {
    std::string message = ErrnoMessage("fork");
    close(out_fd);
    close(err_fd);
    return absl::InternalError(message);
  }
  if (pid == 0) {
    // Child. dup2 clears O_CLOEXEC on the new descriptors.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(126);  // the parent died before prctl
    int null_fd = open("/dev/null", O_RDONLY);
    if (null_fd >= 0) dup2(null_fd, STDIN_FILENO);
    dup2(out_fd, STDOUT_FILENO);
    dup2(err_fd, STDERR_FILENO);
    execv(c_argv[0], c_argv.data());
    ssize_t ignored = write(STDERR_FILENO, kExecFailed, sizeof(kExecFailed) - 1);
    (void)ignored;
    _exit(127);
  }
  close(out_fd);
  close(err_fd);
  return std::unique_ptr<ChildProcess>(
      new ChildProcess(std::move(name), pid, stdout_path, stderr_path));
}

ChildProcess::ChildProcess(std::string name, pid_t pid,
                           std::string stdout_path, std::string stderr_path)
    : name_(std::move(name)),
      pid_(pid),
      stdout_path_(std::move(stdout_path)),
      stderr_path_(std::move(stderr_path)) {}

ChildProcess::~ChildProcess() {
  if (!Reap(WNOHANG)) {
    kill(pid_, SIGKILL);
    Reap(0);
  }
}

bool ChildProcess::Reap(int flags) {
  if (reaped_) return true;
  int status = 0;
  pid_t r;
  do {
    r = waitpid(pid_, &status, flags);
  } while (r < 0 && errno == EINTR);
  if (r == pid_) {
    reaped_ = true;
    wait_status_ = status;
  } else if (r < 0) {
    // ECHILD: someone else reaped it; report it as killed.
    reaped_ = true;
    wait_status_ = SIGKILL;
  }
  return reaped_;
}

bool ChildProcess::IsRunning() { return !Reap(WNOHANG); }

bool ChildProcess::Signal(int signal) {
  if (Reap(WNOHANG)) return false;
  return kill(pid_, signal) == 0;
}

ProcessResult ChildProcess::Wait(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!Reap(WNOHANG)) {
    if (absl::Now() >= deadline) {
      kill(pid_, SIGKILL);
      Reap(0);
      timed_out_ = true;
      break;
    }
    absl::SleepFor(kPollInterval);
  }
  return MakeResult();
}

ProcessResult ChildProcess::MakeResult() const {
  ProcessResult result;
  result.name = name_;
  result.timed_out = timed_out_;
  if (WIFEXITED(wait_status_)) {
    result.exited = true;
    result.exit_code = WEXITSTATUS(wait_status_);
  } else if (WIFSIGNALED(wait_status_)) {
    result.term_signal = WTERMSIG(wait_status_);
  }
  result.stdout_text = ReadStdout();
  result.stderr_text = ReadStderr();
  return result;
}

std::string ChildProcess::ReadStdout() const { return ReadFile(stdout_path_); }
std::string ChildProcess::ReadStderr() const { return ReadFile(stderr_path_); }

std::vector<ProcessResult> WaitAll(
    const std::vector<std::unique_ptr<ChildProcess>>& children,
    absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    bool any_running = false;
    for (const auto& child : children) {
      if (child->IsRunning()) any_running = true;
    }
    if (!any_running || absl::Now() >= deadline) break;
    absl::SleepFor(kPollInterval);
  }
  std::vector<ProcessResult> results;
  results.reserve(children.size());
  for (const auto& child : children) {
    // Children that ended are reported as they are; the others are killed.
    results.push_back(child->Wait(absl::ZeroDuration()));
  }
  return results;
}

// ---------------------------------------------------------------------------
// ReducerdProcess

absl::StatusOr<std::unique_ptr<ReducerdProcess>> ReducerdProcess::StartAttempt(
    const std::string& binary, const ReducerdPlacement& placement, int port,
    const std::vector<std::string>& extra_flags, absl::Time deadline,
    absl::Duration ready_timeout) {
  const std::string address = absl::StrCat(placement.host, ":", port);
  std::vector<std::string> argv = placement.command_prefix;
  argv.push_back(binary);
  argv.push_back(absl::StrCat("--listen=", address));
  argv.insert(argv.end(), extra_flags.begin(), extra_flags.end());
  // A name of its own per start, so that a daemon restarted on the same
  // port does not overwrite its predecessor's logs.
  std::string name = absl::StrCat("reducerd.", port);
  for (int n = 2; FileExists(absl::StrCat(TestTempDir(), "/", name, ".stderr.txt"));
       ++n) {
    name = absl::StrCat("reducerd.", port, ".", n);
  }
  absl::StatusOr<std::unique_ptr<ChildProcess>> process =
      ChildProcess::Start(std::move(argv), name);
  if (!process.ok()) return process.status();

  // Ready: a line naming the address on stdout or stderr, and the port
  // accepts connections.
  while (absl::Now() < deadline) {
    if (!(*process)->IsRunning()) break;
    const std::string logs = (*process)->ReadStdout() + (*process)->ReadStderr();
    const bool accepts = placement.can_connect
                             ? placement.can_connect(port)
                             : CanConnect(placement.host, port);
    if (logs.find(address) != std::string::npos && accepts) {
      return std::unique_ptr<ReducerdProcess>(
          new ReducerdProcess(*std::move(process), address, port));
    }
    absl::SleepFor(kPollInterval);
  }
  const bool exited = !(*process)->IsRunning();
  ProcessResult result = (*process)->Wait(absl::ZeroDuration());
  if (!exited) {
    return absl::DeadlineExceededError(absl::StrCat(
        "reducerd did not print its address ", address, " and accept "
        "connections within ", absl::FormatDuration(ready_timeout), "\n",
        result.Describe()));
  }
  return absl::NotFoundError(result.Describe());
}

absl::StatusOr<std::unique_ptr<ReducerdProcess>> ReducerdProcess::Start(
    std::vector<std::string> extra_flags, absl::Duration ready_timeout) {
  return StartPlaced(ReducerdPlacement(), std::move(extra_flags), ready_timeout);
}

absl::StatusOr<std::unique_ptr<ReducerdProcess>> ReducerdProcess::StartPlaced(
    const ReducerdPlacement& placement, std::vector<std::string> extra_flags,
    absl::Duration ready_timeout) {
  absl::StatusOr<std::string> binary = RunfilePath("server/reducerd");
  if (!binary.ok()) return binary.status();

  std::string last_failure;
  const absl::Time deadline = absl::Now() + ready_timeout;
  for (int attempt = 0; attempt < kReducerdStartAttempts; ++attempt) {
    absl::StatusOr<int> port = PickFreeLoopbackPort();
    if (!port.ok()) return port.status();
    absl::StatusOr<std::unique_ptr<ReducerdProcess>> started =
        StartAttempt(*binary, placement, *port, extra_flags, deadline,
                     ready_timeout);
    if (started.ok() || !absl::IsNotFound(started.status())) return started;
    // It exited early (perhaps the port was taken): try another port.
    last_failure = std::string(started.status().message());
  }
  return absl::InternalError(absl::StrCat(
      "reducerd exited before serving, ", kReducerdStartAttempts,
      " times; last:\n", last_failure));
}

absl::StatusOr<std::unique_ptr<ReducerdProcess>> ReducerdProcess::StartOnPort(
    int port, std::vector<std::string> extra_flags,
    absl::Duration ready_timeout) {
  absl::StatusOr<std::string> binary = RunfilePath("server/reducerd");
  if (!binary.ok()) return binary.status();
  const absl::Time deadline = absl::Now() + ready_timeout;
  std::string last_failure;
  while (absl::Now() < deadline) {
    absl::StatusOr<std::unique_ptr<ReducerdProcess>> started =
        StartAttempt(*binary, ReducerdPlacement(), port, extra_flags, deadline,
                     ready_timeout);
    if (started.ok() || !absl::IsNotFound(started.status())) return started;
    last_failure = std::string(started.status().message());
    absl::SleepFor(absl::Milliseconds(200));  // the port may free up soon
  }
  return absl::DeadlineExceededError(absl::StrCat(
      "reducerd could not serve on port ", port, " within ",
      absl::FormatDuration(ready_timeout), "; last attempt:\n", last_failure));
}

ReducerdProcess::ReducerdProcess(std::unique_ptr<ChildProcess> process,
                                 std::string address, int port)
    : process_(std::move(process)), address_(std::move(address)), port_(port) {}

ReducerdProcess::~ReducerdProcess() {
  if (!stopped_) Stop(absl::Seconds(10));
}

ProcessResult ReducerdProcess::Stop(absl::Duration grace) {
  stopped_ = true;
  process_->Signal(SIGTERM);
  return process_->Wait(grace);
}

std::string ReducerdProcess::StopDrained() {
  const ProcessResult stopped = Stop(kDrainGrace);
  return stopped.Succeeded() ? "" : stopped.Describe();
}

ProcessResult ReducerdProcess::Kill() {
  stopped_ = true;
  process_->Signal(SIGKILL);
  return process_->Wait(absl::Seconds(10));
}

std::string ReducerdProcess::Stderr() const { return process_->ReadStderr(); }

std::string ReducerdProcess::Logs() const {
  return absl::StrCat("--- reducerd stdout ---\n", process_->ReadStdout(),
                      "--- reducerd stderr ---\n", process_->ReadStderr(),
                      "--- end of reducerd ---\n");
}

int ReducerdProcess::MetricsPort() const {
  const std::string out = process_->ReadStdout();
  const std::string marker = "metrics on http://127.0.0.1:";
  const size_t at = out.find(marker);
  if (at == std::string::npos) return 0;
  const size_t begin = at + marker.size();
  const size_t end = out.find('/', begin);
  int port = 0;
  if (end == std::string::npos ||
      !absl::SimpleAtoi(out.substr(begin, end - begin), &port)) {
    return 0;
  }
  return port;
}

absl::StatusOr<int64_t> ReadVmRssKib(pid_t pid) {
  absl::StatusOr<std::string> status =
      ReadFileToString(absl::StrCat("/proc/", pid, "/status"));
  if (!status.ok()) return status.status();
  std::istringstream lines(*status);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind("VmRSS:", 0) != 0) continue;
    std::istringstream fields(line.substr(6));
    int64_t kib = -1;
    fields >> kib;
    if (kib >= 0) return kib;
  }
  return absl::NotFoundError(absl::StrCat("no VmRSS in /proc/", pid, "/status"));
}

// ---------------------------------------------------------------------------
// ReadOnlyBuffer

absl::StatusOr<ReadOnlyBuffer> ReadOnlyBuffer::Create(const void* data,
                                                      size_t size) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t data_pages_size =
      size == 0 ? page : (size + page - 1) / page * page;
  const size_t mapping_size = data_pages_size + page;  // plus the guard page
  void* mapping = mmap(nullptr, mapping_size, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mapping == MAP_FAILED) {
    return absl::InternalError(
        ErrnoMessage(absl::StrCat("mmap of ", mapping_size, " bytes")));
  }
  char* base = static_cast<char*>(mapping);
  char* begin = base + data_pages_size - size;
  if (size > 0) std::memcpy(begin, data, size);
  ReadOnlyBuffer buffer(mapping, mapping_size, data_pages_size, begin, size);
  if (mprotect(base + data_pages_size, page, PROT_NONE) != 0) {
    return absl::InternalError(ErrnoMessage("mprotect PROT_NONE"));
  }
  absl::Status status = buffer.SetWritable(false);
  if (!status.ok()) return status;
  return buffer;
}

ReadOnlyBuffer::ReadOnlyBuffer(void* mapping, size_t mapping_size,
                               size_t data_pages_size, void* data, size_t size)
    : mapping_(mapping),
      mapping_size_(mapping_size),
      data_pages_size_(data_pages_size),
      data_(data),
      size_(size) {}

ReadOnlyBuffer::ReadOnlyBuffer(ReadOnlyBuffer&& other) noexcept
    : mapping_(std::exchange(other.mapping_, nullptr)),
      mapping_size_(std::exchange(other.mapping_size_, 0)),
      data_pages_size_(std::exchange(other.data_pages_size_, 0)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)) {}

ReadOnlyBuffer& ReadOnlyBuffer::operator=(ReadOnlyBuffer&& other) noexcept {
  if (this != &other) {
    Release();
    mapping_ = std::exchange(other.mapping_, nullptr);
    mapping_size_ = std::exchange(other.mapping_size_, 0);
    data_pages_size_ = std::exchange(other.data_pages_size_, 0);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

ReadOnlyBuffer::~ReadOnlyBuffer() { Release(); }

void ReadOnlyBuffer::Release() {
  if (mapping_ != nullptr) munmap(mapping_, mapping_size_);
  mapping_ = nullptr;
}

absl::Status ReadOnlyBuffer::SetWritable(bool writable) {
  if (mapping_ == nullptr) return absl::FailedPreconditionError("moved from");
  const int prot = writable ? (PROT_READ | PROT_WRITE) : PROT_READ;
  if (mprotect(mapping_, data_pages_size_, prot) != 0) {
    return absl::InternalError(ErrnoMessage("mprotect"));
  }
  return absl::OkStatus();
}

}  // namespace testing
}  // namespace reducer
