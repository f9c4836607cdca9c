"""Quorum steps from Python (reducer.Client.all_reduce_quorum and
all_reduce_quorum_) against a real reducerd.

A W = 3 training loop in real processes (quorum_worker.py) whose rank 2 is
SIGKILLed before step 2: the survivors' step 2 and later ones end over ranks
0 and 1 only. Ranks as threads for the rest: the result's form, every input
kind, the arguments refused before anything is sent, and done() over
uneven batches. Expected values come from closed forms computed here.
"""

import json
import os
import pickle
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import torch

import reducer
import module_testing
from module_testing import server, time_limit  # noqa: F401  (fixtures)
from reducerd_process import new_job

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "quorum_worker.py")
W = 3
STEPS = 5
KILLED_RANK, KILLED_AT = 2, 2
PARAMS = 16  # quorum_worker.PARAMS


def expected_sum(step, contributors):
    """The sum over `contributors` of g_r(step)[i] = (r + 1) * (step + 1) + i % 7."""
    i = np.arange(PARAMS)
    return (step + 1) * sum(r + 1 for r in contributors) + len(contributors) * (i % 7)


def read_line_before(process, deadline):
    """The process's next stdout line, or None past `deadline` (monotonic)."""
    line = []
    reader = threading.Thread(target=lambda: line.append(process.stdout.readline()),
                              daemon=True)
    reader.start()
    reader.join(max(0.0, deadline - time.monotonic()))
    return line[0] if line else None


def steps_of(output):
    """{step: its STEP record} from a worker's output."""
    records = [json.loads(line[len("STEP "):]) for line in output.splitlines()
               if line.startswith("STEP ")]
    return {r["step"]: r for r in records}


@pytest.mark.parametrize("shared_memory", ["off", "required"])
def test_killed_rank_is_left_out_and_survivors_go_on(server, shared_memory):
    job = new_job()
    procs = [subprocess.Popen(
        [sys.executable, WORKER, server.target, job, str(rank), str(W),
         "--steps", str(STEPS), "--min_ranks", "2", "--grace", "2.0",
         "--shared_memory", shared_memory]
        + (["--pause_at", str(KILLED_AT)] if rank == KILLED_RANK else []),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for rank in range(W)]
    try:
        killed = procs[KILLED_RANK]
        seen = []
        deadline = time.monotonic() + 40
        while True:
            line = read_line_before(killed, deadline)
            assert line, f"rank {KILLED_RANK} never paused; it printed:\n{''.join(seen)}"
            seen.append(line)
            if line.strip() == f"PAUSE {KILLED_AT}":
                break
        killed.send_signal(signal.SIGKILL)
        killed.wait(timeout=10)
        outputs = [p.communicate(timeout=60)[0] for p in procs[:KILLED_RANK]]
    finally:
        for p in procs:
            p.kill()
            p.wait()
    for rank, (p, out) in enumerate(zip(procs, outputs)):
        assert p.returncode == 0, f"rank {rank} exited {p.returncode}:\n{out}"
        assert out.rstrip().endswith("DONE"), out

    # Before the kill, rank 2 took part in steps 0 and 1 like the others.
    before = steps_of("".join(seen))
    assert sorted(before) == list(range(KILLED_AT))
    survivors = [steps_of(out) for out in outputs]
    for rank, steps in enumerate(survivors):
        assert sorted(steps) == list(range(STEPS)), (rank, steps)
        for step, record in steps.items():
            contributors = list(range(W)) if step < KILLED_AT else [0, 1]
            assert record["contributors"] == contributors, (rank, record)
            assert record["joined"] == [], (rank, record)
            np.testing.assert_array_equal(record["result"], expected_sum(step, contributors),
                                          err_msg=f"rank {rank} step {step}")
            # The same bits on every contributor.
            assert record["result"] == survivors[0][step]["result"]
            if step in before:
                assert before[step] == record


def run(server, fn, world_size=W, **kwargs):
    return module_testing.run(server, fn, world_size, **kwargs)


def test_every_rank_in_time_every_input_kind(server):
    def body(c):
        r = c.rank
        x = np.full(4, r + 1.0)
        out = c.all_reduce_quorum(x, grace=5.0)
        inout = x.copy()
        in_place = c.all_reduce_quorum_(inout, op="max")
        scalar = c.all_reduce_quorum(r + 1)
        real = c.all_reduce_quorum(0.5 * (r + 1), op="avg")
        tensor = c.all_reduce_quorum(torch.full((2, 2), r + 1, dtype=torch.int32))
        named = c.all_reduce_quorum(np.int64(r), name="named step", timeout=10)
        return out, x, in_place, inout, scalar, real, tensor, named

    for rank, (out, x, in_place, inout, scalar, real, tensor, named) in enumerate(
            run(server, body)):
        assert isinstance(out, reducer.QuorumResult) and isinstance(out, tuple)
        result, contributors = out
        np.testing.assert_array_equal(result, np.full(4, 6.0))
        np.testing.assert_array_equal(x, np.full(4, rank + 1.0))  # only read
        assert contributors == [0, 1, 2] and out.contributors is contributors
        assert out.joined == [] and out.step == 0 and out.result is result
        assert in_place.result is inout and in_place.step == 1
        np.testing.assert_array_equal(inout, np.full(4, 3.0))
        assert scalar.result == 6 and type(scalar.result) is int
        assert real.result == 1.0 and type(real.result) is float
        assert isinstance(tensor.result, torch.Tensor)
        assert torch.equal(tensor.result, torch.full((2, 2), 6, dtype=torch.int32))
        assert named.result == 3 and named.step == 5
        for other in (scalar, real, tensor, named):
            assert other.contributors == [0, 1, 2] and other.joined == []
        assert [o.step for o in (out, in_place, scalar, real, tensor)] == [0, 1, 2, 3, 4]
        again = pickle.loads(pickle.dumps(scalar))
        assert again == scalar and again.step == scalar.step
        assert "contributors=[0, 1, 2]" in repr(scalar)


def test_bad_arguments_raise_before_anything_is_sent(server):
    x = np.ones(2)

    def body(c):
        with pytest.raises(ValueError, match=r"min_ranks must be between 0 .* 2; got -1"):
            c.all_reduce_quorum(x, min_ranks=-1)
        with pytest.raises(ValueError, match=r"min_ranks must be between 0 .* 2; got 3"):
            c.all_reduce_quorum_(x.copy(), min_ranks=3)
        with pytest.raises(ValueError, match=r"grace must be a finite .* got -1"):
            c.all_reduce_quorum(x, grace=-1)
        with pytest.raises(ValueError, match=r"grace must be a finite .* got inf"):
            c.all_reduce_quorum_(x.copy(), grace=float("inf"))
        with pytest.raises(ValueError, match=r"grace must be a finite .* got nan"):
            c.all_reduce_quorum(2.0, grace=float("nan"))
        with pytest.raises(ValueError, match="unknown op 'mean'"):
            c.all_reduce_quorum(x, op="mean")
        with pytest.raises(ValueError, match="timeout must be a positive"):
            c.all_reduce_quorum(x, timeout=-1)
        with pytest.raises(TypeError, match="group"):  # a step is over the whole job
            c.all_reduce_quorum(x, group=[0, 1])
        # Nothing was sent: the next step is the job's first.
        return c.all_reduce_quorum(x, min_ranks=2)

    for out in run(server, body, world_size=2):
        assert out.step == 0 and out.contributors == [0, 1]
        np.testing.assert_array_equal(out.result, [2.0, 2.0])


def test_done_with_uneven_batches_gives_the_single_process_metric(server):
    """Rank r holds r + 1 batches of an accuracy metric synced every batch;
    a rank out of batches calls done() and its peers go on without it."""
    batches = [1, 3, 2]

    def counts(rank, batch):
        return np.array([(5 * rank + 2 * batch) % 7, 10], dtype=np.int64)

    def body(c):
        running = np.zeros(2, dtype=np.int64)
        for b in range(batches[c.rank]):
            running += c.all_reduce(counts(c.rank, b))
        c.done()
        # Unnamed calls match again: the longest rank saw every batch.
        return c.all_reduce(running, op="max")

    single = sum(counts(r, b) for r in range(W) for b in range(batches[r]))
    for final in run(server, body):
        np.testing.assert_array_equal(final, single)
