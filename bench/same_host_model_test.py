"""Tests of bench/same_host_model.py against hand-computed figures."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import same_host_model as m  # noqa: E402

MiB = 1 << 20


def test_traffic_at_w4():
    # Per rank: 1000 B copied in and 1000 B copied out, each read and
    # written: 4000. reducerd: 4000 read + 1000 written to reduce, then
    # the result copied once into the job's result segment (1000 read,
    # 1000 written): 7000. Total: 4 x 4000 + 7000.
    assert m.traffic(1000, 4) == {"rank": 4000, "reducerd": 7000,
                                  "chain": 11000, "total": 23000}


def test_traffic_at_w2():
    # reducerd: 2000 read + 1000 written, then 1000 copied once: 5000.
    assert m.traffic(1000, 2) == {"rank": 4000, "reducerd": 5000,
                                  "chain": 9000, "total": 13000}


def test_model_divides_traffic_by_twice_the_copy_rate():
    # 1 GB/s copied moves 2000 bytes of traffic per microsecond.
    got = m.model_us(10**6, 4, 1.0)
    # 10^6 B at W = 4: chain 11 x 10^6, total 23 x 10^6 bytes of traffic.
    assert abs(got["chain_us"] - 5500.0) < 1e-6
    assert abs(got["serial_us"] - 11500.0) < 1e-6


def test_targets_compare_reducer_shm_with_each_peer_at_w4():
    medians = {
        ("reducer_shm", 4, 4): 50.0, ("mpi_tcp", 4, 4): 60.0,
        ("reducer_shm", 4, 4 * MiB): 6000.0, ("gloo", 4, 4 * MiB): 10000.0,
        ("reducer_shm", 4, 64 * MiB): 1.0,        # mpi_shm missing at W = 4
        ("mpi_shm", 2, 64 * MiB): 1000.0,
    }
    checked, unmeasured = m.targets(medians)
    assert [(label, round(ratio, 4), ok) for label, ratio, _, ok in checked] == [
        ("W=4 4 B, reducer_shm/mpi_tcp", 0.8333, True),
        ("W=4 4 MiB, reducer_shm/gloo", 0.6, False),     # over 0.5x
    ]
    assert unmeasured == ["W=4 64 MiB, reducer_shm/mpi_shm"]


def test_targets_with_nothing_measured():
    checked, unmeasured = m.targets({("gloo", 4, 4): 1.0})
    assert checked == []
    assert len(unmeasured) == len(m.TARGETS)


def test_memcpy_probe_returns_one_positive_rate_per_timed_copy():
    rates = m.memcpy_probe(nbytes=MiB, iters=3, warmup=1)
    assert len(rates) == 3
    assert all(r > 0 for r in rates)
