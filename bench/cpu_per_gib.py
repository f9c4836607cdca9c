#!/usr/bin/env python3
"""CPU time per GiB all-reduced: reducerd and each Reducer rank against Gloo.

    bazel build //server:reducerd //bench:reducer_allreduce_worker
    py="$(tools/pinned_venv.sh python/requirements-dev.txt)/bin/python"
    "$py" bench/cpu_per_gib.py [--world_size=4] [--rounds=3] [--sizes=4194304,67108864]
    "$py" bench/cpu_per_gib.py --shared_memory=required  # the same-host path
    "$py" bench/cpu_per_gib.py --smoke                   # W = 2, 1 MiB, one round

Run it with the project's Python (the venv of python/requirements-dev.txt,
torch from the package index): the Gloo ranks run under --python, by
default the same interpreter.

Starts one reducerd on a free loopback port and, per size and round, one
launch of W bench/reducer_allreduce_worker ranks (float32 SUM, out of place,
the gRPC path unless --shared_memory says otherwise) and one of W Gloo ranks
(bench/gloo_allreduce.py under --python, OMP_NUM_THREADS=1), in that order.
What it counts, all as CPU seconds (user and system, every thread) per GiB
of tensor all-reduced (the tensor's size times the calls):

- rank: rank 0's process over its calls, warm-up included (the workers'
  cpu_us_per_call; every rank does the same work);
- reducerd: the daemon's CPU over the whole launch, from /proc/<pid>/stat
  before and after (joining and leaving included, which the call counts
  make small: --iters per size);
- total: W ranks plus reducerd, the machine's CPU for the all-reduce; Gloo's
  is W ranks.

Prints one table under the command line that produced it: per size and
system the median latency, the three figures (medians over the rounds) and
total/Gloo's total. Every worker checks its last result against the closed
form. --json writes every round's figures. Exits non-zero when a launch
fails.
"""

import json
import os
import shlex
import statistics
import sys
import uuid
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))
import run_bench  # noqa: E402  (processes, reducerd, formatting)
from run_bench import GiB, MiB, fmt_size, fmt_time  # noqa: E402


def iters_for(size, smoke):
    """(timed, warm-up) calls of one launch: about 1 GiB per rank for large
    sizes, enough calls for small ones."""
    if smoke:
        return 3, 1
    return max(10, min(200, GiB // size)), 2


def process_cpu_s(pid):
    """The CPU seconds (user + system, every thread) process `pid` has used."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rank0_record(stdout, system, size):
    """Rank 0's one JSON line for `size`, checked to be what was asked."""
    records = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    if len(records) != 1 or records[0].get("size_bytes") != size:
        raise run_bench.RunError(f"{system}: expected one record of {size} B, got "
                                 f"{[r.get('size_bytes') for r in records]}")
    if "cpu_us_per_call" not in records[0]:
        raise run_bench.RunError(f"{system}: its record has no cpu_us_per_call")
    return records[0]


def per_gib(cpu_s, bytes_reduced):
    """CPU seconds per GiB of tensor all-reduced."""
    return cpu_s * GiB / bytes_reduced


def run_reducer(args, daemon, size, log_prefix):
    iters, warmup = iters_for(size, args.smoke)
    job = f"cpu-per-gib-{uuid.uuid4().hex[:12]}"
    cmds = [[str(args.reducer_worker), f"--target={daemon.address}", f"--job={job}",
             f"--rank={r}", f"--world_size={args.world_size}", f"--sizes={size}",
             f"--iters={iters}", f"--warmup={warmup}",
             f"--shared_memory={args.shared_memory}"] for r in range(args.world_size)]
    before = process_cpu_s(daemon.proc.pid)
    out = run_bench.run_processes(cmds, log_prefix, args.timeout_s,
                                  dict(os.environ, **run_bench.MALLOC_ENV))
    daemon_cpu = process_cpu_s(daemon.proc.pid) - before
    record = rank0_record(out, "reducer", size)
    rank = per_gib(record["cpu_us_per_call"] * 1e-6, size)
    server = per_gib(daemon_cpu, size * (iters + warmup))
    return {"latency_us": statistics.median(record["latencies_us"]), "rank": rank,
            "reducerd": server, "total": args.world_size * rank + server}


def run_gloo(args, size, log_prefix):
    iters, warmup = iters_for(size, args.smoke)
    port = run_bench.free_port()
    cmds = [[args.python, str(BENCH_DIR / "gloo_allreduce.py"), f"--rank={r}",
             f"--world_size={args.world_size}", f"--port={port}", f"--sizes={size}",
             f"--iters={iters}", f"--warmup={warmup}", f"--timeout_s={args.timeout_s}"]
            for r in range(args.world_size)]
    env = dict(os.environ, OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo",
               **run_bench.MALLOC_ENV)
    out = run_bench.run_processes(cmds, log_prefix, args.timeout_s, env)
    record = rank0_record(out, "gloo", size)
    rank = per_gib(record["cpu_us_per_call"] * 1e-6, size)
    return {"latency_us": statistics.median(record["latencies_us"]), "rank": rank,
            "reducerd": None, "total": args.world_size * rank}


def summarize(rounds, size, system):
    """Medians over the rounds of one size and system."""
    got = [r[system] for r in rounds if r["size"] == size]
    out = {"latency_us": statistics.median(g["latency_us"] for g in got)}
    for key in ("rank", "reducerd", "total"):
        values = [g[key] for g in got if g[key] is not None]
        out[key] = statistics.median(values) if values else None
    return out


def report(args, command, rounds):
    path = "gRPC" if args.shared_memory == "off" else f"shared_memory={args.shared_memory}"
    print(f"\n== CPU seconds per GiB all-reduced, float32 SUM, W = {args.world_size}, "
          f"Reducer on the {path} path; medians over {args.rounds} round(s)")
    print(f"command: {command}")
    header = ["size", "system", "latency", "rank s/GiB", "reducerd s/GiB",
              "total s/GiB", "total/gloo"]
    rows = []
    summaries = []
    for size in args.sizes:
        gloo = summarize(rounds, size, "gloo")
        for system in ("reducer", "gloo"):
            s = summarize(rounds, size, system)
            summaries.append(dict(s, size_bytes=size, system=system))
            rows.append([fmt_size(size), system, fmt_time(s["latency_us"]),
                         f"{s['rank']:.3f}",
                         "-" if s["reducerd"] is None else f"{s['reducerd']:.3f}",
                         f"{s['total']:.3f}", f"{s['total'] / gloo['total']:.2f}"])
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows)]
    for row in [header] + rows:
        print("  ".join(str(c).rjust(w) for c, w in zip(row, widths)))
    print(f"rank: rank 0's process over its calls; reducerd: the daemon over the whole "
          f"launch; total: {args.world_size} ranks + reducerd (Gloo: {args.world_size} "
          "ranks). Each per GiB of tensor all-reduced.")
    return summaries


# The flags whose defaults --smoke changes: (help, default, smoke default,
# least value or None).
# The binaries it runs (flags of run_bench.BUILT).
BUILT = ("reducerd", "reducer_worker")
SMOKE_FLAGS = {
    "world_size": ("W", 4, 2, 1),
    "rounds": ("rounds", 3, 1, 1),
    "sizes": ("byte sizes, comma-separated", [4 * MiB, 64 * MiB], [MiB], None),
}


def parse_args(argv):
    p = run_bench.DriverParser(
        __doc__, SMOKE_FLAGS, BUILT, "the Gloo ranks",
        smoke_help="W = 2, 1 MiB, 3 calls, one round",
        json_help="write every round's figures here")
    p.add_argument("--shared_memory", choices=("off", "auto", "required"), default="off",
                   help="the Reducer workers' data path (default off: gRPC)")
    return p.parse_args(argv)


def main(argv):
    args = parse_args(argv)
    command = shlex.join(["bench/cpu_per_gib.py"] + argv)
    run_bench.require_built(args, BUILT)
    rounds = []
    try:
        with run_bench.reducerd_in_temp_dir(args.reducerd, "cpu-per-gib-") as (log_dir, daemon):
            for i in range(args.rounds):
                for size in args.sizes:
                    prefix = log_dir / f"r{i}-{size}"
                    reducer = run_reducer(args, daemon, size, f"{prefix}-reducer")
                    gloo = run_gloo(args, size, f"{prefix}-gloo")
                    rounds.append({"round": i, "size": size, "reducer": reducer,
                                   "gloo": gloo})
                print(f"round {i + 1}/{args.rounds} done", flush=True)
    except run_bench.RunError as e:
        print(f"cpu_per_gib: {e}", file=sys.stderr)
        return 1
    summaries = report(args, command, rounds)
    if args.json:
        args.json.write_text(json.dumps({"command": command, "rounds": rounds,
                                         "summaries": summaries}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
