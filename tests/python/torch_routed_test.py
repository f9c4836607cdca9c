"""The torch backend's routed collectives (reduce, gather, scatter,
all_to_all, all_to_all_single, send/recv and what torch builds on them) in
4 real processes against a real reducerd, each result checked against Gloo
in the same processes or the closed form (see torch_routed_worker.py)."""

import pytest

from rank_processes import run_ranks, server, worker_path

WORLD = 4
WORKER = worker_path("torch_routed_worker.py")


@pytest.mark.parametrize("shared_memory", ["off", "required"])
@pytest.mark.parametrize("scenario", ["collectives", "point_to_point"])
def test_scenario_equals_gloo(server, scenario, shared_memory):
    run_ranks(WORKER, scenario, WORLD, server.target,
              extra_env={"REDUCER_SHARED_MEMORY": shared_memory})
