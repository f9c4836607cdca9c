"""The torch.distributed backend "reducer" in 4 real processes against a real
reducerd, each result checked against Gloo in the same processes (see
torch_worker.py for the scenarios)."""

import os
import re
import subprocess
import sys
import time
import urllib.request

import pytest

import torch_paths
from rank_processes import run_ranks, server, wait_all, worker_path
from reducerd_process import ReducerdProcess, free_port
from secure_reducerd import client_tls, make_certs, secure_flags, write_tokens

WORLD = 4
WORKER = worker_path("torch_worker.py")


# The secure reducerd's one tokens-file line: the torch jobs' prefix.
SECURE_JOB = "torchsec"
SECURE_TOKEN = "torch-token-of-torchsec-6d21b0"


@pytest.fixture(scope="module")
def secure_server(tmp_path_factory):
    """reducerd as deploy/k8s/overlays/mtls runs it (TLS, client CA, tokens),
    with a `certs` attribute: the directory of make_test_certs.sh's files."""
    certs = make_certs(tmp_path_factory.mktemp("certs"))
    tokens = write_tokens(tmp_path_factory.mktemp("tokens") / "tokens",
                          {SECURE_JOB: SECURE_TOKEN})
    with ReducerdProcess(secure_flags(certs, tokens)) as s:
        s.certs = certs
        yield s


def secure_env(server, **more):
    """The workers' environment for the secure reducerd: REDUCER_JOB and the
    REDUCER_TLS_* files, plus `more` (the token variables)."""
    tls = client_tls(server.certs)
    return {"REDUCER_JOB": SECURE_JOB, "REDUCER_TLS_CA_FILE": tls["tls_ca_file"],
            "REDUCER_TLS_CERT_FILE": tls["tls_cert_file"],
            "REDUCER_TLS_KEY_FILE": tls["tls_key_file"], **more}


def run_scenario(server, scenario, port=None, extra_env=None):
    """Runs WORLD worker processes of `scenario`; their outputs in rank order."""
    return run_ranks(WORKER, scenario, WORLD, server.target, port=port,
                     extra_env=extra_env)


def jobs(output):
    return re.findall(r"^job=(\S+)$", output, re.M)


@pytest.mark.parametrize("path", torch_paths.params())
def test_every_collective_equals_gloo(server, path):
    outputs = run_scenario(server, "collectives", extra_env=torch_paths.env(path))
    assert len({tuple(jobs(o)) for o in outputs}) == 1  # one job, agreed by all


def test_monitored_barrier_names_the_rank_that_never_came(server):
    outputs = run_scenario(server, "monitored")
    assert all("monitored ok" in o for o in outputs), outputs


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


def _metric_sum(metrics_port, name):
    """The sum of every sample of `name` on reducerd's /metrics."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).read()
    return sum(float(m.group(1)) for m in re.finditer(
        rf"^{name}(?:{{[^}}]*}})? (\S+)$", text.decode(), re.M))


def test_destroy_process_group_leaves_the_job_without_aborting_it():
    """destroy_process_group ends each rank's session as a leave: once every
    rank's process has exited, reducerd counts no aborted epoch (a process
    that exits holding its session is counted as a lost one)."""
    metrics_port = free_port()
    with ReducerdProcess([f"--metrics_listen=127.0.0.1:{metrics_port}"]) as s:
        env = dict(os.environ, REDUCER_TARGET=s.target)
        p = subprocess.Popen(
            [sys.executable, "-m", "torch.distributed.run", "--redirects=1", "--tee=1",
             f"--nproc_per_node={WORLD}", "--master_addr=127.0.0.1",
             f"--master_port={free_port()}", WORKER, "smoke"],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        (out,) = wait_all([p], "torchrun")
        assert out.count("smoke ok") == WORLD, out
        deadline = time.monotonic() + 10
        while _metric_sum(metrics_port, "reducer_ranks_connected") > 0:
            assert time.monotonic() < deadline, "ranks still connected 10 s after torchrun ended"
            time.sleep(0.1)
        assert _metric_sum(metrics_port, "reducer_collectives_total") >= 2  # all_reduce, barrier
        assert _metric_sum(metrics_port, "reducer_epochs_aborted_total") == 0


def test_ignite_style_metric_equals_one_process(server):
    run_scenario(server, "metric")


def test_secure_reducerd_configured_by_environment_only(secure_server, tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text(SECURE_TOKEN + "\n")  # stripped by the backend
    outputs = run_scenario(secure_server, "secure",
                           extra_env=secure_env(secure_server,
                                                REDUCER_TOKEN_FILE=str(token_file)))
    per_rank = [jobs(o) for o in outputs]
    assert [len(j) for j in per_rank] == [1, 2, 1, 2], per_rank
    assert all(j.startswith(SECURE_JOB + "/") for js in per_rank for j in js), per_rank
    assert len({j[0] for j in per_rank}) == 1  # the default group, agreed
    assert per_rank[1][1] == per_rank[3][1] != per_rank[1][0]  # the subgroup [1, 3]


def test_wrong_token_fails_init_naming_the_job(secure_server):
    wrong = "wrong-token-for-torchsec-11aa"
    outputs = run_scenario(secure_server, "refused",
                           extra_env=secure_env(secure_server, REDUCER_TOKEN=wrong))
    for out in outputs:
        assert re.search(rf"^refused=Unauthenticated: job {SECURE_JOB}/\w+", out, re.M), out
        assert wrong not in out and SECURE_TOKEN not in out


def test_local_world_size_is_passed_on_for_a_group_of_the_whole_world(monkeypatch):
    """torchrun's LOCAL_WORLD_SIZE reaches the client of a group of all
    WORLD_SIZE ranks; without RANK and LOCAL_RANK a smaller group's is
    unknown (0)."""
    import reducer.torch

    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert reducer.torch._local_world_size(4) == 2
    assert reducer.torch._local_world_size(3) == 0
    monkeypatch.delenv("WORLD_SIZE")
    assert reducer.torch._local_world_size(4) == 0
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "-2")
    with pytest.raises(ValueError, match="LOCAL_WORLD_SIZE"):
        reducer.torch._local_world_size(4)


def test_a_subgroup_counts_its_ranks_on_this_host(monkeypatch):
    """With torchrun's RANK and LOCAL_RANK, this host holds a block of
    LOCAL_WORLD_SIZE consecutive global ranks: a subgroup's count is its
    ranks in that block, so that a relay never waits for another host's."""
    import reducer.torch

    # 2 hosts x 4 ranks; this is rank 5 (local rank 1): host 1 holds 4-7.
    for name, value in (("WORLD_SIZE", "8"), ("LOCAL_WORLD_SIZE", "4"),
                        ("RANK", "5"), ("LOCAL_RANK", "1")):
        monkeypatch.setenv(name, value)
    assert reducer.torch._local_world_size(8) == 4          # the whole world
    assert reducer.torch._local_world_size(8, range(8)) == 4
    assert reducer.torch._local_world_size(2, [1, 5]) == 1  # across hosts
    assert reducer.torch._local_world_size(4, [4, 5, 6, 7]) == 4
    assert reducer.torch._local_world_size(3, [3, 4, 5]) == 2
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("LOCAL_RANK", "1")                    # host 0: 0-3
    assert reducer.torch._local_world_size(2, [1, 5]) == 1
    assert reducer.torch._local_world_size(3, [0, 1, 4]) == 2


def test_environment_errors_name_the_variable(monkeypatch, tmp_path):
    import reducer.torch

    for name in ("REDUCER_TOKEN", "REDUCER_TOKEN_FILE", "REDUCER_JOB",
                 "REDUCER_TLS_CA_FILE", "REDUCER_TLS_CERT_FILE", "REDUCER_TLS_KEY_FILE",
                 "REDUCER_TLS_SERVER_NAME", "REDUCER_SHARED_MEMORY"):
        monkeypatch.delenv(name, raising=False)
    assert reducer.torch._client_settings()[0] == "torch"
    token_file = tmp_path / "token"
    token_file.write_text("  secret-7\n")
    monkeypatch.setenv("REDUCER_TOKEN_FILE", str(token_file))
    assert reducer.torch._client_settings()[1]["token"] == "secret-7"
    monkeypatch.setenv("REDUCER_TOKEN", "secret-7")
    with pytest.raises(ValueError, match="set one"):
        reducer.torch._client_settings()
    monkeypatch.delenv("REDUCER_TOKEN")
    token_file.write_text("\n")
    with pytest.raises(ValueError, match="empty"):
        reducer.torch._client_settings()
    absent = str(tmp_path / "absent")
    monkeypatch.setenv("REDUCER_TOKEN_FILE", absent)
    with pytest.raises(ValueError, match="REDUCER_TOKEN_FILE") as info:
        reducer.torch._client_settings()
    assert absent in str(info.value)
    monkeypatch.delenv("REDUCER_TOKEN_FILE")
    monkeypatch.setenv("REDUCER_TLS_CA_FILE", absent)
    with pytest.raises(ValueError, match="REDUCER_TLS_CA_FILE"):
        reducer.torch._client_settings()
    monkeypatch.delenv("REDUCER_TLS_CA_FILE")
    monkeypatch.setenv("REDUCER_SHARED_MEMORY", "sometimes")
    with pytest.raises(ValueError, match="REDUCER_SHARED_MEMORY"):
        reducer.torch._client_settings()
