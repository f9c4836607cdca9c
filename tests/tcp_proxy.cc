#include "tests/tcp_proxy.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "tests/process_harness.h"

namespace reducer {
namespace testing {
namespace {

// The longest poll() sleeps without a command or a due delayed chunk: a
// backstop only, commands wake the loop through the pipe.
constexpr absl::Duration kMaxPollWait = absl::Milliseconds(100);

std::string ErrnoMessage(absl::string_view what) {
  return absl::StrCat(what, ": ", std::strerror(errno));
}

void SetNonBlocking(int fd) {
  const int flags = fcntl(fd, F_GETFL, 0);
  fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

// What `info` counts forwarded in `direction` (kUpstream or kDownstream).
uint64_t BytesOf(const TcpProxy::ConnectionInfo& info,
                 TcpProxy::Direction direction) {
  return direction == TcpProxy::kDownstream ? info.bytes_down : info.bytes_up;
}

void SetNoDelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

sockaddr_in Loopback(int port) {
  sockaddr_in addr;
  std::memset(&addr, 0, sizeof(addr));
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return addr;
}

}  // namespace

absl::StatusOr<std::unique_ptr<TcpProxy>> TcpProxy::Start(int upstream_port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(ErrnoMessage("socket"));
  absl::StatusOr<int> port = BindLoopbackAnyPort(fd);
  if (port.ok() && listen(fd, 64) != 0) {
    port = absl::InternalError(ErrnoMessage("listen 127.0.0.1:0"));
  }
  if (!port.ok()) {
    close(fd);
    return port.status();
  }
  SetNonBlocking(fd);
  int wake[2];
  if (pipe2(wake, O_CLOEXEC | O_NONBLOCK) != 0) {
    std::string message = ErrnoMessage("pipe2");
    close(fd);
    return absl::InternalError(message);
  }
  return std::unique_ptr<TcpProxy>(
      new TcpProxy(fd, *port, upstream_port, wake[0], wake[1]));
}

TcpProxy::TcpProxy(int listen_fd, int port, int upstream_port, int wake_read,
                   int wake_write)
    : listen_fd_(listen_fd),
      port_(port),
      upstream_port_(upstream_port),
      wake_read_(wake_read),
      wake_write_(wake_write),
      thread_([this] { Run(); }) {}

TcpProxy::~TcpProxy() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  Wake();
  thread_.join();
  absl::MutexLock lock(&mu_);
  for (auto& c : connections_) CloseLocked(*c);
  close(listen_fd_);
  close(wake_read_);
  close(wake_write_);
}

std::string TcpProxy::address() const {
  return absl::StrCat("127.0.0.1:", port_);
}

void TcpProxy::Wake() {
  const char byte = 1;
  ssize_t ignored = write(wake_write_, &byte, 1);
  (void)ignored;
}

int TcpProxy::num_connections() {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(connections_.size());
}

bool TcpProxy::WaitForConnections(int n, absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto enough = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return static_cast<int>(connections_.size()) >= n;
  };
  return mu_.AwaitWithTimeout(absl::Condition(&enough), timeout);
}

bool TcpProxy::WaitForBytes(int index, Direction direction, uint64_t bytes,
                            absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto enough = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (index >= static_cast<int>(connections_.size())) return false;
    return BytesOf(connections_[index]->info, direction) >= bytes;
  };
  return mu_.AwaitWithTimeout(absl::Condition(&enough), timeout);
}

uint64_t TcpProxy::BytesForwarded(Direction direction) {
  absl::MutexLock lock(&mu_);
  return BytesForwardedLocked(direction);
}

bool TcpProxy::WaitForBytesForwarded(Direction direction, uint64_t bytes,
                                     absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto enough = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return BytesForwardedLocked(direction) >= bytes;
  };
  return mu_.AwaitWithTimeout(absl::Condition(&enough), timeout);
}

uint64_t TcpProxy::BytesForwardedLocked(Direction direction) const {
  uint64_t total = 0;
  for (const auto& c : connections_) total += BytesOf(c->info, direction);
  return total;
}

TcpProxy::ConnectionInfo TcpProxy::connection(int index) {
  absl::MutexLock lock(&mu_);
  if (index < 0 || index >= static_cast<int>(connections_.size())) return {};
  return connections_[index]->info;
}

void TcpProxy::SetDelay(absl::Duration delay, size_t max_read) {
  {
    absl::MutexLock lock(&mu_);
    delay_ = delay;
    max_read_ = std::max<size_t>(1, max_read);
  }
  Wake();
}

bool TcpProxy::SetPaused(int index, Direction direction, bool paused) {
  absl::MutexLock lock(&mu_);
  if (index < 0 || index >= static_cast<int>(connections_.size())) {
    return false;
  }
  ConnectionInfo& info = connections_[index]->info;
  if (direction & kUpstream) info.paused_up = paused;
  if (direction & kDownstream) info.paused_down = paused;
  return true;
}

void TcpProxy::SetAllPaused(bool paused) {
  absl::MutexLock lock(&mu_);
  pause_all_ = paused;
  for (auto& c : connections_) {
    c->info.paused_up = paused;
    c->info.paused_down = paused;
  }
}

void TcpProxy::Pause(int index, Direction direction) {
  SetPaused(index, direction, true);
}

void TcpProxy::Resume(int index, Direction direction) {
  if (SetPaused(index, direction, false)) Wake();
}

void TcpProxy::PauseAll() { SetAllPaused(true); }

void TcpProxy::ResumeAll() {
  SetAllPaused(false);
  Wake();
}

void TcpProxy::Drop(int index) {
  {
    absl::MutexLock lock(&mu_);
    if (index < 0 || index >= static_cast<int>(connections_.size())) return;
    CloseLocked(*connections_[index]);
  }
  Wake();
}

void TcpProxy::DropAll() {
  {
    absl::MutexLock lock(&mu_);
    for (auto& c : connections_) CloseLocked(*c);
  }
  Wake();
}

void TcpProxy::CloseLocked(Connection& c) {
  // Closing here while the loop thread sleeps in poll() on these descriptors
  // is safe: the loop only touches descriptors of open connections, under
  // mu_, after poll() returns (a reused descriptor number is never polled by
  // mistake, because poll() only sleeps and every I/O re-checks `open`).
  if (c.client_fd >= 0) close(c.client_fd);
  if (c.upstream_fd >= 0) close(c.upstream_fd);
  c.client_fd = -1;
  c.upstream_fd = -1;
  c.info.open = false;
  c.up.clear();
  c.down.clear();
}

void TcpProxy::SetRefuseNew(bool refuse) {
  absl::MutexLock lock(&mu_);
  refuse_new_ = refuse;
}

void TcpProxy::AcceptLocked() {
  for (;;) {
    int client = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (client < 0) return;  // EAGAIN: nothing more to accept
    auto c = std::make_unique<Connection>();
    c->client_fd = client;
    if (refuse_new_) {
      close(client);
      c->client_fd = -1;
      connections_.push_back(std::move(c));
      continue;
    }
    int upstream = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr = Loopback(upstream_port_);
    if (upstream >= 0 &&
        connect(upstream, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
      c->upstream_fd = upstream;
      SetNonBlocking(client);
      SetNonBlocking(upstream);
      SetNoDelay(client);
      SetNoDelay(upstream);
      c->info.open = true;
      c->info.paused_up = pause_all_;
      c->info.paused_down = pause_all_;
    } else {
      if (upstream >= 0) close(upstream);
      close(client);
      c->client_fd = -1;
    }
    connections_.push_back(std::move(c));
  }
}

bool TcpProxy::ReadSide(int from, std::deque<Pending>* queue) {
  std::string buffer(max_read_, '\0');
  const ssize_t n = recv(from, buffer.data(), buffer.size(), 0);
  if (n == 0) return false;
  if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
  buffer.resize(static_cast<size_t>(n));
  queue->push_back(Pending{std::move(buffer), 0, absl::Now() + delay_});
  return true;
}

bool TcpProxy::WriteSide(int to, std::deque<Pending>* queue,
                         uint64_t* counter) {
  const absl::Time now = absl::Now();
  while (!queue->empty() && queue->front().release <= now) {
    Pending& p = queue->front();
    const ssize_t n = send(to, p.bytes.data() + p.written,
                           p.bytes.size() - p.written, MSG_NOSIGNAL);
    if (n < 0) {
      return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
    }
    p.written += static_cast<size_t>(n);
    *counter += static_cast<uint64_t>(n);
    if (p.written < p.bytes.size()) return true;  // the socket is full
    queue->pop_front();
  }
  return true;
}

void TcpProxy::Run() {
  std::vector<pollfd> fds;
  for (;;) {
    absl::Duration wait = kMaxPollWait;
    fds.clear();
    fds.push_back({wake_read_, POLLIN, 0});
    fds.push_back({listen_fd_, POLLIN, 0});
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
      const absl::Time now = absl::Now();
      // A direction that is not paused: read `from` while nothing is
      // pending (one chunk in flight per direction, which is what
      // throttles), write `to` when a chunk is due.
      auto watch = [&](bool paused, const std::deque<Pending>& queue, int from,
                       int to) {
        if (paused) return;
        if (queue.empty()) {
          fds.push_back({from, POLLIN, 0});
        } else if (queue.front().release <= now) {
          fds.push_back({to, POLLOUT, 0});
        } else {
          wait = std::min(wait, queue.front().release - now);
        }
      };
      for (auto& c : connections_) {
        if (!c->info.open) continue;
        watch(c->info.paused_up, c->up, c->client_fd, c->upstream_fd);
        watch(c->info.paused_down, c->down, c->upstream_fd, c->client_fd);
      }
    }
    const int timeout_ms = static_cast<int>(
        std::max<int64_t>(1, absl::ToInt64Milliseconds(wait + absl::Milliseconds(1))));
    poll(fds.data(), fds.size(), timeout_ms);
    char drain[64];
    while (read(wake_read_, drain, sizeof(drain)) > 0) {
    }

    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    AcceptLocked();
    // Try every unpaused direction; EAGAIN costs a syscall, which is fine
    // for a test proxy and keeps the loop free of stale poll bookkeeping.
    for (auto& c : connections_) {
      if (!c->info.open) continue;
      bool ok = true;
      if (!c->info.paused_up) {
        ok = ok && WriteSide(c->upstream_fd, &c->up, &c->info.bytes_up);
        if (ok && c->up.empty() && !c->client_eof) {
          if (!ReadSide(c->client_fd, &c->up)) {
            c->client_eof = true;
          }
          ok = WriteSide(c->upstream_fd, &c->up, &c->info.bytes_up);
        }
      }
      if (ok && !c->info.paused_down) {
        ok = WriteSide(c->client_fd, &c->down, &c->info.bytes_down);
        if (ok && c->down.empty() && !c->upstream_eof) {
          if (!ReadSide(c->upstream_fd, &c->down)) {
            c->upstream_eof = true;
          }
          ok = WriteSide(c->client_fd, &c->down, &c->info.bytes_down);
        }
      }
      // One side closed (or failed) and what it sent has been passed on:
      // close the other side too.
      if (!ok || (c->client_eof && c->up.empty()) ||
          (c->upstream_eof && c->down.empty())) {
        CloseLocked(*c);
      }
    }
  }
}

}  // namespace testing
}  // namespace reducer
