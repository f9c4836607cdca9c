#!/usr/bin/env python3
"""Four tenants on one reducerd: three healthy, the fourth hostile in turn.

    bazel build //server:reducerd //bench:healthy_tenant //bench:hostile_tenant
    python3 bench/tenants_bench.py [--iters=300] [--budget_bytes=536870912]
    python3 bench/tenants_bench.py --cases=unread,jobs     # some cases only
    python3 bench/tenants_bench.py --smoke                 # one short round of each

One reducerd per round, on a free loopback port, on its defaults except
--memory_budget_bytes (--budget_bytes) and a tokens file of four tenants
(tenant-a, tenant-b, tenant-c and tenant-h, each a line with the SHA-256 of
a random token, made here with hashlib). In every round the three healthy
tenants each run a job of --world_size ranks (bench/healthy_tenant: one
process, a Client per rank, the gRPC path) doing --warmup + --iters float32
SUM all-reduces of --size_bytes back to back, every result checked. The
first round has no hostile tenant (the baseline); in each of the others
tenant-h (bench/hostile_tenant) first does one of these, and the healthy
tenants start once it holds what it took:

  unread     a Collectives stream of --unread_calls all-gathers of 1 MiB
             whose answers it never reads;
  malformed  --malformed_calls calls with an invalid dtype from rank 0 of a
             64-rank job;
  jobs       one-rank jobs Joined until reducerd refuses (at most 1100);
  memory     two jobs each Sending half the budget less 64 KiB to a rank
             that never receives;
  silent     1100 Collectives streams opened from this address and left
             silent;
  join       Joins naming its own rank 0's session with a wrong world size,
             and an exact retry of that rank's Join, between all-reduces of
             its own job.

Per round it reports the healthy tenants' p50 and p99 latency (every rank's
timed calls, pooled) and their ratio to the baseline's, the calls reducerd
refused them and wrong results (both must be 0), reducerd's peak RSS (VmHWM
of that round's reducerd) against --budget_bytes plus UNCOUNTED_BYTES (what
the budget does not count: docs/deployment.md), the warning lines reducerd
wrote, and what the hostile tenant got. Targets: p99 at most 2x the
baseline's, nothing refused, the peak within the limit. Prints one table
under the command that made it; --json writes every round's figures. Exits
non-zero when a process fails or times out; a missed target is reported,
not an error (the smoke test checks refusals and memory).
"""

import hashlib
import json
import secrets
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))
import run_bench  # noqa: E402  (processes, reducerd, formatting)
from run_bench import KiB, MiB, fmt_size, fmt_time, percentile  # noqa: E402

CASES = ("unread", "malformed", "jobs", "memory", "silent", "join")
HEALTHY = ("tenant-a", "tenant-b", "tenant-c")
HOSTILE = "tenant-h"
P99_RATIO_TARGET = 2.0
# What reducerd may hold besides --memory_budget_bytes: the binary, its
# threads and heap at rest, gRPC's buffers per connection and stream, and
# --kept_results_bytes (64 MiB); docs/deployment.md measures each part.
UNCOUNTED_BYTES = 150 * MiB
ENGAGE_TIMEOUT_S = 60.0
RELEASE_TIMEOUT_S = 30.0

# The binaries it runs (flags of run_bench.BUILT).
BUILT = ("reducerd", "healthy_tenant", "hostile_tenant")
# The flags whose defaults --smoke changes: (help, default, smoke default,
# least value or None).
SMOKE_FLAGS = {
    "iters": ("timed all-reduces per healthy rank", 300, 20, 1),
    "warmup": ("untimed all-reduces per healthy rank first", 20, 3, 0),
    "world_size": ("ranks of each healthy tenant's job", 2, 2, 1),
    "size_bytes": ("bytes per healthy all-reduce", 64 * KiB, 64 * KiB, None),
    "budget_bytes": ("reducerd's --memory_budget_bytes", 512 * MiB, 256 * MiB,
                     64 * MiB),
    "unread_calls": ("unread: all-gathers of 1 MiB never read", 1500, 600, 1),
    "malformed_calls": ("malformed: calls with an invalid dtype", 50000, 5000, 1),
}


def fmt_latency(us):
    """fmt_time, or "-" when no call succeeded (nan)."""
    return "-" if us != us else fmt_time(us)


def tokens_file(path):
    """Writes the tokens file of the four tenants to path; their tokens."""
    tokens = {t: secrets.token_hex(16) for t in (*HEALTHY, HOSTILE)}
    path.write_text("".join(
        f"{t} {hashlib.sha256(tok.encode()).hexdigest()}\n" for t, tok in tokens.items()))
    return tokens


def hostile_cmd(args, case, address, token):
    cmd = [str(args.hostile_tenant), f"--target={address}", f"--job={HOSTILE}",
           f"--token={token}", f"--case={case}"]
    if case == "unread":
        cmd.append(f"--calls={args.unread_calls}")
    elif case == "malformed":
        cmd.append(f"--calls={args.malformed_calls}")
    elif case == "memory":
        cmd.append(f"--send_bytes={args.budget_bytes // 2 - 64 * KiB}")
    return cmd


def engage(args, case, address, token, log_prefix):
    """Starts the hostile tenant and waits for its ENGAGED line: (process,
    its stdout path, the line). Raises RunError if it exits or stays silent."""
    out, err = Path(f"{log_prefix}-hostile.out"), Path(f"{log_prefix}-hostile.err")
    with open(out, "wb") as fo, open(err, "wb") as fe:
        proc = subprocess.Popen(hostile_cmd(args, case, address, token), stdout=fo,
                                stderr=fe, stdin=subprocess.PIPE,
                                cwd=run_bench.REPO_ROOT, start_new_session=True)
    deadline = time.monotonic() + ENGAGE_TIMEOUT_S
    while True:
        for line in out.read_text(errors="replace").splitlines():
            if line.startswith("ENGAGED "):
                return proc, out, line[len("ENGAGED "):]
        if proc.poll() is not None or time.monotonic() > deadline:
            run_bench.kill_group(proc, grace_s=2.0)
            raise run_bench.RunError(
                f"hostile tenant ({case}) did not engage: "
                f"{run_bench.tail(out)} {run_bench.tail(err)}")
        time.sleep(0.02)


def release(proc, out, case):
    """Closes the hostile tenant's stdin (it lets go) and returns its summary."""
    proc.stdin.close()
    try:
        proc.wait(timeout=RELEASE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        run_bench.kill_group(proc, grace_s=2.0)
        return f"did not let go within {RELEASE_TIMEOUT_S:.0f} s (killed)"
    for line in out.read_text(errors="replace").splitlines():
        if line.startswith("{"):
            return json.loads(line)["summary"]
    return f"exited {proc.returncode} without a summary"


def run_healthy(args, address, tokens, log_prefix):
    """The healthy tenants' records, one each."""
    cmds = [[str(args.healthy_tenant), f"--target={address}", f"--job={t}",
             f"--token={tokens[t]}", f"--world_size={args.world_size}",
             f"--size_bytes={args.size_bytes}", f"--iters={args.iters}",
             f"--warmup={args.warmup}"] for t in HEALTHY]
    run_bench.run_processes(cmds, log_prefix, args.timeout_s)
    records = []
    for i in range(len(cmds)):
        lines = [l for l in Path(f"{log_prefix}-{i}.out").read_text().splitlines()
                 if l.startswith("{")]
        if len(lines) != 1:
            raise run_bench.RunError(f"healthy tenant {HEALTHY[i]} printed "
                                     f"{len(lines)} records")
        records.append(json.loads(lines[0]))
    return records


def warning_lines(log_path):
    return sum(1 for line in Path(log_path).read_text(errors="replace").splitlines()
               if " WARN " in line or '"level":"WARN"' in line)


def run_round(args, case, log_dir):
    """One round on a fresh reducerd; case None is the baseline."""
    name = case or "none"
    tokens = tokens_file(log_dir / f"{name}.tokens")
    daemon = run_bench.ReducerDaemon(
        args.reducerd, log_dir / f"{name}-reducerd.log",
        extra_flags=[f"--job_tokens_file={log_dir / f'{name}.tokens'}",
                     f"--memory_budget_bytes={args.budget_bytes}"])
    hostile, engaged, summary = None, "", ""
    try:
        if case:
            hostile, out, engaged = engage(args, case, daemon.address,
                                           tokens[HOSTILE], log_dir / name)
        records = run_healthy(args, daemon.address, tokens, log_dir / name)
        peak_kib = daemon.proc_status("VmHWM")
        alive = daemon.alive()
        if hostile is not None:
            summary = release(hostile, out, case)
            hostile = None
    finally:
        if hostile is not None:
            run_bench.kill_group(hostile, grace_s=2.0)
        daemon.stop()
    latencies = [x for r in records for x in r["latencies_us"]]
    return {
        "case": name, "engaged": engaged, "hostile": summary,
        "p50_us": percentile(latencies, 50) if latencies else float("nan"),
        "p99_us": percentile(latencies, 99) if latencies else float("nan"),
        "timed_calls": len(latencies),
        "refused": sum(r["refused"] for r in records),
        "first_refusal": next((r["first_refusal"] for r in records
                               if r["first_refusal"]), ""),
        "wrong": sum(r["wrong"] for r in records),
        "peak_rss_bytes": (peak_kib or 0) * KiB, "reducerd_alive": alive,
        "warning_lines": warning_lines(log_dir / f"{name}-reducerd.log"),
        "healthy": records,
    }


def report(args, command, rounds):
    base = rounds[0]
    limit = args.budget_bytes + UNCOUNTED_BYTES
    print(f"\n== Four tenants on one reducerd: three healthy W = {args.world_size} "
          f"jobs of {fmt_size(args.size_bytes)} float32 SUM all-reduces "
          f"({args.iters} timed calls a rank), the fourth hostile in turn; "
          f"--memory_budget_bytes {fmt_size(args.budget_bytes)}")
    print(f"command: {command}")
    header = ["hostile", "healthy p50", "healthy p99", "p50 ratio",
              f"p99 ratio (<= {P99_RATIO_TARGET:g})", "refused (0)", "wrong (0)",
              f"peak RSS (<= {limit // MiB} MiB)", "warn lines", "targets"]
    rows = []
    for r in rounds:
        p50_ratio = r["p50_us"] / base["p50_us"]
        p99_ratio = r["p99_us"] / base["p99_us"]
        within = r["peak_rss_bytes"] <= limit and r["reducerd_alive"]
        r.update(p50_ratio=p50_ratio, p99_ratio=p99_ratio, rss_within=within,
                 met=(p99_ratio <= P99_RATIO_TARGET and r["refused"] == 0
                      and r["wrong"] == 0 and within))
        rss = f"{r['peak_rss_bytes'] // MiB} MiB {'yes' if within else 'no'}"
        if not r["reducerd_alive"]:
            rss += " (reducerd died)"
        rows.append([r["case"], fmt_latency(r["p50_us"]), fmt_latency(r["p99_us"]),
                     f"{p50_ratio:.2f}", f"{p99_ratio:.2f}", str(r["refused"]),
                     str(r["wrong"]), rss, str(r["warning_lines"]),
                     "met" if r["met"] else "missed"])
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows)]
    for row in [header] + rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip())
    print("p50/p99: every healthy rank's timed calls pooled; ratios against the "
          "round without a hostile tenant (none). peak RSS: VmHWM of the round's "
          f"reducerd, against the budget plus {UNCOUNTED_BYTES // MiB} MiB it "
          "does not count.")
    for r in rounds[1:]:
        print(f"{r['case']}: hostile held {r['engaged']}; at the end: {r['hostile']}")
        if r["first_refusal"]:
            print(f"{r['case']}: first refusal of a healthy tenant: {r['first_refusal']}")


def parse_args(argv):
    p = run_bench.DriverParser(
        __doc__, SMOKE_FLAGS, BUILT, "nothing (no Python workers)", timeout_s=300,
        smoke_help="one short round of each case, budget 256 MiB",
        json_help="write every round's figures here")
    p.add_argument("--cases", default=",".join(CASES),
                   help=f"the hostile cases, in order (default {','.join(CASES)})")
    args = p.parse_args(argv)
    args.cases = [c for c in args.cases.split(",") if c]
    unknown = [c for c in args.cases if c not in CASES]
    if unknown:
        p.error(f"unknown --cases {','.join(unknown)}; known: {','.join(CASES)}")
    if args.size_bytes <= 0 or args.size_bytes % 4:
        p.error("--size_bytes must be a positive multiple of 4")
    for name in BUILT:
        setattr(args, name, getattr(args, name).absolute())
    return args


def main(argv):
    args = parse_args(argv)
    command = shlex.join(["bench/tenants_bench.py"] + argv)
    run_bench.require_built(args, BUILT)
    rounds = []
    with tempfile.TemporaryDirectory(prefix="tenants-bench-") as tmp:
        try:
            for case in [None, *args.cases]:
                start = time.monotonic()
                rounds.append(run_round(args, case, Path(tmp)))
                print(f"{case or 'none'}: done in {time.monotonic() - start:.1f} s",
                      flush=True)
        except run_bench.RunError as e:
            run_bench.print_log_tails(tmp, "*.err")
            print(f"tenants_bench: {e}", file=sys.stderr)
            return 1
    report(args, command, rounds)
    if args.json:
        args.json.write_text(json.dumps({"command": command, "rounds": rounds},
                                        indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
