#!/usr/bin/env python3
"""Quorum steps: their cost when nobody fails, the survivors' gap after a kill.

    bazel build //server:reducerd //bench:quorum_step_worker
    py="$(tools/pinned_venv.sh python/requirements-dev.txt)/bin/python"
    "$py" bench/quorum_bench.py [--world_size=4] [--rounds=3] [--size_bytes=67108864]
    "$py" bench/quorum_bench.py --shared_memory=required  # the same-host path
    "$py" bench/quorum_bench.py --skip_torchrun           # Reducer's figures only
    "$py" bench/quorum_bench.py --smoke                   # W = 3, 1 MiB, no torchrun

Run it with the project's Python (the venv of python/requirements-dev.txt,
torch from the package index): part 3 runs torchrun under --python, by
default the same interpreter.

Starts one reducerd on a free loopback port and measures, float32 SUM, W
ranks of bench/quorum_step_worker (the gRPC path unless --shared_memory says
otherwise):

1. No failure: per round, one launch of --iters plain AllReduce calls and one
   of --iters AllReduceQuorum calls (min_ranks 0, the default grace), their
   order alternating between rounds; the median per-call latency of rank 0
   in each, medians over the rounds, and quorum/plain: the median of the
   rounds' ratios (target: at most 1.05), and the ratio of the medians.
2. A kill: one launch of a quorum loop (min_ranks W - 1, --grace_ms) whose
   last rank prints PAUSE before call --kill_at and sleeps; the driver
   SIGKILLs it on seeing the line. Over the survivors' timed steps: the
   median step, the longest step at or after the kill, their difference
   (the gap; target: at most grace + 0.5 s), the time from the kill to the
   survivors' next result, and the contributors of every step after the
   kill (must be 0..W-2; before it, all W).
3. For scale (not with --smoke or --skip_torchrun): the same kill under
   `PYTHON -m torch.distributed.run --nproc_per_node=W --max_restarts=1`
   with bench/gloo_restart_worker.py (Gloo, OMP_NUM_THREADS=1,
   GLOO_SOCKET_IFNAME=lo, torchrun's default monitor interval): the time
   from the kill until every restarted rank has finished its first step.

Every worker checks its results against the closed form. Prints one table
under the command line that produced it; --json writes every launch's
figures. Exits non-zero when a launch fails or the kill did not happen.
"""

import json
import os
import re
import shlex
import signal
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))
import run_bench  # noqa: E402  (processes, reducerd, formatting)
from run_bench import MiB, fmt_size, fmt_time  # noqa: E402

OVERHEAD_TARGET = 1.05  # quorum / plain when nobody fails
GAP_SLACK_S = 0.5       # the gap's target is grace + this


def fmt_span(us):
    """fmt_time, in seconds from 1 s up."""
    return f"{us / 1e6:.2f} s" if us >= 1e6 else fmt_time(us)


def records(text, mode):
    """The worker JSON lines of `mode` in one stdout."""
    got = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
    got = [g for g in got if g.get("mode") == mode]
    if len(got) != 1:
        raise run_bench.RunError(f"expected one {mode} record, got {len(got)}")
    return got[0]


def worker_cmds(args, daemon, mode, iters, extra=()):
    """The W quorum_step_worker command lines of one launch (a fresh job)."""
    job = f"quorum-bench-{mode}-{uuid.uuid4().hex[:12]}"
    base = [str(args.worker), f"--target={daemon.address}", f"--job={job}",
            f"--world_size={args.world_size}", f"--mode={mode}",
            f"--size_bytes={args.size_bytes}", f"--iters={iters}",
            f"--warmup={args.warmup}", f"--shared_memory={args.shared_memory}",
            f"--timeout_s={int(args.timeout_s)}", *extra]
    return [base + [f"--rank={r}"] for r in range(args.world_size)]


def worker_env():
    return dict(os.environ, **run_bench.MALLOC_ENV)


def run_overhead(args, daemon, mode, log_prefix):
    """Rank 0's median per-call latency (us) of one launch of `mode`."""
    out = run_bench.run_processes(worker_cmds(args, daemon, mode, args.iters),
                                  log_prefix, args.timeout_s, worker_env())
    record = records(out, mode)
    return {"median_us": statistics.median(record["latencies_us"]),
            "latencies_us": record["latencies_us"]}


class Killer:
    """watch() for run_processes: SIGKILLs the process that printed
    `PAUSE <step> <pid>` in `log`, once; `kill_s` is when (time.monotonic).
    Raises RunError when `proc` (that rank's process, if given) exits before
    it paused."""

    def __init__(self, log, proc=None):
        self.log, self.proc, self.kill_s = Path(log), proc, None

    def __call__(self):
        if self.kill_s is not None:
            return
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        m = re.search(r"^PAUSE (\d+) (\d+)$", text, re.M)
        if m:
            os.kill(int(m.group(2)), signal.SIGKILL)
            self.kill_s = time.monotonic()
        elif self.proc is not None and self.proc.poll() is not None:
            err = run_bench.tail(self.log.with_suffix(".err"))
            raise run_bench.RunError(f"the rank to kill exited with "
                                     f"{self.proc.returncode} before its pause: {err}")


def run_kill(args, daemon, log_prefix):
    """The quorum loop whose last rank is SIGKILLed before call --kill_at."""
    w = args.world_size
    extra = [f"--min_ranks={w - 1}", f"--grace_ms={args.grace_ms}"]
    cmds = worker_cmds(args, daemon, "quorum", args.kill_steps, extra)
    victim_cmd = cmds[-1] + [f"--pause_at={args.kill_at}"]
    victim_out = Path(f"{log_prefix}-victim.out")
    with open(victim_out, "wb") as fo, open(f"{log_prefix}-victim.err", "wb") as fe:
        victim = subprocess.Popen(victim_cmd, stdout=fo, stderr=fe,
                                  stdin=subprocess.DEVNULL, env=worker_env(),
                                  cwd=run_bench.REPO_ROOT, process_group=0)
    killer = Killer(victim_out, victim)
    try:
        run_bench.run_processes(cmds[:-1], log_prefix, args.timeout_s, worker_env(),
                                watch=killer)
    finally:
        run_bench.kill_group(victim, grace_s=2.0, pgid=victim.pid)
        victim.wait()
    if killer.kill_s is None:
        raise run_bench.RunError("the last rank never paused: nothing was killed")
    survivors = [records(Path(f"{log_prefix}-{r}.out").read_text(), "quorum")
                 for r in range(w - 1)]
    first_after = args.kill_at - args.warmup  # the timed index of the kill's step
    before = ",".join(map(str, range(w)))
    after = ",".join(map(str, range(w - 1)))
    wrong = [(r, i, c) for r, s in enumerate(survivors)
             for i, c in enumerate(s["contributors"])
             if c != (after if i >= first_after else before)]
    if wrong:
        raise run_bench.RunError(f"unexpected contributors (rank, timed step, "
                                 f"contributors): {wrong[:5]}")
    pooled = [x for s in survivors for x in s["latencies_us"]]
    longest = max(x for s in survivors for x in s["latencies_us"][first_after:])
    resumed = max(s["end_s"][first_after] for s in survivors)  # every survivor has it
    median = statistics.median(pooled)
    return {"median_us": median, "longest_us": longest, "gap_us": longest - median,
            "kill_to_result_us": (resumed - killer.kill_s) * 1e6,
            "contributors_after": after, "survivors": survivors}


def run_torchrun(args, log_prefix):
    """The kill under torchrun with Gloo; the time from the kill until every
    restarted rank finished its first step (us)."""
    w = args.world_size
    cmd = [args.python, "-m", "torch.distributed.run", f"--nproc_per_node={w}",
           "--max_restarts=1", f"--master_port={run_bench.free_port()}",
           # No redirection, said as a mapping of a local rank that does not
           # exist: torch 1.13 on Python 3.11 reads the default "0" as None.
           f"--redirects={w}:0", f"--tee={w}:0",
           str(BENCH_DIR / "gloo_restart_worker.py"), f"--size_bytes={args.size_bytes}",
           f"--steps={args.kill_steps}", f"--kill_at={args.kill_at}",
           f"--timeout_s={int(args.timeout_s)}"]
    env = dict(os.environ, OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo",
               **run_bench.MALLOC_ENV)
    killer = Killer(f"{log_prefix}-0.out")
    run_bench.run_processes([cmd], log_prefix, args.timeout_s, env, watch=killer)
    if killer.kill_s is None:
        raise run_bench.RunError("torchrun: the last rank never paused")
    steps = [line.split() for line in Path(f"{log_prefix}-0.out").read_text().splitlines()
             if line.startswith("STEP ")]
    first = [float(f[4]) for f in steps if f[1] == "1" and f[3] == "0"]
    if len(first) != w:
        raise run_bench.RunError(f"torchrun: {len(first)} ranks finished the restarted "
                                 f"job's first step, expected {w}")
    return {"kill_to_first_step_us": (max(first) - killer.kill_s) * 1e6}


def report(args, command, overhead, kill, torchrun):
    path = "gRPC" if args.shared_memory == "off" else f"shared_memory={args.shared_memory}"
    plain = statistics.median(r["plain"]["median_us"] for r in overhead)
    quorum = statistics.median(r["quorum"]["median_us"] for r in overhead)
    # The target's figure pairs the launches of one round (adjacent in time,
    # so sharing the machine's drift); the ratio of the medians is shown too.
    ratios = [r["quorum"]["median_us"] / r["plain"]["median_us"] for r in overhead]
    ratio = statistics.median(ratios)
    gap_target_us = (args.grace_ms / 1e3 + GAP_SLACK_S) * 1e6
    verdict = lambda ok: "met" if ok else "missed"  # noqa: E731
    print(f"\n== Quorum steps, float32 SUM, W = {args.world_size}, "
          f"{fmt_size(args.size_bytes)}, the {path} path; no failure: medians over "
          f"{args.rounds} round(s) of {args.iters} calls; kill: rank "
          f"{args.world_size - 1} before step {args.kill_at}, min_ranks "
          f"{args.world_size - 1}, grace {args.grace_ms} ms")
    print(f"command: {command}")
    rows = [
        ["no failure", "plain AllReduce", fmt_span(plain), "", ""],
        ["no failure", "AllReduceQuorum", fmt_span(quorum), "", ""],
        ["no failure", "quorum/plain per round", f"{ratio:.3f}",
         f"<= {OVERHEAD_TARGET:.2f}", verdict(ratio <= OVERHEAD_TARGET)],
        ["no failure", "quorum/plain of medians", f"{quorum / plain:.3f}", "", ""],
        ["kill", "median step", fmt_span(kill["median_us"]), "", ""],
        ["kill", "longest step from the kill", fmt_span(kill["longest_us"]), "", ""],
        ["kill", "gap", fmt_span(kill["gap_us"]), f"<= {fmt_span(gap_target_us)}",
         verdict(kill["gap_us"] <= gap_target_us)],
        ["kill", "kill to next result", fmt_span(kill["kill_to_result_us"]), "", ""],
        ["kill", "contributors after", kill["contributors_after"], "", ""],
    ]
    if torchrun is not None:
        rows.append(["torchrun gloo", "kill to first step again",
                     fmt_span(torchrun["kill_to_first_step_us"]), "", ""])
    header = ["case", "figure", "measured", "target", ""]
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows)]
    for row in [header] + rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip())
    if torchrun is None:
        print("torchrun: skipped (--smoke or --skip_torchrun)")
    print("quorum/plain per round: the median over the rounds of each round's "
          f"ratio ({', '.join(f'{r:.3f}' for r in ratios)}).")
    print("no failure: rank 0's median call; kill: the survivors' steps (ranks "
          f"0-{args.world_size - 2}), the gap being the longest step from the kill "
          "on minus the median step.")
    return {"plain_median_us": plain, "quorum_median_us": quorum,
            "round_ratios": ratios, "ratio": ratio, "ratio_of_medians": quorum / plain,
            "gap_us": kill["gap_us"], "gap_target_us": gap_target_us}


# The flags whose defaults --smoke changes: (help, default, smoke default,
# least value or None).
# The binaries it runs (flags of run_bench.BUILT; --worker: quorum_step_worker).
BUILT = ("reducerd", "worker")
SMOKE_FLAGS = {
    "world_size": ("W", 4, 3, 2),
    "rounds": ("rounds", 3, 1, 1),
    "size_bytes": ("tensor size", 64 * MiB, MiB, None),
    "iters": ("timed calls per no-failure launch", 15, 3, 1),
    "warmup": ("untimed calls first", 2, 1, 0),
    "kill_steps": ("timed calls of the kill loop, after --warmup", 12, 5, None),
    "kill_at": ("the call, warm-up included, before which the last rank is killed", 6, 3,
                None),
    "grace_ms": ("QuorumOptions::grace of the kill loop", 2000, 300, None),
}


def parse_args(argv):
    p = run_bench.DriverParser(
        __doc__, SMOKE_FLAGS, BUILT, "torchrun", timeout_s=300,
        smoke_help="W = 3, 1 MiB, few calls, grace 300 ms, one round, no torchrun",
        json_help="write every launch's figures here")
    p.add_argument("--shared_memory", choices=("off", "auto", "required"), default="off",
                   help="the workers' data path (default off: gRPC)")
    p.add_argument("--skip_torchrun", action="store_true", help="leave out part 3")
    args = p.parse_args(argv)
    # Workers run in the repository's root: relative paths are made
    # absolute here, while the command printed keeps them as given.
    args.reducerd, args.worker = args.reducerd.absolute(), args.worker.absolute()
    if args.size_bytes <= 0 or args.size_bytes % 4:
        p.error("--size_bytes must be a positive multiple of 4")
    if not args.warmup <= args.kill_at < args.warmup + args.kill_steps:
        p.error("--kill_at must be at least --warmup and below --warmup + --kill_steps")
    return args


def main(argv):
    args = parse_args(argv)
    command = shlex.join(["bench/quorum_bench.py"] + argv)
    run_bench.require_built(args, BUILT)
    overhead, kill, torchrun = [], None, None
    try:
        with run_bench.reducerd_in_temp_dir(args.reducerd, "quorum-bench-") as (log_dir, daemon):
            for i in range(args.rounds):
                modes = ("plain", "quorum") if i % 2 == 0 else ("quorum", "plain")
                overhead.append({m: run_overhead(args, daemon, m, log_dir / f"r{i}-{m}")
                                 for m in modes})
                print(f"no failure: round {i + 1}/{args.rounds} done", flush=True)
            kill = run_kill(args, daemon, log_dir / "kill")
            print("kill: done", flush=True)
            if not (args.smoke or args.skip_torchrun):
                torchrun = run_torchrun(args, log_dir / "torchrun")
                print("torchrun: done", flush=True)
    except run_bench.RunError as e:
        print(f"quorum_bench: {e}", file=sys.stderr)
        return 1
    summary = report(args, command, overhead, kill, torchrun)
    if args.json:
        args.json.write_text(json.dumps({"command": command, "overhead": overhead,
                                         "kill": kill, "torchrun": torchrun,
                                         "summary": summary}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
