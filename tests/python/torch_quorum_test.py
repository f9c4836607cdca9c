"""reducer.torch.all_reduce_quorum and reducer.torch.done, the backend's
extensions, in real processes against a real reducerd (see
torch_quorum_worker.py)."""

from rank_processes import run_ranks, server, worker_path

WORLD = 2
WORKER = worker_path("torch_quorum_worker.py")


def test_every_rank_in_time(server):
    outputs = run_ranks(WORKER, "in_time", WORLD, server.target)
    for rank, out in enumerate(outputs):
        assert f"rank {rank} in_time ok" in out, out


def test_uneven_batches_with_done(server):
    outputs = run_ranks(WORKER, "uneven", 3, server.target)
    for rank, out in enumerate(outputs):
        assert f"rank {rank} uneven ok" in out, out
