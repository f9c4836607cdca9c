#!/usr/bin/env python3
"""Small all-reduces across hosts with link delay: how many round trips?

Builds two networks of separate hosts on this machine, each with one shard
host s0 and worker hosts w0..w<W-1>: one whose every egress adds --delay
(each host's end of its link and the bridge port facing it, so one way
between two hosts costs 2 x delay and a round trip, RTT, 4 x delay) and
one without delay. The delay is tc netem on bazel-bin/bench/virtual_network's
veths where the kernel has sch_netem, else bazel-bin/bench/delay_network's
switch, TUN links that hold each packet 2 x delay (--links). Each network
has its own reducerd on s0 (plaintext, --allow_unauthenticated). For each
W of --worlds it runs W bench/reducer_allreduce_worker ranks, rank r on host
w<r>, all-reducing --size bytes of float32 (SUM) --iters times after
--warmup, and (with --systems containing gloo) Gloo's W ranks the same
way, on one network then the other, --rounds times (latencies pooled).

It prints per system and W: the median and p90 with the delay, the median
in RTTs, the median without it, and what the delay added (the
difference), in RTTs as the packets took them (the switch's own lateness
included). One all-reduce through reducerd is one round trip from each
rank to s0, so the delay should add 1 RTT at every W; Gloo's ring adds
2(W-1) one-way trips, W-1 RTTs. The difference separates what the network
costs from the CPU time both networks share; on a machine with fewer
cores than processes, the two overlap and the difference is rough.

--capture records s0's packets during each Reducer run (tcpdump, the last
round's, in OUT_DIR/logs/delay-D/reducer-wW.pcap) and prints over how long
the W results of one all-reduce leave reducerd.

Every process but the driver runs inside a host's namespace; addresses
exist only there. Both networks are removed when the driver exits,
however it exits (their programs remove them when their stdin closes).

Usage, as root, with the project's Python (Gloo's ranks run under it):
  "$(tools/pinned_venv.sh python/requirements-dev.txt)/bin/python" \\
      bench/latency_probe.py [--worlds=2,4,8] [--delay=50us] [--rounds=2]
                             [--iters=300] [--systems=reducer,gloo] [--capture]
                             [--links=auto|netem|tun] [--out_dir=bench/out-latency]
Needs: iproute2, tcpdump for --capture; bazel build --jobs=2 //server:reducerd
//bench:reducer_allreduce_worker //bench:virtual_network //bench:delay_network.
"""

import argparse
import importlib.util
import itertools
import json
import re
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run_bench as rb  # noqa: E402  (processes, daemon, records, stats)
import shard_bench as sb  # noqa: E402  (the virtual network)

REDUCERD_PORT = 50051
GLOO_PORTS = itertools.count(29600)  # a fresh one per launch: no TIME_WAIT
TC = "tc"


def delay_us(text):
    """netem's delay ("50us", "1ms", "0.2ms") in microseconds."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(us|ms)", text)
    if not m:
        raise ValueError(f"delay {text!r} is not NUMBER(us|ms)")
    return float(m.group(1)) * (1000 if m.group(2) == "ms" else 1)


def add_delay(net, delay):
    """netem delay on every egress of the network: each host's end of its
    link and the bridge port facing it. Nothing for a zero delay."""
    if delay_us(delay) == 0:
        return
    bridge_ns = net.info["bridge_namespace"]
    for host in net.hosts.values():
        for ns, dev in ((host["namespace"], host["interface"]),
                        (bridge_ns, host["interface"] + "p")):
            subprocess.run([TC, "-n", ns, "qdisc", "add", "dev", dev, "root",
                            "netem", "delay", delay, "limit", "10000"],
                           check=True, timeout=30, capture_output=True)


class DelayNetwork(sb.Network):
    """bazel-bin/bench/delay_network for the life of this object (the same
    JSON line and removal as shard_bench.Network's virtual_network)."""

    def __init__(self, binary, hosts, one_way_us, log_path, timeout_s=60.0):
        self.log_path = Path(log_path)
        self._err = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [str(binary), f"--hosts={','.join(hosts)}",
             f"--one_way_us={one_way_us:g}", "--report_lateness"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._err,
            cwd=rb.REPO_ROOT, start_new_session=True)
        line = self._first_line(timeout_s)
        if not line:
            self.proc.wait(timeout=10)
            self._err.close()
            raise rb.RunError(f"delay_network exited {self.proc.returncode}: "
                              f"{rb.tail(self.log_path)}")
        self.info = json.loads(line)
        self.hosts = {h["name"]: h for h in self.info["hosts"]}


def make_network(args, hosts, delay, log_dir):
    """The hosts' network with the delay: virtual_network's veths with netem
    on every egress (--links=netem), or delay_network's switch holding each
    packet for 2 x --delay (--links=tun); --links=auto tries netem first."""
    if args.links in ("netem", "auto"):
        net = sb.Network(args.virtual_network, hosts, "", log_dir / "network.log")
        try:
            add_delay(net, delay)
            args.links = "netem"
            return net
        except subprocess.CalledProcessError as e:
            net.close()
            if args.links == "netem":
                raise rb.RunError(f"tc netem failed: {e.stderr.decode().strip()}")
            print(f"tc netem unavailable ({e.stderr.decode().strip()}): "
                  "using delay_network's switch", file=sys.stderr)
    args.links = "tun"
    return DelayNetwork(args.delay_network, hosts, 2 * delay_us(delay),
                        log_dir / "network.log")


def result_spread_us(pcap, world, server):
    """From s0's capture of a Reducer run: what result_spread_from_tcpdump
    makes of it; None without tcpdump."""
    try:
        text = subprocess.run(["tcpdump", "-r", str(pcap), "-nn", "-tt"],
                              capture_output=True, text=True, timeout=120).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    return result_spread_from_tcpdump(text, world, server)


def result_spread_from_tcpdump(text, world, server):
    """From `tcpdump -nn -tt` lines of s0's packets (reducerd at `server`,
    "ADDR.PORT"): per all-reduce, how long its `world` results took to leave
    reducerd (first to last rank's), as (median, p90) in us; None without
    packets of every rank. A rank's call is its segment to reducerd of 60
    bytes or more (shorter ones are control frames: HTTP/2 WINDOW_UPDATE,
    PING, SETTINGS); its result, the first segment back of 33 bytes or more
    after it (one DATA frame of a 4 B tensor: 9 + 24)."""
    pattern = re.compile(r"(\d+\.\d+) IP (\S+) > (\S+): .* length (\d+)")
    waiting, results = set(), {}  # ranks with a call unanswered; their results
    for line in text.splitlines():
        m = pattern.match(line)
        if not m:
            continue
        t, src, dst, length = float(m.group(1)), m.group(2), m.group(3), int(m.group(4))
        # One rank per host: its address names it, whichever connection.
        if dst == server and length >= 60:
            waiting.add(src.rsplit(".", 1)[0])
        elif src == server and length >= 33 and dst.rsplit(".", 1)[0] in waiting:
            rank = dst.rsplit(".", 1)[0]
            waiting.discard(rank)
            results.setdefault(rank, []).append(t)
    if len(results) != world:
        return None
    # Ranks make calls of their own besides the all-reduces (rank 0 before
    # the first): each rank's results are matched to the first rank's at
    # the shift (within 3 calls) that puts them closest in time.
    ref, *others = results.values()
    shifts = [0]
    for other in others:
        def gap(shift, other=other):
            pairs = [abs(other[i + shift] - ref[i]) for i in range(len(ref))
                     if 0 <= i + shift < len(other)]
            return rb.percentile(pairs, 50) if pairs else float("inf")
        shifts.append(min(range(-3, 4), key=gap))
    lists = [ref] + others
    spreads = []
    for i in range(len(ref)):
        ts = [lst[i + sh] for lst, sh in zip(lists, shifts) if 0 <= i + sh < len(lst)]
        if len(ts) == world:
            spreads.append((max(ts) - min(ts)) * 1e6)
    if not spreads:
        return None
    return rb.percentile(spreads, 50), rb.percentile(spreads, 90)


def run_reducer(args, net, daemon, world, run, log_dir):
    cmds = rb.reducer_cmds(args.reducer_worker, daemon.address, world, run)
    cmds = [net.prefix(f"w{r}") + c for r, c in enumerate(cmds)]
    capture = None
    if args.capture:
        pcap = log_dir / f"reducer-w{world}.pcap"
        pcap.unlink(missing_ok=True)  # an earlier round's: not a sign of this one
        capture = subprocess.Popen(
            net.prefix("s0") + ["tcpdump", "-i", net.interface("s0"), "-nn",
                                "-s", "200", "--immediate-mode", "-U", "-Z", "root",
                                "-w", str(pcap)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        # tcpdump writes the file's header once it listens.
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and (
                not pcap.exists() or pcap.stat().st_size < 24):
            time.sleep(0.1)
        time.sleep(1.0)
    try:
        return rb.run_processes(cmds, log_dir / f"reducer-w{world}", args.timeout_s)
    finally:
        if capture is not None:
            capture.terminate()
            capture.wait(timeout=10)


def run_gloo(args, net, world, run, log_dir):
    cmds, port = [], next(GLOO_PORTS)
    for r in range(world):
        host = f"w{r}"
        cmds.append(net.prefix(host) + [
            sb.ENV, f"GLOO_SOCKET_IFNAME={net.interface(host)}", "OMP_NUM_THREADS=1",
            sys.executable, str(rb.BENCH_DIR / "gloo_allreduce.py"),
            f"--world_size={world}", f"--rank={r}", f"--port={port}",
            f"--master_addr={net.address('w0')}",
            f"--timeout_s={args.timeout_s}"] + rb.worker_flags(run))
    return rb.run_processes(cmds, log_dir / f"gloo-w{world}", args.timeout_s)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--worlds", default="2,4,8", help="world sizes W")
    p.add_argument("--delay", default="50us", help="netem delay per egress")
    p.add_argument("--links", choices=("auto", "netem", "tun"), default="auto",
                   help="how the delay is made (see make_network)")
    p.add_argument("--delay_network", default=str(
        rb.REPO_ROOT / "bazel-bin" / "bench" / "delay_network"))
    p.add_argument("--size", type=int, default=4, help="bytes all-reduced")
    p.add_argument("--iters", type=int, default=300)
    p.add_argument("--rounds", type=int, default=2,
                   help="passes over W and systems, interleaving the two networks")
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--systems", default="reducer,gloo")
    p.add_argument("--capture", action="store_true",
                   help="record s0's packets during each Reducer run with tcpdump "
                        "into OUT_DIR/logs/delay-D/reducer-wW.pcap (the packet "
                        "timeline; the last round's)")
    p.add_argument("--reducerd_wrapper", default="",
                   help="a command reducerd runs under, space-separated (e.g. "
                        "'chrt -f 5': real-time priority, so that it has a core "
                        "when it wants one, as on a host of its own, though the "
                        "ranks share this machine's cores with it)")
    p.add_argument("--reducerd_flags", default="", help="extra, space-separated")
    p.add_argument("--timeout_s", type=float, default=300)
    p.add_argument("--out_dir", type=Path, default=rb.BENCH_DIR / "out-latency")
    rb.add_built_flags(p, ("reducerd", "reducer_worker", "virtual_network"))
    args = p.parse_args(argv)
    args.worlds = [int(w) for w in args.worlds.split(",") if w]
    args.systems = [s for s in args.systems.split(",") if s]
    if set(args.systems) - {"reducer", "gloo"}:
        p.error(f"unknown systems in {args.systems}")
    if "gloo" in args.systems and importlib.util.find_spec("torch") is None:
        print(f"warning: {sys.executable} has no torch: no Gloo", file=sys.stderr)
        args.systems.remove("gloo")
    delay_us(args.delay)
    return args


def switch_lateness_us(line):
    """The median lateness delay_network reported on exit, in us; None if
    it reported none (netem links)."""
    m = re.search(r"late by median ([0-9.]+) us", line or "")
    return float(m.group(1)) if m else None


class Cluster:
    """One network (delay `delay`), its reducerd on s0, and the latencies
    measured on it, pooled per (system, W)."""

    def __init__(self, args, hosts, delay, log_dir):
        self.delay = delay
        self.log_dir = log_dir / f"delay-{delay}"
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.net = make_network(args, hosts, delay, self.log_dir)
        self.daemon = None
        self.latencies = {}
        if "reducer" in args.systems:
            self.daemon = rb.ReducerDaemon(
                args.reducerd, self.log_dir / "reducerd.log",
                extra_flags=["--allow_unauthenticated", *args.reducerd_flags.split()],
                address=f"{self.net.address('s0')}:{REDUCERD_PORT}",
                command_prefix=self.net.prefix("s0") + args.reducerd_wrapper.split())

    def measure(self, args, system, world, run):
        print(f"running {system} W={world} delay {self.delay}", file=sys.stderr,
              flush=True)
        out = (run_reducer(args, self.net, self.daemon, world, run, self.log_dir)
               if system == "reducer"
               else run_gloo(args, self.net, world, run, self.log_dir))
        rec = rb.parse_records(out, system, world, run)[0]
        self.latencies.setdefault((system, world), []).extend(rec["latencies_us"])

    def close(self):
        """Stops reducerd and removes the network; returns the switch's
        lateness line (tun links), if any."""
        if self.daemon is not None:
            self.daemon.stop()
        if self.net.close() != 0:
            print(f"error: the network was not removed: {rb.tail(self.net.log_path)}",
                  file=sys.stderr)
        return rb.tail(self.net.log_path).strip()


def main(argv):
    args = parse_args(argv)
    for binary in (args.reducerd, args.reducer_worker):
        if not Path(binary).exists():
            raise SystemExit(f"build {binary} first")
    rtt_us = 4 * delay_us(args.delay)
    hosts = ["s0"] + [f"w{r}" for r in range(max(args.worlds))]
    log_dir = args.out_dir.resolve() / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    run = {"pattern": "allreduce", "sizes": [args.size], "iters": args.iters,
           "warmup": args.warmup}
    clusters, notes = [], []
    try:
        # The delayed network first: it settles --links for the other.
        for delay in (args.delay, "0us"):
            clusters.append(Cluster(args, hosts, delay, log_dir))
        for _ in range(args.rounds):
            for world in args.worlds:
                for system in args.systems:
                    for cluster in clusters:
                        cluster.measure(args, system, world, run)
    finally:
        for cluster in clusters:
            cluster.notes = cluster.close()
            if cluster.notes:
                notes.append(f"delay {cluster.delay}: {cluster.notes}")
    delayed, direct = clusters
    spreads = {}
    if args.capture:
        for c in clusters:
            server = f"{c.net.address('s0')}.{REDUCERD_PORT}"
            for world in args.worlds:
                spreads[(c.delay, world)] = result_spread_us(
                    c.log_dir / f"reducer-w{world}.pcap", world, server)
    # The switch's wake-ups make each one-way trip late (tun links): the
    # round trip packets took is the nominal one plus twice the extra
    # lateness of the delayed network over the direct one.
    late = [switch_lateness_us(c.notes) for c in clusters]
    rtt_eff_us = rtt_us + (2 * (late[0] - late[1]) if None not in late else 0)
    print(f"\n{args.size} B float32 SUM all-reduce, one rank per worker host, "
          f"reducerd on s0; delay {args.delay} on every egress ({args.links} links): "
          f"RTT {rtt_us:.0f} us, {rtt_eff_us:.0f} us as the packets took it; "
          f"{args.rounds} x {args.iters} calls per row")
    print("median: with the delay; no delay: the same network without it; "
          "added: the difference, what the delay costs, in RTTs as taken")
    print(f"{'system':8} {'W':>3} {'median us':>10} {'p90 us':>8} {'RTTs':>6} "
          f"{'no delay us':>12} {'added us':>9} {'added RTTs':>11}")
    rows = []
    for (system, world), lat in delayed.latencies.items():
        base = direct.latencies[(system, world)]
        r = {"system": system, "world_size": world, "size_bytes": args.size,
             "median_us": rb.percentile(lat, 50), "p90_us": rb.percentile(lat, 90),
             "no_delay_median_us": rb.percentile(base, 50),
             "latencies_us": lat, "no_delay_latencies_us": base}
        r["rtts"] = r["median_us"] / rtt_us
        r["added_us"] = r["median_us"] - r["no_delay_median_us"]
        r["added_rtts"] = r["added_us"] / rtt_eff_us
        rows.append(r)
        print(f"{system:8} {world:>3} {r['median_us']:>10.0f} {r['p90_us']:>8.0f} "
              f"{r['rtts']:>6.2f} {r['no_delay_median_us']:>12.0f} "
              f"{r['added_us']:>9.0f} {r['added_rtts']:>11.2f}")
    for (delay, world), spread in sorted(spreads.items()):
        if spread:
            r_note = (f"delay {delay}, W={world}: the W results of one all-reduce "
                      f"leave reducerd over {spread[0]:.0f} us (median; p90 "
                      f"{spread[1]:.0f} us)")
            notes.append(r_note)
            print(r_note)
    for note in notes:
        if "delay_network" in note:
            print(note)
    meta = rb.host_meta(argv=argv, delay=args.delay, links=args.links,
                        rtt_us=rtt_us, rtt_taken_us=rtt_eff_us, notes=notes)
    (args.out_dir / "results.json").write_text(
        json.dumps({"meta": meta, "results": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
