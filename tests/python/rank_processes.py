"""Test support: one torch worker process per rank, with a hard time limit.

    outputs = run_ranks(WORKER, "ddp", world=4, target=server.target)

Each process gets torch's env:// variables (MASTER_ADDR, MASTER_PORT, RANK,
WORLD_SIZE) and REDUCER_TARGET (one address for every rank, or a list of
each rank's: its host's relay), and with LOCAL_WORLD_SIZE in extra_env
torchrun's LOCAL_RANK (hosts of LOCAL_WORLD_SIZE consecutive ranks); run_ranks returns their outputs in rank
order after asserting that every one exited 0 within the limit (past it,
all are killed and the test fails naming the rank).
"""

import os
import subprocess
import sys

import pytest

from reducerd_process import ReducerdProcess, free_port

# Hard limit for one scenario's processes; they are killed past it.
SCENARIO_TIME_LIMIT_S = 120


def worker_path(name):
    """The worker script `name`, which lies beside these tests."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), name)


@pytest.fixture(scope="module")
def server():
    """A reducerd for the test file (a test file imports it by name)."""
    with ReducerdProcess() as s:
        yield s


def run_ranks(worker, scenario, world, target, port=None, extra_env=None, args=()):
    """Runs `world` processes of `worker SCENARIO ARGS...`; their outputs."""
    port = port or free_port()
    targets = target if isinstance(target, list) else [target] * world
    procs = []
    for rank in range(world):
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   RANK=str(rank), WORLD_SIZE=str(world),
                   REDUCER_TARGET=targets[rank], **(extra_env or {}))
        if "LOCAL_WORLD_SIZE" in env:
            env["LOCAL_RANK"] = str(rank % int(env["LOCAL_WORLD_SIZE"]))
        procs.append(subprocess.Popen([sys.executable, worker, scenario, *args],
                                      env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    return wait_all(procs, scenario)


def wait_all(procs, what):
    """The outputs of `procs` in order; fails naming each that did not exit 0."""
    outputs, failures = [], []
    for rank, p in enumerate(procs):
        try:
            out, _ = p.communicate(timeout=SCENARIO_TIME_LIMIT_S)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            out, _ = p.communicate()
            failures.append(f"rank {rank} timed out after {SCENARIO_TIME_LIMIT_S} s")
        outputs.append(out)
        if p.returncode != 0:
            failures.append(f"rank {rank} exited {p.returncode}:\n{out}")
    assert not failures, f"{what}:\n" + "\n".join(failures)
    return outputs
