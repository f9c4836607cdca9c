#!/usr/bin/env python3
"""Ranks per host through a node-local relay, across hosts (network_bench.py's
relay table).

On shard_bench.py's network (network namespaces, every host link capped at
the rate each way), for every configuration of H worker hosts x R ranks
(rank r on host w<r // R>) and every S in the shard counts, per size:
  - gloo: Gloo's ring over the same ranks on the same hosts;
  - flat S: every rank a reducer_allreduce_worker targeting the first S
    shard hosts' reducerds (--shared_memory=off);
  - relay S: one reducerd --upstream=<those shards> on each worker host
    (RELAY_PORT on the host's address), its R ranks targeting it with
    --local_world_size=R.
And on one host with LOCAL_RANKS ranks: "direct", the ranks on the
same-host path (--shared_memory=required) of a reducerd on that host, against
"relay S=1", a relay on that host with one shard upstream; the two in turn,
ONE_HOST_ROUNDS times (each figure the median of all its rounds' calls).

The model is the busiest link's bytes one way over the rate (protocol,
latency and CPU left out), W = H R ranks, s = the shards the partition plan
uses for the size:
  ring:  each inter-host link carries 2(W-1)/W N;
  flat:  a host link carries R N, a shard link W N / s: max of the two;
  relay: a host link carries N (one tensor up, one down), a shard link
         H N / s: max of the two;
  direct: no link (no model); nor does the local relay's, which answers a
  job whose every rank it holds without sending anything upstream.
"""

import json
import os
import shutil
import tempfile
import sys
import time

import run_bench as rb
import shard_bench as sb

KiB, MiB = rb.KiB, rb.MiB

CONFIGS = [(2, 4), (4, 2)]          # (hosts, ranks per host)
SHARDS = [1, 2]
SIZES = [4 * MiB, 16 * MiB, 64 * MiB]
LOCAL_RANKS = 4
SMOKE_CONFIGS = [(2, 2)]
SMOKE_SHARDS = [1]
SMOKE_SIZES = [64 * KiB, 1 * MiB]
SMOKE_LOCAL_RANKS = 2
# run_bench's name of each system's records (what parse_records checks).
PARSED_AS = {"gloo": "gloo", "direct": "reducer_shm", "relay": "reducer_shm"}
HOSTS = [f"w{i}" for i in range(4)]
SHARD_HOSTS = ["s0", "s1"]
RELAY_PORT = 50052
DIRECT_PORT = 50053
# Timed calls per size: about ITER_BUDGET_S of the slowest system's model.
ITER_BUDGET_S = 6.0
MIN_ITERS, MAX_ITERS = 3, 20
# On one host (direct and relay S=1) no link paces the calls (64 MiB takes
# 40-70 ms there) and the machine's state moves their medians by a quarter
# from one launch to the next: the two run ONE_HOST_ROUNDS times in turn,
# ONE_HOST_ITERS calls each time, and each one's figure is the median of
# all its calls.
ONE_HOST_ROUNDS, ONE_HOST_ITERS = 3, 10
# Targets: (label, config, S, size, bound) on relay / gloo; and the local
# relay / direct bound at every size.
TARGETS = [(f"relay 2x4 S=2 {rb.fmt_size(n)}, relay / gloo", (2, 4), 2, n, 0.6)
           for n in (16 * MiB, 64 * MiB)]
LOCAL_BOUND = 1.1


def model_bytes(system, hosts, ranks, shards, size):
    """The busiest link's bytes one way (see the module's docstring); None
    where no link is crossed."""
    world = hosts * ranks
    s = sb.used_shards(size, shards)
    if system == "gloo":
        return 2 * (world - 1) / world * size
    if system == "flat":
        return max(ranks * size, world * size / s)
    if system == "relay" and hosts > 1:
        return max(size, hosts * size / s)
    return None  # one host: its relay answers the job itself


class Runs:
    """What the runners share: network, binaries, logs, live reducerds."""

    def __init__(self, args, net, log_dir):
        self.args, self.net, self.log_dir = args, net, log_dir
        self.env = dict(os.environ, **rb.MALLOC_ENV)
        self.daemons = {}  # name -> ReducerDaemon (CpuMeter reads them)
        self.launches = 0

    def daemon(self, name, host, port, flags=()):
        d = self.daemons.get(name)
        if d is None or not d.alive():
            d = rb.ReducerDaemon(
                self.args.reducerd, self.log_dir / f"reducerd-{name}.log",
                extra_flags=["--allow_unauthenticated", *flags],
                address=f"{self.net.address(host)}:{port}",
                command_prefix=self.net.prefix(host))
            self.daemons[name] = d
        return d

    def stop(self, names):
        """Stops the named reducerds; returns those whose exit was not 0."""
        bad = [n for n in names if n in self.daemons and self.daemons[n].stop() != 0]
        for n in names:
            self.daemons.pop(n, None)
        return bad

    def label(self):
        self.launches += 1
        return self.launches


def shard_target(runs, shards):
    return ",".join(runs.daemon(h, h, sb.REDUCERD_PORT).address
                    for h in SHARD_HOSTS[:shards])


def worker_cmds(runs, targets, ranks, run, extra):
    """One reducer_allreduce_worker per rank; targets[r] its reducerd."""
    cmds = rb.reducer_cmds(runs.args.reducer_worker, "X", len(targets), run)
    out = []
    for r, c in enumerate(cmds):
        c = [a if not a.startswith("--target=") else f"--target={targets[r]}"
             for a in c] + extra
        out.append(runs.net.prefix(HOSTS[r // ranks]) + c)
    return out


def run_gloo(runs, hosts, ranks, run, timeout_s):
    port = sb.GLOO_PORT + runs.label()
    world = hosts * ranks
    cmds = [runs.net.prefix(HOSTS[r // ranks]) + [
        sb.ENV, f"GLOO_SOCKET_IFNAME={runs.net.interface(HOSTS[r // ranks])}",
        sys.executable, str(rb.BENCH_DIR / "gloo_allreduce.py"),
        f"--world_size={world}", f"--rank={r}", f"--port={port}",
        f"--master_addr={runs.net.address('w0')}",
        f"--timeout_s={timeout_s}"] + rb.worker_flags(run) for r in range(world)]
    return rb.run_processes(cmds, runs.log_dir / f"gloo-{hosts}x{ranks}-{runs.launches}",
                            timeout_s, dict(runs.env, OMP_NUM_THREADS="1"))


def run_flat(runs, hosts, ranks, shards, run, timeout_s):
    target = shard_target(runs, shards)
    cmds = worker_cmds(runs, [target] * (hosts * ranks), ranks, run, [])
    return rb.run_processes(
        cmds, runs.log_dir / f"flat-{hosts}x{ranks}-s{shards}-{runs.label()}",
        timeout_s, runs.env)


def start_relays(runs, hosts, shards):
    """A relay reducerd on each of the first `hosts` worker hosts, upstream
    the first `shards` shards; returns their names."""
    upstream = shard_target(runs, shards)
    names = [f"relay-{HOSTS[h]}-s{shards}" for h in range(hosts)]
    for h, name in enumerate(names):
        runs.daemon(name, HOSTS[h], RELAY_PORT, [f"--upstream={upstream}"])
    return names


def run_relay(runs, hosts, ranks, shards, run, timeout_s, local_world_size):
    names = start_relays(runs, hosts, shards)
    targets = [runs.daemons[names[r // ranks]].address for r in range(hosts * ranks)]
    # The ranks reach their host's relay over the same-host path, as a
    # user's do (the client's default finds it).
    cmds = worker_cmds(runs, targets, ranks, run,
                       [f"--local_world_size={local_world_size}",
                        "--shared_memory=required"])
    try:
        return rb.run_processes(
            cmds, runs.log_dir / f"relay-{hosts}x{ranks}-s{shards}-{runs.label()}",
            timeout_s, runs.env)
    finally:
        bad = runs.stop(names)
        if bad:
            raise rb.RunError(f"relay reducerd did not exit 0 on SIGTERM: {bad}")


def run_direct(runs, ranks, run, timeout_s):
    """The ranks of one host on the same-host path of a reducerd there."""
    d = runs.daemon("direct-w0", "w0", DIRECT_PORT)
    cmds = worker_cmds(runs, [d.address] * ranks, ranks, run,
                       ["--shared_memory=required"])
    return rb.run_processes(cmds, runs.log_dir / f"direct-1x{ranks}-{runs.label()}",
                            timeout_s, runs.env)


def iterations(size, bps, smoke, slowest_bytes):
    if smoke:
        return 2, 1
    iters = int(min(MAX_ITERS, max(MIN_ITERS, ITER_BUDGET_S * bps / slowest_bytes)))
    return iters, max(1, iters // 10)


def plan(args):
    """(config label, hosts, ranks, system, shards) in run order per size."""
    out = []
    for hosts, ranks in args.relay_configs:
        out.append((hosts, ranks, "gloo", 0))
        for s in args.relay_shards:
            out += [(hosts, ranks, "flat", s), (hosts, ranks, "relay", s)]
    rounds = 1 if args.smoke else ONE_HOST_ROUNDS
    out += [(1, args.local_ranks, "direct", 0), (1, args.local_ranks, "relay", 1)] * rounds
    return out


def measure(args, out_dir):
    """Builds the network, runs the plan, removes it. Returns (records,
    failures); raises sb.Skip where namespaces cannot be made."""
    log_dir = out_dir / "logs"
    shutil.rmtree(log_dir, ignore_errors=True)
    log_dir.mkdir(parents=True)
    bps = sb.rate_bytes_per_s(args.rate)
    steps = plan(args)
    records, failures = [], []
    with tempfile.TemporaryDirectory(prefix="reducer-relay-bench-") as tmp:
        os.environ["TEST_TMPDIR"] = tmp
        net = sb.Network(args.virtual_network,
                         HOSTS + SHARD_HOSTS[:max(args.relay_shards + [1])],
                         args.rate, log_dir / "virtual_network.err")
        runs = Runs(args, net, log_dir)
        try:
            for size in args.relay_sizes:
                slowest = max(model_bytes(s, h, r, k, size) or 0 for h, r, s, k in steps)
                iters, warmup = iterations(size, bps, args.smoke, slowest)
                run = {"pattern": "allreduce", "sizes": [size], "iters": iters,
                       "warmup": warmup}
                timeout_s = min(args.timeout_s, (40 if args.smoke else 90)
                                + 3 * (iters + warmup) * slowest / bps)
                for hosts, ranks, system, shards in steps:
                    name = f"{hosts}x{ranks} {system}" + (f" S={shards}" if shards else "")
                    if hosts == 1 and not args.smoke:
                        run = dict(run, iters=ONE_HOST_ITERS, warmup=1)
                    print(f"running {name} {rb.fmt_size(size)} x{run['iters']}",
                          file=sys.stderr, flush=True)
                    if shards:
                        shard_target(runs, shards)  # started before the meter
                    meter = sb.CpuMeter(runs)
                    try:
                        if system == "gloo":
                            out = run_gloo(runs, hosts, ranks, run, timeout_s)
                        elif system == "flat":
                            out = run_flat(runs, hosts, ranks, shards, run, timeout_s)
                        elif system == "direct":
                            out = run_direct(runs, ranks, run, timeout_s)
                        else:
                            # One host: the relay's ranks are the whole job
                            # (0, as tests/relay_test's one relay).
                            out = run_relay(runs, hosts, ranks, shards, run, timeout_s,
                                            ranks if hosts > 1 else 0)
                        rec = rb.parse_records(out, PARSED_AS.get(system, "reducer"),
                                               hosts * ranks, run)[0]
                    except (rb.RunError, json.JSONDecodeError, OSError) as e:
                        failures.append(f"{name} {rb.fmt_size(size)}: {e}")
                        print(f"FAILED {name} {rb.fmt_size(size)}: {e}", file=sys.stderr)
                        continue
                    own, busy = meter.read()
                    mb = model_bytes(system, hosts, ranks, shards, size)
                    if merge_round(records, hosts, ranks, system, shards, size,
                                   rec["latencies_us"], busy):
                        continue
                    records.append({
                        "config": f"{hosts}x{ranks}", "hosts": hosts, "ranks": ranks,
                        "system": system, "shards": shards, "size_bytes": size,
                        "latencies_us": rec["latencies_us"],
                        "median_us": rb.percentile(rec["latencies_us"], 50),
                        "model_bytes": mb,
                        "model_us": mb / bps * 1e6 if mb else None,
                        "cpu_own_cores": own, "cpu_busy": busy})
        finally:
            bad = runs.stop(list(runs.daemons))
            net_status = net.close()
        if bad:
            failures.append(f"reducerd did not exit 0 on SIGTERM: {bad}")
        if net_status != 0:
            failures.append(f"virtual_network exited {net_status}")
    add_ratios(records)
    return records, failures


def merge_round(records, hosts, ranks, system, shards, size, latencies, busy):
    """Adds a later round's calls to the record of the same run, if there is
    one (its median then over every round's calls, its machine load the
    mean of the rounds'); False if there is none."""
    for r in records:
        if (r["hosts"], r["ranks"], r["system"], r["shards"], r["size_bytes"]) == \
                (hosts, ranks, system, shards, size):
            r["rounds"] = r.get("rounds", 1) + 1
            r["latencies_us"] = r["latencies_us"] + latencies
            r["median_us"] = rb.percentile(r["latencies_us"], 50)
            r["cpu_busy"] += (busy - r["cpu_busy"]) / r["rounds"]
            return True
    return False


def add_ratios(records):
    """vs_ref: time over the reference of its (config, size): Gloo's across
    hosts, the direct same-host path's on one host; model_vs_ref likewise."""
    ref = {(r["config"], r["size_bytes"]): r for r in records
           if r["system"] in ("gloo", "direct")}
    for r in records:
        g = ref.get((r["config"], r["size_bytes"]))
        if g and g is not r:
            r["vs_ref"] = r["median_us"] / g["median_us"]
            if r["model_us"] and g["model_us"]:
                r["model_vs_ref"] = r["model_us"] / g["model_us"]


def table_cells(records):
    head = ("size", "hosts x ranks", "system", "calls", "median", "vs ref",
            "busiest link", "model", "model ratio", "t / model", "machine")
    out = [head]
    for r in records:
        label = r["system"] + (f" S={r['shards']}" if r["shards"] else "")
        out.append((rb.fmt_size(r["size_bytes"]), r["config"], label,
                    str(len(r["latencies_us"])), rb.fmt_time(r["median_us"]),
                    f"{r['vs_ref']:.2f}" if "vs_ref" in r else "1.00",
                    rb.fmt_size(int(r["model_bytes"])) if r["model_bytes"] else "-",
                    rb.fmt_time(r["model_us"]) if r["model_us"] else "-",
                    f"{r['model_vs_ref']:.2f}" if "model_vs_ref" in r else "-",
                    f"{r['median_us'] / r['model_us']:.2f}" if r["model_us"] else "-",
                    f"{100 * r['cpu_busy']:.0f} %"))
    return out


def targets(records, local_ranks):
    """(label, value, bound, ok) per target; None where not measured."""
    by = {(r["config"], r["system"], r["shards"], r["size_bytes"]): r for r in records}
    out = []
    for label, (h, k), s, size, bound in TARGETS:
        r = by.get((f"{h}x{k}", "relay", s, size))
        v = r.get("vs_ref") if r else None
        out.append((label, v, f"<= {bound:.2f}", None if v is None else v <= bound))
    sizes = sorted({r["size_bytes"] for r in records})
    for size in sizes:
        r = by.get((f"1x{local_ranks}", "relay", 1, size))
        v = r.get("vs_ref") if r else None
        out.append((f"relay 1x{local_ranks} {rb.fmt_size(size)}, relay / direct", v,
                    f"<= {LOCAL_BOUND:.2f}", None if v is None else v <= LOCAL_BOUND))
    return out


def run(args, out_dir):
    """The relay table: a dict of records, failures, wall_s; or {"skipped":
    why} (--skip_relay or no namespaces)."""
    if args.skip_relay:
        return {"skipped": "--skip_relay"}
    start = time.monotonic()
    try:
        records, failures = measure(args, out_dir)
    except sb.Skip as e:
        return {"skipped": str(e)}
    except rb.RunError as e:
        return {"skipped": f"failed: {e}", "failures": [f"relay: {e}"]}
    return {"records": records, "failures": failures, "rate": args.rate,
            "wall_s": time.monotonic() - start}


def main(argv):
    """The relay table alone (network_bench.py runs it beside the others):
    relay_cluster.py [--smoke] [--rate=1gbit] [--configs=2x4] [--shards=2]
    [--sizes=16MiB,64MiB] [--out_dir=DIR]; exits 1 when a run failed."""
    import argparse
    p = argparse.ArgumentParser(description="the relay table alone")
    p.add_argument("--smoke", action="store_true")
    p.add_argument("--rate", default="1gbit")
    p.add_argument("--configs", default="",
                   help="HOSTSxRANKS,... (default 2x4,4x2; --smoke 2x2)")
    p.add_argument("--shards", default="", help="S values (default 1,2; --smoke 1)")
    p.add_argument("--sizes", type=rb.byte_sizes, default="",
                   help="byte sizes, comma-separated (default 4, 16, 64 MiB; --smoke 64 KiB, 1 MiB)")
    rb.add_sweep_flags(p, rb.BENCH_DIR / "out-relay", "size")
    rb.add_built_flags(p, ("reducerd", "reducer_worker", "virtual_network"))
    args = p.parse_args(argv)
    args.skip_relay = False
    args.relay_configs = ([tuple(int(x) for x in c.split("x"))
                           for c in args.configs.split(",") if c]
                          or (SMOKE_CONFIGS if args.smoke else CONFIGS))
    args.relay_shards = ([int(x) for x in args.shards.split(",") if x]
                         or (SMOKE_SHARDS if args.smoke else SHARDS))
    args.relay_sizes = args.sizes or (SMOKE_SIZES if args.smoke else SIZES)
    args.local_ranks = SMOKE_LOCAL_RANKS if args.smoke else LOCAL_RANKS
    args.out_dir = args.out_dir.resolve()
    relay = run(args, args.out_dir)
    if "skipped" in relay:
        print(f"SKIP relay: {relay['skipped']}")
        return 1 if relay.get("failures") else 0
    cells = table_cells(relay["records"])
    widths = [max(len(row[i]) for row in cells) for i in range(len(cells[0]))]
    for row in cells:
        print("  ".join(c.ljust(w) if j < 3 else c.rjust(w)
                        for j, (c, w) in enumerate(zip(row, widths))))
    for label, v, bound, ok in targets(relay["records"], args.local_ranks):
        print(f"{label}: {'-' if v is None else f'{v:.2f}'} {bound} "
              f"{'not measured' if ok is None else 'met' if ok else 'MISSED'}")
    for f in relay["failures"]:
        print(f"FAILED {f}")
    (args.out_dir / "results.json").write_text(json.dumps(
        {"meta": rb.host_meta(argv=argv), "relay": relay}, indent=1))
    return rb.exit_status(relay["failures"])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
