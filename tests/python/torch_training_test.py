"""FSDP (full, fully_shard and hybrid sharding) and DDP (static_graph,
Join with uneven inputs) on the backend "reducer", each against gloo in the
same processes, in real processes against a real reducerd (scenarios in
torch_training_worker.py)."""

import pytest

from rank_processes import run_ranks, server, worker_path

WORKER = worker_path("torch_training_worker.py")


def test_fsdp_trains_as_on_gloo(server):
    outputs = run_ranks(WORKER, "fsdp", world=4, target=server.target)
    assert all("fsdp ok" in out for out in outputs), outputs


@pytest.mark.parametrize("world", [2, 3])
def test_ddp_static_graph_and_join_train_as_on_gloo(server, world):
    outputs = run_ranks(WORKER, "ddp", world=world, target=server.target)
    assert all("ddp ok" in out for out in outputs), outputs
