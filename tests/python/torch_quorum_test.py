"""reducer.torch.all_reduce_quorum and reducer.torch.done, the backend's
extensions, in real processes against a real reducerd (see
torch_quorum_worker.py)."""

import os

import pytest

from rank_processes import run_ranks
from reducerd_process import ReducerdProcess

WORLD = 2
WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch_quorum_worker.py")


@pytest.fixture(scope="module")
def server():
    with ReducerdProcess() as s:
        yield s


def test_every_rank_in_time(server):
    outputs = run_ranks(WORKER, "in_time", WORLD, server.target)
    for rank, out in enumerate(outputs):
        assert f"rank {rank} in_time ok" in out, out


def test_uneven_batches_with_done(server):
    outputs = run_ranks(WORKER, "uneven", 3, server.target)
    for rank, out in enumerate(outputs):
        assert f"rank {rank} uneven ok" in out, out
