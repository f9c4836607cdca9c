// TcpProxy: a loopback TCP proxy for fault injection in end-to-end tests. It
// listens on a free 127.0.0.1 port, opens one upstream connection per
// accepted client connection, and forwards bytes both ways. On command it
// delays or throttles forwarding, pauses a connection (stops forwarding
// without closing it, like a network partition: nothing is read, nothing is
// written, no FIN or RST travels), and drops connections (closes both sides).
//
//   absl::StatusOr<std::unique_ptr<TcpProxy>> proxy =
//       TcpProxy::Start(server->port());
//   ASSERT_TRUE(proxy.ok()) << proxy.status();
//   // Point a client at (*proxy)->address() instead of the server.
//   ASSERT_TRUE((*proxy)->WaitForConnections(2, absl::Seconds(10)));
//   (*proxy)->Pause(1, TcpProxy::kBoth);   // connection 1 stalls
//   (*proxy)->Drop(1);                    // and is cut
//
// Connections are numbered 0, 1, 2, ... in the order they were accepted; a
// gRPC client's first connection through a proxy of its own is its first
// channel's. A connection whose upstream cannot be reached is accepted and
// closed at once (it still gets a number).
//
// Thread-safe: every method may be called from any thread while a
// background thread forwards.
#ifndef REDUCER_TESTS_TCP_PROXY_H_
#define REDUCER_TESTS_TCP_PROXY_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace reducer {
namespace testing {

class TcpProxy {
 public:
  // Which way bytes travel: kUpstream from the client to the server,
  // kDownstream from the server to the client.
  enum Direction { kUpstream = 1, kDownstream = 2, kBoth = 3 };

  // What the proxy knows about one connection.
  struct ConnectionInfo {
    bool open = false;           // neither side closed nor dropped yet
    bool paused_up = false;      // client -> server held
    bool paused_down = false;    // server -> client held
    uint64_t bytes_up = 0;       // forwarded client -> server
    uint64_t bytes_down = 0;     // forwarded server -> client
  };

  // Listens on a free loopback port and forwards every connection to
  // 127.0.0.1:`upstream_port`. INTERNAL when the socket cannot be set up.
  static absl::StatusOr<std::unique_ptr<TcpProxy>> Start(int upstream_port);

  // Stops forwarding and closes every socket.
  ~TcpProxy();
  TcpProxy(const TcpProxy&) = delete;
  TcpProxy& operator=(const TcpProxy&) = delete;

  // "127.0.0.1:PORT", for ClientOptions::target.
  std::string address() const;
  int port() const { return port_; }

  // Connections accepted so far.
  int num_connections();
  // Waits until at least `n` connections were accepted; false at timeout.
  bool WaitForConnections(int n, absl::Duration timeout);
  // Waits until at least `bytes` were forwarded on connection `index` in
  // `direction` (kUpstream or kDownstream); false at timeout.
  bool WaitForBytes(int index, Direction direction, uint64_t bytes,
                    absl::Duration timeout);
  ConnectionInfo connection(int index);
  // Bytes forwarded in `direction` (kUpstream or kDownstream) over every
  // connection accepted so far, closed ones included.
  uint64_t BytesForwarded(Direction direction);
  // Waits until BytesForwarded(direction) >= `bytes`; false at timeout.
  bool WaitForBytesForwarded(Direction direction, uint64_t bytes,
                             absl::Duration timeout);

  // Every forwarded read (at most `max_read` bytes) waits `delay` before it
  // is written, and the next read from that side waits for it, so the
  // throughput of each direction is at most max_read / delay. Applies to
  // every connection, open and future. Zero delay: forward at once.
  void SetDelay(absl::Duration delay, size_t max_read = 64 << 10);

  // Holds the bytes of connection `index` travelling in `direction`: they
  // are neither read nor written until Resume. The connection stays open;
  // its peers notice nothing but silence (keepalive pings go unanswered).
  void Pause(int index, Direction direction);
  void Resume(int index, Direction direction);
  // Pause every connection, open and future (as if the host were cut off),
  // or resume them all.
  void PauseAll();
  void ResumeAll();

  // With `refuse`, every new connection is closed as soon as it is
  // accepted (as if the server could not be reached any more); open ones
  // are left alone.
  void SetRefuseNew(bool refuse);

  // Closes both sides of connection `index` (pending bytes are lost).
  void Drop(int index);
  // Closes both sides of every open connection.
  void DropAll();

 private:
  struct Pending {
    std::string bytes;
    size_t written = 0;
    absl::Time release;
  };
  struct Connection {
    int client_fd = -1;
    int upstream_fd = -1;
    ConnectionInfo info;
    std::deque<Pending> up;    // read from the client, for the server
    std::deque<Pending> down;  // read from the server, for the client
    bool client_eof = false;
    bool upstream_eof = false;
  };

  TcpProxy(int listen_fd, int port, int upstream_port, int wake_read,
           int wake_write);
  void Run();
  void Wake();
  // Pauses (or resumes) `direction` of connection `index`; false when there
  // is no such connection.
  bool SetPaused(int index, Direction direction, bool paused);
  // Pauses (or resumes) every connection, open and future.
  void SetAllPaused(bool paused);
  void AcceptLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CloseLocked(Connection& c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Reads from `from` into `queue`; false when `from` is at EOF or failed.
  bool ReadSide(int from, std::deque<Pending>* queue)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes the due bytes of `queue` to `to`; false when `to` failed.
  bool WriteSide(int to, std::deque<Pending>* queue, uint64_t* counter)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  uint64_t BytesForwardedLocked(Direction direction) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Constant after construction.
  const int listen_fd_;
  const int port_;
  const int upstream_port_;
  const int wake_read_;   // a pipe that interrupts poll() on commands
  const int wake_write_;

  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool pause_all_ ABSL_GUARDED_BY(mu_) = false;
  absl::Duration delay_ ABSL_GUARDED_BY(mu_) = absl::ZeroDuration();
  size_t max_read_ ABSL_GUARDED_BY(mu_) = 64 << 10;
  std::vector<std::unique_ptr<Connection>> connections_ ABSL_GUARDED_BY(mu_);
  bool refuse_new_ ABSL_GUARDED_BY(mu_) = false;

  std::thread thread_;  // last: starts once the members above exist
};

}  // namespace testing
}  // namespace reducer

#endif  // REDUCER_TESTS_TCP_PROXY_H_
