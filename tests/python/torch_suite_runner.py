"""torch's own distributed tests (torch.testing._internal.distributed.
distributed_test, the suite torch runs on gloo and nccl) on the backend
"reducer", for the reduce, gather, scatter and send/recv cases in SELECTED.

    BACKEND=reducer WORLD_SIZE=4 REDUCER_TARGET=host:port \\
        python3 torch_suite_runner.py [unittest args]

torch's TestDistBackend spawns WORLD_SIZE processes per test, each of which
imports this file (so `import reducer.torch` registers the backend there
too) and runs one test method of _DistTestBase against a file:// store.
Every test of the suite that is not in SELECTED is removed from the class,
so that the run holds exactly the cases this backend claims. Left out: the
cases torch itself skips unless the backend is gloo, nccl or mpi (the
object collectives, all_to_all_single on CPU: torch_routed_test covers
those on this backend), recv from any source and unequal all-to-all splits
(the backend refuses both, naming them), the profiler variants, and every
CUDA or NCCL case.
"""

import os
import sys

os.environ.setdefault("BACKEND", "reducer")
os.environ.setdefault("WORLD_SIZE", "4")

import reducer.torch  # noqa: E402,F401  (registers "reducer" in every process)
from torch.testing._internal.common_utils import run_tests  # noqa: E402
from torch.testing._internal.distributed.distributed_test import (  # noqa: E402
    DistributedTest, TestDistBackend)

SELECTED = [
    "test_reduce_sum", "test_reduce_product", "test_reduce_min", "test_reduce_max",
    "test_reduce_group_sum", "test_reduce_full_group_max", "test_reduce_sum_twice",
    "test_gather", "test_gather_checks", "test_gather_group", "test_gather_full_group",
    "test_scatter", "test_scatter_checks", "test_scatter_complex", "test_scatter_group",
    "test_scatter_full_group",
    "test_send_recv", "test_send_recv_with_tag", "test_isend", "test_irecv",
]


class TestReducerBackend(TestDistBackend, DistributedTest._DistTestBase):
    def setUp(self):
        super().setUp()
        self._spawn_processes()


for _name in dir(DistributedTest._DistTestBase):
    if _name.startswith("test_") and _name not in SELECTED:
        setattr(TestReducerBackend, _name, None)  # not collected
_missing = [n for n in SELECTED if not callable(getattr(TestReducerBackend, n, None))]
if _missing:
    sys.exit(f"torch's distributed_test has no {_missing}")

if __name__ == "__main__":
    run_tests()
