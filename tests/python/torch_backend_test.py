"""The torch.distributed backend "reducer" in 4 real processes against a real
reducerd, each result checked against Gloo in the same processes (see
torch_worker.py for the scenarios)."""

import os
import re
import subprocess
import sys
import tempfile

import pytest

from reducerd_process import ReducerdProcess, free_port

WORLD = 4
WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch_worker.py")
# Hard limit for one scenario's processes; they are killed past it.
SCENARIO_TIME_LIMIT_S = 120


@pytest.fixture(scope="module")
def server():
    with ReducerdProcess() as s:
        yield s


def run_scenario(server, scenario, port=None, extra_env=None):
    """Runs WORLD worker processes (env:// variables set); returns their
    outputs in rank order after asserting that every one exited 0."""
    port = port or free_port()
    procs = []
    for rank in range(WORLD):
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   RANK=str(rank), WORLD_SIZE=str(WORLD), REDUCER_TARGET=server.target,
                   **(extra_env or {}))
        procs.append(subprocess.Popen([sys.executable, WORKER, scenario], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True))
    return wait_all(procs, scenario)


def wait_all(procs, what):
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


def jobs(output):
    return re.findall(r"^job=(\S+)$", output, re.M)


def test_every_collective_equals_gloo(server):
    outputs = run_scenario(server, "collectives")
    assert len({tuple(jobs(o)) for o in outputs}) == 1  # one job, agreed by all


def test_new_group_subsets_beside_gloo_groups(server):
    outputs = run_scenario(server, "subgroups")
    # Each group is a job of its own, the same for its members: groups
    # [0,1,2,3], [1,3], [2], [0,2,3], in that order.
    per_rank = [jobs(o) for o in outputs]
    assert [len(j) for j in per_rank] == [2, 2, 3, 3], per_rank
    everyone = {j[0] for j in per_rank}
    assert len(everyone) == 1
    assert per_rank[1][1] == per_rank[3][1]  # [1,3]
    assert per_rank[0][1] == per_rank[2][2] == per_rank[3][2]  # [0,2,3]
    assert len({*everyone, per_rank[1][1], per_rank[2][1], per_rank[0][1]}) == 4


def test_init_destroy_repeated_with_every_init_method(server, tmp_path):
    port = free_port()
    first = run_scenario(server, "repeated", port=port,
                         extra_env={"SECOND_PORT": str(free_port()),
                                    "STORE_FILE": str(tmp_path / "store1")})
    # A second job on the same host and port right after: never the same job.
    second = run_scenario(server, "repeated", port=port,
                          extra_env={"SECOND_PORT": str(free_port()),
                                     "STORE_FILE": str(tmp_path / "store2")})
    first_jobs, second_jobs = set(jobs(first[0])), set(jobs(second[0]))
    assert len(first_jobs) == 4 and len(second_jobs) == 4
    assert not first_jobs & second_jobs
    for o in first:
        assert set(jobs(o)) == first_jobs


def test_torchrun(server):
    env = dict(os.environ, REDUCER_TARGET=server.target)
    # --redirects=1 --tee=1: torch 1.13's default "0" does not parse under
    # Python 3.11 (its Std flag lookup misses the zero member) and torchrun
    # fails before starting a worker; 1 keeps the workers' stdout on ours.
    p = subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--redirects=1", "--tee=1",
         f"--nproc_per_node={WORLD}",
         "--master_addr=127.0.0.1", f"--master_port={free_port()}", WORKER, "smoke"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    (out,) = wait_all([p], "torchrun")
    assert out.count("smoke ok") == WORLD, out


def test_ignite_style_metric_equals_one_process(server):
    run_scenario(server, "metric")
