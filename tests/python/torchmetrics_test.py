"""torchmetrics' distributed sync on the backend "reducer": every metric of
torchmetrics_worker.py synced over a reducer group equals the same metric
synced over a gloo group in the same processes, and the metric of one
process fed every rank's data (uneven shards), at W = 2 and 4."""

import pytest

from rank_processes import run_ranks, server, worker_path

WORKER = worker_path("torchmetrics_worker.py")


@pytest.mark.parametrize("world", [2, 4])
def test_metrics_sync_equal_to_gloo(server, world):
    outputs = run_ranks(WORKER, "metrics", world, server.target)
    for rank, out in enumerate(outputs):
        for name in ("accuracy", "mse", "cat", "auroc_binary", "auroc_multiclass"):
            assert f"{name} ok" in out, out
        assert f"rank {rank} metrics ok" in out, out
