// A VirtualNetwork (tests/netns_harness.h) as a program, for benchmarks
// that run their processes on separate hosts: it builds the network, prints
// one JSON line describing it on stdout, and removes everything it made when
// it gets SIGTERM, SIGINT or SIGHUP or when its stdin reaches end of file
// (so a driver that dies, closing the pipe, leaves nothing behind). A
// network of a process that was SIGKILLed is swept by the next Create.
//
//   bazel-bin/bench/virtual_network --hosts=s0,w0,w1 --rate=200mbit
//   {"prefix":"rd123-","bridge_namespace":"rd123-bridge","rate":"200mbit",
//    "hosts":[{"name":"s0","namespace":"rd123-s0","interface":"rd123-s0",
//              "address":"10.77.0.2"},...]}
//
// Exit status: 0 after a clean removal; 2 with a message on stderr when the
// network cannot be built (bad flags or no privileges: nothing is left
// behind); 3 when the removal failed. Nothing is printed on stdout unless
// the network was built. The `ip`/`tc` commands' logs go to $TEST_TMPDIR
// when set, else to a /tmp/reducer_test.* directory removed at exit.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <memory>
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
#include "tests/process_harness.h"

ABSL_FLAG(std::string, hosts, "",
          "comma-separated host names (a lower-case letter, then up to three "
          "letters or digits)");
ABSL_FLAG(std::string, rate, "",
          "tc tbf rate of every host's link, both ways (e.g. 200mbit); empty: "
          "no cap");
ABSL_FLAG(std::string, burst, reducer::testing::VirtualNetwork::Options().burst,
          "tc tbf burst; below about 70 KB tbf cuts every 64 KiB GSO packet "
          "into segments in software, a CPU cost per byte no NIC has");
ABSL_FLAG(std::string, latency,
          reducer::testing::VirtualNetwork::Options().latency,
          "tc tbf latency");

namespace {

using reducer::testing::VirtualNetwork;

// Written by the signal handler, read by the wait loop.
int stop_pipe[2] = {-1, -1};

void OnSignal(int) {
  const char byte = 1;
  ssize_t ignored = write(stop_pipe[1], &byte, 1);
  (void)ignored;
}

void InstallHandlers() {
  struct sigaction action = {};
  action.sa_handler = OnSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  for (int sig : {SIGTERM, SIGINT, SIGHUP}) sigaction(sig, &action, nullptr);
  signal(SIGPIPE, SIG_IGN);
}

// Returns when stdin reaches end of file (or fails) or a signal arrives.
void WaitForStop() {
  pollfd fds[2] = {{STDIN_FILENO, POLLIN, 0}, {stop_pipe[0], POLLIN, 0}};
  char buffer[4096];
  while (true) {
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[1].revents != 0) return;
    if (fds[0].revents != 0) {
      const ssize_t n = read(STDIN_FILENO, buffer, sizeof(buffer));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return;  // end of file, or stdin unusable
    }
  }
}

std::string HostJson(const VirtualNetwork& net, const std::string& host) {
  return absl::StrCat("{\"name\":\"", host, "\",\"namespace\":\"",
                      net.NamespaceName(host), "\",\"interface\":\"",
                      net.InterfaceName(host), "\",\"address\":\"",
                      net.Address(host), "\"}");
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const bool own_temp_dir = std::getenv("TEST_TMPDIR") == nullptr;
  const std::vector<std::string> hosts =
      absl::StrSplit(absl::GetFlag(FLAGS_hosts), ',', absl::SkipEmpty());
  if (pipe2(stop_pipe, O_CLOEXEC) != 0) {
    std::perror("virtual_network: pipe");
    return 2;
  }
  // Before Create: a signal during the build removes the network as soon
  // as it is built.
  InstallHandlers();

  VirtualNetwork::Options options;
  options.hosts = hosts;
  options.rate = absl::GetFlag(FLAGS_rate);
  options.burst = absl::GetFlag(FLAGS_burst);
  options.latency = absl::GetFlag(FLAGS_latency);
  absl::StatusOr<std::unique_ptr<VirtualNetwork>> net =
      VirtualNetwork::Create(options);
  if (!net.ok()) {
    std::fprintf(stderr, "virtual_network: %s\n", net.status().ToString().c_str());
    return 2;
  }
  std::vector<std::string> host_json;
  for (const std::string& host : hosts) host_json.push_back(HostJson(**net, host));
  std::printf(
      "{\"prefix\":\"%s\",\"bridge_namespace\":\"%s\",\"rate\":\"%s\","
      "\"hosts\":[%s]}\n",
      (*net)->prefix().c_str(), (*net)->BridgeNamespaceName().c_str(),
      options.rate.c_str(), absl::StrJoin(host_json, ",").c_str());
  std::fflush(stdout);

  WaitForStop();
  // The destructor reports a failed removal on stderr; check what is left.
  const std::string prefix = (*net)->prefix();
  net->reset();
  int status = 0;
  absl::StatusOr<std::string> left =
      VirtualNetwork::RunCommand({VirtualNetwork::IpPath(), "netns", "list"});
  if (!left.ok() || left->find(prefix) != std::string::npos) {
    std::fprintf(stderr, "virtual_network: namespaces %s* remain\n",
                 prefix.c_str());
    status = 3;
  }
  if (own_temp_dir) rmdir(reducer::testing::TestTempDir().c_str());
  return status;
}
