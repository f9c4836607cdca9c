#include "tests/netns_harness.h"

#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <thread>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"

namespace reducer {
namespace testing {
namespace {

// Where `ip netns add` keeps its namespaces (bind mounts).
constexpr char kNetnsDir[] = "/run/netns";

// The private range; host i is kFirstHostOctet + i. The network has no
// gateway: .1 stays unused.
constexpr char kSubnetPrefix[] = "10.77.0.";
constexpr int kFirstHostOctet = 2;
constexpr int kSubnetBits = 24;
// Hosts in one network: the /24 minus .0, .1 and broadcast.
constexpr size_t kMaxHosts = 253;

// How long one `ip`/`tc` command may take: they finish in milliseconds; a
// longer one is stuck (a kernel lock held by a dying namespace).
constexpr absl::Duration kCommandTimeout = absl::Seconds(10);

// The longest host name: the interface name "rd<pid>-<host>" must fit in
// IFNAMSIZ - 1 = 15 characters with a 7-digit pid (pid_max 4194304).
constexpr size_t kMaxHostName = 4;

bool Executable(const std::string& path) {
  return access(path.c_str(), X_OK) == 0;
}

std::string FindTool(const char* name) {
  for (const char* dir : {"/usr/sbin/", "/sbin/", "/usr/bin/", "/bin/"}) {
    std::string path = absl::StrCat(dir, name);
    if (Executable(path)) return path;
  }
  return "";
}

bool ValidHostName(const std::string& host) {
  if (host.empty() || host.size() > kMaxHostName || host == "br") return false;
  if (!absl::ascii_islower(host[0])) return false;
  for (char c : host) {
    if (!absl::ascii_islower(c) && !absl::ascii_isdigit(c)) return false;
  }
  return true;
}

// The effective capability mask of this process (CapEff in
// /proc/self/status); 0 when unreadable.
uint64_t EffectiveCapabilities() {
  absl::StatusOr<std::string> status = ReadFileToString("/proc/self/status");
  if (!status.ok()) return 0;
  std::istringstream lines(*status);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind("CapEff:", 0) != 0) continue;
    uint64_t caps = 0;
    std::string hex(absl::StripAsciiWhitespace(line.substr(7)));
    if (absl::SimpleHexAtoi(hex, &caps)) return caps;
  }
  return 0;
}

// From linux/capability.h.
constexpr int kCapNetAdmin = 12;
constexpr int kCapSysAdmin = 21;

// The pid in a name "rd<pid>-...", or -1 when the name is not one of ours.
pid_t OwnerPid(const std::string& name) {
  if (!absl::StartsWith(name, "rd")) return -1;
  const size_t dash = name.find('-');
  if (dash == std::string::npos || dash == 2) return -1;
  int pid = 0;
  if (!absl::SimpleAtoi(name.substr(2, dash - 2), &pid) || pid <= 0) return -1;
  return pid;
}

}  // namespace

std::string VirtualNetwork::IpPath() { return FindTool("ip"); }
std::string VirtualNetwork::TcPath() { return FindTool("tc"); }
std::string VirtualNetwork::NftPath() { return FindTool("nft"); }

absl::StatusOr<std::string> VirtualNetwork::RunCommand(
    const std::vector<std::string>& argv) {
  static std::atomic<int> counter{0};
  const std::string name = absl::StrCat("netns_cmd.", getpid(), ".", counter++);
  absl::StatusOr<std::unique_ptr<ChildProcess>> child =
      ChildProcess::Start(argv, name);
  if (!child.ok()) return child.status();
  ProcessResult result = (*child)->Wait(kCommandTimeout);
  // The logs were read into the result; nothing else needs the files.
  for (const char* suffix : {".stdout.txt", ".stderr.txt"}) {
    unlink(absl::StrCat(TestTempDir(), "/", name, suffix).c_str());
  }
  if (!result.Succeeded()) {
    return absl::InternalError(absl::StrCat(
        "`", absl::StrJoin(argv, " "), "` failed: ", result.Describe()));
  }
  return result.stdout_text;
}

absl::Status VirtualNetwork::Available() {
  const uint64_t caps = EffectiveCapabilities();
  if ((caps >> kCapSysAdmin & 1) == 0 || (caps >> kCapNetAdmin & 1) == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "network namespaces need CAP_SYS_ADMIN and CAP_NET_ADMIN; this "
        "process (uid ", geteuid(), ") has capabilities 0x",
        absl::Hex(caps)));
  }
  if (IpPath().empty() || TcPath().empty()) {
    return absl::FailedPreconditionError(
        "iproute2's `ip` and `tc` are not installed (tools/setup.sh installs "
        "them)");
  }
  // The capabilities may still not suffice (a container's seccomp profile,
  // a read-only /run): try once.
  const std::string probe = absl::StrCat("rd", getpid(), "-probe");
  absl::StatusOr<std::string> added =
      RunCommand({IpPath(), "netns", "add", probe});
  if (!added.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot create a network namespace here: ", added.status().message()));
  }
  absl::StatusOr<std::string> deleted =
      RunCommand({IpPath(), "netns", "del", probe});
  if (!deleted.ok()) return deleted.status();
  return absl::OkStatus();
}

int VirtualNetwork::SweepStale() {
  DIR* dir = opendir(kNetnsDir);
  if (dir == nullptr) return 0;
  std::vector<std::string> stale;
  while (dirent* entry = readdir(dir)) {
    const std::string name = entry->d_name;
    const pid_t pid = OwnerPid(name);
    if (pid <= 0) continue;
    // Only namespaces of processes that are gone: a live pid may be another
    // test's (or, after pid reuse, anyone's), so it is left alone.
    if (kill(pid, 0) == 0 || errno != ESRCH) continue;
    stale.push_back(name);
  }
  closedir(dir);
  int removed = 0;
  for (const std::string& name : stale) {
    absl::StatusOr<std::string> done = RunCommand({IpPath(), "netns", "del", name});
    if (done.ok()) {
      ++removed;
    } else {
      std::fprintf(stderr, "VirtualNetwork: could not remove stale %s: %s\n",
                   name.c_str(), std::string(done.status().message()).c_str());
    }
  }
  return removed;
}

absl::StatusOr<std::unique_ptr<VirtualNetwork>> VirtualNetwork::Create(
    const Options& options) {
  if (options.hosts.empty() || options.hosts.size() > kMaxHosts) {
    return absl::InvalidArgumentError(absl::StrCat(
        "VirtualNetwork needs 1 to ", kMaxHosts, " hosts, got ",
        options.hosts.size()));
  }
  for (size_t i = 0; i < options.hosts.size(); ++i) {
    const std::string& host = options.hosts[i];
    if (!ValidHostName(host)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "host name \"", host, "\" is not a lower-case letter followed by "
          "at most ", kMaxHostName - 1, " letters or digits (and not \"br\")"));
    }
    for (size_t j = 0; j < i; ++j) {
      if (options.hosts[j] == host) {
        return absl::InvalidArgumentError(
            absl::StrCat("host \"", host, "\" is listed twice"));
      }
    }
  }
  if (absl::Status available = Available(); !available.ok()) return available;
  SweepStale();

  std::unique_ptr<VirtualNetwork> net(new VirtualNetwork(
      absl::StrCat("rd", getpid(), "-"), options.hosts));
  // A network of this process that was never destroyed (a test that leaked
  // it, then forked?) would make every `add` fail: refuse clearly instead.
  for (const std::string& ns : [&] {
         std::vector<std::string> names = {net->BridgeNamespaceName()};
         for (const std::string& h : options.hosts) {
           names.push_back(net->NamespaceName(h));
         }
         return names;
       }()) {
    struct stat st;
    if (stat(absl::StrCat(kNetnsDir, "/", ns).c_str(), &st) == 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "namespace ", ns, " already exists: one VirtualNetwork per test "
          "process at a time"));
    }
  }
  absl::Status built = net->Build(options);
  if (!built.ok()) {
    // What was made goes; the build's own error is the one worth reporting.
    net->Destroy().IgnoreError();
    return built;
  }
  return net;
}

VirtualNetwork::VirtualNetwork(std::string prefix,
                               std::vector<std::string> hosts)
    : prefix_(std::move(prefix)), hosts_(std::move(hosts)) {}

VirtualNetwork::~VirtualNetwork() {
  absl::Status destroyed = Destroy();
  if (!destroyed.ok()) {
    std::fprintf(stderr, "VirtualNetwork: cleanup failed: %s\n",
                 std::string(destroyed.message()).c_str());
  }
}

// Build, step by step:
//   1. the bridge's namespace, with the bridge (STP off: ports forward at
//      once) and no address: it only switches frames between the hosts;
//   2. per host: its namespace with loopback up; a veth pair made inside it
//      whose peer is created directly in the bridge's namespace (so neither
//      end ever exists in the root namespace); the host's address on its
//      end; the peer enslaved to the bridge; both ends up;
//   3. per host, with a rate: tbf on the host's end (what it sends) and on
//      the bridge port (what it receives).
absl::Status VirtualNetwork::Build(const Options& options) {
  burst_ = options.burst;
  latency_ = options.latency;
  const std::string ip = IpPath();
  const std::string tc = TcPath();
  const std::string bridge_ns = BridgeNamespaceName();
  const std::string bridge = absl::StrCat(prefix_, "br");
  auto run = [](std::vector<std::string> argv) -> absl::Status {
    return RunCommand(argv).status();
  };
  absl::Status s = run({ip, "netns", "add", bridge_ns});
  if (!s.ok()) return s;
  made_namespaces_.push_back(bridge_ns);
  for (std::vector<std::string> argv : std::vector<std::vector<std::string>>{
           {ip, "-n", bridge_ns, "link", "set", "lo", "up"},
           {ip, "-n", bridge_ns, "link", "add", bridge, "type", "bridge",
            "stp_state", "0", "forward_delay", "0"},
           {ip, "-n", bridge_ns, "link", "set", bridge, "up"}}) {
    if (s = run(argv); !s.ok()) return s;
  }
  for (const std::string& host : hosts_) {
    const std::string ns = NamespaceName(host);
    const std::string dev = InterfaceName(host);
    const std::string port = absl::StrCat(dev, "p");
    if (s = run({ip, "netns", "add", ns}); !s.ok()) return s;
    made_namespaces_.push_back(ns);
    std::vector<std::vector<std::string>> steps = {
        {ip, "-n", ns, "link", "set", "lo", "up"},
        {ip, "-n", ns, "link", "add", dev, "type", "veth", "peer", "name",
         port, "netns", bridge_ns},
        {ip, "-n", ns, "addr", "add",
         absl::StrCat(Address(host), "/", kSubnetBits), "dev", dev},
        {ip, "-n", ns, "link", "set", dev, "up"},
        {ip, "-n", bridge_ns, "link", "set", port, "master", bridge},
        {ip, "-n", bridge_ns, "link", "set", port, "up"},
    };
    if (!options.rate.empty()) {
      for (const auto& [where, link] :
           {std::pair<std::string, std::string>{ns, dev}, {bridge_ns, port}}) {
        steps.push_back({tc, "-n", where, "qdisc", "add", "dev", link, "root",
                         "tbf", "rate", options.rate, "burst", options.burst,
                         "latency", options.latency});
      }
    }
    for (const std::vector<std::string>& argv : steps) {
      if (s = run(argv); !s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

absl::Status VirtualNetwork::Destroy() {
  absl::Status first;
  // Hosts first, the bridge last: deleting a host's namespace deletes its
  // veth end and with it the peer on the bridge.
  while (!made_namespaces_.empty()) {
    const std::string ns = made_namespaces_.back();
    made_namespaces_.pop_back();
    absl::StatusOr<std::string> done = RunCommand({IpPath(), "netns", "del", ns});
    if (!done.ok() && first.ok()) first = done.status();
  }
  return first;
}

int VirtualNetwork::HostIndex(const std::string& host) const {
  for (size_t i = 0; i < hosts_.size(); ++i) {
    if (hosts_[i] == host) return static_cast<int>(i);
  }
  std::fprintf(stderr, "VirtualNetwork: no host \"%s\" (hosts: %s)\n",
               host.c_str(), absl::StrJoin(hosts_, ", ").c_str());
  std::abort();
}

std::string VirtualNetwork::NamespaceName(const std::string& host) const {
  HostIndex(host);
  return absl::StrCat(prefix_, host);
}

std::string VirtualNetwork::InterfaceName(const std::string& host) const {
  return NamespaceName(host);
}

std::string VirtualNetwork::Address(const std::string& host) const {
  return absl::StrCat(kSubnetPrefix, kFirstHostOctet + HostIndex(host));
}

std::string VirtualNetwork::BridgeNamespaceName() const {
  return absl::StrCat(prefix_, "bridge");
}

std::vector<std::string> VirtualNetwork::CommandPrefix(
    const std::string& host) const {
  return {IpPath(), "netns", "exec", NamespaceName(host)};
}

ReducerdPlacement VirtualNetwork::Placement(const std::string& host) const {
  ReducerdPlacement placement;
  placement.host = Address(host);
  placement.command_prefix = CommandPrefix(host);
  const std::string address = Address(host);
  placement.can_connect = [this, host, address](int port) {
    bool connected = false;
    absl::Status ran = RunInHost(host, [&] {
      int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (fd < 0) return;
      sockaddr_in addr;
      std::memset(&addr, 0, sizeof(addr));
      addr.sin_family = AF_INET;
      addr.sin_port = htons(static_cast<uint16_t>(port));
      inet_pton(AF_INET, address.c_str(), &addr.sin_addr);
      connected =
          connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
      close(fd);
    });
    return ran.ok() && connected;
  };
  return placement;
}

absl::Status VirtualNetwork::RunInHost(const std::string& host,
                                       const std::function<void()>& fn) const {
  const std::string path = absl::StrCat(kNetnsDir, "/", NamespaceName(host));
  absl::Status status;
  std::thread thread([&] {
    int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      status = absl::InternalError(
          absl::StrCat("open ", path, ": ", std::strerror(errno)));
      return;
    }
    // CLONE_NEWNET: only this thread moves; it ends after `fn`.
    const int entered = setns(fd, CLONE_NEWNET);
    const int error = errno;
    close(fd);
    if (entered != 0) {
      status = absl::InternalError(
          absl::StrCat("setns into ", path, ": ", std::strerror(error)));
      return;
    }
    fn();
  });
  thread.join();
  return status;
}

absl::Status VirtualNetwork::SetEgressRate(const std::string& host,
                                           const std::string& rate) {
  return RunCommand({TcPath(), "-n", NamespaceName(host), "qdisc", "change",
                     "dev", InterfaceName(host), "root", "tbf", "rate", rate,
                     "burst", burst_, "latency", latency_})
      .status();
}

absl::Status VirtualNetwork::SetBlackhole(const std::string& host, bool on) {
  const std::string nft = NftPath();
  if (nft.empty()) {
    return absl::FailedPreconditionError(
        "nft is not installed (Debian package nftables)");
  }
  std::vector<std::string> exec = CommandPrefix(host);
  exec.push_back(nft);
  if (!on) {
    exec.insert(exec.end(), {"delete", "table", "inet", "blackhole"});
    return RunCommand(exec).status();
  }
  exec.push_back(
      "add table inet blackhole; "
      "add chain inet blackhole in { type filter hook input priority 0; policy drop; }; "
      "add chain inet blackhole out { type filter hook output priority 0; policy drop; }");
  return RunCommand(exec).status();
}

absl::Status VirtualNetwork::SetLinkUp(const std::string& host, bool up) {
  return RunCommand({IpPath(), "-n", NamespaceName(host), "link", "set",
                     InterfaceName(host), up ? "up" : "down"})
      .status();
}

}  // namespace testing
}  // namespace reducer
