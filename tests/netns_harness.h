// VirtualNetwork: a small network of separate hosts on one machine, for
// tests that need real links between processes (a link that goes down, a
// capped rate). Each host is a network namespace of its own with one veth
// link; the other ends of the links are joined by a bridge that lives in one
// more namespace of the network's own. Addresses come from 10.77.0.0/24 and
// exist only inside those namespaces: the machine's root namespace, its
// interfaces and its routes are never touched, and nothing is routed from
// the namespaces to anywhere else (they have no other interface and no
// default route).
//
//   if (absl::Status why = VirtualNetwork::Available(); !why.ok())
//     GTEST_SKIP() << why;
//   VirtualNetwork::Options options;
//   options.hosts = {"s0", "w0", "w1"};
//   options.rate = "200mbit";            // every host's link, both ways
//   absl::StatusOr<std::unique_ptr<VirtualNetwork>> net =
//       VirtualNetwork::Create(options);
//   ReducerdPlacement placement = (*net)->Placement("s0");
//   ... ReducerdProcess::StartPlaced(placement) ...
//   WorkerSpec spec;                     // tests/fault_test_base.h
//   spec.command_prefix = (*net)->CommandPrefix("w0");
//   (*net)->SetLinkUp("w1", false);      // cut w1 off
//
// Names: every namespace and interface starts with "rd<pid>-" (the pid of
// the test process), so that networks of concurrent tests never collide,
// and Create first removes the namespaces of test processes that died
// without cleaning up (a SIGKILL, a watchdog's abort). The destructor
// removes everything the network made.
//
// Processes run in a host's namespace through `ip netns exec` (a command
// prefix for ChildProcess / ReducerdProcess); code of the test itself runs
// there on a thread of its own (RunInHost: setns(2) changes the network
// namespace of the calling thread only).
//
// Thread safety: const methods may be called from any thread; Create,
// SetLinkUp and the destructor from one thread.
#ifndef REDUCER_TESTS_NETNS_HARNESS_H_
#define REDUCER_TESTS_NETNS_HARNESS_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tests/process_harness.h"

namespace reducer {
namespace testing {

class VirtualNetwork {
 public:
  struct Options {
    // Host names: a lower-case letter, then up to three letters or digits
    // ("w0", "s1"); not "br". Host i gets the address 10.77.0.(i + 2).
    std::vector<std::string> hosts;
    // tc's tbf parameters for every host's link, applied in both directions
    // (the host's egress and the bridge port's egress). Empty rate: no cap.
    std::string rate;                // e.g. "200mbit"
    // The burst must hold a whole GSO packet: 64 KiB of payload counts its
    // headers once per segment, more than 64 KiB, and tbf cuts a packet
    // larger than its burst into segments in software, a CPU cost per
    // byte that a NIC's segmentation offload does not have.
    std::string burst = "128kb";
    std::string latency = "100ms";   // queueing bound before tbf drops
  };

  // OK when this process can build a network: root with CAP_SYS_ADMIN and
  // CAP_NET_ADMIN, and iproute2's `ip` and `tc` installed. Otherwise
  // FAILED_PRECONDITION saying what is missing (tests skip with it).
  static absl::Status Available();

  // Builds the network. INVALID_ARGUMENT for a bad host name or list;
  // INTERNAL naming the `ip`/`tc` command that failed (and its output),
  // after removing what was already made.
  static absl::StatusOr<std::unique_ptr<VirtualNetwork>> Create(
      const Options& options);

  // Deletes every namespace of the network (its interfaces go with them).
  ~VirtualNetwork();
  VirtualNetwork(const VirtualNetwork&) = delete;
  VirtualNetwork& operator=(const VirtualNetwork&) = delete;

  // The prefix of every name this network made, "rd<pid>-".
  const std::string& prefix() const { return prefix_; }
  // The host's namespace name ("rd<pid>-w0"), its interface's name (the
  // same string, inside that namespace) and its IPv4 address ("10.77.0.2").
  // `host` must be one of Options::hosts (checked: an unknown host aborts).
  std::string NamespaceName(const std::string& host) const;
  std::string InterfaceName(const std::string& host) const;
  std::string Address(const std::string& host) const;
  // The namespace that holds the bridge ("rd<pid>-bridge").
  std::string BridgeNamespaceName() const;

  // {ip, "netns", "exec", NamespaceName(host)}: put before an argv to run
  // the program in the host's namespace.
  std::vector<std::string> CommandPrefix(const std::string& host) const;
  // Where a reducerd on `host` runs and listens; its readiness probe
  // connects from inside the host's namespace.
  ReducerdPlacement Placement(const std::string& host) const;

  // Runs `fn` on a new thread whose network namespace is the host's, and
  // waits for it. Sockets `fn` creates belong to that namespace for good.
  // INTERNAL if the namespace cannot be entered (then `fn` does not run).
  absl::Status RunInHost(const std::string& host,
                         const std::function<void()>& fn) const;

  // Sets the host's interface up or down (`ip link set ... down` inside the
  // host's namespace): down cuts the host off without closing anything.
  absl::Status SetLinkUp(const std::string& host, bool up);

  // Replaces the cap on what `host` sends with tbf at `rate` (the burst
  // and latency of Options): a link slowed to a crawl, and back. The
  // network must have been made with a rate.
  absl::Status SetEgressRate(const std::string& host, const std::string& rate);

  // Drops (`on`) or passes again every packet into and out of `host`, with
  // an nftables table inside its namespace: a blackhole, which unlike a
  // link taken down the host's own stack does not notice. FAILED_PRECONDITION
  // when nftables' `nft` is not installed.
  absl::Status SetBlackhole(const std::string& host, bool on);

  // Removes the namespaces whose names start with "rd<pid>-" for a pid that
  // no longer runs. Returns how many it removed. Called by Create.
  static int SweepStale();

  // Runs `argv` (argv[0] a path) to completion, at most 10 s; INTERNAL with
  // the command and its output unless it exits 0. For the test's own checks
  // of the machine (`ip netns list`, `ip link`).
  static absl::StatusOr<std::string> RunCommand(
      const std::vector<std::string>& argv);
  // The paths of `ip` and `tc`; empty when not installed.
  static std::string IpPath();
  static std::string TcPath();
  static std::string NftPath();

 private:
  VirtualNetwork(std::string prefix, std::vector<std::string> hosts);
  // Each step of Create; the first failure is returned.
  absl::Status Build(const Options& options);
  int HostIndex(const std::string& host) const;
  // Deletes the namespaces made so far; the first error, if any.
  absl::Status Destroy();

  const std::string prefix_;
  const std::vector<std::string> hosts_;
  std::string burst_;    // Options::burst and latency, for SetEgressRate
  std::string latency_;
  std::vector<std::string> made_namespaces_;  // in creation order
};

}  // namespace testing
}  // namespace reducer

#endif  // REDUCER_TESTS_NETNS_HARNESS_H_
