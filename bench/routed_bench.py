#!/usr/bin/env python3
"""Reduce against AllReduce (the root-only downlink), and all-to-all against
Gloo's, through torch.distributed, in one invocation.

    bazel build //python:reducer //server:reducerd
    py="$(tools/pinned_venv.sh python/requirements-dev.txt)/bin/python"
    "$py" bench/routed_bench.py [--world_size=4] [--rounds=3] [--json=FILE]
    "$py" bench/routed_bench.py --smoke  # W = 2, 4 KiB, 2 rounds

Run it with the project's Python (the venv of python/requirements-dev.txt,
torch from the package index, which //python:reducer's torch backend is
built against); the workers run under the same one unless --python says
otherwise.

Starts one reducerd on a free loopback port and, per data path ("grpc":
REDUCER_SHARED_MEMORY=off; "shm": required, skipped with the reason where
the same-host path is unavailable), --rounds launches of W = --world_size
torch worker processes, each holding the default group on backend
"reducer" and a gloo group. float32 SUM throughout, tensors of --sizes bytes
per rank (default 4 MiB and 64 MiB), the systems alternating call by call:

1. reduce to rank 0 against all_reduce, both on "reducer", and Gloo's reduce:
   the median time of one call on the root (rank 0) and on a non-root, and
   the ratio reduce/all_reduce (a Reducer reduce sends the result to the
   root only: the other ranks' downlink carries nothing).
2. all_to_all_single (even splits) on "reducer" and on gloo: the median on
   rank 0 and the ratio reducer/gloo.

Every worker checks its last results against the closed form. Prints one
table per part under the command line that produced it; --json writes every
latency.
"""

import argparse
import json
import os
import shlex
import statistics
import sys
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))
import run_bench  # noqa: E402  (processes, reducerd)

KiB, MiB = 1 << 10, 1 << 20
PATH_MODES = {"grpc": "off", "shm": "required"}


def iters_for(size, smoke):
    """(timed, warmup) calls per system and size."""
    if smoke:
        return 5, 1
    return (20, 3) if size <= 4 * MiB else (6, 2)


# --------------------------------------------------------------------------
# Worker (one process per rank; rank 0 prints JSON lines).

def timed(fn, iters, warmup):
    out = []
    for i in range(warmup + iters):
        start = time.perf_counter()
        fn()
        if i >= warmup:
            out.append((time.perf_counter() - start) * 1e6)
    return out


def worker(args):
    import torch
    import torch.distributed as dist
    import reducer.torch  # noqa: F401  (registers the backend)
    torch.set_num_threads(1)
    dist.init_process_group("reducer")
    gloo = dist.new_group(backend="gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    records = []
    for size in args.sizes:
        n = max(world, size // 4 // world * world)
        iters, warmup = iters_for(size, args.smoke)
        x = torch.full((n,), float(rank + 1))
        buf = x.clone()

        def reduce():
            buf.copy_(x)
            dist.reduce(buf, dst=0)

        def all_reduce():
            buf.copy_(x)
            dist.all_reduce(buf)

        def gloo_reduce():
            buf.copy_(x)
            dist.reduce(buf, dst=0, group=gloo)

        lat = {"reduce": [], "all_reduce": [], "gloo_reduce": []}
        for _ in range(iters + warmup):  # alternate the systems call by call
            for name, fn in (("reduce", reduce), ("all_reduce", all_reduce),
                             ("gloo_reduce", gloo_reduce)):
                lat[name] += timed(fn, 1, 0)
        for name in lat:
            lat[name] = lat[name][warmup:]
        reduce()
        if rank == 0 and not bool((buf == world * (world + 1) / 2).all()):
            raise SystemExit(f"wrong reduce result {buf[:4]}")
        records.append({"part": "reduce", "rank": rank, "size_bytes": n * 4,
                        "latencies_us": lat})

        inp = torch.arange(n, dtype=torch.float32) + rank * n
        out = torch.empty_like(inp)
        lat = {"reducer": [], "gloo": []}
        for _ in range(iters + warmup):
            lat["reducer"] += timed(lambda: dist.all_to_all_single(out, inp), 1, 0)
            lat["gloo"] += timed(lambda: dist.all_to_all_single(out, inp, group=gloo), 1, 0)
        for name in lat:
            lat[name] = lat[name][warmup:]
        dist.all_to_all_single(out, inp)
        part = n // world
        want = torch.cat([torch.arange(part, dtype=torch.float32) + i * n + rank * part
                          for i in range(world)])
        if not torch.equal(out, want):
            raise SystemExit(f"wrong all_to_all_single result {out[:4]}")
        records.append({"part": "alltoall", "rank": rank, "size_bytes": n * 4,
                        "latencies_us": lat})
    # Rank 0 and rank 1 (a non-root) report; the driver reads both.
    if rank in (0, 1):
        for r in records:
            print(json.dumps(r), flush=True)
    dist.destroy_process_group()


# --------------------------------------------------------------------------
# Driver.

def launch(args, daemon, path, log_prefix):
    port = run_bench.free_port()
    env = {k: v for k, v in os.environ.items() if k != "REDUCER_SHARED_MEMORY"}
    env.update(run_bench.MALLOC_ENV, OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo",
               REDUCER_TARGET=daemon.address, REDUCER_SHARED_MEMORY=PATH_MODES[path],
               MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
               WORLD_SIZE=str(args.world_size),
               PYTHONPATH=os.pathsep.join([str(args.pythonpath)] + (
                   [os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])))
    cmds = []
    for r in range(args.world_size):
        cmds.append(["env", f"RANK={r}", args.python, str(Path(__file__).resolve()),
                     "--worker", f"--sizes={','.join(map(str, args.sizes))}"]
                    + (["--smoke"] if args.smoke else []))
    outs = []
    # run_processes returns rank 0's stdout; rank 1's is in its log file.
    outs.append(run_bench.run_processes(cmds, log_prefix, args.timeout_s, env))
    if args.world_size > 1:
        outs.append(Path(f"{log_prefix}-1.out").read_text())
    return [json.loads(line) for out in outs for line in out.splitlines()
            if line.startswith("{")]


def median(xs):
    return statistics.median(xs) if xs else float("nan")


def fmt_us(us):
    return f"{us / 1000:.2f} ms" if us >= 1000 else f"{us:.0f} us"


def report(command, args, paths, skipped, records):
    print(f"\n== 1. reduce to rank 0 against all_reduce, W = {args.world_size}, "
          f"float32 SUM, median over {args.rounds} round(s)")
    print(f"command: {command}")
    print(f"{'size':>8}  {'path':5} {'rank':>4}  {'reduce':>10}  {'all_reduce':>10}  "
          f"{'reduce/all_reduce':>17}  {'gloo reduce':>11}  {'reduce/gloo':>11}")
    table = {"reduce": [], "alltoall": []}
    for path in paths:
        for size in sorted({r["size_bytes"] for r in records[path]}):
            for rank in (0, 1):
                rs = [r for r in records[path] if r["part"] == "reduce"
                      and r["size_bytes"] == size and r["rank"] == rank]
                if not rs:
                    continue
                m = {k: median([v for r in rs for v in r["latencies_us"][k]])
                     for k in ("reduce", "all_reduce", "gloo_reduce")}
                row = {"path": path, "size_bytes": size, "rank": rank, **m,
                       "reduce_over_all_reduce": m["reduce"] / m["all_reduce"],
                       "reduce_over_gloo": m["reduce"] / m["gloo_reduce"]}
                table["reduce"].append(row)
                print(f"{run_bench.fmt_size(size):>8}  {path:5} {rank:>4}  "
                      f"{fmt_us(m['reduce']):>10}  {fmt_us(m['all_reduce']):>10}  "
                      f"{row['reduce_over_all_reduce']:>17.2f}  "
                      f"{fmt_us(m['gloo_reduce']):>11}  {row['reduce_over_gloo']:>11.2f}")
    print(f"\n== 2. all_to_all_single (even splits) against Gloo, W = {args.world_size}, "
          f"float32, rank 0, median over {args.rounds} round(s)")
    print(f"command: {command}")
    print(f"{'size':>8}  {'path':5}  {'reducer':>10}  {'gloo':>10}  {'reducer/gloo':>12}")
    for path in paths:
        for size in sorted({r["size_bytes"] for r in records[path]}):
            rs = [r for r in records[path] if r["part"] == "alltoall"
                  and r["size_bytes"] == size and r["rank"] == 0]
            m = {k: median([v for r in rs for v in r["latencies_us"][k]])
                 for k in ("reducer", "gloo")}
            row = {"path": path, "size_bytes": size, **m,
                   "reducer_over_gloo": m["reducer"] / m["gloo"]}
            table["alltoall"].append(row)
            print(f"{run_bench.fmt_size(size):>8}  {path:5}  {fmt_us(m['reducer']):>10}  "
                  f"{fmt_us(m['gloo']):>10}  {row['reducer_over_gloo']:>12.2f}")
    for path, why in skipped.items():
        print(f"path {path} skipped: {why}")
    return table


def shm_available(args, daemon, log_dir):
    """None when a W = 2 launch runs on the same-host path; else why not."""
    probe = argparse.Namespace(**{**vars(args), "world_size": 2, "sizes": [4 * KiB],
                                  "smoke": True})
    try:
        launch(probe, daemon, "shm", log_dir / "probe-shm")
        return None
    except run_bench.RunError as e:
        return str(e).splitlines()[0][:200]


# The flags whose defaults --smoke changes: (help, default, smoke default,
# least value or None).
# The binaries it runs (flags of run_bench.BUILT).
BUILT = ("reducerd", "pythonpath")
SMOKE_FLAGS = {
    "world_size": ("W", 4, 2, 1),
    "rounds": ("launches per path", 3, 2, 1),
    "sizes": ("bytes per rank, comma-separated", [4 * MiB, 64 * MiB], [4 * KiB], None),
}


def parse_args(argv):
    p = run_bench.DriverParser(__doc__, SMOKE_FLAGS, BUILT, "the workers",
                               smoke_help="W = 2, 4 KiB, 2 rounds",
                               json_help="write every latency here")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv):
    args = parse_args(argv)
    if args.worker:
        return worker(args)
    command = shlex.join([Path(sys.executable).name, os.path.relpath(__file__)] + argv)
    run_bench.require_built(args, BUILT)
    t0 = time.monotonic()
    records, skipped = {}, {}
    try:
        with run_bench.reducerd_in_temp_dir(args.reducerd, "routed_bench-",
                                            log_tails="*.out") as (log_dir, daemon):
            why = shm_available(args, daemon, log_dir)
            paths = ["grpc"] + (["shm"] if why is None else [])
            if why is not None:
                skipped["shm"] = why
            for i in range(args.rounds):
                for path in paths:
                    records.setdefault(path, []).extend(
                        launch(args, daemon, path, log_dir / f"{i:02d}-{path}"))
                print(f"round {i + 1}/{args.rounds} done after "
                      f"{time.monotonic() - t0:.0f} s", file=sys.stderr, flush=True)
    except run_bench.RunError as e:
        sys.exit(f"routed_bench: {e}")
    table = report(command, args, paths, skipped, records)
    print(f"\ntotal {time.monotonic() - t0:.0f} s", flush=True)
    if args.json:
        args.json.write_text(json.dumps({"command": command, "argv": argv,
                                         "world_size": args.world_size,
                                         "summary": table, "records": records,
                                         "skipped": skipped}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
