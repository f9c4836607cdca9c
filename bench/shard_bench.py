#!/usr/bin/env python3
"""Sharded all-reduce across hosts: Reducer on S shards against Gloo and MPI.

One invocation builds a network of separate hosts on this machine
(bazel-bin/bench/virtual_network: network namespaces on a bridge, every
host's link capped both ways with tc tbf at --rate), with W = 4 worker hosts
w0..w3 and shard hosts s0..s3, one reducerd on each shard host. For every
size (float32 SUM, 4 KiB to 64 MiB in steps of 4x) it runs, one after the
other so that they see the same machine state:
  - Gloo (bench/gloo_allreduce.py, one rank per worker host, its sockets on
    the host's interface),
  - Open MPI over TCP (bench/mpi_allreduce.c: mpirun in w0's namespace, the
    other ranks' daemons started in their hosts' namespaces by an rsh agent
    that maps a host's address to `ip netns exec NS`),
  - Reducer with S = 1, 2, 4 shards (bench/reducer_allreduce_worker with
    --target naming the first S shard hosts' reducerds).
It prints, per size and system, the median time, the bus bandwidth
2(W-1)/W * N / t, the ratio to Gloo, and the bandwidth model's time beside
it (see model_us), with the CPU its own processes used (in cores) and how
busy the whole machine was meanwhile; writes results.json, results.csv,
results.md (the table) and shard_bench.png into --out_dir; and checks the
two targets (S = 4 at 64 MiB at most 0.75x Gloo's time; S = 1 at 64 MiB
within 20 % of the model).

--smoke: sizes 4 KiB and 2 MiB (cut over both shards), S = 2,
one round of 2 timed calls; exits 0 with a SKIP line when namespaces cannot
be made here, and fails when the interpreter has no torch.

Every process but the driver runs inside a host's namespace; nothing is sent
to an address outside them. Every subprocess has a hard timeout, and the
network is removed when the driver exits, however it exits (the helper
removes it when its stdin closes).

Usage, with the project's Python (Gloo's ranks run under the same one):
  "$(tools/pinned_venv.sh python/requirements-dev.txt)/bin/python" \
      bench/shard_bench.py [--smoke] [--shards=1,2,4] [--rate=200mbit]
                           [--systems=reducer,gloo,mpi] [--out_dir=bench/out-shard]
Needs: root (network namespaces), iproute2, torch in that Python, openmpi-bin,
libopenmpi-dev (the plot only where that Python has matplotlib); bazel build
//server:reducerd //bench:reducer_allreduce_worker //bench:virtual_network.
"""

import argparse
import importlib.util
import json
import os
import re
import resource
import selectors
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run_bench as rb  # noqa: E402  (the loopback bench's processes and stats)

BENCH_DIR = rb.BENCH_DIR
REPO_ROOT = rb.REPO_ROOT
KiB, MiB = rb.KiB, rb.MiB

WORLD = 4
MAX_SHARDS = 4
WORKERS = [f"w{r}" for r in range(WORLD)]
SHARD_HOSTS = [f"s{i}" for i in range(MAX_SHARDS)]
FULL_SIZES = [4 * KiB * 4**i for i in range(8)]       # 4 KiB .. 64 MiB
SMOKE_SIZES = [4 * KiB, 2 * MiB]
REDUCERD_PORT = 50051
GLOO_PORT = 29500
# client/shards/partition_plan.h's kMinPartitionBytes: no partition is cut smaller,
# so a collective of N bytes uses min(S, N / 64 KiB) shards (at least one).
MIN_PARTITION_BYTES = 64 * KiB
SUBNET = "10.77.0.0/24"  # tests/netns_harness.h's addresses
IP = shutil.which("ip") or "/usr/sbin/ip"
ENV = shutil.which("env") or "/usr/bin/env"

# Per size, the timed calls of every system: about ITER_BUDGET_S of the
# slowest system's modelled time, within [MIN_ITERS, MAX_ITERS].
ITER_BUDGET_S = 20.0
MIN_ITERS, MAX_ITERS = 3, 50

# Open MPI across hosts: ob1 + TCP only on the namespaces' subnet, no
# binding (the other systems are unbound too), one slot per host.
MPIRUN_FLAGS = ["--allow-run-as-root", "--bind-to", "none",
                "--mca", "pml", "ob1", "--mca", "btl", "tcp,self",
                "--mca", "btl_tcp_if_include", SUBNET,
                "--mca", "oob_tcp_if_include", SUBNET]


class Skip(Exception):
    """The benchmark cannot run on this machine (the smoke test skips)."""


# --------------------------------------------------------------------------
# The bandwidth model.

def rate_bytes_per_s(rate):
    """tc's rate ("200mbit", "1gbit", "500kbit"; SI prefixes) in bytes/s."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([kmg]?)bit", rate.lower())
    if not m:
        raise ValueError(f"rate {rate!r} is not NUMBER[k|m|g]bit")
    return float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m.group(2)] / 8


def used_shards(size, shards):
    """How many shards the partition plan cuts a size-byte all-reduce over."""
    return max(1, min(shards, size // MIN_PARTITION_BYTES))


def model_us(system, size, shards, bps):
    """The time the link caps allow, in us. Reducer: every worker sends and
    receives N bytes through its own link, every used shard W*N/S through
    its own, so t = max(N, W*N/S) / B (each direction is capped separately
    and carries the same). Gloo and MPI, a ring: each rank sends and
    receives 2(W-1)/W * N, t = 2(W-1)/W * N / B. Protocol headers, latency
    and CPU are not in it."""
    if system == "reducer":
        s = used_shards(size, shards)
        return max(size, WORLD * size / s) / bps * 1e6
    return 2 * (WORLD - 1) / WORLD * size / bps * 1e6


def bus_bandwidth(size, us):
    """Bus bandwidth in bytes/s: 2(W-1)/W * N / t."""
    return 2 * (WORLD - 1) / WORLD * size / (us / 1e6)


# --------------------------------------------------------------------------
# The network and its hosts.

class Network:
    """bazel-bin/bench/virtual_network run for the life of this object; its
    stdin is a pipe, so the network goes when this process does."""

    def __init__(self, binary, hosts, rate, log_path, timeout_s=60.0):
        self.log_path = Path(log_path)
        self._err = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [str(binary), f"--hosts={','.join(hosts)}", f"--rate={rate}"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._err,
            cwd=REPO_ROOT, start_new_session=True)
        line = self._first_line(timeout_s)
        if not line:
            self.proc.wait(timeout=10)
            self._err.close()
            why = rb.tail(self.log_path).strip()
            if self.proc.returncode == 2:
                raise Skip(f"cannot build the network: {why}")
            raise rb.RunError(f"virtual_network exited {self.proc.returncode}: {why}")
        self.info = json.loads(line)
        self.hosts = {h["name"]: h for h in self.info["hosts"]}

    def _first_line(self, timeout_s):
        """The JSON line, or "" if the helper exits or stays silent."""
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        if not sel.select(timeout_s):
            rb.kill_group(self.proc)
            return ""
        return self.proc.stdout.readline().decode().strip()

    def address(self, host):
        return self.hosts[host]["address"]

    def interface(self, host):
        return self.hosts[host]["interface"]

    def prefix(self, host):
        """The argv prefix that runs a program in the host's namespace."""
        return [IP, "netns", "exec", self.hosts[host]["namespace"]]

    def close(self):
        """Removes the network (stdin EOF, then SIGTERM if needed); returns
        the helper's exit status."""
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                rb.kill_group(self.proc, grace_s=30)
        self._err.close()
        return self.proc.returncode


class Bench:
    """What the runners share: the network, binaries, reducerds, logs."""

    def __init__(self, args, net, tmp):
        self.args = args
        self.net = net
        self.tmp = Path(tmp)
        self.log_dir = args.out_dir / "logs"
        self.env = dict(os.environ, **rb.MALLOC_ENV)
        self.daemons = {}
        self.mpi_binary = None
        self.mpi_agent = None  # (rsh agent, hostfile)
        self.launches = 0

    def daemon(self, host):
        """The reducerd of a shard host, (re)started when not running: on
        the host's own address, plaintext without tokens, so with
        --allow_unauthenticated."""
        d = self.daemons.get(host)
        if d is None or not d.alive():
            d = rb.ReducerDaemon(
                self.args.reducerd, self.log_dir / f"reducerd-{host}.log",
                extra_flags=["--allow_unauthenticated",
                             *self.args.reducerd_flags.split()],
                address=f"{self.net.address(host)}:{REDUCERD_PORT}",
                command_prefix=self.net.prefix(host))
            self.daemons[host] = d
        return d

    def stop_daemons(self):
        """SIGTERM to every reducerd; returns the hosts whose exit was not 0."""
        bad = [h for h, d in self.daemons.items() if d.stop() != 0]
        self.daemons = {}
        return bad

    def next_label(self):
        self.launches += 1
        return self.launches


def run_reducer(bench, shards, run, timeout_s):
    """W Reducer workers, rank r in host w<r>, --target the first `shards`
    shard hosts' reducerds."""
    target = ",".join(bench.daemon(h).address for h in SHARD_HOSTS[:shards])
    cmds = rb.reducer_cmds(bench.args.reducer_worker, target, WORLD, run)
    cmds = [bench.net.prefix(WORKERS[r]) + c for r, c in enumerate(cmds)]
    log = bench.log_dir / f"reducer-s{shards}-{bench.next_label()}"
    return rb.run_processes(cmds, log, timeout_s, bench.env)


def run_gloo(bench, run, timeout_s):
    """W Gloo ranks, rank r in host w<r> with GLOO_SOCKET_IFNAME its
    interface, rendezvous at w0."""
    port = GLOO_PORT + bench.next_label()  # fresh: no TIME_WAIT in the way
    cmds = []
    for r, host in enumerate(WORKERS):
        cmds.append(bench.net.prefix(host) + [
            ENV, f"GLOO_SOCKET_IFNAME={bench.net.interface(host)}",
            sys.executable, str(BENCH_DIR / "gloo_allreduce.py"),
            f"--world_size={WORLD}", f"--rank={r}", f"--port={port}",
            f"--master_addr={bench.net.address('w0')}",
            f"--timeout_s={timeout_s}"] + rb.worker_flags(run))
    env = dict(bench.env, OMP_NUM_THREADS="1")
    return rb.run_processes(cmds, bench.log_dir / f"gloo-{bench.launches}",
                            timeout_s, env)


def mpi_agent(bench):
    """Writes the rsh agent mpirun starts remote daemons with: called as
    `agent [options] HOST COMMAND`, it runs COMMAND with /bin/sh in the
    namespace of the worker host whose address is HOST."""
    cases = "\n".join(f"  {bench.net.address(h)}) ns={bench.net.hosts[h]['namespace']} ;;"
                      for h in WORKERS)
    path = bench.tmp / "netns_rsh"
    path.write_text(f"""#!/bin/sh
while [ $# -gt 0 ]; do case "$1" in -*) shift ;; *) break ;; esac; done
host=$1; shift
case "$host" in
{cases}
  *) echo "netns_rsh: no host $host" >&2; exit 255 ;;
esac
# Daemons of one machine share a hostname, hence a session directory name:
# one base per host keeps them apart.
mkdir -p "{bench.tmp}/ompi-$ns"
export OMPI_MCA_orte_tmpdir_base="{bench.tmp}/ompi-$ns"
exec {IP} netns exec "$ns" /bin/sh -c "$*"
""")
    path.chmod(0o755)
    hostfile = bench.tmp / "mpi_hosts"
    hostfile.write_text("".join(f"{bench.net.address(h)} slots=1\n" for h in WORKERS))
    return path, hostfile


def run_mpi(bench, run, timeout_s):
    """mpirun in w0's namespace, one rank per worker host."""
    agent, hostfile = bench.mpi_agent
    exports = [a for name in rb.MALLOC_ENV for a in ("-x", name)]
    cmd = (bench.net.prefix("w0") + ["mpirun"] + MPIRUN_FLAGS +
           ["--mca", "plm_rsh_agent", str(agent), "--hostfile", str(hostfile)] +
           exports + ["-np", str(WORLD), str(bench.mpi_binary)] + rb.worker_flags(run))
    env = dict(bench.env, OMPI_ALLOW_RUN_AS_ROOT="1",
               OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    return rb.run_processes([cmd], bench.log_dir / f"mpi-{bench.next_label()}",
                            timeout_s, env)


# --------------------------------------------------------------------------
# Plan and run.

def iterations(size, shards_list, bps, smoke):
    """(iters, warmup) for one size, the same for every system."""
    if smoke:
        return 2, 1
    slowest = max([model_us("reducer", size, s, bps) for s in shards_list] +
                  [model_us("gloo", size, 1, bps)]) / 1e6
    iters = int(min(MAX_ITERS, max(MIN_ITERS, ITER_BUDGET_S / slowest)))
    return iters, max(1, iters // 10)


def cpu_sample():
    """(total, idle) jiffies of all cores from /proc/stat."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
    return sum(fields), fields[3] + fields[4]


def process_cpu_s(pid):
    """User + system CPU seconds of a running process (0 if gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class CpuMeter:
    """CPU used over an interval: by the benchmark's own processes (the
    workers this driver waited for, and the reducerds) and by the whole
    machine (anyone's, other work included)."""

    def __init__(self, bench):
        self.bench = bench
        self.wall0 = time.monotonic()
        self.machine0 = cpu_sample()
        self.own0 = self._own()

    def _own(self):
        ru = resource.getrusage(resource.RUSAGE_CHILDREN)
        return ru.ru_utime + ru.ru_stime + sum(
            process_cpu_s(d.proc.pid) for d in self.bench.daemons.values())

    def read(self):
        """(own cores, machine busy fraction) since construction; own cores
        is CPU seconds per wall second (os.cpu_count() is all of them)."""
        wall = time.monotonic() - self.wall0
        own = (self._own() - self.own0) / max(wall, 1e-9)
        t1, i1 = cpu_sample()
        t0, i0 = self.machine0
        return own, 1.0 - (i1 - i0) / max(1, t1 - t0)


def systems_in_order(args):
    """(system, shards) pairs in run order: the peers, then Reducer per S."""
    out = [(s, 0) for s in ("gloo", "mpi") if s in args.systems]
    if "reducer" in args.systems:
        out += [("reducer", s) for s in args.shards]
    return out


def run_all(bench, systems, rounds):
    """Every size, systems one after the other per size; returns (records,
    failures). Latencies of the same (system, S, size) over rounds are
    pooled."""
    args = bench.args
    bps = rate_bytes_per_s(args.rate)
    pooled, failures = {}, []
    for rnd in range(rounds):
        for size in args.sizes:
            iters, warmup = iterations(size, args.shards, bps, args.smoke)
            run = {"pattern": "allreduce", "sizes": [size], "iters": iters,
                   "warmup": warmup}
            expect_s = (warmup + iters) * max(
                model_us(s, size, k, bps) for s, k in systems) / 1e6
            # A launch that hangs (a peer that never connects) fails soon in
            # the smoke form; start-up takes seconds, torch's most.
            timeout_s = min(args.timeout_s, (30 if args.smoke else 90) + 3 * expect_s)
            busy_before = rb.wait_for_idle(args.wait_idle_s)
            for system, shards in systems:
                label = system_label(system, shards)
                print(f"running {label} {rb.fmt_size(size)} x{iters} "
                      f"(round {rnd + 1})", file=sys.stderr, flush=True)
                if system == "reducer":
                    for h in SHARD_HOSTS[:shards]:
                        bench.daemon(h)  # started before the meter
                meter = CpuMeter(bench)
                try:
                    if system == "reducer":
                        out = run_reducer(bench, shards, run, timeout_s)
                    elif system == "gloo":
                        out = run_gloo(bench, run, timeout_s)
                    else:
                        out = run_mpi(bench, run, timeout_s)
                    rec = rb.parse_records(out, system, WORLD, run)[0]
                except (rb.RunError, json.JSONDecodeError, OSError) as e:
                    failures.append(f"{label} {rb.fmt_size(size)}: {e}")
                    print(f"FAILED {label} {rb.fmt_size(size)}: {e}", file=sys.stderr)
                    continue
                own, busy = meter.read()
                key = (system, shards, size)
                if key in pooled:
                    pooled[key]["latencies_us"] += rec["latencies_us"]
                    pooled[key]["cpu_own_cores"].append(own)
                    pooled[key]["cpu_busy"].append(busy)
                else:
                    rec.update(shards=shards, cpu_own_cores=[own], cpu_busy=[busy],
                               cpu_busy_before=busy_before)
                    pooled[key] = rec
    return list(pooled.values()), failures


def system_label(system, shards):
    return f"reducer S={shards}" if system == "reducer" else system


def summarize(records, bps):
    """Adds median, bus bandwidth, model, ratios to Gloo and to the model."""
    gloo = {}
    for r in records:
        lat = r["latencies_us"]
        r["median_us"] = rb.percentile(lat, 50)
        r["p90_us"] = rb.percentile(lat, 90)
        r["busbw_MBps"] = bus_bandwidth(r["size_bytes"], r["median_us"]) / 1e6
        r["model_us"] = model_us(r["system"], r["size_bytes"], r["shards"], bps)
        r["vs_model"] = r["median_us"] / r["model_us"]
        r["cpu_busy_mean"] = sum(r["cpu_busy"]) / len(r["cpu_busy"])
        r["cpu_own_cores_mean"] = sum(r["cpu_own_cores"]) / len(r["cpu_own_cores"])
        r["label"] = system_label(r["system"], r["shards"])
        if r["system"] == "gloo":
            gloo[r["size_bytes"]] = r
    for r in records:
        g = gloo.get(r["size_bytes"])
        if g:
            r["vs_gloo"] = r["median_us"] / g["median_us"]
            r["model_vs_gloo"] = r["model_us"] / g["model_us"]


def sort_key(r):
    order = {"gloo": 0, "mpi": 1, "reducer": 2}
    return (r["size_bytes"], order[r["system"]], r["shards"])


def table_rows(records):
    """The table as rows of strings, header first."""
    head = ("size", "system", "calls", "median", "busbw MB/s", "vs gloo",
            "model", "model vs gloo", "t / model", "own cpu", "machine")
    rows = [head]
    for r in sorted(records, key=sort_key):
        rows.append((rb.fmt_size(r["size_bytes"]), r["label"],
                     str(len(r["latencies_us"])), rb.fmt_time(r["median_us"]),
                     f"{r['busbw_MBps']:.1f}",
                     f"{r['vs_gloo']:.2f}" if "vs_gloo" in r else "",
                     rb.fmt_time(r["model_us"]),
                     f"{r['model_vs_gloo']:.2f}" if "model_vs_gloo" in r else "",
                     f"{r['vs_model']:.2f}", f"{r['cpu_own_cores_mean']:.2f}",
                     f"{100 * r['cpu_busy_mean']:.0f} %"))
    return rows


def print_table(records):
    rows = table_rows(records)
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for i, row in enumerate(rows):
        print("  ".join(c.rjust(w) if j > 1 else c.ljust(w)
                        for j, (c, w) in enumerate(zip(row, widths))))
        if i == 0:
            print("  ".join("-" * w for w in widths))


def write_markdown(records, path):
    """The table as Markdown (for bench/README.md)."""
    rows = table_rows(records)
    lines = ["| " + " | ".join(rows[0]) + " |",
             "|" + "|".join(" --- " if i < 2 else " ---: " for i in range(len(rows[0]))) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows[1:]]
    Path(path).write_text("\n".join(lines) + "\n")


def check_targets(records):
    """(figure, value, target, ok) for the two targets, where measured."""
    by = {(r["system"], r["shards"], r["size_bytes"]): r for r in records}
    out = []
    s4 = by.get(("reducer", 4, 64 * MiB))
    if s4 and "vs_gloo" in s4:
        out.append(("S=4 64 MiB, reducer / gloo time", s4["vs_gloo"],
                    "<= 0.75 (model 0.67)", s4["vs_gloo"] <= 0.75))
    s1 = by.get(("reducer", 1, 64 * MiB))
    if s1:
        out.append(("S=1 64 MiB, reducer time / model", s1["vs_model"],
                    "within 20 % (0.80..1.20)", 0.8 <= s1["vs_model"] <= 1.2))
    return out


CSV_FIELDS = ["size_bytes", "system", "shards", "iters", "median_us", "p90_us",
              "busbw_MBps", "vs_gloo", "model_us", "model_vs_gloo", "vs_model",
              "cpu_own_cores_mean", "cpu_busy_mean"]


def write_csv(records, path):
    rb.write_summary_csv(records, path, CSV_FIELDS, sort_key)


def write_plot(records, path, rate):
    """Median time (left) and bus bandwidth (right) against size, one line
    per system, each with its model dashed. False without matplotlib."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("warning: matplotlib missing, no plot", file=sys.stderr)
        return False
    colors = {"gloo": "tab:blue", "mpi": "tab:green", "reducer S=1": "tab:orange",
              "reducer S=2": "tab:red", "reducer S=4": "tab:purple"}
    lines = {}
    for r in sorted(records, key=sort_key):
        lines.setdefault(r["label"], []).append(r)
    fig, (ax_t, ax_b) = plt.subplots(1, 2, figsize=(13, 5.5))
    ring_drawn = False
    for label, rs in lines.items():
        x = [r["size_bytes"] for r in rs]
        c = colors.get(label)
        ax_t.plot(x, [r["median_us"] / 1e3 for r in rs], marker="o", markersize=3,
                  color=c, label=label)
        ax_b.plot(x, [r["busbw_MBps"] for r in rs], marker="o", markersize=3,
                  color=c, label=label)
        ring = rs[0]["system"] != "reducer"
        if ring and ring_drawn:
            continue  # Gloo and MPI share the ring's model
        ring_drawn = ring_drawn or ring
        style = dict(linestyle="--", linewidth=1, alpha=0.7,
                     color="black" if ring else c,
                     label="ring model" if ring else f"{label} model")
        ax_t.plot(x, [r["model_us"] / 1e3 for r in rs], **style)
        ax_b.plot(x, [bus_bandwidth(r["size_bytes"], r["model_us"]) / 1e6
                      for r in rs], **style)
    for ax in (ax_t, ax_b):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("tensor size (bytes, float32)")
        ax.grid(True, which="both", alpha=0.3)
    ax_t.set_yscale("log")
    ax_t.set_ylabel("median all-reduce time (ms); dashed: link model")
    ax_b.set_ylabel("bus bandwidth 2(W-1)/W N/t (MB/s); dashed: link model")
    ax_t.legend(fontsize=8)
    fig.suptitle(f"W={WORLD} worker hosts, links capped at {rate} each way "
                 "(tc tbf, network namespaces)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


# --------------------------------------------------------------------------
# Driver.

def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--smoke", action="store_true",
                   help="4 KiB and 2 MiB, S=2, one round of 2 calls; skips "
                        "(exit 0) without namespaces or torch")
    p.add_argument("--shards", default="1,2,4", help="Reducer's S values (1..4)")
    p.add_argument("--rate", default="100mbit",
                   help="tc tbf rate of every link (the default: a rate that "
                        "two cores drive for W = 4 and S = 4)")
    p.add_argument("--systems", default="reducer,gloo,mpi")
    p.add_argument("--sizes", type=rb.byte_sizes, default="",
                   help="byte sizes instead of 4 KiB..64 MiB")
    p.add_argument("--rounds", type=int, default=1,
                   help="sweeps over all sizes; latencies pooled")
    rb.add_sweep_flags(p, BENCH_DIR / "out-shard", "size")
    p.add_argument("--reducerd_flags", default="",
                   help="extra reducerd flags, space-separated (default: none, "
                        "reducerd's own defaults, which size chunks to the "
                        "links; --chunk_time=0 for fixed --chunk_bytes)")
    rb.add_built_flags(p, ("reducerd", "reducer_worker", "virtual_network"))
    args = p.parse_args(argv)
    args.systems = [s for s in args.systems.split(",") if s]
    if set(args.systems) - {"reducer", "gloo", "mpi"}:
        p.error(f"unknown systems in {args.systems}")
    args.shards = [int(s) for s in args.shards.split(",") if s]
    if args.smoke:
        args.shards, args.rounds = [2], 1
        args.sizes = args.sizes or list(SMOKE_SIZES)
    if any(not 1 <= s <= MAX_SHARDS for s in args.shards):
        p.error(f"--shards must lie in 1..{MAX_SHARDS}")
    args.sizes = args.sizes or FULL_SIZES
    rate_bytes_per_s(args.rate)
    args.out_dir = args.out_dir.resolve()
    return args


def check_machine(args):
    """Drops systems that cannot run here (with a warning); raises Skip when
    the smoke form cannot run at all."""
    if not os.path.exists(args.virtual_network):
        raise rb.RunError(f"build {args.virtual_network} first")
    if "gloo" in args.systems and importlib.util.find_spec("torch") is None:
        why = (f"{sys.executable} cannot import torch (run this with the project's "
               "Python: tools/pinned_venv.sh python/requirements-dev.txt)")
        if args.smoke:
            raise rb.RunError(why)
        print(f"warning: {why}: no Gloo", file=sys.stderr)
        args.systems.remove("gloo")
    if "mpi" in args.systems and not (shutil.which("mpicc") and shutil.which("mpirun")):
        print("warning: mpicc/mpirun missing (openmpi-bin, libopenmpi-dev): no MPI",
              file=sys.stderr)
        args.systems.remove("mpi")
    if "reducer" in args.systems and not (os.path.exists(args.reducerd) and
                                          os.path.exists(args.reducer_worker)):
        raise rb.RunError(f"build {args.reducerd} and {args.reducer_worker} first")


def report(args, records, failures, targets, net_info, wall_s):
    """Prints the table and targets and writes the out dir's files."""
    print(f"\nW={WORLD} worker hosts, shard hosts s0..s{max(args.shards) - 1}, "
          f"every link {args.rate} each way; float32 SUM; median of the calls; "
          f"busbw = 2(W-1)/W N/t; model = the link caps alone")
    print_table(records)
    if targets:
        print("\ntargets:")
        for label, value, target, ok in targets:
            print(f"  {'ok  ' if ok else 'MISS'} {label}: {value:.2f} (target {target})")
    print(f"\nwall time {wall_s:.0f} s")
    meta = rb.host_meta(argv=sys.argv[1:], rate=args.rate, world_size=WORLD,
                        shards=args.shards, rounds=args.rounds,
                        min_partition_bytes=MIN_PARTITION_BYTES,
                        reducerd_flags=args.reducerd_flags,
                        addresses={h["name"]: h["address"] for h in net_info["hosts"]})
    doc = {"meta": meta, "results": sorted(records, key=sort_key),
           "targets": rb.target_dicts(targets),
           "failures": failures, "wall_s": wall_s}
    (args.out_dir / "results.json").write_text(json.dumps(doc, indent=1))
    write_csv(records, args.out_dir / "results.csv")
    write_markdown(records, args.out_dir / "results.md")
    plotted = write_plot(records, args.out_dir / "shard_bench.png", args.rate)
    print(f"wrote {rb.shown_path(args.out_dir)}/results.json, results.csv, results.md"
          + (", shard_bench.png" if plotted else ""))


def skip_or_fail(args, why):
    """The smoke form skips (exit 0) where the machine cannot run it; a full
    run fails (exit 1)."""
    if args.smoke:
        print(f"SKIP: {why}")
        return 0
    print(f"error: {why}", file=sys.stderr)
    return 1


def measure(args):
    """Builds the network, runs every system on it (logs in --out_dir/logs)
    and removes it. Returns (records, failures, the network's JSON); raises
    Skip where the network cannot be made here."""
    shutil.rmtree(args.out_dir / "logs", ignore_errors=True)
    (args.out_dir / "logs").mkdir(parents=True)
    hosts = WORKERS + SHARD_HOSTS[:max(args.shards)]
    with tempfile.TemporaryDirectory(prefix="reducer-shard-bench-") as tmp:
        os.environ["TEST_TMPDIR"] = tmp  # the helper's command logs
        net = Network(args.virtual_network, hosts, args.rate,
                      args.out_dir / "logs" / "virtual_network.err")
        bench = Bench(args, net, tmp)
        try:
            if "mpi" in args.systems:
                bench.mpi_binary = rb.build_mpi(tmp)
                bench.mpi_agent = mpi_agent(bench)
            records, failures = run_all(bench, systems_in_order(args), args.rounds)
        finally:
            bad = bench.stop_daemons()
            net_status = net.close()
        if bad:
            failures.append(f"reducerd did not exit 0 on SIGTERM on {bad}")
        if net_status != 0:
            failures.append(f"virtual_network exited {net_status}: "
                            f"{rb.tail(net.log_path)}")
    return records, failures, net.info


def main(argv):
    args = parse_args(argv)
    try:
        check_machine(args)
    except Skip as e:
        return skip_or_fail(args, e)
    start = time.monotonic()
    try:
        records, failures, net_info = measure(args)
    except Skip as e:
        return skip_or_fail(args, e)
    bps = rate_bytes_per_s(args.rate)
    summarize(records, bps)
    targets = check_targets(records)
    report(args, records, failures, targets, net_info, time.monotonic() - start)
    return rb.exit_status(failures)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
