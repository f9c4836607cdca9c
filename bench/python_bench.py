#!/usr/bin/env python3
"""Python's cost over C++, the torch backend "reducer" against Gloo, and DDP.

    bazel build //bench:reducer_allreduce_worker //python:reducer //server:reducerd
    py="$(tools/pinned_venv.sh python/requirements-dev.txt)/bin/python"
    "$py" bench/python_bench.py [--world_size=4] [--rounds=3] [--json=FILE]
    "$py" bench/python_bench.py --smoke  # W = 2, 4 B and 4 KiB, 3 DDP steps

Run it with the project's Python (the venv of python/requirements-dev.txt:
torch from the package index, which //python:reducer's torch backend is
built against).

Starts one reducerd on a free loopback port (the same-host path on, as by
default) and measures, at W = --world_size worker processes on this host
(W = 1 measures Python's own cost with no peer competing for the cores),
against Gloo in the same invocation, float32 SUM throughout:

1. all_reduce: torch.distributed.all_reduce (in place) on backend "reducer"
   and on a gloo group in the same processes, 4 B, 4 KiB, 256 KiB, 4 MiB and
   64 MiB, the two alternating size by size; per data path of the reducer
   backend (see below) the median and its ratio to Gloo's (Gloo measured in
   that path's processes).
2. per call: a 4 B all-reduce through (a) the C++ client
   (bench/reducer_allreduce_worker, Client::AllReduce), (b)
   reducer.Client.all_reduce on a numpy array, (c)
   torch.distributed.all_reduce on the reducer backend (in place on a
   tensor of zeros, which the sums keep, so that no rank refills it between
   calls while its peers wait: the others run out of place); the medians and the
   ratios python/C++ and torch/C++, per data path, with each system's CPU
   time per call (rank 0's process, every thread: what W ranks on fewer
   cores than W + 1 pay for in latency).
3. DDP: the median step time (zero_grad, forward, backward, SGD step) of a
   6 x Linear(2048, 2048) MLP with ReLUs between (25,178,112 float32
   parameters, 96 MiB; a CPU batch of --ddp_batch rows, default 8: at this
   size a step's time is the weights' memory traffic, the same at 8 rows as
   at 32) under DistributedDataParallel on the reducer backend and on
   the gloo group, bucket_cap_mb 25 (the default) and 1, the systems
   alternating step by step, with the same model stepped without DDP (no
   communication) as the compute-only reference. Both DDPs run a
   communication hook that calls torch's default_hooks.allreduce_hook and
   chains a .then recording time.perf_counter() when the bucket's all-reduce
   has completed (and the hook records when DDP handed it the bucket). torch's
   DDP waits for every bucket's future inside backward() (finalize_backward,
   queued by autograd at the end of the backward pass), so every bucket is
   done before backward() returns by construction; what shows overlap is how
   many buckets were done before the last bucket was handed to the hook,
   that is before the gradients were all computed, and how long backward()
   went on after that ("exposed": communication not hidden by computation).

The data paths: "shm", the same-host shared-memory path (the C++ worker's
--shared_memory=required, reducer.Client(shared_memory="required"),
REDUCER_SHARED_MEMORY=required for the torch backend; skipped, with the
reason, when a probe of two C++ workers finds it unavailable, exit 77), and
"grpc", the tensors over gRPC on loopback (the same with "off"). Each path
gets launches of its own: the client library reads REDUCER_SHARED_MEMORY
once per process and lets it override every client's setting, so one
process cannot hold torch groups on both paths (and the driver removes an
inherited REDUCER_SHARED_MEMORY; each worker checks that it maps memfd
segments exactly when its path is shm). A round is, per path, a launch of
the C++ workers, of the Python workers and of the torch workers; parts 1 and
2 run --rounds rounds (fresh processes each, so all systems see the same
machine over the run); DDP runs once, in the last round's torch processes
of the first path (shm where it is available).
Workers run under --python (default: the interpreter running this) with
OMP_NUM_THREADS=1 (as torchrun sets it for several ranks per host),
GLOO_SOCKET_IFNAME=lo and bench/run_bench.py's MALLOC_ENV, in one process
group per launch (run_bench.run_processes), each launch with a hard timeout
(--timeout_s); reducerd is stopped at the end, also on failure. Prints one
table per part, each under the command line that produced it; --json writes
every latency and step trace with the summaries. Exits non-zero when a run
fails or a result is wrong (each worker checks its last result against the
closed form; the DDP models trained on Reducer and on Gloo must agree).
"""

import argparse
import datetime
import json
import os
import shlex
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))
import run_bench  # noqa: E402  (processes, reducerd, formatting)
from run_bench import KiB, MiB, RunError, fmt_size, fmt_time  # noqa: E402

ALLREDUCE_SIZES = [4, 4 * KiB, 256 * KiB, 4 * MiB, 64 * MiB]
SMOKE_SIZES = [4, 4 * KiB]
PER_CALL_BYTES = 4
PATH_MODES = {"shm": "required", "grpc": "off"}  # data path -> shared_memory
DDP_CAPS_MB = [25, 1]
DDP_SYSTEMS = ["reducer", "gloo", "none"]
LAYERS, WIDTH = 6, 2048  # the DDP model: about 25M parameters


def allreduce_iters(size, smoke):
    """(timed, warmup) calls per size in part 1: fewer for large tensors."""
    if smoke:
        return 10, 2
    for limit, iters, warmup in ((4 * KiB, 200, 20), (256 * KiB, 50, 5),
                                 (4 * MiB, 20, 3)):
        if size <= limit:
            return iters, warmup
    return 5, 2


def per_call_iters(smoke):
    """(timed, warmup) 4 B calls per system, path and round in part 2."""
    return (20, 3) if smoke else (3000, 500)


# --------------------------------------------------------------------------
# Workers (one process per rank; rank 0 prints JSON lines on stdout).

def emit(record):
    print(json.dumps(record), flush=True)


def maps_memfd():
    """Whether this process maps a memfd, as the same-host path's segments are."""
    with open("/proc/self/maps") as f:
        return any("/memfd:" in line for line in f)


def expected_sum(world):
    return world * (world + 1) / 2  # rank r contributes r + 1


def cpu_per_call_us(cpu_start, calls):
    """This process's CPU time (every thread) since time.process_time() was
    `cpu_start`, per call, in microseconds."""
    return (time.process_time() - cpu_start) * 1e6 / calls


def check_path(path):
    """Exits unless this process maps memfds exactly when `path` is shm: the
    client library lets REDUCER_SHARED_MEMORY, read once per process,
    override every client's own setting, so a stray one would mislabel rows."""
    if maps_memfd() != (path == "shm"):
        raise SystemExit(f"path {path}, but this process {'maps' if maps_memfd() else 'maps no'}"
                         f" memfd (REDUCER_SHARED_MEMORY={os.environ.get('REDUCER_SHARED_MEMORY')})")


def python_worker(args):
    """Part 2b: 4 B reducer.Client.all_reduce (out of place) on args.path."""
    import numpy as np
    import reducer
    x = np.full(PER_CALL_BYTES // 4, args.rank + 1, np.float32)
    with reducer.Client(target=args.target, job=args.job, rank=args.rank,
                        world_size=args.world_size, timeout=args.timeout_s,
                        shared_memory=PATH_MODES[args.path]) as client:
        check_path(args.path)
        latencies = []
        cpu_start = time.process_time()
        for i in range(args.warmup + args.iters):
            start = time.perf_counter()
            result = client.all_reduce(x)
            if i >= args.warmup:
                latencies.append((time.perf_counter() - start) * 1e6)
        cpu_us_per_call = cpu_per_call_us(cpu_start, args.warmup + args.iters)
        if not (result == expected_sum(args.world_size)).all():
            raise SystemExit(f"wrong all_reduce result {result}")
    if args.rank == 0:
        emit({"part": "per_call", "system": "python", "path": args.path,
              "world_size": args.world_size, "size_bytes": PER_CALL_BYTES,
              "cpu_us_per_call": cpu_us_per_call, "latencies_us": latencies})


def timed_all_reduce(torch, dist, rank, world, size, group, iters, warmup,
                     refill=True):
    """Latencies (us) of in-place all_reduce calls on one tensor, refilled
    with rank + 1 before each call (untimed); checks the last result.

    refill=False (part 2c, set against out-of-place calls that need no
    refill): the tensor holds zeros, which every call's sum keeps, so no
    rank does work between calls that its peers would wait for; one more
    call, on rank + 1 and untimed, checks the result."""
    x = torch.empty(size // 4, dtype=torch.float32)
    x.fill_(rank + 1 if refill else 0)
    latencies = []
    for i in range(warmup + iters):
        if refill:
            x.fill_(rank + 1)
        start = time.perf_counter()
        dist.all_reduce(x, group=group)
        if i >= warmup:
            latencies.append((time.perf_counter() - start) * 1e6)
    if not refill:
        if not bool((x == 0).all()):
            raise SystemExit(f"wrong all_reduce result on {size} B of zeros: {x[:4]}")
        x.fill_(rank + 1)
        dist.all_reduce(x, group=group)
    if not bool((x == expected_sum(world)).all()):
        raise SystemExit(f"wrong all_reduce result on {size} B: {x[:4]}")
    return latencies


class Trace:
    """A DDP hook's state: the group and, per bucket of the current step,
    (index, handed to the hook, all-reduce completed), perf_counter seconds."""

    def __init__(self, process_group):
        self.process_group = process_group
        self.events = []


def traced_allreduce_hook(state, bucket):
    """torch's default allreduce_hook, plus when the bucket came and when its
    all-reduce completed (the .then runs as the future completes)."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    launched = time.perf_counter()
    index = bucket.index()
    future = default_hooks.allreduce_hook(state.process_group, bucket)

    def done(f):
        state.events.append((index, launched, time.perf_counter()))
        return f.value()
    return future.then(done)


def make_model(torch):
    torch.manual_seed(0)  # the same initial weights in every model and rank
    layers = []
    for i in range(LAYERS):
        layers.append(torch.nn.Linear(WIDTH, WIDTH))
        if i + 1 < LAYERS:
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers)


def ddp_part(torch, dist, args, groups, path):
    """Part 3: DDP on the reducer group (path `path`) and the gloo group, and
    the model without DDP, alternating step by step, per bucket cap."""
    from torch.nn.parallel import DistributedDataParallel as DDP
    data = torch.Generator().manual_seed(1000 + args.rank)
    x = torch.randn(args.ddp_batch, WIDTH, generator=data)
    y = torch.randn(args.ddp_batch, WIDTH, generator=data)
    for cap in DDP_CAPS_MB:
        runs = {}
        for system in DDP_SYSTEMS:
            model = make_model(torch)
            trace = None
            if system != "none":
                trace = Trace(groups[system])
                model = DDP(model, process_group=groups[system], bucket_cap_mb=cap)
                model.register_comm_hook(trace, traced_allreduce_hook)
            opt = torch.optim.SGD(model.parameters(), lr=0.01)
            runs[system] = (model, opt, trace, [])
        for i in range(args.ddp_warmup + args.ddp_steps):
            # Same order on every rank; rotated so no system always goes first.
            k = i % len(DDP_SYSTEMS)
            for system in DDP_SYSTEMS[k:] + DDP_SYSTEMS[:k]:
                model, opt, trace, steps = runs[system]
                if trace is not None:
                    trace.events.clear()
                t0 = time.perf_counter()
                opt.zero_grad(set_to_none=True)
                loss = torch.nn.functional.mse_loss(model(x), y)
                t1 = time.perf_counter()
                loss.backward()
                t2 = time.perf_counter()
                opt.step()
                t3 = time.perf_counter()
                if i < args.ddp_warmup:
                    continue
                step = {"step_ms": (t3 - t0) * 1e3, "forward_ms": (t1 - t0) * 1e3,
                        "backward_ms": (t2 - t1) * 1e3}
                if trace is not None:
                    # Times relative to the end of loss.backward(), in ms.
                    step["buckets"] = [
                        {"index": idx, "launched_ms": (a - t2) * 1e3,
                         "done_ms": (b - t2) * 1e3}
                        for idx, a, b in sorted(trace.events)]
                steps.append(step)
        # Same start, same data, same steps: Reducer's and Gloo's models must
        # agree up to summation order.
        params = {s: [p.detach() for p in runs[s][0].parameters()] for s in ("reducer", "gloo")}
        diff = max(float((a - b).abs().max()) for a, b in zip(params["reducer"], params["gloo"]))
        if diff > 1e-3:
            raise SystemExit(f"DDP on reducer and on gloo disagree by {diff:g} (cap {cap} MB)")
        if args.rank == 0:
            for system in DDP_SYSTEMS:
                emit({"part": "ddp", "system": system,
                      "path": path if system == "reducer" else None,
                      "world_size": args.world_size, "bucket_cap_mb": cap,
                      "batch": args.ddp_batch,
                      "params": sum(p.numel() for p in params["gloo"]),
                      "param_bytes": sum(p.numel() * 4 for p in params["gloo"]),
                      "reducer_vs_gloo_max_param_diff": diff,
                      "steps": runs[system][3]})
        del runs


def torch_worker(args):
    """Parts 1, 2c and (with --ddp_steps) 3 on args.path, in one set of
    processes: the default group on the reducer backend and a gloo group.
    One path per process: the client library reads REDUCER_SHARED_MEMORY once
    per process and lets it override every later client's setting, so two
    groups of one process cannot be put on different paths through it."""
    import torch
    import torch.distributed as dist
    import reducer.torch  # noqa: F401  (registers the backend)
    del reducer
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(args.port),
                      REDUCER_TARGET=args.target, REDUCER_JOB=args.job,
                      REDUCER_SHARED_MEMORY=PATH_MODES[args.path])
    timeout = datetime.timedelta(seconds=args.timeout_s)
    dist.init_process_group("reducer", rank=args.rank, world_size=args.world_size,
                            timeout=timeout)
    gloo = dist.new_group(backend="gloo", timeout=timeout)
    check_path(args.path)
    rank, world, path = args.rank, args.world_size, args.path
    systems = [("reducer", None), ("gloo", gloo)]

    for size in args.sizes:  # part 1
        iters, warmup = allreduce_iters(size, args.smoke)
        for system, group in systems:
            latencies = timed_all_reduce(torch, dist, rank, world, size, group,
                                         iters, warmup)
            if rank == 0:
                emit({"part": "allreduce", "system": system, "path": path,
                      "world_size": world, "size_bytes": size,
                      "latencies_us": latencies})
    iters, warmup = per_call_iters(args.smoke)
    cpu_start = time.process_time()
    latencies = timed_all_reduce(torch, dist, rank, world, PER_CALL_BYTES, None,
                                 iters, warmup, refill=False)  # part 2c
    cpu_us_per_call = cpu_per_call_us(cpu_start, warmup + iters + 1)  # + the check
    if rank == 0:
        emit({"part": "per_call", "system": "torch", "path": path,
              "world_size": world, "size_bytes": PER_CALL_BYTES,
              "cpu_us_per_call": cpu_us_per_call, "latencies_us": latencies})
    if args.ddp_steps > 0:  # part 3
        ddp_part(torch, dist, args, {"reducer": None, "gloo": gloo}, path)
    dist.destroy_process_group()


# --------------------------------------------------------------------------
# Driver.

class Bench:
    """What the launches share: binaries, reducerd, the workers' environment."""

    def __init__(self, args, log_dir, daemon):
        self.args = args
        self.log_dir = log_dir
        self.daemon = daemon
        self.launches = 0
        # Each client's path is set explicitly (the torch workers set
        # REDUCER_SHARED_MEMORY themselves); one inherited would override it.
        self.env = {k: v for k, v in os.environ.items() if k != "REDUCER_SHARED_MEMORY"}
        self.env.update(run_bench.MALLOC_ENV, OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo",
                        PYTHONPATH=os.pathsep.join(
                            [str(args.pythonpath)] + ([os.environ["PYTHONPATH"]]
                                                      if os.environ.get("PYTHONPATH") else [])))

    def launch(self, name, cmds):
        """Runs one set of W ranks to the end (hard timeout); rank 0's records."""
        self.launches += 1
        out = run_bench.run_processes(cmds, self.log_dir / f"{self.launches:02d}-{name}",
                                      self.args.timeout_s, self.env)
        return [json.loads(line) for line in out.splitlines() if line.startswith("{")]

    def cpp(self, world, path, iters, warmup):
        job = f"pybench-cpp-{uuid.uuid4().hex[:12]}"
        cmds = [[str(self.args.reducer_worker), f"--target={self.daemon.address}",
                 f"--job={job}", f"--rank={r}", f"--world_size={world}",
                 f"--sizes={PER_CALL_BYTES}", f"--iters={iters}", f"--warmup={warmup}",
                 f"--shared_memory={PATH_MODES[path]}"] for r in range(world)]
        return self.launch(f"cpp-{path}", cmds)

    def python_cmds(self, worker, world, extra):
        job = f"pybench-{worker}-{uuid.uuid4().hex[:12]}"
        return [[str(self.args.python), str(Path(__file__).resolve()), f"--worker={worker}",
                 f"--rank={r}", f"--world_size={world}", f"--target={self.daemon.address}",
                 f"--job={job}", f"--timeout_s={self.args.timeout_s}"] + extra
                for r in range(world)]


def probe_shm(bench, world):
    """None when two C++ workers run a 4 B all-reduce on the same-host path;
    the workers' reason when they exit 77 (unavailable here)."""
    try:
        bench.cpp(2, "shm", 1, 0)
        return None
    except RunError as e:
        if e.returncode == run_bench.SHM_UNAVAILABLE_EXIT:
            return run_bench.unavailable_line(str(e))
        raise


def check_records(records, part, system, path, iters, sizes):
    got = [r for r in records if r.get("part", part) == part]
    if [r["size_bytes"] for r in got] != sizes:
        raise RunError(f"{part} {system} {path}: expected sizes {sizes}, got "
                       f"{[r['size_bytes'] for r in got]}")
    for r in got:
        if len(r["latencies_us"]) != iters:
            raise RunError(f"{part} {system} {path}: expected {iters} latencies, got "
                           f"{len(r['latencies_us'])}")


def one_round(bench, paths, world, sizes, ddp_steps, samples, cpu):
    """One round: per path, the C++, Python and torch workers, one launch
    each; appends this round's latencies as one list to
    samples[(part, system, path, size)] (Gloo's under the path of the torch
    launch it ran in) and each per-call system's CPU per call to
    cpu[(system, path)]; DDP runs in the first
    path's torch launch when ddp_steps > 0. Returns the DDP records."""
    args = bench.args
    iters, warmup = per_call_iters(args.smoke)
    ddp = []
    for path in paths:
        for r in bench.cpp(world, path, iters, warmup):
            if r.get("shared_memory") != PATH_MODES[path] or len(r["latencies_us"]) != iters:
                raise RunError(f"unexpected C++ record {json.dumps(r)[:200]}")
            samples.setdefault(("per_call", "cpp", path, PER_CALL_BYTES), []).append(
                r["latencies_us"])
            cpu.setdefault(("cpp", path), []).append(r["cpu_us_per_call"])
        common = [f"--path={path}", f"--iters={iters}", f"--warmup={warmup}"]
        py = bench.launch(f"python-{path}", bench.python_cmds("python", world, common))
        check_records(py, "per_call", "python", path, iters, [PER_CALL_BYTES])
        steps = ddp_steps if path == paths[0] else 0
        torch_extra = common + [
            f"--port={run_bench.free_port()}", "--sizes=" + ",".join(map(str, sizes)),
            f"--ddp_steps={steps}", f"--ddp_warmup={args.ddp_warmup}",
            f"--ddp_batch={args.ddp_batch}"] + (["--smoke"] if args.smoke else [])
        tr = bench.launch(f"torch-{path}", bench.python_cmds("torch", world, torch_extra))
        check_records([r for r in tr if r["part"] == "per_call"], "per_call", "torch", path,
                      iters, [PER_CALL_BYTES])
        for system in ("reducer", "gloo"):
            got = [r for r in tr if r["part"] == "allreduce" and r["system"] == system]
            if [r["size_bytes"] for r in got] != sizes:
                raise RunError(f"all_reduce {system} ({path} launch): sizes "
                               f"{[r['size_bytes'] for r in got]}")
            for r in got:
                if len(r["latencies_us"]) != allreduce_iters(r["size_bytes"], args.smoke)[0]:
                    raise RunError(f"all_reduce {system} ({path}): wrong number of latencies")
        for r in py + tr:
            if r["part"] in ("allreduce", "per_call"):
                samples.setdefault((r["part"], r["system"], path, r["size_bytes"]),
                                   []).append(r["latencies_us"])
            if r["part"] == "per_call":
                cpu.setdefault((r["system"], path), []).append(r["cpu_us_per_call"])
        ddp += [r for r in tr if r["part"] == "ddp"]
    if ddp_steps and len(ddp) != len(DDP_CAPS_MB) * len(DDP_SYSTEMS):
        raise RunError(f"expected {len(DDP_CAPS_MB) * len(DDP_SYSTEMS)} DDP records, "
                       f"got {len(ddp)}")
    return ddp


def print_table(title, command, header, rows, notes=()):
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows)]
    print()
    print(f"== {title}")
    print(f"command: {command}")
    print("  ".join(h.ljust(w) for h, w in zip(header, widths)).rstrip())
    for row in rows:
        print("  ".join(str(c).rjust(w) if i else str(c).ljust(w)
                        for i, (c, w) in enumerate(zip(row, widths))).rstrip())
    for note in notes:
        print(note)


def median(values):
    return statistics.median(values) if values else float("nan")


def pooled(rounds):
    return [v for r in rounds for v in r]


def round_ratios(samples, key, base):
    """Each round's median of samples[key] over that of samples[base]."""
    return [median(a) / median(b) for a, b in zip(samples[key], samples[base])]


def fmt_range(values):
    return f"{min(values):.2f}-{max(values):.2f}"


def summarize_allreduce(samples, paths, sizes):
    """Per size and path: medians over all rounds, the ratio, and the ratio
    of each round's medians (the spread between rounds)."""
    out = []
    for size in sizes:
        for path in paths:
            red_key = ("allreduce", "reducer", path, size)
            gloo_key = ("allreduce", "gloo", path, size)
            red, gloo = median(pooled(samples[red_key])), median(pooled(samples[gloo_key]))
            out.append({"size_bytes": size, "path": path,
                        "calls": len(pooled(samples[red_key])),
                        "reducer_median_us": red, "gloo_median_us": gloo,
                        "reducer_vs_gloo": red / gloo,
                        "reducer_vs_gloo_per_round": round_ratios(samples, red_key, gloo_key)})
    return out


def summarize_per_call(samples, cpu, paths):
    """Per path: the three medians over all rounds, the ratios to C++ and
    each round's ratios."""
    out = []
    for path in paths:
        keys = {s: ("per_call", s, path, PER_CALL_BYTES) for s in ("cpp", "python", "torch")}
        m = {s: median(pooled(samples[k])) for s, k in keys.items()}
        out.append({"path": path, "size_bytes": PER_CALL_BYTES,
                    "calls": len(pooled(samples[keys["cpp"]])),
                    "cpp_median_us": m["cpp"], "python_median_us": m["python"],
                    "torch_median_us": m["torch"],
                    "python_vs_cpp": m["python"] / m["cpp"],
                    "torch_vs_cpp": m["torch"] / m["cpp"],
                    "python_vs_cpp_per_round": round_ratios(samples, keys["python"], keys["cpp"]),
                    "torch_vs_cpp_per_round": round_ratios(samples, keys["torch"], keys["cpp"]),
                    "python_minus_cpp_us": m["python"] - m["cpp"],
                    "torch_minus_cpp_us": m["torch"] - m["cpp"],
                    # Median over the rounds of rank 0's CPU time per call.
                    "cpu_us_per_call": {s: median(cpu[(s, path)])
                                        for s in ("cpp", "python", "torch")}})
    return out


def summarize_ddp(records):
    """Per (cap, system): medians of step, forward, backward; for the DDPs,
    bucket counts, overlap and each bucket's median completion time."""
    out = []
    for r in records:
        steps = r["steps"]
        s = {"bucket_cap_mb": r["bucket_cap_mb"], "system": r["system"], "path": r["path"],
             "steps": len(steps), "step_ms": median([x["step_ms"] for x in steps]),
             "forward_ms": median([x["forward_ms"] for x in steps]),
             "backward_ms": median([x["backward_ms"] for x in steps])}
        if r["system"] != "none":
            buckets = [len(x["buckets"]) for x in steps]
            overlapped, before_return, exposed = [], [], []
            for x in steps:
                compute_end = max(b["launched_ms"] for b in x["buckets"])
                overlapped.append(sum(b["done_ms"] < compute_end for b in x["buckets"]))
                before_return.append(sum(b["done_ms"] <= 0 for b in x["buckets"]))
                exposed.append(-compute_end)
            n = max(buckets)
            s.update({
                "buckets": n,
                "overlapped_median": median(overlapped),
                "overlapped_min": min(overlapped), "overlapped_max": max(overlapped),
                "done_before_backward_returned_min": min(before_return),
                "exposed_ms": median(exposed),
                "bucket_done_ms": [median([x["buckets"][i]["done_ms"] for x in steps
                                           if len(x["buckets"]) == n]) for i in range(n)],
                "bucket_launched_ms": [median([x["buckets"][i]["launched_ms"] for x in steps
                                               if len(x["buckets"]) == n]) for i in range(n)]})
        out.append(s)
    by = {(s["bucket_cap_mb"], s["system"]): s for s in out}
    for s in out:
        s["vs_gloo"] = s["step_ms"] / by[(s["bucket_cap_mb"], "gloo")]["step_ms"]
    return out


def report(args, command, paths, skipped, sizes, allreduce, per_call, ddp, ddp_records):
    w = args.world_size
    skip_note = [f"path shm skipped: {skipped}"] if skipped else []
    print_table(
        f"1. torch.distributed.all_reduce, float32 SUM in place, W = {w}: backend "
        f"\"reducer\" vs a gloo group in the same processes (median over {args.rounds} "
        "round(s))",
        command, ["size", "path", "calls", "reducer", "gloo", "reducer/gloo", "per round"],
        [[fmt_size(s["size_bytes"]), s["path"], s["calls"], fmt_time(s["reducer_median_us"]),
          fmt_time(s["gloo_median_us"]), f"{s['reducer_vs_gloo']:.2f}",
          fmt_range(s["reducer_vs_gloo_per_round"])] for s in allreduce],
        skip_note + ["per round: the lowest and highest ratio of one round's medians"])
    print_table(
        f"2. Python's cost per call: {PER_CALL_BYTES} B float32 SUM all-reduce, W = {w}, "
        f"median over {args.rounds} round(s)",
        command, ["path", "calls", "C++ Client::AllReduce", "reducer.Client.all_reduce",
                  "torch all_reduce", "python/C++", "per round", "torch/C++", "per round",
                  "python-C++", "torch-C++", "CPU/call C++", "Python", "torch"],
        [[s["path"], s["calls"], fmt_time(s["cpp_median_us"]), fmt_time(s["python_median_us"]),
          fmt_time(s["torch_median_us"]), f"{s['python_vs_cpp']:.2f}",
          fmt_range(s["python_vs_cpp_per_round"]), f"{s['torch_vs_cpp']:.2f}",
          fmt_range(s["torch_vs_cpp_per_round"]), fmt_time(s["python_minus_cpp_us"]),
          fmt_time(s["torch_minus_cpp_us"])] +
         [fmt_time(s["cpu_us_per_call"][k]) for k in ("cpp", "python", "torch")]
         for s in per_call],
        skip_note + ["C++: bench/reducer_allreduce_worker (out of place); python: numpy, "
                     "out of place; torch: in place on zeros (no refill between calls), "
                     "synchronous; each on its own launch "
                     "of W processes per round. per round: lowest and highest ratio of one "
                     "round's medians. CPU/call: rank 0's process CPU time (every thread) "
                     "over its calls, warm-up included, per call; median over the rounds"])
    if not ddp_records:
        print("\n== 3. DDP step: not run (--ddp_steps=0)")
        return
    r0 = ddp_records[0]
    rows = []
    for s in ddp:
        row = [s["bucket_cap_mb"], s["system"], s["path"] or "-", s["steps"],
               f"{s['step_ms']:.1f} ms", f"{s['vs_gloo']:.2f}", f"{s['forward_ms']:.1f} ms",
               f"{s['backward_ms']:.1f} ms"]
        if s["system"] == "none":
            row += ["-", "-", "-", "-", "-"]
        else:
            row += [s["buckets"],
                    f"{s['overlapped_median']:g} ({s['overlapped_min']}-{s['overlapped_max']})",
                    f"{s['done_before_backward_returned_min']}/{s['buckets']}",
                    f"{s['exposed_ms']:.1f} ms",
                    " ".join(f"{t:+.1f}" for t in s["bucket_done_ms"])]
        rows.append(row)
    print_table(
        f"3. DDP step, W = {w}: {LAYERS} x Linear({WIDTH},{WIDTH}) "
        f"({r0['param_bytes'] // 4:,} float32 params, {r0['param_bytes'] / MiB:.1f} MiB), "
        f"batch {r0['batch']} on CPU, SGD; median over the steps",
        command, ["cap MB", "system", "path", "steps", "step", "vs gloo", "forward",
                  "backward", "buckets", "overlapped", "done<=bwd end", "exposed",
                  "bucket done vs bwd end (ms)"],
        rows,
        skip_note + [
            "system none: the same model without DDP (compute only, no communication).",
            "overlapped: buckets whose all-reduce completed before the last bucket was "
            "handed to the hook (gradients still being computed); median (min-max) over steps; "
            "at most buckets - 1.",
            "done<=bwd end: buckets completed before loss.backward() returned, fewest in any "
            "step (always all: DDP waits for every bucket inside backward()).",
            "exposed: backward() time after the last bucket was handed over (communication "
            "not hidden by computation).",
            "bucket done vs bwd end: each bucket's median completion time relative to the "
            "end of loss.backward(), in bucket order (bucket 0 first handed over).",
            "max |param difference| reducer vs gloo after the steps: "
            + ", ".join(f"cap {r['bucket_cap_mb']}: {r['reducer_vs_gloo_max_param_diff']:.1e}"
                        for r in ddp_records if r["system"] == "gloo")])


# The flags whose defaults --smoke changes: (help, default, smoke default,
# least value or None).
# The binaries it runs (flags of run_bench.BUILT).
BUILT = ("reducerd", "reducer_worker", "pythonpath")
SMOKE_FLAGS = {
    "world_size": ("W", 4, 2, 1),
    "rounds": ("rounds of parts 1 and 2", 3, 1, 1),
    "sizes": ("part 1's sizes in bytes", ALLREDUCE_SIZES, SMOKE_SIZES, None),
    "ddp_steps": ("timed DDP steps per system and cap; 0: no DDP", 20, 3, None),
    "ddp_warmup": ("untimed DDP steps", 3, 1, None),
    "ddp_batch": ("DDP batch rows", 8, 8, None),
}


def parse_args(argv):
    p = run_bench.DriverParser(
        __doc__, SMOKE_FLAGS, BUILT, "the workers (and has numpy)",
        smoke_help="W = 2, 4 B and 4 KiB, few calls, 3 DDP steps, one round",
        json_help="write the results here")
    # Worker mode (the driver runs this file with these).
    p.add_argument("--worker", choices=["python", "torch"], help=argparse.SUPPRESS)
    p.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    p.add_argument("--target", help=argparse.SUPPRESS)
    p.add_argument("--job", help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, help=argparse.SUPPRESS)
    p.add_argument("--path", choices=sorted(PATH_MODES), help=argparse.SUPPRESS)
    p.add_argument("--iters", type=int, help=argparse.SUPPRESS)
    p.add_argument("--warmup", type=int, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv):
    args = parse_args(argv)
    if args.worker == "python":
        return python_worker(args)
    if args.worker == "torch":
        return torch_worker(args)
    command = shlex.join([Path(sys.executable).name, os.path.relpath(__file__)] + argv)
    run_bench.require_built(args, BUILT)
    try:
        subprocess.run([args.python, "-c", "import torch, numpy"], check=True, timeout=120,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    except (subprocess.SubprocessError, OSError) as e:
        sys.exit(f"{args.python} cannot import torch and numpy: {e}")
    t0 = time.monotonic()
    samples, cpu, ddp_records = {}, {}, []
    try:
        with run_bench.reducerd_in_temp_dir(args.reducerd, "python_bench-",
                                            log_tails="*.err") as (log_dir, daemon):
            bench = Bench(args, log_dir, daemon)
            skipped = probe_shm(bench, args.world_size)
            paths = ["grpc"] if skipped else ["shm", "grpc"]
            if skipped:
                print(f"warning: skipping path shm: {skipped}", file=sys.stderr)
            for i in range(args.rounds):
                last = i + 1 == args.rounds
                ddp_records += one_round(bench, paths, args.world_size, args.sizes,
                                         args.ddp_steps if last else 0, samples, cpu)
                print(f"round {i + 1}/{args.rounds} done after "
                      f"{time.monotonic() - t0:.0f} s", file=sys.stderr, flush=True)
    except RunError as e:
        sys.exit(f"python_bench: {e}")
    allreduce = summarize_allreduce(samples, paths, args.sizes)
    per_call = summarize_per_call(samples, cpu, paths)
    ddp = summarize_ddp(ddp_records) if ddp_records else []
    report(args, command, paths, skipped, args.sizes, allreduce, per_call, ddp, ddp_records)
    print(f"\ntotal {time.monotonic() - t0:.0f} s", flush=True)
    if args.json:
        args.json.write_text(json.dumps({
            "command": command, "argv": argv, "world_size": args.world_size,
            "rounds": args.rounds, "paths": paths, "skipped": {"shm": skipped} if skipped else {},
            "allreduce": allreduce, "per_call": per_call, "ddp": ddp,
            "ddp_records": ddp_records,
            "samples": [{"part": k[0], "system": k[1], "path": k[2], "size_bytes": k[3],
                         "latencies_us_per_round": v} for k, v in sorted(
                             samples.items(), key=lambda kv: str(kv[0]))],
            "cpu_us_per_call_per_round": [
                {"system": k[0], "path": k[1], "values": v} for k, v in sorted(cpu.items())]},
            indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
