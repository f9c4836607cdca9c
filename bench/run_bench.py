#!/usr/bin/env python3
"""Side-by-side all-reduce benchmark: Reducer against Gloo and Open MPI.

One invocation runs, for W in (2, 4) worker processes on this host, float32
SUM all-reduce from 4 B to 64 MiB (steps of 4x) plus the metric-sync pattern
(2 float64 values) on each system, interleaving the systems size group by
size group so that they see the same machine state. The systems:
  reducer      Reducer over gRPC on loopback (worker --shared_memory=off)
  reducer_shm  Reducer on the same-host shared-memory path
               (--shared_memory=required); skipped, with the reason, when a
               probe finds that the path cannot run here (worker exit 77)
  gloo         torch.distributed's Gloo backend over loopback TCP
  mpi_tcp      Open MPI over loopback TCP (--mca btl tcp,self; alias "mpi")
  mpi_shm      Open MPI's shared-memory transport (--mca btl vader,self, or
               sm,self where ompi_info lists sm instead of vader)
gloo and mpi_* are skipped, with the reason, where torch or Open MPI is
missing. It prints one table (median, p90, algorithm bandwidth, each system's
ratio to gloo, mpi_tcp and mpi_shm), and, when reducer_shm was asked for,
the same-host section (bench/same_host_model.py: a memcpy probe before and
after the runs, reducer_shm's memory-traffic model per size, the W = 4
targets). --suite=same_host is that comparison alone: every system, W = 2
and 4, 4 B, 4 KiB, 256 KiB, 4 MiB and 64 MiB, none of the extra figures
below. It writes raw and summary numbers to OUT_DIR/results.json and
OUT_DIR/results.csv and a log-log plot to OUT_DIR/allreduce_latency.png, and
adds two figures the targets name: the reduction kernel's float32 sum against
memcpy bandwidth (bazel-bin/bench/reduce_kernel_bench) and reducerd's peak RSS
(VmHWM) over one 1 GiB all-reduce with W = 4; and two of Reducer's own: one
AllReduceMany of 100 small tensors against one small all-reduce, and gRPC's
bare round trip on this machine (bazel-bin/bench/grpc_echo_bench), the floor
under small collectives; and 4 B, 4 MiB, 64 MiB all-reduces at W = 4 with TLS
against plaintext, with the AES-GCM throughput of `openssl speed` that
accounts for the difference (--skip_tls leaves them out).

Peers: bench/gloo_allreduce.py (torch.distributed, run by the interpreter
that runs this script: the project's Python, the venv of
python/requirements-dev.txt with torch from the package index) and
bench/mpi_allreduce.c (built here with mpicc into a temporary directory).
Reducer: bazel-bin/server/reducerd and bazel-bin/bench/reducer_allreduce_worker
(skipped with a warning when not built). Every subprocess has a hard timeout.

Usage, with the project's Python (the one with torch):
  "$(tools/pinned_venv.sh python/requirements-dev.txt)/bin/python" \
      bench/run_bench.py [--quick] [--suite=same_host]
                         [--systems=reducer,reducer_shm,gloo,mpi_tcp,mpi_shm]
                         [--world_sizes=2,4] [--sizes=4,4096]
                         [--out_dir=bench/out]
Needs: that Python (torch), openmpi-bin and libopenmpi-dev (tools/setup.sh
--bench); the plot only where the interpreter has matplotlib (not pinned:
without it, no plot and a warning).
"""

import argparse
import contextlib
import csv
import json
import os
import platform
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from functools import partial
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
sys.path.insert(0, str(BENCH_DIR))
import same_host_model  # noqa: E402  (the same-host model and targets)

SYSTEMS = ("reducer", "reducer_shm", "gloo", "mpi_tcp", "mpi_shm")
ALIASES = {"mpi": "mpi_tcp"}  # the name mpi_tcp had before mpi_shm existed
PEERS = ("gloo", "mpi_tcp", "mpi_shm")
# The worker's --shared_memory for each Reducer system.
REDUCER_MODES = {"reducer": "off", "reducer_shm": "required"}
# The "system" each worker program prints in its records.
REPORTED_AS = {"reducer_shm": "reducer", "mpi_tcp": "mpi", "mpi_shm": "mpi"}
# reducer_allreduce_worker's exit status when the same-host path cannot run.
SHM_UNAVAILABLE_EXIT = 77
KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30

FULL_SIZES = [4 * 4**i for i in range(13)]          # 4 B .. 64 MiB
QUICK_SIZES = [4, 4 * KiB, 256 * KiB, 4 * MiB]
SAME_HOST_SIZES = [4, 4 * KiB, 256 * KiB, 4 * MiB, 64 * MiB]
METRIC_SYNC = "metric_sync"
METRIC_SYNC_BYTES = 16
RSS_TENSOR_BYTES = 1 * GiB
RSS_WORLD_SIZE = 4
# Fusion: one AllReduceMany of FUSED_TENSORS tensors of FUSED_BYTES each,
# against one all-reduce of FUSED_BYTES (W = 4, Reducer only).
FUSED_TENSORS = 100
FUSED_BYTES = 16
FUSED_WORLD_SIZE = 4

# mpirun as root in a container (Open MPI 4.1): no process binding (the
# peers are unbound too), oversubscribing the cores, its own out-of-band
# channel on loopback; the ob1 messaging layer over one transport (BTL) and
# "self" (a rank to itself): TCP over loopback for mpi_tcp, the shared-memory
# BTL for mpi_shm (mpi_btls).
MPIRUN_FLAGS = ["--allow-run-as-root", "--oversubscribe", "--bind-to", "none",
                "--mca", "oob_tcp_if_include", "lo", "--mca", "pml", "ob1"]
MPI_TCP_FLAGS = ["--mca", "btl", "tcp,self", "--mca", "btl_tcp_if_include", "lo"]


# On this machine kind (a VM) a page touched for the first time costs ~4 ms
# per MiB, and glibc serves every malloc of 32 MiB or more with a fresh mmap,
# so a library that mallocs a 64 MiB scratch buffer per call (Open MPI's
# allreduce does) pays ~250 ms of page faults per call. These settings keep
# freed memory in the heap for reuse; by default every worker process of
# every system gets them (--malloc_env).
MALLOC_ENV = {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": str(1 << 40)}


class RunError(Exception):
    """A benchmark subprocess failed, timed out or printed unusable output.
    returncode: the failed process's exit status, when one exited non-zero."""

    def __init__(self, message, returncode=None):
        super().__init__(message)
        self.returncode = returncode


# --------------------------------------------------------------------------
# Plan: which sizes run with how many iterations.

def iterations_for(size, quick):
    """Returns (iters, warmup) for one size: 500 for small tensors down to 10
    for 64 MiB, which keeps each size to a few seconds."""
    if quick:
        return 30, 3
    for limit, iters, warmup in ((1 * KiB, 500, 50), (64 * KiB, 200, 20),
                                 (1 * MiB, 100, 10), (4 * MiB, 50, 5),
                                 (16 * MiB, 20, 3)):
        if size <= limit:
            return iters, warmup
    return 10, 2


def make_plan(quick, sizes=None):
    """Returns the list of runs for one world size: dicts with "pattern",
    "sizes", "iters" and "warmup". Sizes sharing an iteration count share one
    launch of the workers (process start-up is paid once per group).
    sizes, when given, replaces the default list."""
    groups = {}
    for size in sizes or (QUICK_SIZES if quick else FULL_SIZES):
        groups.setdefault(iterations_for(size, quick), []).append(size)
    plan = [{"pattern": "allreduce", "sizes": sizes, "iters": it, "warmup": wu}
            for (it, wu), sizes in groups.items()]
    ms_iters = 200 if quick else 1000
    plan.append({"pattern": METRIC_SYNC, "sizes": [METRIC_SYNC_BYTES],
                 "iters": ms_iters, "warmup": ms_iters // 10})
    return plan


# --------------------------------------------------------------------------
# Processes.

def free_port():
    """Returns a TCP port on 127.0.0.1 that is free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def kill_group(proc, grace_s=5.0, pgid=None):
    """Stops a process and its process group (pgid, by default the process's
    own pid: one started in a session or group of its own): SIGTERM to the
    group, then SIGKILL if the process is still there after grace_s."""
    if proc.poll() is not None:
        return
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pgid or proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=grace_s)
            return
        except subprocess.TimeoutExpired:
            continue


def tail(path, n=2000):
    """Returns the last n characters of a log file (or "" if absent)."""
    try:
        return Path(path).read_text(errors="replace")[-n:]
    except OSError:
        return ""


def print_log_tails(log_dir, pattern, n=1500):
    """Prints to stderr the last n characters of every non-empty log in
    log_dir whose name matches pattern ("*.err"), each under its name."""
    for f in sorted(Path(log_dir).glob(pattern)):
        text = tail(f, n).strip()
        if text:
            print(f"--- {f.name}\n{text}", file=sys.stderr)


def require_binaries(binaries, build_command):
    """Exits naming the first of binaries (Paths) that is missing and the
    build_command that makes them."""
    for binary in binaries:
        if not binary.exists():
            raise SystemExit(f"{binary} is missing: {build_command}")


def run_processes(cmds, log_prefix, timeout_s, env=None, watch=None):
    """Starts every command at once (output in log_prefix-<i>.out/.err),
    waits for all of them with one hard deadline and returns the first
    command's stdout. On a timeout, a non-zero exit or a RunError from
    watch() (called while waiting) it kills them all and raises RunError.
    The commands are started as a launcher (mpirun, torchrun) starts its
    ranks: children of this process, in its session, all in one process
    group of their own (the first's), so that they share one scheduler
    autogroup, as a job's ranks do; a process that starts a session of its
    own per rank puts each rank in an autogroup of its own, which the
    kernel then shares the CPUs between as if they were separate users."""
    procs, logs = [], []
    try:
        for i, cmd in enumerate(cmds):
            out, err = Path(f"{log_prefix}-{i}.out"), Path(f"{log_prefix}-{i}.err")
            logs.append((out, err))
            with open(out, "wb") as fo, open(err, "wb") as fe:
                procs.append(subprocess.Popen(
                    cmd, stdout=fo, stderr=fe, stdin=subprocess.DEVNULL,
                    env=env, cwd=REPO_ROOT,
                    process_group=procs[0].pid if procs else 0))
        wait_all(procs, logs, time.monotonic() + timeout_s, timeout_s, watch)
        return logs[0][0].read_text()
    finally:
        for p in procs:
            kill_group(p, grace_s=2.0, pgid=procs[0].pid)


def wait_all(procs, logs, deadline, timeout_s, watch=None):
    """Polls procs until all exit; raises RunError as soon as one fails, when
    the deadline passes, or when watch() raises it."""
    while True:
        if watch:
            watch()
        pending = False
        for i, p in enumerate(procs):
            rc = p.poll()
            if rc is None:
                pending = True
            elif rc != 0:
                raise RunError(f"process {i} ({Path(p.args[0]).name}) exited "
                               f"with {rc}: {tail(logs[i][1])}", returncode=rc)
        if not pending:
            return
        if time.monotonic() > deadline:
            raise RunError(f"timed out after {timeout_s:.0f} s: "
                           f"{tail(logs[0][1])}")
        time.sleep(0.02)


class ReducerDaemon:
    """Runs bazel-bin/server/reducerd until stop(): on a free 127.0.0.1 port,
    or on `address` behind `command_prefix` (e.g. `ip netns exec NS`, for a
    reducerd on a host of its own)."""

    def __init__(self, binary, log_path, env=None, start_timeout_s=60.0,
                 extra_flags=(), address=None, command_prefix=()):
        self.address = address or f"127.0.0.1:{free_port()}"
        self.log_path = Path(log_path)
        self._ready = threading.Event()
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [*command_prefix, str(binary), f"--listen={self.address}",
             *extra_flags], cwd=REPO_ROOT,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, text=True, start_new_session=True,
            env=dict(os.environ, **(env or {})))
        self._pump_thread = threading.Thread(target=self._pump, daemon=True)
        self._pump_thread.start()
        self._wait_ready(start_timeout_s)

    def _pump(self):
        """Copies the daemon's output to its log; flags the line naming the
        address (the daemon prints it once it serves)."""
        for line in self.proc.stdout:
            self._log.write(line)
            self._log.flush()
            if self.address in line:
                self._ready.set()

    def _wait_ready(self, timeout_s):
        """Waits for the address line; raises RunError if the daemon exits or
        stays silent too long."""
        deadline = time.monotonic() + timeout_s
        while not self._ready.wait(0.05):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RunError(f"reducerd did not start on {self.address}: "
                               f"{tail(self.log_path)}")

    def alive(self):
        """True while the daemon process runs."""
        return self.proc.poll() is None

    def proc_status(self, field):
        """Returns a /proc/<pid>/status field in KiB (e.g. "VmHWM"), or None."""
        try:
            text = Path(f"/proc/{self.proc.pid}/status").read_text()
        except OSError:
            return None
        m = re.search(rf"^{field}:\s+(\d+) kB", text, re.M)
        return int(m.group(1)) if m else None

    def stop(self, grace_s=20.0):
        """SIGTERM (the daemon drains and exits 0), SIGKILL after grace_s."""
        kill_group(self.proc, grace_s)
        self._pump_thread.join(timeout=5)
        self._log.close()
        return self.proc.returncode


# --------------------------------------------------------------------------
# What the drivers (this file and the other bench/*.py that import it) share:
# the flags naming their built binaries and bounding their launches, the
# defaults of their smoke forms, and a reducerd with its logs in a temporary
# directory.

# Each flag that names a built binary: its default below bazel-bin and the
# Bazel target that builds it. --pythonpath names the directory that holds
# the built reducer package; --worker is quorum_bench's, --healthy_tenant
# and --hostile_tenant tenants_bench's.
BUILT = {
    "reducerd": ("server/reducerd", "//server:reducerd"),
    "reducer_worker": ("bench/reducer_allreduce_worker", "//bench:reducer_allreduce_worker"),
    "worker": ("bench/quorum_step_worker", "//bench:quorum_step_worker"),
    "healthy_tenant": ("bench/healthy_tenant", "//bench:healthy_tenant"),
    "hostile_tenant": ("bench/hostile_tenant", "//bench:hostile_tenant"),
    "virtual_network": ("bench/virtual_network", "//bench:virtual_network"),
    "echo_bench": ("bench/grpc_echo_bench", "//bench:grpc_echo_bench"),
    "kernel_bench": ("bench/reduce_kernel_bench", "//bench:reduce_kernel_bench"),
    "pythonpath": ("python", "//python:reducer"),
}


def add_built_flags(p, names, type=str):
    """Adds to parser p, for each name of BUILT in names, --NAME defaulting
    to REPO_ROOT/bazel-bin/<its path>, of `type` (str or Path)."""
    for name in names:
        p.add_argument(f"--{name}", type=type,
                       default=type(REPO_ROOT / "bazel-bin" / BUILT[name][0]))


def require_built(args, names):
    """Exits naming the first missing binary of the flags `names` (of BUILT;
    for --pythonpath its reducer package) and the bazel command that builds
    them all."""
    require_binaries(
        [Path(getattr(args, name)) / ("reducer" if name == "pythonpath" else "")
         for name in names],
        "bazel build " + " ".join(BUILT[name][1] for name in names))


def add_sweep_flags(p, out_dir, idle_wait_before):
    """Adds to parser p the flags of a driver that sweeps sizes into an out
    dir: --out_dir (default out_dir), --timeout_s (each launch of workers)
    and --wait_idle_s (before each `idle_wait_before`: "size", "size
    group")."""
    p.add_argument("--out_dir", type=Path, default=out_dir)
    p.add_argument("--timeout_s", type=float, default=600,
                   help="hard limit for each launch of workers")
    p.add_argument("--wait_idle_s", type=float, default=0,
                   help=f"before each {idle_wait_before}, wait up to this long "
                        "for other load to go away (default: only warn)")


def add_launch_flags(p, python_runs, timeout_s=600):
    """Adds to parser p --python, the interpreter with torch that runs
    `python_runs` ("the Gloo ranks"; default: this one), and --timeout_s,
    the hard limit of each launch (default timeout_s)."""
    p.add_argument("--python", default=sys.executable,
                   help=f"the Python with torch that runs {python_runs} "
                        "(default: this one)")
    p.add_argument("--timeout_s", type=float, default=timeout_s,
                   help="hard limit of each launch")


def byte_sizes(text):
    """argparse type of a comma-separated list of byte sizes ("" is []);
    each must be a positive multiple of 4 (float32 elements)."""
    sizes = [int(x) for x in text.split(",") if x]
    if any(n <= 0 or n % 4 for n in sizes):
        raise argparse.ArgumentTypeError(
            f"sizes must be positive multiples of 4: {text}")
    return sizes


def add_smoke_flags(p, flags):
    """Adds to parser p, for each name -> (what, full, smoke, least) of
    `flags`, --NAME with the help `what` and both defaults: a list of byte
    sizes (byte_sizes) for "sizes", else an int. Each stays None until
    fill_smoke_defaults(args, flags) sets it; `least`, unless None, is the
    smallest value DriverParser accepts."""
    def shown(name, value):
        if name == "sizes":
            return ", ".join(fmt_size(n) for n in value)
        return fmt_size(value) if name.endswith("_bytes") else str(value)

    for name, (what, full, smoke, _) in flags.items():
        defaults = f"default {shown(name, full)}"
        if smoke != full:
            defaults += f"; smoke {shown(name, smoke)}"
        p.add_argument(f"--{name}", type=byte_sizes if name == "sizes" else int,
                       default=None, help=f"{what} ({defaults})")


def fill_smoke_defaults(args, flags):
    """Sets each flag of add_smoke_flags' `flags` that the command line left
    None: to its smoke value with --smoke, else to its full one."""
    for name, (_, full, smoke, _) in flags.items():
        if getattr(args, name) is None:
            setattr(args, name, smoke if args.smoke else full)


class DriverParser(argparse.ArgumentParser):
    """The command line of a driver that runs reducerd and launches
    workers in rounds: the flags of add_smoke_flags(smoke_flags), --smoke
    (smoke_help), --json (a Path; json_help), the built binaries `built`
    (add_built_flags, as Paths) and add_launch_flags(python_runs,
    timeout_s); the driver adds its own. parse_args fills the smoke flags'
    defaults (fill_smoke_defaults) and checks their least values."""

    def __init__(self, doc, smoke_flags, built, python_runs, smoke_help, json_help,
                 timeout_s=600):
        super().__init__(description=doc.splitlines()[0])
        self.smoke_flags = smoke_flags
        add_smoke_flags(self, smoke_flags)
        self.add_argument("--smoke", action="store_true", help=smoke_help)
        self.add_argument("--json", type=Path, help=json_help)
        add_built_flags(self, built, type=Path)
        add_launch_flags(self, python_runs, timeout_s)

    def parse_args(self, args=None, namespace=None):
        parsed = super().parse_args(args, namespace)
        fill_smoke_defaults(parsed, self.smoke_flags)
        for name, (_, _, _, least) in self.smoke_flags.items():
            if least is not None and getattr(parsed, name) < least:
                self.error(f"--{name} must be at least {least}")
        return parsed


@contextlib.contextmanager
def reducerd_in_temp_dir(reducerd, prefix, log_tails=None):
    """Yields (log_dir, daemon): a fresh temporary directory named prefix...
    and a ReducerDaemon of the binary reducerd logging into it; stops the
    daemon and removes the directory after. A RunError, the daemon's start
    included, propagates, after the tails of the logs matching log_tails
    ("*.err"; None: none) are printed."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        log_dir = Path(tmp)
        daemon = None
        try:
            daemon = ReducerDaemon(reducerd, log_dir / "reducerd.log")
            yield log_dir, daemon
        except RunError:
            if log_tails:
                print_log_tails(log_dir, log_tails)
            raise
        finally:
            if daemon is not None:
                daemon.stop()


def host_meta(**fields):
    """results.json's "meta": the date, this host's name and CPU count, then
    `fields`."""
    return {"date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "host": platform.node(),
            "cpus": os.cpu_count(), **fields}


def target_dicts(targets):
    """results.json's "targets": each (label, value, target, ok) as a dict."""
    return [dict(figure=l, value=v, target=t, ok=ok) for l, v, t, ok in targets]


def shown_path(path):
    """path as a report names it, with no machine path: relative to the
    repository where it lies below it, else its name alone."""
    path = Path(path)
    return os.path.relpath(path, REPO_ROOT) if path.is_relative_to(REPO_ROOT) else path.name


def exit_status(failures):
    """Prints each failure to stderr ("FAILED: ..."); the driver's exit
    status, 1 if there were any, else 0."""
    for f in failures:
        print(f"FAILED: {f}", file=sys.stderr)
    return 1 if failures else 0


# --------------------------------------------------------------------------
# Systems: each runner returns rank 0's stdout for one plan entry.

def worker_flags(run):
    """The --sizes/--iters/--warmup/--metric_sync flags shared by all workers
    (and --fused_tensors, which only the Reducer worker knows)."""
    flags = [f"--iters={run['iters']}", f"--warmup={run['warmup']}"]
    if run["pattern"] == METRIC_SYNC:
        return flags + ["--metric_sync"]
    if run["pattern"] == "fused":
        flags.append(f"--fused_tensors={run['tensors']}")
    return [f"--sizes={','.join(map(str, run['sizes']))}"] + flags


def run_gloo(ctx, world, run, log_prefix):
    """Launches W gloo_allreduce.py ranks with a fresh rendezvous port."""
    port = free_port()
    base = [sys.executable, str(BENCH_DIR / "gloo_allreduce.py"),
            f"--world_size={world}", f"--port={port}",
            f"--timeout_s={ctx.timeout_s}"] + worker_flags(run)
    cmds = [base + [f"--rank={r}"] for r in range(world)]
    env = dict(os.environ, OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo",
               **ctx.worker_env)
    return run_processes(cmds, log_prefix, ctx.timeout_s, env)


def mpi_shm_btl():
    """The name this Open MPI gives its shared-memory BTL, from ompi_info's
    component list: "vader" (Open MPI 2-4) or "sm" (5 and later); None when
    neither is listed or ompi_info is missing."""
    try:
        out = subprocess.run(["ompi_info"], capture_output=True, text=True,
                             timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    listed = set(re.findall(r"MCA btl:\s+(\w+)", out))
    return next((b for b in ("vader", "sm") if b in listed), None)


def mpi_btls(system, shm_btl):
    """The transport flags of mpi_tcp or mpi_shm (shm_btl: mpi_shm_btl())."""
    if system == "mpi_tcp":
        return MPI_TCP_FLAGS
    return ["--mca", "btl", f"{shm_btl},self"]


def run_mpi(ctx, world, run, log_prefix, system="mpi_tcp"):
    """Runs the mpicc-built peer under mpirun with W ranks over the
    transport of `system` (mpi_tcp or mpi_shm)."""
    exports = [a for name in ctx.worker_env for a in ("-x", name)]
    cmd = (["mpirun"] + MPIRUN_FLAGS + mpi_btls(system, ctx.mpi_shm_btl) +
           exports + ["-np", str(world), str(ctx.mpi_binary)])
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1",
               OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", **ctx.worker_env)
    return run_processes([cmd + worker_flags(run)], log_prefix, ctx.timeout_s, env)


def reducer_cmds(worker, address, world, run, shared_memory="off"):
    """The W reducer_allreduce_worker command lines for one run (fresh job);
    --shared_memory is passed only when it is not the worker's default."""
    job = f"bench-{run['pattern']}-w{world}-{uuid.uuid4().hex[:12]}"
    base = [str(worker), f"--target={address}", f"--job={job}",
            f"--world_size={world}"] + worker_flags(run)
    if shared_memory != "off":
        base.append(f"--shared_memory={shared_memory}")
    return [base + [f"--rank={r}"] for r in range(world)]


def run_reducer(ctx, world, run, log_prefix, system="reducer"):
    """Launches W Reducer workers of `system` (reducer or reducer_shm)
    against the shared daemon (restarted if it died in an earlier run)."""
    if ctx.daemon is None or not ctx.daemon.alive():
        ctx.daemon = ReducerDaemon(ctx.reducerd, ctx.log_dir / "reducerd.log",
                                   ctx.daemon_env)
    cmds = reducer_cmds(ctx.reducer_worker, ctx.daemon.address, world, run,
                        REDUCER_MODES[system])
    return run_processes(cmds, log_prefix, ctx.timeout_s,
                         dict(os.environ, **ctx.worker_env))


RUNNERS = {"reducer": run_reducer,
           "reducer_shm": partial(run_reducer, system="reducer_shm"),
           "gloo": run_gloo,
           "mpi_tcp": run_mpi,
           "mpi_shm": partial(run_mpi, system="mpi_shm")}


def parse_records(stdout, system, world, run):
    """Parses rank 0's JSON lines and checks they answer the run asked for.
    Records of a system whose program prints another name (REPORTED_AS)
    are renamed to `system`; reducer_shm's must say shared_memory=required."""
    records = []
    for line in stdout.splitlines():
        line = line.strip()
        if line.startswith("{"):
            records.append(json.loads(line))
    got = [r.get("size_bytes") for r in records]
    if got != run["sizes"]:
        raise RunError(f"expected sizes {run['sizes']}, got {got}")
    for r in records:
        if (r.get("system") != REPORTED_AS.get(system, system)
                or r.get("world_size") != world):
            raise RunError(f"unexpected record header: {json.dumps(r)[:200]}")
        if system in REDUCER_MODES and r.get("shared_memory", "off") != REDUCER_MODES[system]:
            raise RunError(f"{system} record ran with shared_memory="
                           f"{r.get('shared_memory', 'off')}")
        r["system"] = system
        if len(r.get("latencies_us", [])) != run["iters"]:
            raise RunError(f"expected {run['iters']} latencies, got "
                           f"{len(r.get('latencies_us', []))}")
        r["pattern"] = r.get("pattern", "allreduce")
    return records


# --------------------------------------------------------------------------
# Statistics and reporting.

def percentile(values, q):
    """The q-th percentile (0..100) with linear interpolation (numpy's default)."""
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def summarize(record):
    """Adds median/p90/min/mean (us) and algorithm bandwidth (GB/s) to a record."""
    lat = record["latencies_us"]
    record["median_us"] = percentile(lat, 50)
    record["p90_us"] = percentile(lat, 90)
    record["min_us"] = min(lat)
    record["mean_us"] = sum(lat) / len(lat)
    record["algbw_GBps"] = record["size_bytes"] / (record["median_us"] * 1e3)
    return record


def key_of(record):
    """Identifies a measurement across systems: (W, pattern, size)."""
    return record["world_size"], record["pattern"], record["size_bytes"]


def add_ratios(records):
    """Sets vs_<peer> = median / peer's median on every record of another
    system than the peer (same W, pattern and size)."""
    by_key = {(r["system"],) + key_of(r): r for r in records}
    for r in records:
        for peer in PEERS:
            other = peer != r["system"] and by_key.get((peer,) + key_of(r))
            if other:
                r[f"vs_{peer}"] = r["median_us"] / other["median_us"]


def fmt_size(n):
    """4 -> "4 B", 4096 -> "4 KiB", 67108864 -> "64 MiB"."""
    for unit, scale in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} B"


def fmt_time(us):
    """A latency in us or ms with 3-4 significant digits."""
    return f"{us:.1f} us" if us < 1000 else f"{us / 1000:.2f} ms"


def sort_key(r):
    """Table order: W, metric sync last, size, then SYSTEMS' order."""
    return (r["world_size"], r["pattern"] == METRIC_SYNC, r["size_bytes"],
            SYSTEMS.index(r["system"]))


def print_table(records):
    """Prints the results table to stdout."""
    head = ("system", "W", "size", "median", "p90", "algbw GB/s",
            *(f"vs {p}" for p in PEERS))
    rows = [head]
    for r in sorted(records, key=sort_key):
        size = "metric sync" if r["pattern"] == METRIC_SYNC else fmt_size(r["size_bytes"])
        ratios = [f"{r[f'vs_{p}']:.2f}" if f"vs_{p}" in r else "" for p in PEERS]
        rows.append((r["system"], str(r["world_size"]), size,
                     fmt_time(r["median_us"]), fmt_time(r["p90_us"]),
                     f"{r['algbw_GBps']:.3g}", *ratios))
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    for i, row in enumerate(rows):
        print("  ".join(c.rjust(w) if j else c.ljust(w)
                        for j, (c, w) in enumerate(zip(row, widths))))
        if i == 0:
            print("  ".join("-" * w for w in widths))


CSV_FIELDS = ["system", "world_size", "pattern", "size_bytes", "iters",
              "median_us", "p90_us", "min_us", "mean_us", "algbw_GBps",
              *(f"vs_{p}" for p in PEERS), "cpu_busy_before"]


def write_summary_csv(records, path, fields, key):
    """One row of `fields` per record, in the order of key, with iters the
    number of its latencies."""
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        w.writeheader()
        for r in sorted(records, key=key):
            w.writerow(dict(r, iters=len(r["latencies_us"])))


def write_csv(records, path):
    """One summary row per (system, W, pattern, size)."""
    write_summary_csv(records, path, CSV_FIELDS, sort_key)


def write_plot(records, path):
    """Log-log latency (median) against size, one line per system per W;
    the metric sync appears as a star at 16 B (hollow for W=2). Returns False without
    matplotlib."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("warning: matplotlib missing, no plot", file=sys.stderr)
        return False
    colors = {"reducer": "tab:red", "reducer_shm": "tab:orange",
              "gloo": "tab:blue", "mpi_tcp": "tab:green", "mpi_shm": "tab:olive"}
    styles = {2: "--", 4: "-"}
    fig, ax = plt.subplots(figsize=(9, 6))
    for (system, world), rs in group_lines(records).items():
        line = sorted((r for r in rs if r["pattern"] != METRIC_SYNC),
                      key=lambda r: r["size_bytes"])
        style = dict(color=colors.get(system), linestyle=styles.get(world, ":"))
        if line:
            ax.plot([r["size_bytes"] for r in line],
                    [r["median_us"] / 1000 for r in line], marker="o",
                    markersize=3, label=f"{system} W={world}", **style)
        for r in rs:
            if r["pattern"] == METRIC_SYNC:
                ax.plot([r["size_bytes"]], [r["median_us"] / 1000], marker="*",
                        markersize=11, color=style["color"], linestyle="none",
                        markerfacecolor=style["color"] if world == 4 else "none")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("tensor size (bytes, float32)")
    ax.set_ylabel("median latency (ms)")
    ax.set_title("all-reduce latency on one host (stars: metric sync, 2 float64; hollow W=2)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def group_lines(records):
    """Groups records by (system, W) for plotting."""
    lines = {}
    for r in records:
        lines.setdefault((r["system"], r["world_size"]), []).append(r)
    return lines


# --------------------------------------------------------------------------
# Extra figures: reduction kernel bandwidth and reducerd peak RSS.

def kernel_bench(binary, timeout_s):
    """Runs the kernel benchmark (Google Benchmark JSON) and pairs float32 sum
    with memcpy bandwidth. Returns a dict, or None when it is not built."""
    if not binary.exists():
        return None
    proc = subprocess.run([str(binary), "--benchmark_format=json"],
                          capture_output=True, text=True, timeout=timeout_s,
                          cwd=REPO_ROOT)
    if proc.returncode != 0:
        raise RunError(f"reduce_kernel_bench exited {proc.returncode}: "
                       f"{proc.stderr[-2000:]}")
    data = json.loads(proc.stdout)
    bench = {}  # name -> (GB/s, label); with repetitions, the median aggregate
    for b in data.get("benchmarks", []):
        if b.get("run_type") == "aggregate" and b.get("aggregate_name") != "median":
            continue
        name = b.get("run_name", b["name"])
        bench[name] = (b.get("bytes_per_second", 0) / 1e9, b.get("label", ""))
    return {"all_GBps": {n: v for n, (v, _) in bench.items()},
            "float32_sum_vs_memcpy": pair_kernels(bench)}


def bench_args(name):
    """The arguments of a benchmark name other than its dtype and timing
    suffix, as a tuple: "BM_ReduceSum/W:2/dtype:0/real_time" -> ("W:2",),
    "BM_Memcpy/1048576" -> ("1048576",)."""
    return tuple(t for t in name.split("/")[1:]
                 if not t.startswith(("dtype", "real_time", "process_time",
                                      "manual_time", "threads:")))


def pair_kernels(bench):
    """Pairs each float32 sum benchmark (by name or label) with the memcpy
    benchmark of the same other arguments (W, size), or with the only memcpy
    one. bench maps name -> (GB/s, label); returns dicts with both and the
    ratio."""
    memcpy = {bench_args(n): (n, v) for n, (v, _) in bench.items()
              if "memcpy" in n.lower() and v > 0}
    pairs = []
    for name, (gbps, label) in bench.items():
        text = f"{name} {label}".lower()
        if "memcpy" in text or "sum" not in text:
            continue
        if not re.search(r"float32|f32|dtype:0\b", text):  # DataType::kFloat32 == 0
            continue
        match = memcpy.get(bench_args(name)) or (
            next(iter(memcpy.values())) if len(memcpy) == 1 else None)
        if match:
            pairs.append({"sum": name, "sum_GBps": gbps, "memcpy": match[0],
                          "memcpy_GBps": match[1], "ratio": gbps / match[1]})
    return pairs


def reducerd_peak_rss(ctx, timeout_s):
    """Starts a fresh reducerd, runs one 1 GiB float32 all-reduce with W = 4
    workers (--iters=1 --warmup=0) and reads the daemon's VmHWM before
    stopping it. Returns a dict with KiB figures, or {"skipped": why}."""
    need = RSS_WORLD_SIZE * 2 * RSS_TENSOR_BYTES + 2 * GiB
    avail = mem_available()
    if avail is not None and avail < need:
        return {"skipped": f"needs ~{need / GiB:.0f} GiB free, "
                           f"{avail / GiB:.1f} GiB available"}
    daemon = ReducerDaemon(ctx.reducerd, ctx.log_dir / "reducerd-rss.log",
                           ctx.daemon_env)
    try:
        idle_kib = daemon.proc_status("VmHWM")
        run = {"pattern": "allreduce", "sizes": [RSS_TENSOR_BYTES],
               "iters": 1, "warmup": 0}
        cmds = reducer_cmds(ctx.reducer_worker, daemon.address, RSS_WORLD_SIZE, run)
        t0 = time.monotonic()
        out = run_processes(cmds, ctx.log_dir / "reducer-rss", timeout_s,
                            dict(os.environ, **ctx.worker_env),
                            watch=lambda: memory_guard(daemon))
        elapsed = time.monotonic() - t0
        peak_kib = daemon.proc_status("VmHWM")
        records = parse_records(out, "reducer", RSS_WORLD_SIZE, run)
    finally:
        daemon.stop()
    return {"tensor_bytes": RSS_TENSOR_BYTES, "world_size": RSS_WORLD_SIZE,
            "idle_VmHWM_kib": idle_kib, "peak_VmHWM_kib": peak_kib,
            "latency_us": records[0]["latencies_us"][0],
            "workers_wall_s": elapsed}


def reducer_fusion(ctx, records, timeout_s):
    """Median of one AllReduceMany of FUSED_TENSORS x FUSED_BYTES at W=4,
    against this run's median of one FUSED_BYTES all-reduce."""
    single = [r for r in records if r["system"] == "reducer" and
              r["world_size"] == FUSED_WORLD_SIZE and r["pattern"] == "allreduce"
              and r["size_bytes"] == FUSED_BYTES]
    if not single:
        return {"skipped": f"no W={FUSED_WORLD_SIZE} {FUSED_BYTES} B all-reduce in this run"}
    run = {"pattern": "fused", "tensors": FUSED_TENSORS, "sizes": [FUSED_BYTES],
           "iters": 500, "warmup": 50}
    out = run_reducer(ctx, FUSED_WORLD_SIZE, run, ctx.log_dir / "reducer-fused")
    fused = parse_records(out, "reducer", FUSED_WORLD_SIZE, run)[0]
    fused_us = percentile(fused["latencies_us"], 50)
    single_us = percentile(single[0]["latencies_us"], 50)
    return {"tensors": FUSED_TENSORS, "bytes_each": FUSED_BYTES,
            "fused_median_us": fused_us, "single_median_us": single_us,
            "ratio": fused_us / single_us}


# TLS against plaintext: the same W=4 all-reduces against two reducerds,
# one serving TLS (certificates from tests/make_test_certs.sh), alternating
# plaintext and TLS rounds so that both see the same machine state.
TLS_SIZES = [4, 4 * MiB, 64 * MiB]
TLS_WORLD_SIZE = 4
TLS_ROUNDS = 3


def tls_iterations(size):
    """Timed iterations per round: enough for a stable median, little time."""
    return 200 if size < 64 * KiB else (20 if size <= 4 * MiB else 5)


def openssl_aead_speed(timeout_s):
    """`openssl speed -evp` GB/s for 16 KiB blocks (a TLS record) of the two
    AES-GCM ciphers TLS 1.3 negotiates; {} when openssl is missing."""
    speeds = {}
    for cipher in ("aes-128-gcm", "aes-256-gcm"):
        try:
            out = subprocess.run(
                ["openssl", "speed", "-evp", cipher, "-bytes", "16384",
                 "-seconds", "1"], capture_output=True, text=True,
                timeout=timeout_s).stdout
        except (OSError, subprocess.TimeoutExpired):
            continue
        m = re.search(rf"^{cipher.upper()}\s+([\d.]+)k", out, re.M | re.I)
        if m:
            speeds[cipher] = float(m.group(1)) * 1000 / 1e9  # kB/s -> GB/s
    return speeds


def negotiated_cipher(address):
    """The TLS version and cipher reducerd at `address` negotiates with
    OpenSSL's client (what gRPC's OpenSSL-based handshaker picks too)."""
    out = subprocess.run(["openssl", "s_client", "-connect", address],
                         input="", capture_output=True, text=True, timeout=10).stdout
    m = re.search(r"New, (\S+), Cipher is (\S+)", out)
    return f"{m.group(1)} {m.group(2)}" if m else "unknown"


def reducer_tls(ctx, tmp, timeout_s):
    """Median all-reduce time with TLS and in plaintext, W=4, per size, and
    what AES-GCM throughput predicts the difference to be."""
    certs = Path(tmp) / "certs"
    subprocess.run(["bash", str(REPO_ROOT / "tests/make_test_certs.sh"), str(certs)],
                   check=True, timeout=60)
    plain = ReducerDaemon(ctx.reducerd, ctx.log_dir / "reducerd-plain.log",
                          ctx.daemon_env)
    tls = ReducerDaemon(ctx.reducerd, ctx.log_dir / "reducerd-tls.log",
                        ctx.daemon_env, extra_flags=[
                            f"--tls_cert_file={certs / 'server.pem'}",
                            f"--tls_key_file={certs / 'server.key'}"])
    latencies = {(m, s): [] for m in ("plain", "tls") for s in TLS_SIZES}
    try:
        cipher = negotiated_cipher(tls.address)
        for _ in range(TLS_ROUNDS):
            for size in TLS_SIZES:
                run = {"pattern": "allreduce", "sizes": [size],
                       "iters": tls_iterations(size), "warmup": 2}
                for mode, daemon in (("plain", plain), ("tls", tls)):
                    cmds = reducer_cmds(ctx.reducer_worker, daemon.address,
                                        TLS_WORLD_SIZE, run)
                    if mode == "tls":
                        cmds = [c + [f"--tls_ca_file={certs / 'ca.pem'}"] for c in cmds]
                    out = run_processes(cmds, ctx.log_dir / f"reducer-{mode}-{size}",
                                        timeout_s, dict(os.environ, **ctx.worker_env))
                    record = parse_records(out, "reducer", TLS_WORLD_SIZE, run)[0]
                    latencies[(mode, size)] += record["latencies_us"]
    finally:
        plain.stop()
        tls.stop()
    aead = openssl_aead_speed(timeout_s)
    rows = []
    for size in TLS_SIZES:
        p50 = percentile(latencies[("plain", size)], 50)
        t50 = percentile(latencies[("tls", size)], 50)
        # Each of W ranks sends and receives `size` bytes: reducerd decrypts
        # W x size and encrypts W x size, each client encrypts and decrypts
        # size. On reducerd's side that is 2 W x size through AES-GCM.
        crypt_bytes = 2 * TLS_WORLD_SIZE * size
        gbps = aead.get("aes-256-gcm") or aead.get("aes-128-gcm")
        rows.append({"size_bytes": size, "plain_median_us": p50,
                     "tls_median_us": t50, "ratio": t50 / p50,
                     "extra_us": t50 - p50,
                     "model_reducerd_aead_us": crypt_bytes / (gbps * 1e3) if gbps else None})
    return {"world_size": TLS_WORLD_SIZE, "cipher": cipher,
            "openssl_speed_GBps_16KiB": aead, "rows": rows}


def print_tls(tls):
    """Prints the TLS-against-plaintext rows."""
    print(f"\nTLS against plaintext, W={TLS_WORLD_SIZE} all-reduce "
          f"(same run, alternating rounds):")
    if "skipped" in tls:
        print(f"  skipped: {tls['skipped']}")
        return
    print(f"  negotiated: {tls['cipher']}; openssl speed (16 KiB blocks): " +
          ", ".join(f"{c} {v:.2f} GB/s" for c, v in tls["openssl_speed_GBps_16KiB"].items()))
    for r in tls["rows"]:
        model = r["model_reducerd_aead_us"]
        print(f"  {fmt_size(r['size_bytes']):>8}: plaintext {fmt_time(r['plain_median_us'])}, "
              f"TLS {fmt_time(r['tls_median_us'])} (x{r['ratio']:.2f}, "
              f"+{fmt_time(r['extra_us'])}; reducerd's AES-GCM alone at that "
              f"speed: {fmt_time(model) if model is not None else 'n/a'})")


ECHO_MODES = ("callback_per_call", "cq_stream")


def grpc_floor(ctx, binary, timeout_s):
    """Median round trip of 4 B through gRPC alone (bench/grpc_echo_bench,
    one client): a new stream per call against one long-lived stream."""
    if not binary.exists():
        return {"skipped": f"build {binary} first"}
    server = ReducerDaemon(binary, ctx.log_dir / "grpc-echo.log", ctx.daemon_env)
    try:
        medians = {}
        for mode in ECHO_MODES:
            proc = subprocess.run(
                [str(binary), f"--target={server.address}", f"--mode={mode}",
                 "--bytes=4", "--iters=2000", "--warmup=100"],
                capture_output=True, text=True, timeout=timeout_s)
            if proc.returncode != 0:
                raise RunError(f"grpc_echo_bench --mode={mode} exited "
                               f"{proc.returncode}: {proc.stderr[-500:]}")
            record = json.loads(proc.stdout.strip().splitlines()[-1])
            medians[mode] = percentile(record["latencies_us"], 50)
    finally:
        server.stop()
    return {"median_us": medians}


def same_host_section(records, world_sizes, sizes, probe_before, probe_after,
                      skipped):
    """The same-host figures (bench/same_host_model.py): the memcpy probe's
    rate (median of both probes' copies), reducer_shm's traffic and model
    times per W and size beside its median, and the W = 4 targets."""
    rates = probe_before + probe_after
    copy = percentile(rates, 50)
    medians = {(r["system"], r["world_size"], r["size_bytes"]): r["median_us"]
               for r in records if r["pattern"] == "allreduce"}
    rows = []
    for world in world_sizes:
        for size in sizes:
            moved = same_host_model.traffic(size, world)
            model = same_host_model.model_us(size, world, copy)
            measured = medians.get(("reducer_shm", world, size))
            rows.append({"world_size": world, "size_bytes": size,
                         "rank_bytes": moved["rank"],
                         "reducerd_bytes": moved["reducerd"], **model,
                         "reducer_shm_median_us": measured,
                         "t_over_chain": measured / model["chain_us"]
                         if measured else None})
    checked, unmeasured = same_host_model.targets(medians)
    return {"memcpy_probe_bytes": same_host_model.PROBE_BYTES,
            "memcpy_GBps": copy,
            "memcpy_GBps_before": percentile(probe_before, 50),
            "memcpy_GBps_after": percentile(probe_after, 50),
            "rows": rows, "targets": checked, "unmeasured_targets": unmeasured,
            "reducer_shm_skipped": skipped.get("reducer_shm")}


def fmt_bytes(n):
    """A byte count in B, KiB, MiB or GiB with 3-4 significant digits."""
    for unit, scale in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if n >= scale:
            return f"{n / scale:.4g} {unit}"
    return f"{n} B"


def print_same_host(shm):
    """Prints the same-host section: the model table and the targets."""
    print(f"\nsame host: reducer_shm's memory traffic (bench/same_host_model.py) "
          f"at the memcpy probe's {shm['memcpy_GBps']:.2f} GB/s copied "
          f"({fmt_size(shm['memcpy_probe_bytes'])}, one thread; "
          f"{shm['memcpy_GBps_before']:.2f} before the runs, "
          f"{shm['memcpy_GBps_after']:.2f} after):")
    if shm["reducer_shm_skipped"]:
        print(f"  reducer_shm not measured: {shm['reducer_shm_skipped']}")
    head = ("W", "size", "rank moves", "reducerd moves", "model chain",
            "model serial", "reducer_shm", "t / chain")
    rows = [head]
    for r in shm["rows"]:
        m = r["reducer_shm_median_us"]
        rows.append((str(r["world_size"]), fmt_size(r["size_bytes"]),
                     fmt_bytes(r["rank_bytes"]), fmt_bytes(r["reducerd_bytes"]),
                     fmt_time(r["chain_us"]), fmt_time(r["serial_us"]),
                     fmt_time(m) if m else "-",
                     f"{r['t_over_chain']:.2f}" if m else "-"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    for row in rows:
        print("  " + "  ".join(c.rjust(w) for c, w in zip(row, widths)))
    print("\nsame-host targets (W=4):")
    for label, value, target, ok in shm["targets"]:
        print(f"  {'ok  ' if ok else 'MISS'} {label}: {value:.2f} (target {target})")
    for label in shm["unmeasured_targets"]:
        print(f"  n/a  {label}: not measured")


MIN_MEM_AVAILABLE = 1 * GiB


def memory_guard(daemon):
    """Raises RunError (which stops the run) before the 1 GiB run can push the
    machine into the OOM killer: when MemAvailable falls under 1 GiB."""
    avail = mem_available()
    if avail is not None and avail < MIN_MEM_AVAILABLE:
        rss = daemon.proc_status("VmRSS")
        raise RunError(f"stopped: MemAvailable fell to {avail / MiB:.0f} MiB "
                       f"(reducerd VmRSS {rss and rss // 1024} MiB)")


def mem_available():
    """MemAvailable from /proc/meminfo in bytes (None if unreadable)."""
    try:
        m = re.search(r"^MemAvailable:\s+(\d+) kB",
                      Path("/proc/meminfo").read_text(), re.M)
        return int(m.group(1)) * 1024 if m else None
    except OSError:
        return None


# --------------------------------------------------------------------------
# The project's performance targets (docs/performance.md), checked on this run's numbers.

def check_targets(records, kernel, rss):
    """Returns a list of (figure, value, target, ok) from this run's data."""
    w4 = {(r["pattern"], r["size_bytes"]): r for r in records
          if r["system"] == "reducer" and r["world_size"] == 4}
    out = []
    small = [r["vs_gloo"] for (p, s), r in w4.items()
             if p == "allreduce" and s <= 256 * KiB and "vs_gloo" in r]
    if small:
        out.append(("W=4 4 B..256 KiB, worst reducer/gloo", max(small), "<= 0.50",
                    max(small) <= 0.5))
    for label, key, limit in (("W=4 metric sync, reducer/gloo", (METRIC_SYNC, 16), 0.5),
                              ("W=4 4 MiB, reducer/gloo", ("allreduce", 4 * MiB), 1.0),
                              ("W=4 64 MiB, reducer/gloo", ("allreduce", 64 * MiB), 1.33)):
        if key in w4 and "vs_gloo" in w4[key]:
            v = w4[key]["vs_gloo"]
            out.append((label, v, f"<= {limit:.2f}", v <= limit))
    pairs = (kernel or {}).get("float32_sum_vs_memcpy") or []
    if pairs:
        worst = min(p["ratio"] for p in pairs)
        out.append(("kernel float32 sum / memcpy (worst size)", worst, ">= 0.80",
                    worst >= 0.8))
    if rss and rss.get("peak_VmHWM_kib"):
        mib = rss["peak_VmHWM_kib"] / 1024
        out.append(("reducerd peak RSS, 1 GiB all-reduce (MiB)", mib, "< 256",
                    mib < 256))
    return out


def print_extras(kernel, rss, targets, timings, busy_runs):
    """Prints the kernel, RSS, targets and wall-time sections."""
    print("\nreduction kernel (bazel-bin/bench/reduce_kernel_bench):")
    if kernel is None:
        print("  skipped (--skip_kernel, or not built)")
    elif not kernel["float32_sum_vs_memcpy"]:
        print("  no float32-sum/memcpy pair recognised; all GB/s:")
        for name, v in kernel["all_GBps"].items():
            print(f"    {name}: {v:.2f}")
    for p in (kernel or {}).get("float32_sum_vs_memcpy", []):
        print(f"  {p['sum']}: {p['sum_GBps']:.2f} GB/s vs {p['memcpy']}: "
              f"{p['memcpy_GBps']:.2f} GB/s ({100 * p['ratio']:.0f} %)")
    print("\nreducerd peak RSS, one 1 GiB all-reduce, W=4:")
    if not rss or "skipped" in rss:
        print(f"  skipped: {(rss or {}).get('skipped', 'not run')}")
    else:
        print(f"  VmHWM {rss['peak_VmHWM_kib'] / 1024:.0f} MiB (idle "
              f"{(rss['idle_VmHWM_kib'] or 0) / 1024:.0f} MiB), all-reduce "
              f"{fmt_time(rss['latency_us'])}")
    if targets:
        print("\nperformance targets:")
        for label, value, target, ok in targets:
            print(f"  {'ok  ' if ok else 'MISS'} {label}: {value:.2f} (target {target})")
    if busy_runs:
        print(f"\nwarning: {busy_runs} measurements started with the machine over "
              f"{100 * BUSY_LIMIT:.0f} % busy with other work (cpu_busy_before)")
    print("\nwall time per system: " +
          ", ".join(f"{s} {t:.1f} s" for s, t in timings.items()))


# --------------------------------------------------------------------------
# Driver.

class Context:
    """What the runners share: binaries, logs, timeouts, the reducerd."""

    def __init__(self, args):
        self.timeout_s = args.timeout_s
        self.log_dir = args.out_dir / "logs"
        self.reducerd = Path(args.reducerd)
        self.reducer_worker = Path(args.reducer_worker)
        self.wait_idle_s = args.wait_idle_s
        self.worker_env = MALLOC_ENV if args.malloc_env != "none" else {}
        self.daemon_env = MALLOC_ENV if args.malloc_env == "all" else {}
        self.mpi_binary = None
        self.mpi_shm_btl = None
        self.daemon = None
        self.skipped = {}  # system -> why it did not run
        self.setup_failures = []


def parse_args(argv):
    """Command-line flags of the driver."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true",
                   help="4 sizes, 30 iterations, no 1 GiB RSS run (CI smoke)")
    p.add_argument("--suite", choices=("same_host",),
                   help="same_host: the same-host comparison alone (every "
                        "system, 4 B..64 MiB in five sizes, no extra figures)")
    p.add_argument("--systems", default=",".join(SYSTEMS),
                   help=f"comma-separated subset of {','.join(SYSTEMS)} "
                        "(mpi: mpi_tcp)")
    p.add_argument("--world_sizes", default="2,4")
    p.add_argument("--sizes", type=byte_sizes, default="",
                   help="comma-separated byte sizes instead of the default list")
    add_sweep_flags(p, BENCH_DIR / "out", "size group")
    p.add_argument("--malloc_env", choices=("workers", "all", "none"),
                   default="workers",
                   help="which processes get MALLOC_ENV (heap reuse instead of "
                        "fresh mmap pages): the workers of every system, those "
                        "and reducerd, or none")
    p.add_argument("--skip_rss", action="store_true",
                   help="skip reducerd's 1 GiB peak-RSS run")
    p.add_argument("--skip_kernel", action="store_true",
                   help="skip the reduction kernel benchmark")
    p.add_argument("--skip_fusion", action="store_true",
                   help="skip the AllReduceMany-against-one-all-reduce figure")
    add_built_flags(p, ("reducerd", "reducer_worker"))
    p.add_argument("--skip_tls", action="store_true",
                   help="skip the TLS-against-plaintext all-reduce rows")
    p.add_argument("--skip_floor", action="store_true",
                   help="skip the bare gRPC round-trip figure")
    add_built_flags(p, ("echo_bench", "kernel_bench"))
    args = p.parse_args(argv)
    if args.suite == "same_host":
        args.sizes = args.sizes or list(SAME_HOST_SIZES)
        args.skip_rss = args.skip_kernel = args.skip_fusion = True
        args.skip_tls = args.skip_floor = True
    args.systems = list(dict.fromkeys(ALIASES.get(s, s)
                                      for s in args.systems.split(",") if s))
    bad = set(args.systems) - set(SYSTEMS)
    if bad:
        p.error(f"unknown systems: {sorted(bad)}")
    args.world_sizes = [int(w) for w in args.world_sizes.split(",")]
    args.out_dir = args.out_dir.resolve()
    return args


def unavailable_reason(ctx, system, tmp):
    """Why `system` cannot run here, or None; builds the MPI peer into tmp
    and finds the shared-memory BTL on first need, and probes reducer_shm."""
    if system in REDUCER_MODES:
        if not (ctx.reducerd.exists() and ctx.reducer_worker.exists()):
            return f"build {ctx.reducerd} and {ctx.reducer_worker} first"
        return probe_reducer_shm(ctx) if system == "reducer_shm" else None
    if system == "gloo":
        import importlib.util
        return None if importlib.util.find_spec("torch") else (
            f"torch is not importable by {sys.executable} (run this with the "
            "project's Python: tools/pinned_venv.sh python/requirements-dev.txt)")
    if not (shutil.which("mpicc") and shutil.which("mpirun")):
        return "Open MPI (mpicc, mpirun) is not installed"
    if system == "mpi_shm":
        ctx.mpi_shm_btl = ctx.mpi_shm_btl or mpi_shm_btl()
        if ctx.mpi_shm_btl is None:
            return "ompi_info lists no shared-memory BTL (vader or sm)"
    if ctx.mpi_binary is None:
        ctx.mpi_binary = build_mpi(tmp)
    return None


def probe_reducer_shm(ctx):
    """Runs one 4 B all-reduce of two reducer_shm workers; returns None when
    it works, or the workers' reason when they exit SHM_UNAVAILABLE_EXIT.
    Any other failure raises RunError."""
    run = {"pattern": "allreduce", "sizes": [4], "iters": 1, "warmup": 0}
    try:
        out = run_reducer(ctx, 2, run, ctx.log_dir / "reducer_shm-probe",
                          system="reducer_shm")
        parse_records(out, "reducer_shm", 2, run)
        return None
    except RunError as e:
        if e.returncode == SHM_UNAVAILABLE_EXIT:
            return "the same-host path is unavailable: " + unavailable_line(str(e))
        raise RunError(f"reducer_shm probe: {e}") from e


def unavailable_line(text):
    """The worker's "shared memory unavailable: WHY" reason out of a log
    tail, or the tail's last line."""
    m = re.findall(r"shared memory unavailable: (.*)", text)
    return m[-1].strip() if m else text.strip().splitlines()[-1]


def available_systems(args, ctx, tmp):
    """The requested systems that can run here; the others go into
    ctx.skipped with the reason (and a warning), and also into
    ctx.setup_failures when finding out failed (a probe that broke)."""
    systems = []
    for s in args.systems:
        try:
            why = unavailable_reason(ctx, s, tmp)
        except (RunError, subprocess.SubprocessError, OSError) as e:
            why = f"failed: {e}"
            ctx.setup_failures.append(f"{s}: {e}")
        if why:
            ctx.skipped[s] = why
            print(f"warning: skipping {s}: {why}", file=sys.stderr)
            continue
        systems.append(s)
    return systems


def build_mpi(tmp):
    """Compiles bench/mpi_allreduce.c with mpicc -O2 into tmp."""
    binary = Path(tmp) / "mpi_allreduce"
    subprocess.run(["mpicc", "-O2", "-o", str(binary),
                    str(BENCH_DIR / "mpi_allreduce.c")],
                   check=True, timeout=120)
    return binary


def run_all(ctx, systems, world_sizes, quick, sizes=None):
    """Runs every plan entry for every W, systems interleaved per entry.
    Returns (records, failures, wall seconds per system)."""
    records, failures = [], []
    timings = {s: 0.0 for s in systems}
    for world in world_sizes:
        for i, run in enumerate(make_plan(quick, sizes)):
            busy = wait_for_idle(ctx.wait_idle_s)
            for system in systems:
                label = f"{system} W={world} {run['pattern']} {fmt_size(run['sizes'][0])}.."
                print(f"running {label} x{run['iters']}", file=sys.stderr, flush=True)
                t0 = time.monotonic()
                try:
                    out = RUNNERS[system](ctx, world, run,
                                          ctx.log_dir / f"{system}-w{world}-{i}")
                    new = parse_records(out, system, world, run)
                    for r in new:
                        r["cpu_busy_before"] = round(busy, 3)
                    records += new
                except (RunError, json.JSONDecodeError, OSError) as e:
                    failures.append(f"{label}: {e}")
                    print(f"FAILED {label}: {e}", file=sys.stderr)
                timings[system] += time.monotonic() - t0
    return records, failures, timings


BUSY_LIMIT = 0.25  # fraction of all CPUs used by others before a run group


def cpu_busy(interval_s=0.5):
    """Fraction of CPU time (all cores) that was not idle over interval_s,
    from /proc/stat. Measured between runs, it is other people's load."""
    def sample():
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
        return sum(fields), fields[3] + fields[4]  # total, idle + iowait
    total0, idle0 = sample()
    time.sleep(interval_s)
    total1, idle1 = sample()
    return 1.0 - (idle1 - idle0) / max(1, total1 - total0)


def wait_for_idle(max_wait_s):
    """Waits up to max_wait_s for the machine to be idle (others using under
    BUSY_LIMIT of the CPUs); warns when it is not. Returns the last reading."""
    deadline = time.monotonic() + max_wait_s
    busy = cpu_busy()
    while busy > BUSY_LIMIT and time.monotonic() < deadline:
        busy = cpu_busy(2.0)
    if busy > BUSY_LIMIT:
        print(f"warning: machine {100 * busy:.0f} % busy with other work; "
              "numbers will be skewed (see --wait_idle_s)", file=sys.stderr)
    return busy


def extras(args, ctx, systems, failures):
    """Kernel benchmark and reducerd peak RSS; failures are recorded."""
    kernel = rss = None
    if not args.skip_kernel:
        try:
            kernel = kernel_bench(Path(args.kernel_bench), args.timeout_s)
        except (RunError, subprocess.TimeoutExpired, json.JSONDecodeError) as e:
            failures.append(f"kernel bench: {e}")
    if "reducer" not in systems:
        rss = {"skipped": "reducer not run"}
    elif args.quick or args.skip_rss:
        rss = {"skipped": "--quick/--skip_rss"}
    else:
        try:
            rss = reducerd_peak_rss(ctx, args.timeout_s)
        except RunError as e:
            failures.append(f"reducerd peak RSS: {e}")
    return kernel, rss


def print_floor(floor):
    """Prints gRPC's own round-trip floor."""
    print("\ngRPC round trip alone, 4 B, one client (bench/grpc_echo_bench):")
    if "skipped" in floor:
        print(f"  skipped: {floor['skipped']}")
        return
    m = floor["median_us"]
    print(f"  new stream per call {fmt_time(m['callback_per_call'])}, "
          f"one long-lived stream {fmt_time(m['cq_stream'])}")


def print_fusion(fusion):
    """Prints the AllReduceMany-against-one-all-reduce figure."""
    print(f"\nfusion, W={FUSED_WORLD_SIZE}: one AllReduceMany of {FUSED_TENSORS} x "
          f"{FUSED_BYTES} B against one {FUSED_BYTES} B all-reduce:")
    if "skipped" in fusion:
        print(f"  skipped: {fusion['skipped']}")
    else:
        print(f"  {fmt_time(fusion['fused_median_us'])} vs "
              f"{fmt_time(fusion['single_median_us'])} (x{fusion['ratio']:.2f})")


def write_results(args, ctx, records, kernel, rss, targets, failures, timings,
                  more):
    """Writes results.json (raw latencies and everything else), results.csv
    and the plot into --out_dir."""
    meta = host_meta(python=sys.version.split()[0], quick=args.quick, argv=sys.argv[1:],
                     worker_env=ctx.worker_env, reducerd_env=ctx.daemon_env)
    doc = {"meta": meta, "results": records, "kernel_bench": kernel,
           "reducerd_peak_rss": rss, **more, "targets": target_dicts(targets),
           "failures": failures, "wall_s_per_system": timings}
    (args.out_dir / "results.json").write_text(json.dumps(doc, indent=1))
    write_csv(records, args.out_dir / "results.csv")
    write_plot(records, args.out_dir / "allreduce_latency.png")


def main(argv):
    """Runs the benchmark; exit status 1 if any requested run failed."""
    args = parse_args(argv)
    ctx = Context(args)
    shutil.rmtree(ctx.log_dir, ignore_errors=True)
    ctx.log_dir.mkdir(parents=True)
    with tempfile.TemporaryDirectory(prefix="reducer-bench-") as tmp:
        same_host = "reducer_shm" in args.systems
        try:
            systems = available_systems(args, ctx, tmp)
            probe_before = same_host_model.memcpy_probe() if same_host else []
            records, failures, timings = run_all(ctx, systems, args.world_sizes,
                                                 args.quick, args.sizes)
            probe_after = same_host_model.memcpy_probe() if same_host else []
            failures = ctx.setup_failures + failures
            fusion = {"skipped": "--skip_fusion, or reducer not run"}
            if "reducer" in systems and not args.skip_fusion:
                try:
                    fusion = reducer_fusion(ctx, records, args.timeout_s)
                except (RunError, json.JSONDecodeError, OSError) as e:
                    failures.append(f"fusion: {e}")
                    fusion = {"skipped": f"failed: {e}"}
        finally:
            if ctx.daemon:
                ctx.daemon.stop()
                ctx.daemon = None
        kernel, rss = extras(args, ctx, systems, failures)
        tls = {"skipped": "--skip_tls, or reducer not run"}
        if "reducer" in systems and not args.skip_tls:
            try:
                tls = reducer_tls(ctx, tmp, args.timeout_s)
            except (RunError, subprocess.SubprocessError, json.JSONDecodeError,
                    OSError, IndexError) as e:
                failures.append(f"TLS rows: {e}")
                tls = {"skipped": f"failed: {e}"}
        floor = {"skipped": "--skip_floor"}
        if not args.skip_floor:
            try:
                floor = grpc_floor(ctx, Path(args.echo_bench), args.timeout_s)
            except (RunError, subprocess.TimeoutExpired, json.JSONDecodeError) as e:
                failures.append(f"gRPC floor: {e}")
                floor = {"skipped": f"failed: {e}"}
    for r in records:
        summarize(r)
    add_ratios(records)
    targets = check_targets(records, kernel, rss)
    print_table(records)
    for system, why in ctx.skipped.items():
        print(f"skipped {system}: {why}")
    busy_runs = sum(r.get("cpu_busy_before", 0) > BUSY_LIMIT for r in records)
    print_extras(kernel, rss, targets, timings, busy_runs)
    if not args.suite:  # a suite leaves these out
        print_fusion(fusion)
        print_floor(floor)
        print_tls(tls)
    shm = {"skipped": "reducer_shm not asked for"}
    if same_host:
        shm = same_host_section(records, args.world_sizes,
                                args.sizes or (QUICK_SIZES if args.quick else FULL_SIZES),
                                probe_before, probe_after, ctx.skipped)
        print_same_host(shm)
        targets += [tuple(t) for t in shm["targets"]]
    write_results(args, ctx, records, kernel, rss, targets, failures, timings,
                  dict(fusion=fusion, grpc_floor=floor, tls=tls, same_host=shm,
                       skipped_systems=ctx.skipped))
    print(f"\nwrote {shown_path(args.out_dir)}/results.json, results.csv, "
          "allreduce_latency.png")
    return exit_status(failures)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
