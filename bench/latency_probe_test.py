"""Tests of bench/latency_probe.py's reading of a capture, on tcpdump lines
written here: which segments are calls and results, and the spread of
each all-reduce's results, computed by hand."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import latency_probe as lp  # noqa: E402

SERVER = "10.9.0.1.50051"


def seg(t, src, dst, length):
    return (f"{t:.6f} IP {src} > {dst}: Flags [P.], seq 1:{length + 1}, "
            f"ack 1, win 502, length {length}")


def call(t, host, length=80):
    return seg(t, f"{host}.40000", SERVER, length)


def result(t, host, length=33):
    return seg(t, SERVER, f"{host}.40000", length)


def test_spread_is_first_to_last_result_of_each_all_reduce():
    a, b = "10.9.0.2", "10.9.0.3"
    lines = [
        call(1.000000, a), call(1.000100, b),
        result(1.000200, a), result(1.000250, b),      # spread 50 us
        call(2.000000, b), call(2.000010, a),
        result(2.000300, b), result(2.000450, a),      # spread 150 us
        call(3.000000, a), call(3.000010, b),
        result(3.000500, a), result(3.000600, b),      # spread 100 us
    ]
    median, p90 = lp.result_spread_from_tcpdump("\n".join(lines), 2, SERVER)
    assert median == pytest.approx(100.0, abs=0.01)
    # p90 of [50, 100, 150]: 100 + 0.8 x 50.
    assert p90 == pytest.approx(140.0, abs=0.01)


def test_control_frames_and_answers_without_a_call_are_not_results():
    a, b = "10.9.0.2", "10.9.0.3"
    lines = [
        call(1.000000, a), call(1.000000, b),
        seg(1.000050, f"{a}.40000", SERVER, 13),        # WINDOW_UPDATE
        result(1.000060, a, length=17),                 # a PING ack: short
        result(1.000100, a), result(1.000130, b),       # spread 30 us
        result(1.000140, b),                            # b has no call now
        "1.000150 ARP, Request who-has 10.9.0.1 tell 10.9.0.2, length 28",
    ]
    median, p90 = lp.result_spread_from_tcpdump("\n".join(lines), 2, SERVER)
    assert median == pytest.approx(30.0, abs=0.01)
    assert p90 == pytest.approx(30.0, abs=0.01)


def test_a_rank_with_an_extra_call_is_matched_at_its_shift():
    # Rank a makes one call of its own before the all-reduces (a barrier):
    # its results are one ahead, and matched to b's one later.
    a, b = "10.9.0.2", "10.9.0.3"
    lines = [call(0.5, a), result(0.5001, a)]
    for i, spread in enumerate([20e-6, 40e-6, 60e-6]):
        t = 1.0 + i
        lines += [call(t, a), call(t, b),
                  result(t + 0.0001, a), result(t + 0.0001 + spread, b)]
    median, _ = lp.result_spread_from_tcpdump("\n".join(lines), 2, SERVER)
    assert median == pytest.approx(40.0, abs=0.01)


def test_no_packets_of_some_rank_is_none():
    a = "10.9.0.2"
    lines = [call(1.0, a), result(1.0001, a)]
    assert lp.result_spread_from_tcpdump("\n".join(lines), 2, SERVER) is None
