#!/usr/bin/env python3
"""Load benchmark: one reducerd serving many jobs at once.

The load of tests/load_test.cc at a larger scale: SMALL_JOBS jobs of
SMALL_WORLD ranks and one job of BIG_WORLD ranks at once, every rank a thread
of a tests/load_worker process with its own Client, each running the same
plan of COLLECTIVES calls (small and medium all-reduces, uneven all-gathers,
broadcasts, barriers, scalars; by call order and by name), every result
checked against its closed form. It reports:

- p50 and p99 latency of each collective kind and size, per world size;
- collectives per second (whole collectives, not rank calls) over the run;
- reducerd's memory: VmRSS before the load, VmHWM and VmRSS after it
  (/proc/PID/status);
- reducerd's CPU per collective and per rank call: utime + stime from
  /proc/PID/stat over the run, divided by the counts.

Usage: bench/load_bench.py [--small_jobs=32] [--small_world=4]
           [--big_world=64] [--collectives=5000] [--medium_elements=16384]
           [--json=FILE] [--no_build]
It builds //server:reducerd and //tests:load_worker with Bazel first
(unless --no_build). Every subprocess has a hard timeout; a failed rank
(anything but ok == planned) fails the run.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
REDUCERD = REPO_ROOT / "bazel-bin/server/reducerd"
LOAD_WORKER = REPO_ROOT / "bazel-bin/tests/load_worker"
# Ranks per load_worker process: a few processes of many threads keep 192+
# clients affordable on 2 cores.
RANKS_PER_PROCESS = 16
# Kind names of tests/load_worker.cc and the payload each carries per rank.
KIND_SIZES = {
    "allreduce_small_int64": "8-256 B",
    "allreduce_small_float32": "256-508 B",
    "allreduce_medium_float32": None,  # --medium_elements x 4 B
    "allreduce_scalar": "8 B",
    "allgather": "16-48 B",
    "broadcast": "128 B",
    "barrier": "0 B",
}
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def proc_status_kib(pid, field):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/{pid}/status")


def proc_cpu_seconds(pid):
    """utime + stime of pid, in seconds (/proc/PID/stat fields 14 and 15)."""
    with open(f"/proc/{pid}/stat") as f:
        stat = f.read()
    # The command name (field 2) may hold spaces; fields follow its ')'.
    fields = stat[stat.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def percentile(sorted_values, q):
    if not sorted_values:
        return float("nan")
    k = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return sorted_values[k]


def start_reducerd(timeout_s=30):
    proc = subprocess.Popen([str(REDUCERD), "--listen=127.0.0.1:0"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            text=True)
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        line = proc.stdout.readline()
        m = re.search(r"listening on (\S+)", line)
        if m:
            return proc, m.group(1)
        if proc.poll() is not None:
            break
    proc.kill()
    raise RuntimeError("reducerd did not start")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--small_jobs", type=int, default=32)
    p.add_argument("--small_world", type=int, default=4)
    p.add_argument("--big_world", type=int, default=64)
    p.add_argument("--collectives", type=int, default=5000,
                   help="calls per rank")
    p.add_argument("--medium_elements", type=int, default=16384)
    p.add_argument("--timeout_s", type=int, default=1800,
                   help="hard limit of the whole run")
    p.add_argument("--json", help="also write the figures to this file")
    p.add_argument("--no_build", action="store_true")
    args = p.parse_args()

    if not args.no_build:
        subprocess.run(["bazel", "build", "//server:reducerd",
                        "//tests:load_worker"], cwd=REPO_ROOT, check=True)
    for binary in (REDUCERD, LOAD_WORKER):
        if not binary.exists():
            sys.exit(f"load_bench: {binary} is missing; bazel build it first")

    reducerd, address = start_reducerd()
    tmp = Path(tempfile.mkdtemp(prefix="load_bench."))
    workers = []  # (Popen, world size, latency file)
    try:
        time.sleep(0.5)
        rss_before = proc_status_kib(reducerd.pid, "VmRSS")
        cpu_before = proc_cpu_seconds(reducerd.pid)
        start = time.time()

        def launch(jobs, world, first, count, name):
            out = tmp / f"{name}.lat"
            cmd = [str(LOAD_WORKER), f"--target={address}",
                   "--jobs=" + ",".join(jobs), f"--world_size={world}",
                   f"--first_rank={first}", f"--num_ranks={count}",
                   f"--collectives={args.collectives}",
                   f"--medium_elements={args.medium_elements}",
                   f"--latency_out={out}"]
            log = open(tmp / f"{name}.out", "w")
            workers.append((subprocess.Popen(cmd, stdout=log,
                                             stderr=subprocess.STDOUT),
                            world, out, tmp / f"{name}.out"))

        jobs_per_process = max(1, RANKS_PER_PROCESS // args.small_world)
        small = [f"small{j}" for j in range(args.small_jobs)]
        for i in range(0, len(small), jobs_per_process):
            launch(small[i:i + jobs_per_process], args.small_world, 0,
                   args.small_world, f"small{i // jobs_per_process}")
        for i, first in enumerate(range(0, args.big_world, RANKS_PER_PROCESS)):
            launch(["big"], args.big_world, first,
                   min(RANKS_PER_PROCESS, args.big_world - first), f"big{i}")

        deadline = start + args.timeout_s
        failed = []
        for proc, _, _, log in workers:
            try:
                rc = proc.wait(timeout=max(1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                proc.kill()
                rc = "timeout"
            if rc != 0:
                failed.append(f"{log.name}: {rc}\n{log.read_text()[-2000:]}")
        wall = time.time() - start
        cpu = proc_cpu_seconds(reducerd.pid) - cpu_before
        hwm = proc_status_kib(reducerd.pid, "VmHWM")
        rss_after = proc_status_kib(reducerd.pid, "VmRSS")
    finally:
        for proc, _, _, _ in workers:
            if proc.poll() is None:
                proc.kill()
        reducerd.terminate()
        try:
            reducerd.wait(timeout=30)
        except subprocess.TimeoutExpired:
            reducerd.kill()
    if failed:
        sys.exit("load_bench: ranks failed:\n" + "\n".join(failed))

    latencies = {}  # (world, kind) -> [usec]
    for _, world, out, _ in workers:
        for line in out.read_text().splitlines():
            kind, usec = line.split()
            latencies.setdefault((world, kind), []).append(int(usec))
    jobs = args.small_jobs + 1
    collectives = jobs * args.collectives
    calls = (args.small_jobs * args.small_world + args.big_world) * args.collectives

    sizes = dict(KIND_SIZES)
    sizes["allreduce_medium_float32"] = f"{args.medium_elements * 4 // 1024} KiB"
    rows = []
    print(f"load: {args.small_jobs} jobs of {args.small_world} ranks + 1 job of "
          f"{args.big_world} ranks, {args.collectives} collectives per rank")
    print(f"{'W':>3} {'kind':<26} {'size':>10} {'calls':>8} "
          f"{'p50 ms':>8} {'p99 ms':>8}")
    for (world, kind) in sorted(latencies):
        v = sorted(latencies[(world, kind)])
        row = {"world_size": world, "kind": kind, "size": sizes.get(kind, "?"),
               "calls": len(v), "p50_ms": percentile(v, 0.50) / 1000,
               "p99_ms": percentile(v, 0.99) / 1000}
        rows.append(row)
        print(f"{world:>3} {kind:<26} {row['size']:>10} {len(v):>8} "
              f"{row['p50_ms']:>8.2f} {row['p99_ms']:>8.2f}")
    summary = {
        "collectives": collectives, "rank_calls": calls, "wall_s": wall,
        "collectives_per_s": collectives / wall,
        "rank_calls_per_s": calls / wall,
        "reducerd_vmrss_before_kib": rss_before,
        "reducerd_vmhwm_kib": hwm, "reducerd_vmrss_after_kib": rss_after,
        "reducerd_cpu_s": cpu,
        "reducerd_cpu_us_per_collective": cpu / collectives * 1e6,
        "reducerd_cpu_us_per_rank_call": cpu / calls * 1e6,
    }
    print(f"{collectives} collectives ({calls} rank calls) in {wall:.1f} s: "
          f"{summary['collectives_per_s']:.0f} collectives/s, "
          f"{summary['rank_calls_per_s']:.0f} rank calls/s")
    print(f"reducerd: VmRSS {rss_before / 1024:.1f} MiB before, VmHWM "
          f"{hwm / 1024:.1f} MiB, VmRSS {rss_after / 1024:.1f} MiB after; CPU "
          f"{cpu:.1f} s = {summary['reducerd_cpu_us_per_collective']:.0f} us per "
          f"collective, {summary['reducerd_cpu_us_per_rank_call']:.0f} us per "
          f"rank call")
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"args": vars(args), "summary": summary, "latency": rows}, indent=1))


if __name__ == "__main__":
    main()
