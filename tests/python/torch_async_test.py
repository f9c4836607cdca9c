"""The "reducer" backend's asynchronous Work objects and DistributedDataParallel,
in real processes against a real reducerd (scenarios in torch_async_worker.py),
and the README's DDP example under torchrun.
"""

import os
import re
import subprocess
import sys

import pytest

import torch_paths
from rank_processes import SCENARIO_TIME_LIMIT_S, run_ranks, server, worker_path
from reducerd_process import free_port

WORKER = worker_path("torch_async_worker.py")


@pytest.mark.parametrize("path", torch_paths.params())
def test_every_collective_returns_at_once_with_a_real_future(server, path):
    run_ranks(WORKER, "futures", world=2, target=server.target,
              extra_env=torch_paths.env(path))


def assert_identical_parameters(outputs):
    """Every rank printed one parameter digest, and all are the same (each
    rank checked its parameters against DDP on gloo itself)."""
    digests = [re.findall(r"^params_sha256=(\w+)$", out, re.M) for out in outputs]
    assert all(len(d) == 1 for d in digests), outputs
    assert len({d[0] for d in digests}) == 1, digests


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("hook", ["none", "fp16", "bf16"])
def test_ddp_matches_gloo_and_is_bit_identical_across_ranks(server, world, hook):
    outputs = run_ranks(WORKER, "ddp", world=world, target=server.target, args=[hook])
    assert_identical_parameters(outputs)


def test_ddp_on_the_python_path(server):
    """The same at W = 2 with the fp16 hook (its futures) where all_reduce
    takes the backend's Python path (a package without reducer._torch_c)."""
    outputs = run_ranks(WORKER, "ddp", world=2, target=server.target, args=["fp16"],
                        extra_env=torch_paths.env("python"))
    assert_identical_parameters(outputs)


def test_readme_ddp_example_under_torchrun(server):
    """examples/torch_ddp.py as the README starts it: torchrun, 2 ranks."""
    example = os.path.join(os.environ["TEST_SRCDIR"], os.environ["TEST_WORKSPACE"],
                           "examples", "torch_ddp.py")
    env = dict(os.environ, REDUCER_TARGET=server.target)
    p = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--redirects=1", "--tee=1",
         "--nproc_per_node=2", "--master_addr=127.0.0.1", f"--master_port={free_port()}",
         example, "--steps=40", "--hook=fp16"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        timeout=SCENARIO_TIME_LIMIT_S)
    assert p.returncode == 0, p.stdout
    (mse,) = re.findall(r"validation mse=([\d.]+) over 512 values", p.stdout)
    # Untrained, the error is about 5; the model learns the linear map.
    assert float(mse) < 0.5, p.stdout
