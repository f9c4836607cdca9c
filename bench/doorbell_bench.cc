// Round trips between two processes on one host, signalled three ways: a
// Doorbell that watches its word (yielding) before its futex wait, as
// shipped; a Doorbell that goes straight to the futex (spin zero); and a one-byte message each way over a
// SOCK_SEQPACKET socketpair (the floor of any message-based signal). Each
// round trip is one ring (or message) there and one back; the child process
// answers every ping.
//
// Rounds interleave the three ways so that they see the same machine state.
// Prints how long the watch lasts (Doorbell::kSpin), then, per way, the median
// and p90 round trip in microseconds over all rounds, and each way's median
// as a ratio to the shipped doorbell's.
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/time/time.h"
#include "core/shm/doorbell.h"
#include "core/shm/fd_passing.h"
#include "core/shm/shared_segment.h"

ABSL_FLAG(int, round_trips, 5000, "timed round trips per round and way");
ABSL_FLAG(int, rounds, 3, "rounds (each runs every way once)");

namespace reducer {
namespace {

enum class Way { kSpinThenFutex, kFutexOnly, kSocket };
constexpr const char* kWayNames[] = {
    "doorbell (watch, then futex)", "doorbell (futex only)", "seqpacket socket"};
constexpr int kWarmup = 200;

struct Bells {
  std::atomic<uint32_t> ping;
  char pad[60];
  std::atomic<uint32_t> pong;
};

// The child: answers `count` pings the chosen way, then exits. `seen` is the
// ping counter before the first ping, read before the fork (read after it,
// the first ping could already be in it).
[[noreturn]] void Answer(Way way, Bells* bells, uint32_t seen, int sock,
                         int count) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  const absl::Duration spin =
      way == Way::kFutexOnly ? absl::ZeroDuration() : Doorbell::kSpin;
  Doorbell ping(&bells->ping, spin), pong(&bells->pong, spin);
  for (int i = 0; i < count; ++i) {
    if (way == Way::kSocket) {
      if (!ReceiveWithFds(sock, 1, 0, absl::InfiniteFuture()).ok()) _exit(2);
      if (!SendWithFds(sock, "o", {}).ok()) _exit(3);
    } else {
      auto now = ping.WaitChange(seen, absl::InfiniteFuture());
      if (!now.ok()) _exit(2);
      seen = *now;
      pong.Ring();
    }
  }
  _exit(0);
}

// Round trips of one round of `way`, in microseconds.
std::vector<double> RunRound(Way way, Bells* bells, int round_trips) {
  int pair[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0) {
    std::perror("socketpair");
    std::exit(1);
  }
  int total = kWarmup + round_trips;
  uint32_t ping_before = bells->ping.load();
  pid_t child = fork();
  if (child == 0) {
    close(pair[0]);
    Answer(way, bells, ping_before, pair[1], total);
  }
  close(pair[1]);
  const absl::Duration spin =
      way == Way::kFutexOnly ? absl::ZeroDuration() : Doorbell::kSpin;
  Doorbell ping(&bells->ping, spin), pong(&bells->pong, spin);
  std::vector<double> us;
  us.reserve(round_trips);
  for (int i = 0; i < total; ++i) {
    auto start = std::chrono::steady_clock::now();
    if (way == Way::kSocket) {
      if (!SendWithFds(pair[0], "i", {}).ok() ||
          !ReceiveWithFds(pair[0], 1, 0, absl::InfiniteFuture()).ok()) {
        std::fprintf(stderr, "socket round trip failed\n");
        std::exit(1);
      }
    } else {
      uint32_t seen = pong.value();
      ping.Ring();
      if (!pong.WaitChange(seen, absl::InfiniteFuture()).ok()) std::exit(1);
    }
    auto end = std::chrono::steady_clock::now();
    if (i >= kWarmup) {
      us.push_back(
          std::chrono::duration<double, std::micro>(end - start).count());
    }
  }
  int status = 0;
  waitpid(child, &status, 0);
  close(pair[0]);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::fprintf(stderr, "the answering process failed (%d)\n", status);
    std::exit(1);
  }
  return us;
}

double Quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(q * (v.size() - 1))];
}

int Main() {
  auto segment = SharedSegment::Create("doorbell-bench", 4096);
  if (!segment.ok()) {
    std::fprintf(stderr, "%s\n", segment.status().ToString().c_str());
    return 1;
  }
  auto* bells = new (segment->data()) Bells();
  std::vector<double> all[3];
  for (int round = 0; round < absl::GetFlag(FLAGS_rounds); ++round) {
    for (Way way : {Way::kSpinThenFutex, Way::kFutexOnly, Way::kSocket}) {
      std::vector<double> us =
          RunRound(way, bells, absl::GetFlag(FLAGS_round_trips));
      auto& into = all[static_cast<int>(way)];
      into.insert(into.end(), us.begin(), us.end());
    }
  }
  std::printf("watch before the futex wait: %s\n",
              absl::FormatDuration(Doorbell::kSpin).c_str());
  double shipped = Quantile(all[0], 0.5);
  std::printf("%-30s %10s %10s %8s\n", "round trip", "median us", "p90 us",
              "ratio");
  for (int w = 0; w < 3; ++w) {
    double median = Quantile(all[w], 0.5);
    std::printf("%-30s %10.2f %10.2f %8.2f\n", kWayNames[w], median,
                Quantile(all[w], 0.9), median / shipped);
  }
  return 0;
}

}  // namespace
}  // namespace reducer

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return reducer::Main();
}
