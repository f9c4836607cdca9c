"""The same-host comparison's model and targets (bench/run_bench.py prints them).

memcpy_probe() measures, in this process, how fast one thread copies
PROBE_BYTES between two buffers it has already touched: the bandwidth the
model divides by.

traffic(n, world) is the memory traffic of one float32 all-reduce of n bytes
per rank on reducer_shm (docs/same_host.md), as bytes read plus bytes
written, per party:
  - each rank copies its n input bytes into its input segment (reads n,
    writes n) and copies the n result bytes out of the job's result
    segment (reads n, writes n): 4n;
  - reducerd reads the W inputs and writes one result (W*n + n), then copies
    that result once into the job's result segment, whose one range every
    rank reads (reads and writes n): (W + 3) n.
A memcpy of b bytes reads b and writes b, so a probe that copies b bytes in
t seconds moves memory at 2b / t; model_us() divides traffic by that rate.
Two model times: "chain", the dependent steps of one all-reduce with the W
ranks' copies overlapping (one rank's copy in, reducerd's work, one rank's
copy out: (W + 7) n), the floor when every process has a core; and
"serial", every party's traffic one after the other ((5W + 3) n), what one
core would take. Payloads up to 64 KiB travel inline in ring records, and
there the doorbells' latency, not the copies, sets the time.

targets() checks the comparison's three W = 4 targets on measured medians.
"""

import time

PROBE_BYTES = 64 << 20
PROBE_WARMUP = 2
PROBE_ITERS = 10
TARGET_WORLD = 4


def memcpy_probe(nbytes=PROBE_BYTES, iters=PROBE_ITERS, warmup=PROBE_WARMUP):
    """Copies nbytes between two warm bytearrays (a memcpy in CPython)
    warmup + iters times; returns the timed copies' GB/s (bytes copied per
    second / 1e9), one per copy."""
    src = bytearray(b"\x01") * nbytes
    dst = bytearray(nbytes)          # zero-filled: every page touched
    rates = []
    for i in range(warmup + iters):
        t0 = time.perf_counter()
        dst[:] = src
        took = time.perf_counter() - t0
        if i >= warmup:
            rates.append(nbytes / took / 1e9)
    if dst[nbytes // 2] != 1:
        raise RuntimeError("memcpy probe: the copy did not arrive")
    return rates


def traffic(n, world):
    """Bytes read plus written for one all-reduce of n bytes on reducer_shm:
    {"rank": per rank, "reducerd": reducerd's, "chain": the dependent steps,
    "total": every party's}."""
    rank = 4 * n
    reducerd = (world + 3) * n
    return {"rank": rank, "reducerd": reducerd,
            "chain": rank + reducerd, "total": world * rank + reducerd}


def model_us(n, world, copy_GBps):
    """Model times in us for one all-reduce of n bytes at a memcpy rate of
    copy_GBps (bytes copied per second / 1e9): {"chain_us", "serial_us"}."""
    moved_per_us = 2 * copy_GBps * 1e3  # traffic bytes per microsecond
    t = traffic(n, world)
    return {"chain_us": t["chain"] / moved_per_us,
            "serial_us": t["total"] / moved_per_us}


# (label, size in bytes, the peer, factor): reducer_shm's median at W = 4
# must be at most factor x the peer's.
TARGETS = (("W=4 4 B, reducer_shm/mpi_tcp", 4, "mpi_tcp", 1.0),
           ("W=4 4 MiB, reducer_shm/gloo", 4 << 20, "gloo", 0.5),
           ("W=4 64 MiB, reducer_shm/mpi_shm", 64 << 20, "mpi_shm", 1.0))


def targets(medians):
    """medians maps (system, W, size) -> median us of plain all-reduces.
    Returns (checked, unmeasured): checked is a list of (label, ratio,
    "<= factor", ok); unmeasured the labels lacking either median."""
    checked, unmeasured = [], []
    for label, size, peer, factor in TARGETS:
        mine = medians.get(("reducer_shm", TARGET_WORLD, size))
        theirs = medians.get((peer, TARGET_WORLD, size))
        if mine is None or theirs is None:
            unmeasured.append(label)
            continue
        ratio = mine / theirs
        checked.append((label, ratio, f"<= {factor:.2f}", ratio <= factor))
    return checked, unmeasured
