"""PyTorch-Ignite on the backend "reducer".

1. Ignite's own distributed tests (tests/ignite/distributed of its 0.5.5
   sdist, fetched by tools/pinned_sdist.sh: @ignite_sdist//:defs.bzl's
   path comes as IGNITE_SDIST) run as Ignite's CI runs them on gloo
   (`-m distributed`, pytest-xdist `--dist=each` over 4 workers,
   WORLD_SIZE=4), with every default group they ask gloo for made on
   reducer (ignite_on_reducer.py): every test passes on every rank, and
   every test that runs on a group ran on a reducer one.
2. reducer.ignite as docs/python.md shows it (ignite_parallel_worker.py):
   idist.Parallel(backend="reducer") under torchrun and spawning its own
   2 processes; idist.auto_model gives DistributedDataParallel, whose steps
   equal one process's; Ignite's Accuracy over sharded data.
3. Without reducer.ignite, Ignite refuses the name (so the registration is
   what makes the two above work).
"""

import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict

import pytest

from rank_processes import wait_all
from reducerd_process import ReducerdProcess, free_port

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "ignite_parallel_worker.py")
SUITE_WORLD = 4
SUITE_LIMIT_S = 300       # the whole run of Ignite's tests, hard
SUITE_TEST_LIMIT_S = 120  # one test of theirs (pytest-timeout, thread method)

# Ignite's gloo-run tests in tests/ignite/distributed that make no process
# group (they check what idist says with none).
NO_GROUP = {
    "tests.ignite.distributed.comp_models.test_native::test__native_dist_model",
    "tests.ignite.distributed.utils.test_native::test_one_rank_first_asserts",
}


@pytest.fixture(scope="module")
def server():
    with ReducerdProcess() as s:
        yield s


def env_with(server, **more):
    return dict(os.environ, REDUCER_TARGET=server.target, **more)


def ignite_tests(tmp_path):
    """A copy of the sdist's tests/ (so that `import ignite` finds the
    installed package, not the sdist's sources) under tmp_path."""
    sdist = os.environ.get("IGNITE_SDIST", "")
    if not sdist:
        pytest.fail("Ignite's sdist is not there: "
                    f"{os.environ.get('IGNITE_SDIST_ERROR', 'IGNITE_SDIST unset')} "
                    "(once online: bazel sync --only=ignite_sdist)")
    root = tmp_path / "ignite-tests"
    shutil.copytree(os.path.join(sdist, "tests"), root / "tests")
    return root


def test_ignite_distributed_tests_pass_on_reducer(server, tmp_path):
    root = ignite_tests(tmp_path)
    report = tmp_path / "ignite.xml"
    here = os.pathsep.join([HERE, os.environ.get("PYTHONPATH", "")])
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "ignite_on_reducer",
           "-m", "distributed", "--dist=each", f"--tx={SUITE_WORLD}*popen//python={sys.executable}",
           f"--timeout={SUITE_TEST_LIMIT_S}", "--timeout-method=thread",
           "-q", "-rfE", "--color=no", f"--junitxml={report}", "tests/ignite/distributed"]
    p = subprocess.Popen(cmd, cwd=root, env=env_with(server, WORLD_SIZE=str(SUITE_WORLD),
                                                      PYTHONPATH=here),
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         start_new_session=True)
    try:
        out, _ = p.communicate(timeout=SUITE_LIMIT_S)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, 9)
        out, _ = p.communicate()
        pytest.fail(f"Ignite's tests ran past {SUITE_LIMIT_S} s:\n{out[-6000:]}")
    assert p.returncode == 0, out[-8000:]

    # testcase -> outcomes on the ranks, and the backend each rank's body ran on
    outcomes, ran_on = defaultdict(list), defaultdict(list)
    for case in ET.parse(report).getroot().iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        if case.find("skipped") is not None:
            continue
        bad = case.find("failure") is not None or case.find("error") is not None
        outcomes[name].append("failed" if bad else "passed")
        for prop in case.iter("property"):
            if prop.get("name") == "ran_on":
                ran_on[name].append(prop.get("value"))
    assert outcomes, out[-4000:]
    for name, got in outcomes.items():
        assert got == ["passed"] * SUITE_WORLD, (name, got)
    ran = set(outcomes)
    # Ignite 0.5.5 runs 31 of these tests on gloo with WORLD_SIZE set.
    assert len(ran) == 31, sorted(ran)
    assert NO_GROUP <= ran, sorted(ran)
    for name in ran - NO_GROUP:
        assert ran_on[name] == ["reducer"] * SUITE_WORLD, (name, ran_on[name])
    for name in NO_GROUP:
        assert ran_on[name] == ["none"] * SUITE_WORLD, (name, ran_on[name])


def run_worker(args, env):
    p = subprocess.Popen([sys.executable, *args], cwd=HERE, env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    (out,) = wait_all([p], " ".join(args))
    return out


def test_parallel_and_auto_model_under_torchrun(server):
    out = run_worker(["-m", "torch.distributed.run", "--nproc_per_node=2",
                      "--master_addr=127.0.0.1", f"--master_port={free_port()}",
                      WORKER, "torchrun"], env_with(server))
    for rank in (0, 1):
        assert f"ignite ok {rank} (torchrun)" in out, out
    assert "Initialized processing group with backend: 'reducer'" in out, out


def test_parallel_spawning_its_processes(server):
    out = run_worker([WORKER, "spawn", str(free_port())], env_with(server))
    for rank in (0, 1):
        assert f"ignite ok {rank} (spawn)" in out, out


REFUSED = """
import ignite.distributed as idist
import reducer.torch
try:
    idist.Parallel(backend="reducer")
except ValueError as e:
    print("refused:", e)
else:
    raise SystemExit("Ignite took an unregistered backend name")
import reducer.ignite
assert "reducer" in idist.available_backends(), idist.available_backends()
assert idist.Parallel(backend="reducer").backend == "reducer"
assert idist.auto_model is reducer.ignite.auto_model
print("registered")
"""


def test_ignite_refuses_the_name_until_reducer_ignite_is_imported(server):
    out = run_worker(["-c", REFUSED], env_with(server))
    assert "refused: Unknown backend 'reducer'" in out and "registered" in out, out
