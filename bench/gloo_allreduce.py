#!/usr/bin/env python3
"""Gloo peer for Reducer's side-by-side all-reduce benchmark.

One process per rank; bench/run_bench.py launches W of them. Each rank joins a
torch.distributed group with backend "gloo" through a TCP rendezvous on
127.0.0.1 (or --master_addr, with GLOO_SOCKET_IFNAME naming the interface,
when bench/shard_bench.py runs each rank on a host of its own), then, for
every size in --sizes, runs --warmup untimed and --iters timed float32 SUM
all_reduce calls back to back (no barrier between iterations, as in a
training loop), timing each call with time.perf_counter.
With --metric_sync it instead times all_reduce of a 2-element float64 tensor
(the metric-sync pattern, 16 bytes).

Rank 0 prints one JSON line per size on stdout, in the format every worker of
the benchmark shares:
  {"system": "gloo", "world_size": W, "size_bytes": N, "latencies_us": [...],
   "cpu_us_per_call": C}
(metric sync adds "pattern": "metric_sync" and has size_bytes 16).
cpu_us_per_call is rank 0's process CPU time (every thread) over the size's
calls, warm-up and refills included, divided by their number.
"""

import argparse
import datetime
import json
import os
import sys
import time

import torch
import torch.distributed as dist

METRIC_SYNC_ELEMENTS = 2  # two float64 values, like a metric's (sum, count)


def parse_args(argv):
    """Parses the command line shared by all benchmark workers."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world_size", type=int, required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--master_addr", default="127.0.0.1",
                   help="rank 0's address for the TCP rendezvous")
    p.add_argument("--sizes", default="4",
                   help="comma-separated tensor sizes in bytes (multiples of 4)")
    p.add_argument("--iters", type=int, default=None,
                   help="timed iterations per size (default 100; 1000 with --metric_sync)")
    p.add_argument("--warmup", type=int, default=None,
                   help="untimed iterations per size (default iters/10, at least 1)")
    p.add_argument("--metric_sync", action="store_true",
                   help="time all_reduce of a 2-element float64 tensor instead of --sizes")
    p.add_argument("--timeout_s", type=float, default=300,
                   help="torch.distributed timeout for rendezvous and each collective")
    args = p.parse_args(argv)
    if args.iters is None:
        args.iters = 1000 if args.metric_sync else 100
    if args.warmup is None:
        args.warmup = max(1, args.iters // 10)
    return args


def parse_sizes(text):
    """Returns the list of byte sizes in a comma-separated string; each must be a
    positive multiple of 4 (whole float32 elements)."""
    sizes = [int(s) for s in text.split(",") if s.strip()]
    for n in sizes:
        if n <= 0 or n % 4:
            raise SystemExit(f"size {n} is not a positive multiple of 4 bytes")
    return sizes


def init_group(args):
    """Joins the gloo process group over a TCP rendezvous at --master_addr;
    Gloo's own connections use GLOO_SOCKET_IFNAME (loopback when unset)."""
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # stay on loopback
    dist.init_process_group(
        backend="gloo",
        init_method=f"tcp://{args.master_addr}:{args.port}",
        rank=args.rank,
        world_size=args.world_size,
        timeout=datetime.timedelta(seconds=args.timeout_s),
    )


def time_allreduce(tensor, fill_value, iters, warmup):
    """Runs warmup + iters all_reduce(SUM) calls on `tensor` and returns the
    timed ones' latencies in microseconds and the process's CPU time per
    call (every call).

    all_reduce is in place, so the tensor is refilled (untimed) before each
    call; that keeps the values finite and lets us check the result."""
    world = dist.get_world_size()
    latencies = []
    cpu_start = time.process_time()
    for i in range(warmup + iters):
        tensor.fill_(fill_value)
        t0 = time.perf_counter()
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
        t1 = time.perf_counter()
        if i >= warmup:
            latencies.append((t1 - t0) * 1e6)
    cpu_us_per_call = (time.process_time() - cpu_start) * 1e6 / (warmup + iters)
    check_result(tensor, fill_value * world)
    return latencies, cpu_us_per_call


def check_result(tensor, expected):
    """Fails loudly if the last all_reduce did not produce `expected` at both
    ends of the tensor (a cheap guard against measuring a broken run)."""
    first, last = float(tensor[0]), float(tensor[-1])
    if first != expected or last != expected:
        raise SystemExit(f"wrong all_reduce result: {first}, {last}, expected {expected}")


def emit(record):
    """Prints one result line (rank 0 only) and flushes it."""
    if dist.get_rank() == 0:
        print(json.dumps(record), flush=True)


def run_sizes(args):
    """Times float32 SUM all_reduce for every size in --sizes."""
    for size in parse_sizes(args.sizes):
        tensor = torch.empty(size // 4, dtype=torch.float32)
        dist.barrier()  # align ranks before this size's run, outside the timing
        lat, cpu = time_allreduce(tensor, 1.0, args.iters, args.warmup)
        emit({"system": "gloo", "world_size": args.world_size,
              "size_bytes": size, "latencies_us": lat, "cpu_us_per_call": cpu})
        del tensor


def run_metric_sync(args):
    """Times all_reduce of a 2-element float64 tensor (the metric-sync pattern)."""
    tensor = torch.empty(METRIC_SYNC_ELEMENTS, dtype=torch.float64)
    dist.barrier()
    lat, cpu = time_allreduce(tensor, 1.0, args.iters, args.warmup)
    emit({"system": "gloo", "world_size": args.world_size,
          "size_bytes": tensor.numel() * tensor.element_size(),
          "pattern": "metric_sync", "latencies_us": lat, "cpu_us_per_call": cpu})


def main(argv):
    """Entry point: join, run the requested pattern, leave the group."""
    args = parse_args(argv)
    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    init_group(args)
    try:
        if args.metric_sync:
            run_metric_sync(args)
        else:
            run_sizes(args)
        dist.barrier()
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1:])
