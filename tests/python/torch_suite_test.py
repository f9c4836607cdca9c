"""torch's own distributed tests (torch.testing._internal.distributed.
distributed_test) on the backend "reducer" at W = 3, against a real
reducerd: the cases of torch_suite_ci.txt, one or more of every kind of
collective torch's suite runs on the CPU, each of which must pass (a skip
fails the test). torch_suite_runner.py runs them; tools/torch_suite.sh runs
the whole suite on gloo and reducer."""

import json
import os
import subprocess
import sys

import pytest

from reducerd_process import ReducerdProcess

HERE = os.path.dirname(os.path.abspath(__file__))
RUNNER = os.path.join(HERE, "torch_suite_runner.py")
CASES_FILE = os.path.join(HERE, "torch_suite_ci.txt")
WORLD_SIZE = 3
TIME_LIMIT_S = 600


def _cases():
    with open(CASES_FILE, encoding="utf-8") as f:
        return [line.split("#", 1)[0].strip() for line in f
                if line.split("#", 1)[0].strip()]


@pytest.fixture(scope="module")
def server():
    with ReducerdProcess() as s:
        yield s


def test_case_list_has_every_kind_of_collective():
    cases = _cases()
    assert len(cases) == len(set(cases)), "a case is listed twice"
    for kind in ["all_reduce", "all_reduce_coalesced", "all_gather", "all_gather_coalesced",
                 "all_gather_object", "broadcast", "barrier", "reduce", "gather", "scatter",
                 "scatter_object_list", "all_to_all", "all_to_all_single", "send_recv",
                 "isend", "irecv", "batch_isend_irecv", "DistributedDataParallel",
                 "_group", "get_future", "sparse_all_reduce"]:
        assert any(kind in case for case in cases), kind


def test_torch_distributed_suite_passes_on_reducer(server, tmp_path):
    cases = _cases()
    results = tmp_path / "reducer.jsonl"
    env = dict(os.environ, REDUCER_TARGET=server.target, TMPDIR=str(tmp_path))
    done = subprocess.run(
        [sys.executable, RUNNER, "--backend=reducer", f"--world-size={WORLD_SIZE}",
         f"--tests-file={CASES_FILE}", f"--jsonl={results}", "--require-pass"],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=TIME_LIMIT_S)
    report = done.stdout + done.stderr
    records = [json.loads(line) for line in results.read_text().splitlines()]
    outcomes = {r["test"]: r for r in records if "test" in r}
    not_passed = {name: (r["outcome"], r["reason"].splitlines()[:1])
                  for name, r in outcomes.items() if r["outcome"] != "pass"}
    assert not not_passed, not_passed
    assert sorted(outcomes) == sorted(cases), report[-3000:]
    assert records[-1]["summary"]["passed"] == len(cases)
    assert all(r["world_size"] == WORLD_SIZE for r in outcomes.values())
    assert done.returncode == 0, report[-6000:]
