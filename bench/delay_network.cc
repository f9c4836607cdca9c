// A network of separate hosts whose links add a fixed one-way delay, for
// latency probes (bench/latency_probe.py) on kernels without tc's netem.
// Each host is a network namespace of its own with one TUN interface and
// an address of 10.77.0.0/24 (host i: 10.77.0.(i + 2)); this program is the
// switch between them: it reads every packet a host sends, holds it for
// --one_way_us and writes it into the TUN of the host it is addressed to
// (IPv4 only; anything else, or to an unknown address, is dropped). Packets
// leave in the order they arrived, so every link keeps its order.
//
// It prints one JSON line on stdout in the shape bench/virtual_network
// prints (prefix, hosts: name, namespace, interface, address) once the
// network is up, and removes everything it made when its stdin reaches end
// of file or it gets SIGTERM, SIGINT or SIGHUP. Namespaces are named
// "rd<pid>-<host>", as tests/netns_harness.h names its own, so that a
// network left by a SIGKILLed switch is swept by the next VirtualNetwork.
// Addresses exist only inside these namespaces; nothing is routed
// elsewhere.
//
//   bazel-bin/bench/delay_network --hosts=s0,w0,w1 --one_way_us=100
//
// The switch thread runs SCHED_FIFO where it may (else at normal priority)
// with a timer slack of 1 ns, and sleeps in ppoll until the next packet is
// due; its wake-up latency adds to the delay (the probe reports the delay
// it measured: see --report_lateness). Exit status: 0 after a clean
// removal; 2 when the network cannot be built; 3 when the removal failed.
#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "tests/netns_harness.h"

ABSL_FLAG(std::string, hosts, "", "comma-separated host names");
ABSL_FLAG(int, one_way_us, 100,
          "how long each packet is held between two hosts, in microseconds");
ABSL_FLAG(bool, report_lateness, false,
          "on exit, print on stderr the median and p99 of how late packets "
          "left (beyond --one_way_us)");

namespace {

using reducer::testing::VirtualNetwork;

constexpr int kMaxHosts = 32;
constexpr size_t kMaxPacket = 65536;

int stop_pipe[2] = {-1, -1};

void OnSignal(int) {
  const char byte = 1;
  ssize_t ignored = write(stop_pipe[1], &byte, 1);
  (void)ignored;
}

int64_t NowNs() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return int64_t{t.tv_sec} * 1000000000 + t.tv_nsec;
}

struct Host {
  std::string name, ns, dev, address;
  uint32_t address_be = 0;  // network byte order, as in the IPv4 header
  int fd = -1;
};

struct Packet {
  int64_t due_ns;
  int to_fd;
  std::string bytes;
};

absl::Status Run(const std::vector<std::string>& argv) {
  return VirtualNetwork::RunCommand(argv).status();
}

// A TUN device named `dev` in the root namespace, moved into `ns`; the
// returned descriptor keeps working there.
absl::StatusOr<int> OpenTun(const std::string& dev, const std::string& ns) {
  const int fd = open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0)
    return absl::InternalError(absl::StrCat("/dev/net/tun: ", strerror(errno)));
  ifreq request = {};
  request.ifr_flags = IFF_TUN | IFF_NO_PI;
  std::strncpy(request.ifr_name, dev.c_str(), IFNAMSIZ - 1);
  if (ioctl(fd, TUNSETIFF, &request) != 0) {
    const int err = errno;
    close(fd);
    return absl::InternalError(
        absl::StrCat("TUNSETIFF ", dev, ": ", strerror(err)));
  }
  absl::Status moved =
      Run({VirtualNetwork::IpPath(), "link", "set", dev, "netns", ns});
  if (!moved.ok()) {
    close(fd);
    return moved;
  }
  return fd;
}

absl::Status Build(std::vector<Host>& hosts) {
  const std::string ip = VirtualNetwork::IpPath();
  for (Host& h : hosts) {
    if (absl::Status s = Run({ip, "netns", "add", h.ns}); !s.ok()) return s;
    absl::StatusOr<int> fd = OpenTun(h.dev, h.ns);
    if (!fd.ok()) return fd.status();
    h.fd = *fd;
    for (const std::vector<std::string>& argv :
         std::vector<std::vector<std::string>>{
             {ip, "-n", h.ns, "link", "set", "lo", "up"},
             {ip, "-n", h.ns, "addr", "add", h.address + "/24", "dev", h.dev},
             {ip, "-n", h.ns, "link", "set", h.dev, "up"}}) {
      if (absl::Status s = Run(argv); !s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

// Closes the TUNs (which removes them) and deletes the namespaces made;
// false if one is left.
bool Destroy(std::vector<Host>& hosts) {
  bool ok = true;
  for (Host& h : hosts) {
    if (h.fd >= 0) close(h.fd);
    h.fd = -1;
    if (access(("/run/netns/" + h.ns).c_str(), F_OK) == 0 &&
        !Run({VirtualNetwork::IpPath(), "netns", "del", h.ns}).ok()) {
      ok = false;
    }
  }
  return ok;
}

void RealTimeIfAllowed() {
  prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
  sched_param param = {};
  param.sched_priority = 10;
  sched_setscheduler(0, SCHED_FIFO, &param);  // best effort
}

// Switches packets until stdin closes or a signal arrives; returns how late
// each packet left beyond its due time, in ns.
std::vector<int64_t> Switch(std::vector<Host>& hosts, int64_t one_way_ns) {
  std::vector<pollfd> fds;
  for (const Host& h : hosts) fds.push_back({h.fd, POLLIN, 0});
  fds.push_back({STDIN_FILENO, POLLIN, 0});
  fds.push_back({stop_pipe[0], POLLIN, 0});
  const size_t n = hosts.size();
  std::deque<Packet> queue;
  std::vector<int64_t> lateness;
  std::string buffer(kMaxPacket, '\0');
  while (true) {
    // Deliver what is due.
    int64_t now = NowNs();
    while (!queue.empty() && queue.front().due_ns <= now) {
      Packet& p = queue.front();
      ssize_t ignored = write(p.to_fd, p.bytes.data(), p.bytes.size());
      (void)ignored;  // a full TUN queue drops, as a link would
      if (lateness.size() < 10000000) lateness.push_back(now - p.due_ns);
      queue.pop_front();
    }
    timespec timeout;
    timespec* wait = nullptr;
    if (!queue.empty()) {
      const int64_t left = std::max<int64_t>(0, queue.front().due_ns - NowNs());
      timeout.tv_sec = left / 1000000000;
      timeout.tv_nsec = left % 1000000000;
      wait = &timeout;
    }
    if (ppoll(fds.data(), fds.size(), wait, nullptr) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (fds[n + 1].revents != 0) break;
    if (fds[n].revents != 0) {
      char sink[256];
      const ssize_t got = read(STDIN_FILENO, sink, sizeof(sink));
      if (got <= 0 && !(got < 0 && errno == EINTR)) break;
    }
    const int64_t arrived = NowNs();
    for (size_t i = 0; i < n; ++i) {
      if (fds[i].revents == 0) continue;
      while (true) {
        const ssize_t got = read(hosts[i].fd, buffer.data(), buffer.size());
        if (got <= 0) break;
        if (got < 20 || (static_cast<uint8_t>(buffer[0]) >> 4) != 4) continue;
        uint32_t to;
        std::memcpy(&to, buffer.data() + 16, sizeof(to));
        for (const Host& h : hosts) {
          if (h.address_be != to) continue;
          queue.push_back({arrived + one_way_ns, h.fd, buffer.substr(0, got)});
          break;
        }
      }
    }
  }
  return lateness;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const std::vector<std::string> names =
      absl::StrSplit(absl::GetFlag(FLAGS_hosts), ',', absl::SkipEmpty());
  if (names.empty() || names.size() > kMaxHosts) {
    std::fprintf(stderr, "delay_network: give 1 to %d --hosts\n", kMaxHosts);
    return 2;
  }
  if (pipe2(stop_pipe, O_CLOEXEC) != 0) return 2;
  struct sigaction action = {};
  action.sa_handler = OnSignal;
  sigemptyset(&action.sa_mask);
  for (int sig : {SIGTERM, SIGINT, SIGHUP}) sigaction(sig, &action, nullptr);
  signal(SIGPIPE, SIG_IGN);

  const std::string prefix = absl::StrCat("rd", getpid(), "-");
  std::vector<Host> hosts;
  for (size_t i = 0; i < names.size(); ++i) {
    Host h;
    h.name = names[i];
    h.ns = prefix + h.name;
    h.dev = prefix + h.name;
    h.address = absl::StrCat("10.77.0.", i + 2);
    h.address_be =
        htonl((10u << 24) | (77u << 16) | static_cast<uint32_t>(i + 2));
    if (h.dev.size() >= IFNAMSIZ) {
      std::fprintf(stderr, "delay_network: interface name %s too long\n",
                   h.dev.c_str());
      return 2;
    }
    hosts.push_back(h);
  }
  if (absl::Status built = Build(hosts); !built.ok()) {
    std::fprintf(stderr, "delay_network: %s\n", built.ToString().c_str());
    Destroy(hosts);
    return 2;
  }
  std::vector<std::string> json;
  for (const Host& h : hosts) {
    json.push_back(absl::StrCat("{\"name\":\"", h.name, "\",\"namespace\":\"",
                                h.ns, "\",\"interface\":\"", h.dev,
                                "\",\"address\":\"", h.address, "\"}"));
  }
  std::printf("{\"prefix\":\"%s\",\"one_way_us\":%d,\"hosts\":[%s]}\n",
              prefix.c_str(), absl::GetFlag(FLAGS_one_way_us),
              absl::StrJoin(json, ",").c_str());
  std::fflush(stdout);

  RealTimeIfAllowed();
  std::vector<int64_t> late =
      Switch(hosts, int64_t{absl::GetFlag(FLAGS_one_way_us)} * 1000);
  if (absl::GetFlag(FLAGS_report_lateness) && !late.empty()) {
    std::sort(late.begin(), late.end());
    std::fprintf(
        stderr,
        "delay_network: %zu packets, late by median %.1f us, p99 %.1f us\n",
        late.size(), late[late.size() / 2] / 1e3,
        late[late.size() * 99 / 100] / 1e3);
  }
  return Destroy(hosts) ? 0 : 3;
}
