"""DDP and FSDP through node-local relays, as torchrun runs them on two
hosts of two ranks each: a shard, and on each "host" a relay (reducerd
--upstream=the shard) that the host's ranks name as REDUCER_TARGET, with
torchrun's LOCAL_WORLD_SIZE=2. Nothing else changes for the training
script: the scenarios of torch_training_worker.py train over the reducer
group and over a gloo group in the same processes and compare the
parameters (a relay sums its host's gradients first, so they agree to
rounding, as with hierarchical all-reduce)."""

import pytest

from rank_processes import run_ranks, worker_path
from reducerd_process import ReducerdProcess

WORKER = worker_path("torch_training_worker.py")
HOSTS, RANKS_PER_HOST = 2, 2


@pytest.fixture(scope="module")
def relay_targets():
    """Each rank's target: its host's relay, both relays on one shard."""
    with ReducerdProcess() as shard:
        upstream = [f"--upstream={shard.target}"]
        with ReducerdProcess(upstream) as r0, ReducerdProcess(upstream) as r1:
            yield [relay.target for relay in (r0, r1) for _ in range(RANKS_PER_HOST)]


def test_ddp_through_relays_trains_as_on_gloo(relay_targets):
    outputs = run_ranks(WORKER, "ddp", world=HOSTS * RANKS_PER_HOST,
                        target=relay_targets,
                        extra_env={"LOCAL_WORLD_SIZE": str(RANKS_PER_HOST)})
    assert all("ddp ok" in out for out in outputs), outputs


def test_fsdp_through_relays_trains_as_on_gloo(relay_targets):
    # Reduce-scatter and all-gather of the host's ranks, and the hybrid
    # mesh's groups: a host's own pair, and pairs across the hosts.
    outputs = run_ranks(WORKER, "fsdp", world=HOSTS * RANKS_PER_HOST,
                        target=relay_targets,
                        extra_env={"LOCAL_WORLD_SIZE": str(RANKS_PER_HOST)})
    assert all("fsdp ok" in out for out in outputs), outputs
