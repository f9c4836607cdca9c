#!/usr/bin/python3
"""Python's cost over C++, and the torch backend "reducer" against Gloo.

    bazel build //bench:reducer_allreduce_worker //python:reducer //server:reducerd
    /usr/bin/python3 bench/python_bench.py [--world_size=4] [--rounds=3]

Starts one reducerd on a free loopback port, then, --rounds times, runs W
processes of each of these one after the other (so all see the same
machine), float32 SUM all-reduce, each call timed on rank 0:
  cpp      bench/reducer_allreduce_worker (Client::AllReduce, out of place)
  python   reducer.Client.all_reduce on a numpy array (out of place)
  torch    torch.distributed.all_reduce (in place) on the "reducer" backend
           and on a gloo group in the same processes, alternating size by size
Prints the median over all rounds per system and size, and the ratios
python/cpp and reducer-backend/gloo. Not run in CI.
"""

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SIZES = [4, 64 << 20]
TORCH_SIZES = [4, 4 << 10, 4 << 20, 64 << 20]


def iters_for(size):
    return 200 if size <= 4096 else (20 if size <= 4 << 20 else 5)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def report(system, world, size, latencies):
    print(json.dumps({"system": system, "world_size": world, "size_bytes": size,
                      "latencies_us": latencies}), flush=True)


def python_worker(args):
    import numpy as np
    import reducer
    client = reducer.Client(target=args.target, job=args.job, rank=args.rank,
                            world_size=args.world_size)
    for size in args.sizes:
        x = np.ones(size // 4, np.float32)
        latencies = []
        for i in range(3 + iters_for(size)):
            start = time.perf_counter()
            client.all_reduce(x)
            if i >= 3:
                latencies.append((time.perf_counter() - start) * 1e6)
        if args.rank == 0:
            report("python", args.world_size, size, latencies)
    client.close()


def torch_worker(args):
    import datetime
    import torch
    import torch.distributed as dist
    import reducer.torch  # noqa: F401
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(args.port),
                      REDUCER_TARGET=args.target)
    dist.init_process_group("reducer", rank=args.rank, world_size=args.world_size,
                            timeout=datetime.timedelta(seconds=120))
    groups = {"torch-reducer": None, "torch-gloo": dist.new_group(backend="gloo")}
    for size in args.sizes:
        for system, group in groups.items():
            x = torch.ones(size // 4)
            latencies = []
            for i in range(3 + iters_for(size)):
                start = time.perf_counter()
                dist.all_reduce(x, group=group)
                if i >= 3:
                    latencies.append((time.perf_counter() - start) * 1e6)
            if args.rank == 0:
                report(system, args.world_size, size, latencies)
    dist.destroy_process_group()


def run_ranks(commands):
    procs = [subprocess.Popen(c, stdout=subprocess.PIPE, text=True) for c in commands]
    outs = [p.communicate(timeout=600)[0] for p in procs]
    for c, p in zip(commands, procs):
        if p.returncode != 0:
            raise RuntimeError(f"{c} exited {p.returncode}")
    return [json.loads(line) for line in outs[0].splitlines() if line.startswith("{")]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--world_size", type=int, default=4)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--worker", choices=["python", "torch"])
    p.add_argument("--rank", type=int)
    p.add_argument("--target")
    p.add_argument("--job")
    p.add_argument("--port", type=int)
    p.add_argument("--sizes", type=lambda s: [int(v) for v in s.split(",")])
    args = p.parse_args()
    if args.worker == "python":
        return python_worker(args)
    if args.worker == "torch":
        return torch_worker(args)

    bin_dir = os.path.join(ROOT, "bazel-bin")
    env_path = os.path.join(bin_dir, "python")
    os.environ["PYTHONPATH"] = env_path + os.pathsep + os.environ.get("PYTHONPATH", "")
    port = free_port()
    server = subprocess.Popen([os.path.join(bin_dir, "server", "reducerd"),
                               f"--listen=127.0.0.1:{port}"], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True)
    server.stdout.readline()
    target = f"127.0.0.1:{port}"
    w = args.world_size
    results = {}
    try:
        for _ in range(args.rounds):
            runs = []
            for size in SIZES:  # the C++ worker takes one --iters for all sizes
                job = uuid.uuid4().hex
                runs.append([[os.path.join(bin_dir, "bench", "reducer_allreduce_worker"),
                              f"--target={target}", f"--job={job}", f"--rank={r}",
                              f"--world_size={w}", f"--sizes={size}",
                              f"--iters={iters_for(size)}"] for r in range(w)])
            job = uuid.uuid4().hex
            runs.append([[sys.executable, __file__, "--worker=python", f"--rank={r}",
                          f"--world_size={w}", f"--target={target}", f"--job={job}",
                          "--sizes=" + ",".join(map(str, SIZES))] for r in range(w)])
            torch_port = free_port()
            runs.append([[sys.executable, __file__, "--worker=torch", f"--rank={r}",
                          f"--world_size={w}", f"--target={target}", f"--port={torch_port}",
                          "--sizes=" + ",".join(map(str, TORCH_SIZES))] for r in range(w)])
            for commands in runs:
                for line in run_ranks(commands):
                    system = line.get("system")
                    results.setdefault((system, line["size_bytes"]), []).extend(
                        line["latencies_us"])
    finally:
        server.terminate()
        server.wait(timeout=30)

    med = {k: statistics.median(v) for k, v in results.items()}
    print(f"W = {w}, float32 SUM, median over {args.rounds} rounds (us)")
    print(f"{'size':>10} {'C++':>10} {'Python':>10} {'Py/C++':>7} {'Py-C++':>9}")
    for size in SIZES:
        c, py = med[("reducer", size)], med[("python", size)]
        print(f"{size:>10} {c:>10.0f} {py:>10.0f} {py / c:>7.2f} {py - c:>9.0f}")
    print(f"{'size':>10} {'backend':>10} {'gloo':>10} {'ratio':>7}")
    for size in TORCH_SIZES:
        r, g = med[("torch-reducer", size)], med[("torch-gloo", size)]
        print(f"{size:>10} {r:>10.0f} {g:>10.0f} {r / g:>7.2f}")


if __name__ == "__main__":
    main()
