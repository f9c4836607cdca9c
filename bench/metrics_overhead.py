#!/usr/bin/env python3
"""What metrics cost: reducerd with --metrics_listen (scraped once a second,
as Prometheus would) against reducerd without, in one invocation.

For --rounds rounds, alternating the two configurations (so both see the
same machine state), it starts a fresh reducerd and W worker processes
(bazel-bin/bench/reducer_allreduce_worker) that run float32 SUM all-reduces
of 4 B (--small_iters timed calls) and of 64 MiB (--large_iters), and then
prints the median latency of every call of each configuration and their
ratio (on / off). The target: within 5 % at W = 4. Exit 1 when a figure is
missed, 2 when a run fails. Not run in CI (it takes about a minute).

Usage: bazel build //server:reducerd //bench:reducer_allreduce_worker
       bench/metrics_overhead.py [--world_size=4] [--rounds=12]
"""

import argparse
import json
import re
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
SMALL, LARGE = 4, 64 << 20
TARGET = 1.05


def start_reducerd(binary, metrics):
    flags = ["--listen=127.0.0.1:0"]
    if metrics:
        flags.append("--metrics_listen=127.0.0.1:0")
    proc = subprocess.Popen([binary] + flags, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    address, metrics_port = None, None
    deadline = time.time() + 30
    while time.time() < deadline and address is None:
        line = proc.stdout.readline()
        if not line:
            break
        m = re.search(r"metrics on http://127\.0\.0\.1:(\d+)", line)
        if m:
            metrics_port = int(m.group(1))
        m = re.search(r"listening on (\S+)", line)
        if m:
            address = m.group(1)
    if address is None:
        proc.kill()
        raise RuntimeError("reducerd did not start")
    return proc, address, metrics_port


def scrape_loop(port, stop):
    """GETs /metrics once a second until `stop` is set; counts scrapes."""
    count = 0
    while not stop.wait(1.0):
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics",
                                    timeout=5) as r:
            r.read()
        count += 1
    return count


def run_workers(worker, address, world, size, iters, timeout_s=300):
    job = f"overhead-{uuid.uuid4().hex[:8]}"
    procs = [subprocess.Popen(
        [worker, f"--target={address}", f"--job={job}", f"--rank={r}",
         f"--world_size={world}", f"--sizes={size}", f"--iters={iters}",
         "--warmup=3"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for r in range(world)]
    outs = [p.communicate(timeout=timeout_s) for p in procs]
    for r, (p, (out, err)) in enumerate(zip(procs, outs)):
        if p.returncode != 0:
            raise RuntimeError(f"worker rank {r} failed: {err[-2000:]}")
    for line in outs[0][0].splitlines():
        if line.startswith("{"):
            return json.loads(line)["latencies_us"]
    raise RuntimeError("rank 0 printed no latencies")


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--world_size", type=int, default=4)
    p.add_argument("--rounds", type=int, default=12)
    p.add_argument("--small_iters", type=int, default=500)
    p.add_argument("--large_iters", type=int, default=4)
    p.add_argument("--reducerd", default=str(REPO_ROOT / "bazel-bin/server/reducerd"))
    p.add_argument("--worker", default=str(
        REPO_ROOT / "bazel-bin/bench/reducer_allreduce_worker"))
    args = p.parse_args(argv)

    samples = {(on, size): [] for on in (False, True) for size in (SMALL, LARGE)}
    scrapes = 0
    for round_index in range(args.rounds):
        # Alternate which configuration goes first, so neither always runs
        # right after the other.
        order = (False, True) if round_index % 2 == 0 else (True, False)
        for on in order:
            daemon, address, metrics_port = start_reducerd(args.reducerd, on)
            stop = threading.Event()
            result = {}
            scraper = None
            if on:
                scraper = threading.Thread(
                    target=lambda: result.update(n=scrape_loop(metrics_port, stop)))
                scraper.start()
            try:
                for size, iters in ((SMALL, args.small_iters),
                                    (LARGE, args.large_iters)):
                    samples[(on, size)] += run_workers(
                        args.worker, address, args.world_size, size, iters)
            finally:
                stop.set()
                if scraper is not None:
                    scraper.join()
                    scrapes += result.get("n", 0)
                daemon.terminate()
                daemon.wait(timeout=30)
        print(f"round {round_index + 1}/{args.rounds} done", file=sys.stderr)

    print(f"metrics on against off, W = {args.world_size}, {args.rounds} "
          f"rounds alternating, fresh reducerd each, /metrics scraped every "
          f"1 s while on ({scrapes} scrapes)")
    print(f"{'size':>8} {'calls':>6} {'off median':>12} {'on median':>12} "
          f"{'on/off':>7}  target")
    missed = False
    for size, label in ((SMALL, "4 B"), (LARGE, "64 MiB")):
        off = statistics.median(samples[(False, size)])
        on = statistics.median(samples[(True, size)])
        ratio = on / off
        ok = ratio <= TARGET
        missed |= not ok
        unit, scale = ("us", 1) if size == SMALL else ("ms", 1e-3)
        print(f"{label:>8} {len(samples[(True, size)]):>6} "
              f"{off * scale:>10.1f}{unit} {on * scale:>10.1f}{unit} "
              f"{ratio:>7.3f}  <= {TARGET:.2f}: {'met' if ok else 'missed'}")
    return 1 if missed else 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        print(f"metrics_overhead: {e}", file=sys.stderr)
        sys.exit(2)
