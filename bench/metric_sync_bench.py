#!/usr/bin/env python3
"""One metric sync of a large state: the clone metric code makes today
against Reducer's out-of-place all-reduce.

    bazel build //python:reducer //server:reducerd
    py="$(tools/pinned_venv.sh python/requirements-dev.txt)/bin/python"
    "$py" bench/metric_sync_bench.py [--world_sizes=2,4] [--sizes_mib=64,256] [--iters=5]
    "$py" bench/metric_sync_bench.py --smoke   # W = 2, 1 MiB, 2 syncs per form

A metric's state must survive its sync (the metric goes on accumulating
into it, or computes again), so torch.distributed's in-place all_reduce
cannot take it as it is. Ignite's sync_all_reduce clones the state and
all-reduces the clone in place (idist.all_reduce); Reducer's out-of-place
forms read the state and return the sum as a new tensor. At W worker
processes on this host, with one reducerd on a free loopback port, each
worker holds a float32 state of S bytes (rank r's filled with r + 1) on a
process group of the backend "reducer" and syncs it in three forms, taking
turns sync by sync so that all three see the same machine:

  clone        t = state.clone(); dist.all_reduce(t)     (Ignite's way)
  out_of_place t = reducer.torch.backend_of().client.all_reduce(state)
  metric_sync  MetricSync(client) with the state added; t = sync.reduce()["state"]

Before each sync the ranks meet at a barrier and each resets its peak
resident memory (/proc/self/clear_refs, 5) after freeing the previous
result; a sync's time is from the call to the result in hand; "rise" is
the process's peak resident set during the sync above where it stood
before the call (memory the sync newly touched), "peak" that peak above
the process's resident set before its first sync, with its state made
(what the syncs added to the process: the client's buffers, the result,
the clone). The client
keeps what it receives into between calls: on the same-host path the
result segment it maps, whose range an out-of-place result is lent as a
read-only tensor (no copy); over gRPC a cache of idle buffers. So an
out-of-place result costs no new memory, and the clone's S bytes are the
rise of the clone form. Per form the table gives the median over the
syncs of the slowest rank's time and of the largest rank's rise and peak,
and the ratios of out_of_place and metric_sync to clone (time, peak).
Every result is checked (each element W(W+1)/2) and every state is checked
unchanged.

The same-host path is on by default (REDUCER_SHARED_MEMORY unset);
--shared_memory=off sends the tensors over gRPC. --smoke: W = 2, 1 MiB,
2 syncs per form, as bench/BUILD's metric_sync_bench_smoke_test runs it
(which checks the table's shape, never a timing).
"""

import argparse
import json
import os
import re
import statistics
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run_bench  # noqa: E402  (processes, reducerd, formatting)
from run_bench import RunError  # noqa: E402

MiB = 1 << 20
FORMS = ["clone", "out_of_place", "metric_sync"]


# --------------------------------------------------------------------------
# Worker: one rank.

def proc_status_kib(field):
    m = re.search(rf"^{field}:\s+(\d+) kB", Path("/proc/self/status").read_text(), re.M)
    return int(m.group(1))


def reset_peak():
    """Sets this process's peak resident set (VmHWM) to its current one."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def worker(args):
    import torch
    import torch.distributed as dist

    import reducer
    import reducer.torch

    torch.set_num_threads(1)
    dist.init_process_group("reducer", rank=args.rank, world_size=args.world_size,
                            init_method=f"tcp://127.0.0.1:{args.store_port}")
    client = reducer.torch.backend_of().client
    world, rank = args.world_size, args.rank
    n = args.size_bytes // 4
    state = torch.full((n,), float(rank + 1), dtype=torch.float32)
    want = float(world * (world + 1) // 2)
    sync = reducer.MetricSync(client)
    sync.add("state", state)
    start_kib = proc_status_kib("VmRSS")

    def run(form):
        if form == "clone":
            t = state.clone()
            dist.all_reduce(t)
            return t
        if form == "out_of_place":
            return client.all_reduce(state)
        return sync.reduce()["state"]

    records = []
    result = None
    for i in range(args.warmup + args.iters):
        for form in FORMS:
            result = None  # the previous result's pages go back before the reset
            dist.barrier()
            reset_peak()
            before = proc_status_kib("VmRSS")
            start = time.perf_counter()
            result = run(form)
            seconds = time.perf_counter() - start
            peak = proc_status_kib("VmHWM")
            if result.dtype != torch.float32 or result.numel() != n or not bool(
                    (result == want).all()):
                raise SystemExit(f"rank {rank}: {form}: wrong result")
            if not bool((state == rank + 1).all()):
                raise SystemExit(f"rank {rank}: {form} changed the state")
            if i >= args.warmup:
                records.append({"form": form, "iter": i - args.warmup, "rank": rank,
                                "seconds": seconds, "rise_kib": peak - before,
                                "peak_kib": peak - start_kib})
    result = None
    dist.barrier()
    dist.destroy_process_group()
    print(json.dumps({"records": records}), flush=True)


# --------------------------------------------------------------------------
# Driver.

def launch(args, daemon, env, log_dir, world, size_bytes):
    """Runs W ranks of one (W, S) configuration; every rank's records."""
    store_port = run_bench.free_port()
    job_env = dict(env, REDUCER_TARGET=daemon.address,
                   REDUCER_JOB=f"metricsync-{uuid.uuid4().hex[:8]}")
    cmds = [[sys.executable, str(Path(__file__).resolve()), "--worker",
             f"--rank={r}", f"--world_size={world}", f"--size_bytes={size_bytes}",
             f"--store_port={store_port}", f"--iters={args.iters}",
             f"--warmup={args.warmup}"] for r in range(world)]
    prefix = log_dir / f"w{world}-{size_bytes // MiB}mib"
    run_bench.run_processes(cmds, prefix, args.timeout_s, job_env)
    records = []
    for r in range(world):
        out = Path(f"{prefix}-{r}.out").read_text()
        lines = [line for line in out.splitlines() if line.startswith("{")]
        if not lines:
            raise RunError(f"rank {r} printed no records: {out[-500:]}")
        records += json.loads(lines[-1])["records"]
    return records


def summarize(records, world, iters):
    """form -> (median seconds of the slowest rank, median rise MiB and
    median peak MiB of the largest rank), over the syncs."""
    out = {}
    for form in FORMS:
        times, rises, peaks = [], [], []
        for i in range(iters):
            these = [r for r in records if r["form"] == form and r["iter"] == i]
            if len(these) != world:
                raise RunError(f"{form} sync {i}: {len(these)} ranks reported, not {world}")
            times.append(max(r["seconds"] for r in these))
            rises.append(max(r["rise_kib"] for r in these) / 1024)
            peaks.append(max(r["peak_kib"] for r in these) / 1024)
        out[form] = tuple(statistics.median(v) for v in (times, rises, peaks))
    return out


def fmt_ms(seconds):
    return f"{seconds * 1e3:.1f} ms"


def print_table(command, rows):
    print("== one metric sync: clone + in-place all_reduce against out of place")
    print(f"command: {command}")
    header = (f"{'W':>2} {'state':>8}  {'form':<13} {'time':>10} {'rise':>10} {'peak':>10}"
              f"  {'time/clone':>10} {'peak/clone':>10}")
    print(header)
    print("-" * len(header))
    for world, size_bytes, summary in rows:
        base_t, _, base_p = summary["clone"]
        for form in FORMS:
            t, r, p = summary[form]
            ratio_t = f"{t / base_t:.2f}x" if base_t > 0 else "-"
            ratio_p = f"{p / base_p:.2f}x" if base_p > 0 else "-"
            print(f"{world:>2} {run_bench.fmt_size(size_bytes):>8}  {form:<13} "
                  f"{fmt_ms(t):>10} {r:>6.1f} MiB {p:>6.0f} MiB  {ratio_t:>10} {ratio_p:>10}")
    print("(medians over the syncs: time of the slowest rank; rise, the resident memory "
          "a sync newly touched, and peak, its resident set's peak above the process "
          "before its first sync, of the largest rank)")


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--smoke", action="store_true",
                   help="W = 2, 1 MiB, 2 syncs per form (CI)")
    p.add_argument("--world_sizes", default="2,4")
    p.add_argument("--sizes_mib", default="64,256")
    p.add_argument("--iters", type=int, default=5, help="timed syncs per form")
    p.add_argument("--warmup", type=int, default=1, help="untimed syncs per form first")
    p.add_argument("--shared_memory", choices=["auto", "off"], default="auto",
                   help="the workers' REDUCER_SHARED_MEMORY (auto: the same-host "
                        "path where it works)")
    run_bench.add_built_flags(p, ("reducerd", "pythonpath"))
    p.add_argument("--timeout_s", type=float, default=300,
                   help="hard limit for one configuration's processes")
    p.add_argument("--json", help="also write the table's figures here")
    # One rank (internal).
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    p.add_argument("--world_size", type=int, help=argparse.SUPPRESS)
    p.add_argument("--size_bytes", type=int, help=argparse.SUPPRESS)
    p.add_argument("--store_port", type=int, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.smoke:
        args.world_sizes, args.sizes_mib, args.iters, args.warmup = "2", "1", 2, 0
    return args


def main(argv):
    args = parse_args(argv)
    if args.worker:
        worker(args)
        return 0
    command = "bench/metric_sync_bench.py " + " ".join(argv)
    worlds = [int(w) for w in args.world_sizes.split(",")]
    sizes = [int(float(s) * MiB) for s in args.sizes_mib.split(",")]
    env = {k: v for k, v in os.environ.items() if k != "REDUCER_SHARED_MEMORY"}
    if args.shared_memory != "auto":
        env["REDUCER_SHARED_MEMORY"] = args.shared_memory
    env.update(OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join(
        [args.pythonpath] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])))
    rows = []
    try:
        with run_bench.reducerd_in_temp_dir(args.reducerd,
                                            "metric-sync-bench-") as (log_dir, daemon):
            for world in worlds:
                for size in sizes:
                    records = launch(args, daemon, env, log_dir, world, size)
                    rows.append((world, size, summarize(records, world, args.iters)))
    except RunError as e:
        print(f"FAILED: {e}", file=sys.stderr)
        return 2
    print_table(command, rows)
    if args.json:
        Path(args.json).write_text(json.dumps([
            {"world_size": w, "size_bytes": s,
             **{f"{form}_{k}": v for form, (t, r, p) in summary.items()
                for k, v in (("seconds", t), ("rise_mib", r), ("peak_mib", p))}}
            for w, s, summary in rows], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
