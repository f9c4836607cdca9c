#include "tests/tcp_proxy.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/process_harness.h"

namespace reducer {
namespace testing {
namespace {

// A loopback echo server: every byte it reads on a connection goes back.
class EchoServer {
 public:
  EchoServer() {
    listen_fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr;
    std::memset(&addr, 0, sizeof(addr));
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    listen(listen_fd_, 16);
    socklen_t len = sizeof(addr);
    getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { Run(); });
  }
  ~EchoServer() {
    stop_ = true;
    thread_.join();
    for (int fd : clients_) close(fd);
    close(listen_fd_);
  }
  int port() const { return port_; }

 private:
  void Run() {
    while (!stop_) {
      std::vector<pollfd> fds = {{listen_fd_, POLLIN, 0}};
      for (int fd : clients_) fds.push_back({fd, POLLIN, 0});
      if (poll(fds.data(), fds.size(), 20) <= 0) continue;
      if (fds[0].revents & POLLIN) {
        clients_.push_back(accept(listen_fd_, nullptr, nullptr));
      }
      for (size_t i = 1; i < fds.size(); ++i) {
        if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        char buffer[4096];
        const ssize_t n = recv(fds[i].fd, buffer, sizeof(buffer), 0);
        if (n > 0) send(fds[i].fd, buffer, n, MSG_NOSIGNAL);
      }
    }
  }

  int listen_fd_ = -1;
  int port_ = 0;
  std::vector<int> clients_;  // only the server thread touches it
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// Reads until `n` bytes arrived, the peer closed, or `timeout` passed.
// Returns what arrived; *closed tells whether the peer closed or reset.
std::string ReadFor(int fd, size_t n, absl::Duration timeout,
                    bool* closed = nullptr) {
  std::string got;
  const absl::Time deadline = absl::Now() + timeout;
  if (closed != nullptr) *closed = false;
  while (got.size() < n && absl::Now() < deadline) {
    pollfd p = {fd, POLLIN, 0};
    const int left =
        static_cast<int>(absl::ToInt64Milliseconds(deadline - absl::Now()));
    if (poll(&p, 1, std::max(left, 1)) <= 0) continue;
    char buffer[4096];
    const ssize_t r = recv(fd, buffer, sizeof(buffer), 0);
    if (r <= 0) {
      if (closed != nullptr) *closed = true;
      break;
    }
    got.append(buffer, static_cast<size_t>(r));
  }
  return got;
}

// Each test's echo server, and the TcpProxy it starts in front of it.
class TcpProxyTest : public ::testing::Test {
 protected:
  // Starts proxy_ in front of `upstream_port`.
  void StartProxy(int upstream_port) {
    absl::StatusOr<std::unique_ptr<TcpProxy>> proxy =
        TcpProxy::Start(upstream_port);
    ASSERT_TRUE(proxy.ok()) << proxy.status();
    proxy_ = *std::move(proxy);
  }
  // Sets *fd to a new connection to proxy_.
  void Connect(int* fd) {
    *fd = ConnectLoopback(proxy_->port());
    ASSERT_GE(*fd, 0);
  }
  // Starts proxy_ in front of the echo server and sets fd_ to a connection
  // through it, once the proxy holds it as its connection 0.
  void StartAndConnect() {
    ASSERT_NO_FATAL_FAILURE(StartProxy(echo_.port()));
    ASSERT_NO_FATAL_FAILURE(Connect(&fd_));
    ASSERT_TRUE(proxy_->WaitForConnections(1, absl::Seconds(5)));
  }

  void TearDown() override {
    if (fd_ >= 0) close(fd_);
  }

  EchoServer echo_;
  std::unique_ptr<TcpProxy> proxy_;
  int fd_ = -1;  // StartAndConnect's connection, closed at the end
};

TEST_F(TcpProxyTest, ForwardsBothWaysAndCountsBytes) {
  ASSERT_NO_FATAL_FAILURE(StartAndConnect());
  ASSERT_EQ(send(fd_, "hello", 5, 0), 5);
  EXPECT_EQ(ReadFor(fd_, 5, absl::Seconds(5)), "hello");
  const TcpProxy::ConnectionInfo info = proxy_->connection(0);
  EXPECT_TRUE(info.open);
  EXPECT_EQ(info.bytes_up, 5u);
  EXPECT_EQ(info.bytes_down, 5u);
}

TEST_F(TcpProxyTest, PauseHoldsBytesUntilResume) {
  ASSERT_NO_FATAL_FAILURE(StartAndConnect());
  proxy_->Pause(0, TcpProxy::kBoth);
  ASSERT_EQ(send(fd_, "abc", 3, 0), 3);
  bool closed = false;
  EXPECT_EQ(ReadFor(fd_, 3, absl::Milliseconds(300), &closed), "");
  EXPECT_FALSE(closed) << "a paused connection must stay open";
  EXPECT_EQ(proxy_->connection(0).bytes_up, 0u);
  proxy_->Resume(0, TcpProxy::kBoth);
  EXPECT_EQ(ReadFor(fd_, 3, absl::Seconds(5)), "abc");
}

TEST_F(TcpProxyTest, PausingOneDirectionLetsTheOtherThrough) {
  ASSERT_NO_FATAL_FAILURE(StartAndConnect());
  proxy_->Pause(0, TcpProxy::kDownstream);
  ASSERT_EQ(send(fd_, "xyz", 3, 0), 3);
  EXPECT_TRUE(
      proxy_->WaitForBytes(0, TcpProxy::kUpstream, 3, absl::Seconds(5)));
  EXPECT_EQ(ReadFor(fd_, 3, absl::Milliseconds(300)), "");
  proxy_->Resume(0, TcpProxy::kDownstream);
  EXPECT_EQ(ReadFor(fd_, 3, absl::Seconds(5)), "xyz");
}

TEST_F(TcpProxyTest, DropClosesTheClientSide) {
  ASSERT_NO_FATAL_FAILURE(StartAndConnect());
  proxy_->Drop(0);
  bool closed = false;
  ReadFor(fd_, 1, absl::Seconds(5), &closed);
  EXPECT_TRUE(closed);
  EXPECT_FALSE(proxy_->connection(0).open);
  close(fd_);
  // New connections still work.
  ASSERT_NO_FATAL_FAILURE(Connect(&fd_));
  ASSERT_EQ(send(fd_, "again", 5, 0), 5);
  EXPECT_EQ(ReadFor(fd_, 5, absl::Seconds(5)), "again");
  EXPECT_EQ(proxy_->num_connections(), 2);
}

TEST_F(TcpProxyTest, TotalsCountClosedConnectionsToo) {
  ASSERT_NO_FATAL_FAILURE(StartProxy(echo_.port()));
  int first = -1;
  ASSERT_NO_FATAL_FAILURE(Connect(&first));
  ASSERT_EQ(send(first, "abc", 3, 0), 3);
  EXPECT_EQ(ReadFor(first, 3, absl::Seconds(5)), "abc");
  proxy_->Drop(0);
  close(first);
  int second = -1;
  ASSERT_NO_FATAL_FAILURE(Connect(&second));
  ASSERT_EQ(send(second, "defgh", 5, 0), 5);
  EXPECT_EQ(ReadFor(second, 5, absl::Seconds(5)), "defgh");
  EXPECT_TRUE(
      proxy_->WaitForBytesForwarded(TcpProxy::kUpstream, 8, absl::Seconds(5)));
  EXPECT_EQ(proxy_->BytesForwarded(TcpProxy::kUpstream), 8u);
  EXPECT_EQ(proxy_->BytesForwarded(TcpProxy::kDownstream), 8u);
  // Nothing more comes: the wait times out.
  EXPECT_FALSE(proxy_->WaitForBytesForwarded(TcpProxy::kUpstream, 9,
                                             absl::Milliseconds(50)));
  close(second);
}

TEST_F(TcpProxyTest, DelayThrottlesForwarding) {
  ASSERT_NO_FATAL_FAILURE(StartProxy(echo_.port()));
  proxy_->SetDelay(absl::Milliseconds(100));
  int fd = -1;
  ASSERT_NO_FATAL_FAILURE(Connect(&fd));
  const absl::Time start = absl::Now();
  ASSERT_EQ(send(fd, "slow", 4, 0), 4);
  EXPECT_EQ(ReadFor(fd, 4, absl::Seconds(5)), "slow");
  // 100 ms up and 100 ms down, at least.
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(190));
  close(fd);
}

TEST_F(TcpProxyTest, UnreachableUpstreamClosesTheConnection) {
  int dead_port;
  {
    EchoServer echo;
    dead_port = echo.port();
  }
  ASSERT_NO_FATAL_FAILURE(StartProxy(dead_port));
  int fd = -1;
  ASSERT_NO_FATAL_FAILURE(Connect(&fd));
  bool closed = false;
  ReadFor(fd, 1, absl::Seconds(5), &closed);
  EXPECT_TRUE(closed);
  close(fd);
}

}  // namespace
}  // namespace testing
}  // namespace reducer
