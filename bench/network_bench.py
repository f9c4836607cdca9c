#!/usr/bin/env python3
"""The network path: Reducer over gRPC against Gloo, on loopback and across hosts.

    bazel build //server:reducerd //bench:reducer_allreduce_worker \\
        //bench:virtual_network //bench:grpc_echo_bench
    py="$(tools/pinned_venv.sh python/requirements-dev.txt)/bin/python"
    "$py" bench/network_bench.py                 # both tables; writes bench/out-network/
    "$py" bench/network_bench.py --skip_cluster  # the loopback table alone
    "$py" bench/network_bench.py --smoke         # the CI form: W = 2 loopback, S = 1,2 cluster

It runs under the project's Python (the venv of python/requirements-dev.txt,
torch from the package index), whose torch the Gloo ranks use.

One invocation, one process driving it, runs:

- the loopback table (bench/run_bench.py's runners): Reducer over gRPC
  (reducer_allreduce_worker --shared_memory=off, one reducerd on a free
  127.0.0.1 port) against Gloo over loopback TCP, W = 4 ranks, float32 SUM
  at --loopback_sizes plus the metric-sync pattern (2 float64), the systems
  interleaved size group by size group. Beside each row: reducer/gloo and
  its target; beside the --echo_sizes rows, the bandwidth model of
  loopback: W concurrent bench/grpc_echo_bench clients (--mode=cq_stream,
  one long-lived stream each) echoing the same bytes through one echo
  server, the pooled median of their round trips and echo/gloo;
- the cluster table (bench/shard_bench.py's network): W = 4 worker hosts
  and S shard hosts in network namespaces, every link capped at --rate,
  Reducer with S in --shards against Gloo at --cluster_sizes, reducerd on
  its defaults, with shard_bench's link model (model, t / model, model vs
  gloo) beside each figure. Skipped, with its reason, under --skip_cluster
  or where namespaces cannot be made (torch missing is a failure);
- the relay table (bench/relay_cluster.py): H worker hosts x R ranks
  (--relay_configs, default 2x4 and 4x2), S in --relay_shards (1,2), at
  --relay_sizes (4, 16, 64 MiB): Gloo's ring over the same ranks, every
  rank flat to the shards, and a relay (reducerd --upstream) per host;
  and one host of 4 ranks through a relay against the same-host path
  straight to a reducerd; busiest-link model and model ratio beside each
  figure. Skipped, with its reason, under --skip_relay or without
  namespaces;
- the targets table: every target, the measured value, met or missed (or
  not measured, and why).

Writes OUT_DIR/results.json (every call's latency, the tables, the targets)
and OUT_DIR/results.md (the three tables); the runs' logs go to
OUT_DIR/loopback/logs and OUT_DIR/cluster/logs. Exits 1 when a run failed;
a missed target or a skipped table does not fail it.

--smoke: loopback W = 2 at 4 B and 4 KiB (run_bench's --quick iterations),
the echo beside 4 KiB; cluster S = 1,2 at 4 KiB and 2 MiB, one round of 2
calls (shard_bench's --smoke). The targets are set for W = 4; at W = 2
their verdicts only show the table works. The relay table's smoke form:
2 hosts x 2 ranks, S = 1, 64 KiB and 1 MiB, one host of 2 ranks.

Usage: bench/network_bench.py [--smoke] [--skip_cluster]
                              [--loopback_sizes=4,4096,...] [--echo_sizes=...]
                              [--cluster_sizes=4194304,67108864] [--rate=1gbit]
                              [--shards=1,4] [--out_dir=bench/out-network]
Needs: root (network namespaces), iproute2, torch in the interpreter.
"""

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))
import run_bench as rb  # noqa: E402  (loopback runners, reducerd, stats)
import shard_bench as sb  # noqa: E402  (the virtual network and its model)
import relay_cluster as rc  # noqa: E402  (ranks per host, relays)

REPO_ROOT = rb.REPO_ROOT
KiB, MiB = rb.KiB, rb.MiB

WORLD = 4
SMOKE_WORLD = 2
LOOPBACK_SIZES = [4, 4 * KiB, 256 * KiB, 4 * MiB, 64 * MiB]
SMOKE_LOOPBACK_SIZES = [4, 4 * KiB]
ECHO_SIZES = [4, 4 * MiB, 64 * MiB]
SMOKE_ECHO_SIZES = [4 * KiB]
CLUSTER_SIZES = [4 * MiB, 64 * MiB]
SMOKE_CLUSTER_SIZES = sb.SMOKE_SIZES  # 4 KiB, 2 MiB
SMOKE_SHARDS = "1,2"
ECHO_MODE = "cq_stream"

# Loopback targets, reducer median / gloo median at most, by (pattern, size).
LOOPBACK_TARGETS = {("allreduce", 4): 0.5, ("allreduce", 4 * KiB): 0.5,
                    ("allreduce", 256 * KiB): 0.5,
                    (rb.METRIC_SYNC, rb.METRIC_SYNC_BYTES): 0.5,
                    ("allreduce", 4 * MiB): 1.1, ("allreduce", 64 * MiB): 1.15}
# Cluster targets in table order: (label, bound). shard_bench.check_targets
# checks the 64 MiB ones (its labels and bounds); cluster_targets the 4 MiB one.
S4_4MIB = ("S=4 4 MiB, reducer / gloo time", "<= 1.00")
CLUSTER_TARGETS = [S4_4MIB,
                   ("S=4 64 MiB, reducer / gloo time", "<= 0.75 (model 0.67)"),
                   ("S=1 64 MiB, reducer time / model", "within 20 % (0.80..1.20)")]


# --------------------------------------------------------------------------
# Loopback: Reducer and Gloo (run_bench.py), and the echo model.

def loopback_args(args):
    """run_bench.py's flags for the loopback table, parsed by its own
    parser. Returns its argparse namespace (out_dir: OUT_DIR/loopback)."""
    argv = ["--systems=reducer,gloo", f"--world_sizes={args.world}",
            f"--sizes={','.join(map(str, args.loopback_sizes))}",
            f"--out_dir={args.out_dir / 'loopback'}",
            f"--reducerd={args.reducerd}",
            f"--reducer_worker={args.reducer_worker}",
            f"--echo_bench={args.echo_bench}",
            f"--timeout_s={args.timeout_s}", f"--wait_idle_s={args.wait_idle_s}"]
    return rb.parse_args(argv + (["--quick"] if args.smoke else []))


def run_loopback(args):
    """Runs Reducer and Gloo at W = args.world, then the echo model.
    Returns a dict: world_size, records (summarized, with vs_gloo), echo
    (size -> figures or {"skipped": why}), skipped (system -> why),
    failures."""
    rargs = loopback_args(args)
    ctx = rb.Context(rargs)
    shutil.rmtree(ctx.log_dir, ignore_errors=True)
    ctx.log_dir.mkdir(parents=True)
    with tempfile.TemporaryDirectory(prefix="reducer-network-bench-") as tmp:
        try:
            systems = rb.available_systems(rargs, ctx, tmp)
            records, failures, _ = rb.run_all(ctx, systems, [args.world],
                                              rargs.quick, rargs.sizes)
        finally:
            if ctx.daemon:
                ctx.daemon.stop()
                ctx.daemon = None
    for r in records:
        rb.summarize(r)
    rb.add_ratios(records)
    echo = echo_model(ctx, args, failures)
    return {"world_size": args.world, "records": records, "echo": echo,
            "skipped": ctx.skipped, "failures": ctx.setup_failures + failures}


def echo_clients(binary, address, size, world, quick):
    """The W concurrent grpc_echo_bench command lines for one size, with
    run_bench's iterations for the size."""
    iters, warmup = rb.iterations_for(size, quick)
    cmd = [str(binary), f"--target={address}", f"--mode={ECHO_MODE}",
           f"--bytes={size}", f"--iters={iters}", f"--warmup={warmup}"]
    return [cmd] * world


def echo_latencies(log_prefix, world, size):
    """Every client's round trips (us), pooled, from their logs' last JSON
    line. Raises RunError when a client's record is not for `size`."""
    latencies = []
    for i in range(world):
        lines = [l for l in Path(f"{log_prefix}-{i}.out").read_text().splitlines()
                 if l.startswith("{")]
        record = json.loads(lines[-1]) if lines else {}
        if record.get("bytes") != size:
            raise rb.RunError(f"echo client {i}: no record of {size} B")
        latencies += record["latencies_us"]
    return latencies


def echo_one(ctx, args, server, size):
    """One size's echo: W clients at once against `server`. Returns the
    figures; raises RunError when a client fails."""
    log_prefix = ctx.log_dir / f"echo-{size}"
    cmds = echo_clients(args.echo_bench, server.address, size, args.world,
                        args.smoke)
    rb.run_processes(cmds, log_prefix, args.timeout_s)
    latencies = echo_latencies(log_prefix, args.world, size)
    return {"clients": args.world, "mode": ECHO_MODE, "size_bytes": size,
            "median_us": rb.percentile(latencies, 50),
            "p90_us": rb.percentile(latencies, 90), "latencies_us": latencies}


def echo_model(ctx, args, failures):
    """The loopback bandwidth model beside each --echo_sizes row that was
    run: one echo server (bench/grpc_echo_bench --listen) and W clients per
    size. Returns size -> figures or {"skipped": why}; failures of the
    server or of a client go into failures."""
    sizes = [s for s in args.echo_sizes if s in args.loopback_sizes]
    if not sizes:
        return {}
    if not Path(args.echo_bench).exists():
        return {s: {"skipped": f"build {args.echo_bench} first"} for s in sizes}
    echo = {}
    try:
        server = rb.ReducerDaemon(args.echo_bench, ctx.log_dir / "grpc-echo.log")
    except rb.RunError as e:
        failures.append(f"echo server: {e}")
        return {s: {"skipped": f"echo server failed: {e}"} for s in sizes}
    try:
        for size in sizes:
            print(f"running echo x{args.world} {rb.fmt_size(size)}",
                  file=sys.stderr, flush=True)
            try:
                echo[size] = echo_one(ctx, args, server, size)
            except (rb.RunError, OSError, json.JSONDecodeError, KeyError) as e:
                failures.append(f"echo {rb.fmt_size(size)}: {e}")
                echo[size] = {"skipped": f"failed: {e}"}
    finally:
        server.stop()
    return echo


def loopback_rows(loopback):
    """The loopback table as dicts, one per (pattern, size) that Reducer or
    Gloo measured, in run_bench's order: size label, reducer and gloo
    medians, reducer/gloo, target, echo figures."""
    by = {}
    for r in loopback["records"]:
        by.setdefault((r["pattern"], r["size_bytes"]), {})[r["system"]] = r
    rows = []
    for key in sorted(by, key=lambda k: (k[0] == rb.METRIC_SYNC, k[1])):
        reducer, gloo = by[key].get("reducer"), by[key].get("gloo")
        echo = loopback["echo"].get(key[1]) if key[0] == "allreduce" else None
        echo_us = echo.get("median_us") if echo else None
        rows.append({
            "pattern": key[0], "size_bytes": key[1],
            "size": "metric sync" if key[0] == rb.METRIC_SYNC else rb.fmt_size(key[1]),
            "reducer_us": reducer and reducer["median_us"],
            "gloo_us": gloo and gloo["median_us"],
            "reducer_vs_gloo": reducer and reducer.get("vs_gloo"),
            "target": LOOPBACK_TARGETS.get(key),
            "echo_us": echo_us,
            "echo_vs_gloo": echo_us / gloo["median_us"] if echo_us and gloo else None,
            "echo_skipped": echo.get("skipped") if echo else None})
    return rows


def loopback_cells(rows, world):
    """The loopback table as rows of strings, header first."""
    head = ("size", "reducer", "gloo", "reducer/gloo", "target",
            f"echo ({world} clients)", "echo/gloo")
    out = [head]
    for r in rows:
        out.append((r["size"], fmt_us(r["reducer_us"]), fmt_us(r["gloo_us"]),
                    fmt_ratio(r["reducer_vs_gloo"]),
                    f"<= {r['target']:.2f}" if r["target"] else "-",
                    fmt_us(r["echo_us"]) if not r["echo_skipped"] else "n/a",
                    fmt_ratio(r["echo_vs_gloo"])))
    return out


def loopback_targets(rows, world):
    """(figure, value, target, ok) per loopback target; value and ok are
    None where the row was not measured."""
    out = []
    measured = {(r["pattern"], r["size_bytes"]): r for r in rows}
    for key, bound in LOOPBACK_TARGETS.items():
        name = "metric sync" if key[0] == rb.METRIC_SYNC else rb.fmt_size(key[1])
        r = measured.get(key)
        v = r and r["reducer_vs_gloo"]
        out.append((f"loopback W={world} {name}, reducer / gloo", v,
                    f"<= {bound:.2f}", None if v is None else v <= bound))
    return out


# --------------------------------------------------------------------------
# Cluster: shard_bench.py's network, Reducer on S shards against Gloo.

def cluster_args(args):
    """shard_bench.py's flags for the cluster table, parsed by its own
    parser (out_dir: OUT_DIR/cluster); --smoke keeps our --shards."""
    argv = [f"--rate={args.rate}", f"--shards={','.join(map(str, args.shards))}",
            "--systems=reducer,gloo",
            f"--sizes={','.join(map(str, args.cluster_sizes))}",
            f"--out_dir={args.out_dir / 'cluster'}",
            f"--reducerd={args.reducerd}",
            f"--reducer_worker={args.reducer_worker}",
            f"--virtual_network={args.virtual_network}",
            f"--timeout_s={args.timeout_s}", f"--wait_idle_s={args.wait_idle_s}"]
    sargs = sb.parse_args(argv + (["--smoke"] if args.smoke else []))
    sargs.shards = args.shards  # shard_bench's --smoke sets S = 2 alone
    return sargs


def run_cluster(args):
    """Runs the cluster table. Returns a dict: records (summarized by
    shard_bench), failures, rate, shards, wall_s; or {"skipped": why} where
    it cannot run here. A binary that is not built is a failure."""
    if args.skip_cluster:
        return {"skipped": "--skip_cluster"}
    sargs = cluster_args(args)
    try:
        sb.check_machine(sargs)
    except sb.Skip as e:
        return {"skipped": str(e)}
    except rb.RunError as e:
        return {"skipped": f"failed: {e}", "failures": [f"cluster: {e}"]}
    start = time.monotonic()
    try:
        records, failures, _ = sb.measure(sargs)
    except sb.Skip as e:
        return {"skipped": str(e)}
    sb.summarize(records, sb.rate_bytes_per_s(sargs.rate))
    return {"records": sorted(records, key=sb.sort_key), "failures": failures,
            "rate": sargs.rate, "shards": sargs.shards,
            "wall_s": time.monotonic() - start}


def cluster_targets(cluster):
    """(figure, value, target, ok) per cluster target: shard_bench's
    check_targets and S = 4 at 4 MiB; value and ok are None where not
    measured."""
    records = cluster.get("records", [])
    checked = {label: (v, t, ok) for label, v, t, ok in sb.check_targets(records)}
    s4 = next((r for r in records if (r["system"], r["shards"], r["size_bytes"])
               == ("reducer", 4, 4 * MiB) and "vs_gloo" in r), None)
    if s4:
        checked[S4_4MIB[0]] = (s4["vs_gloo"], S4_4MIB[1], s4["vs_gloo"] <= 1.0)
    return [(f"cluster {label}", *checked.get(label, (None, bound, None)))
            for label, bound in CLUSTER_TARGETS]


# --------------------------------------------------------------------------
# Reporting.

def fmt_us(us):
    """A latency, or "-" when not measured."""
    return rb.fmt_time(us) if us is not None else "-"


def fmt_ratio(x):
    """A ratio with two decimals, or "-"."""
    return f"{x:.2f}" if x is not None else "-"


def print_cells(rows, left=1):
    """Prints rows of strings as an aligned table: the first `left` columns
    flush left, the others right, a rule under the header."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for i, row in enumerate(rows):
        print("  ".join(c.ljust(w) if j < left else c.rjust(w)
                        for j, (c, w) in enumerate(zip(row, widths))).rstrip())
        if i == 0:
            print("  ".join("-" * w for w in widths))


def markdown(rows, left=1):
    """Rows of strings as a Markdown table (lines)."""
    rule = "|" + "|".join(" --- " if i < left else " ---: " for i in range(len(rows[0]))) + "|"
    return (["| " + " | ".join(rows[0]) + " |", rule] +
            ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |"
             for row in rows[1:]])


def loopback_title(world):
    return (f"== loopback table: W={world}, float32 SUM, reducer over gRPC "
            f"(--shared_memory=off) against gloo over loopback TCP; median; "
            f"echo = {world} concurrent grpc_echo_bench {ECHO_MODE} clients of "
            f"the same bytes (the bandwidth model)")


def print_loopback(loopback, rows):
    """Prints the loopback table and what was skipped."""
    print("\n" + loopback_title(loopback["world_size"]))
    print_cells(loopback_cells(rows, loopback["world_size"]))
    for size, e in loopback["echo"].items():
        if "skipped" in e:
            print(f"echo at {rb.fmt_size(size)}: {e['skipped']}")
    for system, why in loopback["skipped"].items():
        print(f"skipped {system}: {why}")


def cluster_title(cluster):
    return (f"== cluster table: W={sb.WORLD} worker hosts, S={','.join(map(str, cluster['shards']))} "
            f"shard hosts, every link {cluster['rate']} each way (network namespaces); "
            f"float32 SUM; median; model = the link caps alone")


def print_cluster(cluster):
    """Prints the cluster table, or a SKIP line with the reason."""
    if "skipped" in cluster:
        print(f"\n== cluster table\nSKIP cluster: {cluster['skipped']}")
        return
    print("\n" + cluster_title(cluster))
    sb.print_table(cluster["records"])


def relay_title(relay):
    return (f"== relay table: H worker hosts x R ranks, shard hosts s0,s1, every "
            f"link {relay['rate']} each way; float32 SUM; median; vs ref = over "
            f"gloo (over direct on one host); busiest link = its bytes one way, "
            f"model = those over the rate; model ratio = model over the ref's model")


def print_relay(relay):
    """Prints the relay table, or a SKIP line with the reason."""
    if "skipped" in relay:
        print(f"\n== relay table\nSKIP relay: {relay['skipped']}")
        return
    print("\n" + relay_title(relay))
    print_cells(rc.table_cells(relay["records"]), left=3)


def target_cells(targets, notes):
    """The targets table as rows of strings, header first; notes: why a
    section's targets were not measured (section prefix -> reason)."""
    out = [("target", "measured", "bound", "verdict")]
    for label, value, bound, ok in targets:
        if ok is None:
            why = next((n for p, n in notes.items() if label.startswith(p)), "")
            verdict = f"not measured{f' ({why})' if why else ''}"
        else:
            verdict = "met" if ok else "MISSED"
        out.append((label, fmt_ratio(value), bound, verdict))
    return out


def print_targets(cells, smoke):
    print("\n== targets table" + (" (set for W=4; --smoke's W=2 figures only "
                                   "show the table works)" if smoke else ""))
    print_cells(cells, left=len(cells[0]))


def write_markdown(path, loopback, rows, cluster, relay, cells):
    """Writes the three tables as Markdown."""
    lines = [f"## {loopback_title(loopback['world_size']).lstrip('= ')}", ""]
    lines += markdown(loopback_cells(rows, loopback["world_size"]))
    lines += [f"\nEcho at {rb.fmt_size(s)}: {e['skipped']}"
              for s, e in loopback["echo"].items() if "skipped" in e]
    if "skipped" in cluster:
        lines += ["", "## cluster table", "", f"Skipped: {cluster['skipped']}"]
    else:
        lines += ["", f"## {cluster_title(cluster).lstrip('= ')}", ""]
        lines += markdown(sb.table_rows(cluster["records"]), left=2)
    if "skipped" in relay:
        lines += ["", "## relay table", "", f"Skipped: {relay['skipped']}"]
    else:
        lines += ["", f"## {relay_title(relay).lstrip('= ')}", ""]
        lines += markdown(rc.table_cells(relay["records"]), left=3)
    lines += ["", "## targets table", ""] + markdown(cells, left=len(cells[0]))
    Path(path).write_text("\n".join(lines) + "\n")


def write_results(args, loopback, rows, cluster, relay, targets, failures):
    """Writes OUT_DIR/results.json: every record, the echo, the targets."""
    meta = rb.host_meta(argv=sys.argv[1:], smoke=args.smoke,
                        loopback_world_size=args.world, rate=args.rate,
                        shards=args.shards, echo_mode=ECHO_MODE)
    doc = {"meta": meta,
           "loopback": {"rows": rows, "records": loopback["records"],
                        "echo": {str(s): e for s, e in loopback["echo"].items()},
                        "skipped_systems": loopback["skipped"]},
           "cluster": cluster,
           "relay": relay,
           "targets": rb.target_dicts(targets),
           "failures": failures}
    (args.out_dir / "results.json").write_text(json.dumps(doc, indent=1))


# --------------------------------------------------------------------------
# Driver.

def parse_args(argv):
    """Command-line flags of the driver."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--smoke", action="store_true",
                   help="W=2 loopback at 4 B and 4 KiB, few iterations; cluster "
                        "S=1,2 at 4 KiB and 2 MiB, one round of 2 calls")
    p.add_argument("--skip_cluster", action="store_true",
                   help="the loopback table alone (where namespaces cannot be made)")
    p.add_argument("--loopback_sizes", type=rb.byte_sizes, default="",
                   help="byte sizes of the loopback table (default 4 B..64 MiB, 5 sizes)")
    p.add_argument("--echo_sizes", type=rb.byte_sizes, default="",
                   help="loopback sizes with the echo beside them (default 4 B, 4 and 64 MiB)")
    p.add_argument("--cluster_sizes", type=rb.byte_sizes, default="",
                   help="byte sizes of the cluster table (default 4 and 64 MiB)")
    p.add_argument("--rate", default="1gbit", help="tc tbf rate of every cluster link")
    p.add_argument("--shards", default="", help="Reducer's S values (default 1,4)")
    p.add_argument("--skip_relay", action="store_true", help="no relay table")
    p.add_argument("--relay_configs", default="",
                   help="HOSTSxRANKS,... of the relay table (default 2x4,4x2)")
    p.add_argument("--relay_shards", default="", help="S values of the relay table (default 1,2)")
    p.add_argument("--relay_sizes", type=rb.byte_sizes, default="",
                   help="byte sizes of the relay table (default 4, 16, 64 MiB)")
    rb.add_sweep_flags(p, BENCH_DIR / "out-network", "size group")
    rb.add_built_flags(p, ("reducerd", "reducer_worker", "virtual_network", "echo_bench"))
    args = p.parse_args(argv)
    for name, full, smoke in (
            ("loopback_sizes", LOOPBACK_SIZES, SMOKE_LOOPBACK_SIZES),
            ("echo_sizes", ECHO_SIZES, SMOKE_ECHO_SIZES),
            ("cluster_sizes", CLUSTER_SIZES, SMOKE_CLUSTER_SIZES),
            ("relay_sizes", rc.SIZES, rc.SMOKE_SIZES)):
        # "" (the default) parses to []: the table's own sizes.
        setattr(args, name, getattr(args, name) or list(smoke if args.smoke else full))
    try:
        sb.rate_bytes_per_s(args.rate)
    except ValueError as e:
        p.error(str(e))
    shards = args.shards or (SMOKE_SHARDS if args.smoke else "1,4")
    args.shards = [int(s) for s in shards.split(",") if s]
    if any(not 1 <= s <= sb.MAX_SHARDS for s in args.shards):
        p.error(f"--shards must lie in 1..{sb.MAX_SHARDS}")
    args.world = SMOKE_WORLD if args.smoke else WORLD
    args.relay_configs = ([tuple(int(x) for x in c.split("x"))
                           for c in args.relay_configs.split(",") if c]
                          or (rc.SMOKE_CONFIGS if args.smoke else rc.CONFIGS))
    if any(h * r > 8 or h > len(rc.HOSTS) for h, r in args.relay_configs):
        p.error("--relay_configs: at most 4 hosts and 8 ranks")
    args.relay_shards = ([int(s) for s in args.relay_shards.split(",") if s]
                         or (rc.SMOKE_SHARDS if args.smoke else rc.SHARDS))
    if any(not 1 <= s <= len(rc.SHARD_HOSTS) for s in args.relay_shards):
        p.error("--relay_shards must lie in 1..2")
    args.local_ranks = rc.SMOKE_LOCAL_RANKS if args.smoke else rc.LOCAL_RANKS
    args.out_dir = args.out_dir.resolve()
    return args


def main(argv):
    """Runs both tables and the targets; exit status 1 if a run failed."""
    args = parse_args(argv)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    loopback = run_loopback(args)
    cluster = run_cluster(args)
    relay = rc.run(args, args.out_dir / "relay")
    rows = loopback_rows(loopback)
    targets = (loopback_targets(rows, args.world) + cluster_targets(cluster)
               + rc.targets(relay.get("records", []), args.local_ranks))
    notes = {"cluster": f"cluster skipped: {cluster['skipped']}"
             if "skipped" in cluster else "size or S not run",
             "relay": f"relay skipped: {relay['skipped']}"
             if "skipped" in relay else "size, S or configuration not run",
             "loopback": "; ".join(f"{s} skipped: {why}" for s, why in
                                   loopback["skipped"].items()) or "size not run"}
    cells = target_cells(targets, notes)
    print_loopback(loopback, rows)
    print_cluster(cluster)
    print_relay(relay)
    print_targets(cells, args.smoke)
    failures = (loopback["failures"] + cluster.get("failures", [])
                + relay.get("failures", []))
    write_results(args, loopback, rows, cluster, relay, targets, failures)
    write_markdown(args.out_dir / "results.md", loopback, rows, cluster, relay, cells)
    print(f"\nwrote {rb.shown_path(args.out_dir)}/results.json, results.md")
    return rb.exit_status(failures)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
